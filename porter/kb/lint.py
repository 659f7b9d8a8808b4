"""`porter kb lint`: every rule of docs/kb-schema.md, reported per file and field with a fix.

Errors fail the lint (exit 1); warnings are advice. Checks that need the whole knowledge base
(unique ids, related ids, examples diagnosing to their entry) run after all files parsed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from porter.kb.loader import LoadedKB, load_entries
from porter.kb.schema import KBEntry, Problem

_ABS_PATH = re.compile(r"(?:^|[\s'\"(=])/(?:usr|home|opt|data|root|tmp|etc|var|mnt|workspace)/")
_VOLATILE = re.compile(r"\bpid[= ]\d+|\b0x[0-9a-fA-F]{6,}\b|, line \d+")
# verify commands are judged by their exit status: these shapes get it wrong
_ALWAYS_SUCCEEDS = re.compile(r"\|\|\s*(?:echo|true|:)(?:\s|$)")
_GREP_COUNT = re.compile(r"\bgrep\s+(?:-[A-Za-z]+\s+)*-[A-Za-z]*c[A-Za-z]*\b")


@dataclass
class LintReport:
    entries: int
    files: int
    problems: list[Problem] = field(default_factory=list)
    examples_checked: int = 0
    regexes_checked: int = 0

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "warning"]

    @property
    def ok(self) -> bool:
        return not self.errors

    def to_dict(self) -> dict:
        return {
            "ok": self.ok,
            "entries": self.entries,
            "files": self.files,
            "errors": [p.to_dict() for p in self.errors],
            "warnings": [p.to_dict() for p in self.warnings],
            "examples_checked": self.examples_checked,
            "regexes_checked": self.regexes_checked,
        }


def project_root_of(patterns_dir: Path) -> Path:
    """Example paths are relative to the directory that holds knowledge/ (the repository root)."""
    patterns_dir = patterns_dir.resolve()
    return patterns_dir.parent.parent if patterns_dir.parent.name == "knowledge" else patterns_dir.parent


def _check_signatures(entry: KBEntry, problems: list[Problem], regex_cache: dict[str, object]) -> int:
    from porter.kb.regexsafety import check_regex

    checked = 0
    for i, sig in enumerate(entry.signatures):
        where = f"signatures.items[{i}].{sig.kind}"
        if _ABS_PATH.search(sig.pattern) or _VOLATILE.search(sig.pattern):
            problems.append(Problem(entry.path, where, f"{sig.pattern!r} contains a path, PID, address or line number that varies between runs",
                                    "keep only the message text (see docs/kb-schema.md)", "warning"))
        if sig.kind != "regex":
            continue
        checked += 1
        from porter.kb.index import regex_needles

        if not regex_needles(sig.pattern):
            problems.append(Problem(entry.path, where, f"{sig.pattern!r} has no literal anchor of 3+ characters, so every line of every log must be searched with it",
                                    "start or anchor the regex on a literal fragment of the message (and avoid (?i))", "warning"))
        verdict = regex_cache.get(sig.pattern)
        if verdict is None:
            verdict = regex_cache[sig.pattern] = check_regex(sig.pattern)
        if not verdict.ok:
            if verdict.problem.startswith("does not compile"):
                fix = "fix the regex syntax; in YAML double quotes a backslash must be doubled (\\\\.), or use single quotes"
            elif verdict.problem.startswith("nested"):
                fix = "remove the outer quantifier or make the inner one bounded ({0,80}); prefer a `literal`"
            else:
                fix = ("replace unbounded `.*`, `.+`, `\\S*`, `\\w+` with bounded ones such as `.{0,200}` / `\\S{1,120}`, "
                       "or split into literals with match: all")
            problems.append(Problem(entry.path, where, f"{sig.pattern!r}: {verdict.problem}", fix))
    return checked


def _check_placeholders(entry: KBEntry, problems: list[Problem]) -> None:
    """`{op}` in the fix text must be a capture of one of the entry's structured signatures."""
    from porter.kb.families import CAPTURE_PATTERNS, capture_names, placeholder_names

    names = capture_names(entry.signatures)
    for field_name, texts in (("title", [entry.title]), ("root_cause", [entry.root_cause]), ("fix", entry.fix), ("verify", [entry.verify])):
        for text in texts:
            for name in sorted(placeholder_names(text) - names):
                if name in CAPTURE_PATTERNS:
                    problems.append(Problem(entry.path, field_name, f"{{{name}}} is not captured by any signature of this entry",
                                            f"add a template item with {{{name}}}, or write the text without the placeholder", "warning"))


def _check_verify(entry: KBEntry, problems: list[Problem]) -> None:
    command = entry.verify.split("  #", 1)[0]  # a trailing comment is advice for the reader
    if _ALWAYS_SUCCEEDS.search(command):
        problems.append(Problem(entry.path, "verify", "`|| echo` / `|| true` makes the command succeed whether or not the fix worked",
                                "drop the fallback so a failing check exits non-zero", "warning"))
    if _GREP_COUNT.search(command):
        problems.append(Problem(entry.path, "verify", "`grep -c` exits 1 when the count is 0, so its exit status does not say whether the fix worked",
                                "use `grep -q PATTERN` (must appear) or `! CMD | grep -q PATTERN` (must not appear)", "warning"))


def _check_versions(entry: KBEntry, problems: list[Problem]) -> None:
    from packaging.specifiers import InvalidSpecifier, SpecifierSet

    for i, rng in enumerate(entry.applies_to):
        try:
            SpecifierSet(rng.versions)
        except InvalidSpecifier:
            problems.append(Problem(entry.path, f"applies_to[{i}].versions", f"{rng.versions!r} is not a PEP 440 specifier set",
                                    "write e.g. \">=0.13,<0.15\" (comma-separated, no spaces inside versions)"))


def _check_examples(kb: LoadedKB, root: Path, problems: list[Problem]) -> int:
    from porter.kb.matcher import diagnose_stream

    compiled = kb.compiled(calibrated=False)  # examples check the signatures; calibration may still abstain
    checked = 0
    for entry in kb.entries:
        for i, example in enumerate(entry.examples):
            where = f"examples[{i}]"
            path = Path(example)
            if not path.is_absolute():
                path = root / path if (root / path).is_file() or not Path(example).is_file() else Path(example).resolve()
            if not path.is_file():
                problems.append(Problem(entry.path, where, f"{example}: file not found (looked at {path})",
                                        "use a repository-relative path such as tests/data/traces/<layer>/<ID>-<slug>.txt"))
                continue
            checked += 1
            with path.open("rb") as fh:
                diag = diagnose_stream(compiled, fh, top=3)
            top = diag.top
            if top is not None and top.entry.id == entry.id:
                continue
            mine = next((m for m in diag.matches + diag.near_misses if m.entry.id == entry.id), None)
            if top is None and mine is not None and mine.explain.get("advice") and diag.near_misses[0] is mine:
                continue  # a warning entry's example of a working run: it matches, and is reported as advice
            if top is None:
                got = "unknown (no entry reached the match threshold)"
            else:
                got = f"{top.entry.id} (confidence {top.confidence:.2f}, lines {', '.join(str(m.line) for m in top.lines[:3])})"
            if mine is None:
                detail = "none of this entry's signatures matched any line"
                fix = "add a signature taken verbatim from a line of the example (after the rank/timestamp prefix)"
            else:
                detail = f"this entry scored {mine.confidence:.2f} via {mine.method}"
                if mine.explain.get("missing_required"):
                    detail += f"; required items not found: {mine.explain['missing_required']}"
                fix = ("raise the weight of this entry's most specific signature, add one that only this failure prints, "
                       f"or make {top.entry.id}'s signatures more specific" if top else "raise the weight (a single hit needs weight >= 0.5)")
            problems.append(Problem(entry.path, where, f"{example}: top-1 is {got}; {detail}", fix))
    return checked


def lint(patterns_dir: Path, root: Path | None = None, check_examples: bool = True, display_base: Path | None = None) -> LintReport:
    patterns_dir = Path(patterns_dir)
    root = root or project_root_of(patterns_dir)
    kb = load_entries(patterns_dir, display_base or root)
    problems = list(kb.problems)
    report = LintReport(entries=len(kb.entries), files=len(kb.files))
    if not kb.files:
        problems.append(Problem(str(patterns_dir), "", "no entry files (*.yaml) found", "add entries under knowledge/patterns/<layer>/<ID>.yaml"))

    by_id: dict[str, list[KBEntry]] = {}
    for entry in kb.entries:
        by_id.setdefault(entry.id, []).append(entry)
    for entry_id, same in by_id.items():
        if len(same) > 1:
            for entry in same:
                others = ", ".join(e.path for e in same if e is not entry)
                problems.append(Problem(entry.path, "id", f"duplicate id {entry_id!r} (also in {others})", "give each entry its own id; never reuse or renumber ids"))

    regex_cache: dict[str, object] = {}
    for entry in kb.entries:
        report.regexes_checked += _check_signatures(entry, problems, regex_cache)
        _check_versions(entry, problems)
        _check_verify(entry, problems)
        _check_placeholders(entry, problems)
        for i, up in enumerate(entry.downstream_of):
            if up not in by_id:
                problems.append(Problem(entry.path, f"downstream_of[{i}]", f"{up!r} is not the id of any entry", "fix the id or remove it"))
        for i, rel in enumerate(entry.related):
            if rel not in by_id:
                problems.append(Problem(entry.path, f"related[{i}]", f"{rel!r} is not the id of any entry", "fix the id or remove it from `related`"))
            elif rel == entry.id:
                problems.append(Problem(entry.path, f"related[{i}]", "an entry cannot be related to itself", "remove it"))
        if not entry.symptoms:
            problems.append(Problem(entry.path, "symptoms", "no symptoms: the fuzzy fallback cannot find this entry",
                                    "add one or two prose forms of the error", "warning"))
        if entry.signatures and max(s.weight for s in entry.signatures) < 0.5 and entry.match == "any":
            problems.append(Problem(entry.path, "signatures", "no item has weight >= 0.5, so no single line can diagnose this entry",
                                    "raise the weight of the most specific item, or use match: all", "warning"))

    codes_dir = patterns_dir.parent / "codes"
    if codes_dir.is_dir():
        from porter.kb.codes import load_tables

        problems.extend(load_tables(codes_dir)[1])
    if check_examples and kb.entries:
        report.examples_checked = _check_examples(kb, root, problems)
    report.problems = sorted(problems, key=lambda p: (p.severity != "error", p.file, p.field))
    return report
