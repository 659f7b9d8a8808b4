"""`porter upgrade NAME --drop OLD`: the guard cleanup of an analysed plugin tree (which files
change and how) and its PR summary. `plan_drop` is pure over the guard verdicts and the plugin's
files; the branch is written by the port pipeline's entry point (porter.port.edit_port.publish_edits,
called from porter/commands/upgrade.py).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from porter.upgrade.drop import DEFAULT_LINE_LENGTH, DropEdit, DropResult, drop_source
from porter.upgrade.lanes import GuardVerdict
from porter.upgrade.sources import parse_release


@dataclass(frozen=True)
class DropPlan:
    drop: str  # the release lane being dropped ("0.18.0")
    target: str  # the release lane after the drop
    guards: tuple[GuardVerdict, ...]  # the guards the drop edits
    results: tuple[DropResult, ...]  # changed files only
    skipped: tuple[str, ...] = ()  # files that could not be transformed, with why
    removed: tuple[str, ...] = ()  # plugin modules nothing imports after the drop (orphans.py): deleted
    notes: tuple[str, ...] = ()  # `path:line: comment` of comments asking for work once the dropped release goes

    @property
    def edits(self) -> list[DropEdit]:
        return [e for r in self.results for e in r.edits]

    def to_dict(self) -> dict[str, Any]:
        return {"drop": self.drop, "target": self.target, "guards": [g.to_dict() for g in self.guards],
                "files": [r.path for r in self.results], "edits": [e.to_dict() for e in self.edits],
                "removed_files": list(self.removed), "skipped": list(self.skipped), "notes": list(self.notes)}


def guard_versions(source: str) -> list[str]:
    """The version literals a guard test names (`vllm_version_is("0.18.0")` -> ["0.18.0"])."""
    try:
        expr = ast.parse(source, mode="eval").body
    except SyntaxError:
        return []
    out: list[str] = []
    for node in ast.walk(expr):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and parse_release(node.value) is not None:
            out.append(node.value)
        elif isinstance(node, ast.Tuple) and node.elts and all(isinstance(e, ast.Constant) and isinstance(e.value, int) for e in node.elts):
            out.append(".".join(str(e.value) for e in node.elts))  # type: ignore[union-attr]
    return out


def selects(guard: GuardVerdict, drop: str | None) -> bool:
    """A guard the drop of `drop` edits: decided (collapse/retarget) and naming `drop` or an older release."""
    if guard.verdict not in ("collapse", "retarget"):
        return False
    if drop is None:
        return True
    wanted = parse_release(drop)
    for text in guard_versions(guard.guard):
        have = parse_release(text)
        if text == drop or (wanted is not None and have is not None and have <= wanted):
            return True
    return False


def formatter_line_length(plugin_root: Path, path: str | None = None) -> int:
    """The line limit the plugin's formatter keeps (pyproject.toml: ruff, black, isort, yapf), else PEP 8's;
    with `path` (relative to the plugin root), a formatter that excludes the file does not count (a
    project moving to ruff lists the folders still formatted the old way in ruff's `exclude`)."""
    import tomllib

    try:
        tool = tomllib.loads((plugin_root / "pyproject.toml").read_text(encoding="utf-8")).get("tool", {})
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return DEFAULT_LINE_LENGTH
    for table, key in (("ruff", "line-length"), ("black", "line-length"), ("isort", "line_length"), ("yapf", "column_limit")):
        config = tool.get(table) or {}
        value = config.get(key)
        if isinstance(value, int) and value > 0 and not (path and _excluded(table, config, path)):
            return value
    return DEFAULT_LINE_LENGTH


def _excluded(table: str, config: dict[str, Any], path: str) -> bool:
    """Does the formatter's own exclude setting leave `path` alone (ruff/isort globs, black regexes)?"""
    import fnmatch
    import re

    keys = {"ruff": ("exclude", "extend-exclude"), "isort": ("skip", "skip_glob", "extend_skip", "extend_skip_glob"),
            "black": ("exclude", "extend-exclude", "force-exclude")}.get(table, ())
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]  # a folder pattern covers what is in it
    for key in keys:
        value = config.get(key)
        patterns = [value] if isinstance(value, str) else [v for v in value if isinstance(v, str)] if isinstance(value, list) else []
        for pattern in patterns:
            if table == "black":
                try:
                    if re.search(pattern, "/" + path):
                        return True
                except re.error:
                    continue
            elif any(fnmatch.fnmatch(c, pattern.rstrip("/")) or fnmatch.fnmatch(parts[-1], pattern) for c in candidates):
                return True
    return False


def plan_drop(guards: Iterable[GuardVerdict], plugin_root: Path, drop: str | None, target: str,
              version_functions: Iterable[str]) -> DropPlan:
    chosen = tuple(g for g in guards if selects(g, drop))
    by_file: dict[str, list[GuardVerdict]] = {}  # a list: version tests used as values may share a line
    for guard in chosen:
        by_file.setdefault(guard.path, []).append(guard)
    results: list[DropResult] = []
    skipped: list[str] = []
    words = _PluginWords(plugin_root)
    for path, decisions in sorted(by_file.items()):
        file = plugin_root / path
        try:
            source = file.read_text(encoding="utf-8")
            result = drop_source(source, path, decisions, version_functions, formatter_line_length(plugin_root, path),
                                 read_elsewhere=lambda name, path=path: words.read_outside(name, path))
        except (OSError, UnicodeDecodeError) as exc:
            skipped.append(f"{path}: {exc}")
            continue
        except Exception as exc:  # noqa: BLE001 - libcst cannot parse it: a human edits this file
            skipped.append(f"{path}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            continue
        if result.changed:
            results.append(result)
    removed = _orphans(plugin_root, results)
    kept = tuple(r for r in results if r.path not in removed)  # a deleted module needs no guard edits
    notes = _drop_notes(plugin_root, drop, {r.path: r.source for r in kept}, set(removed)) if drop else ()
    return DropPlan(drop or "", target, chosen, kept, tuple(skipped), removed, notes)


_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TOP_BINDING = re.compile(r"^(?:(?:async\s+)?def|class)\s+([A-Za-z_]\w*)|^([A-Za-z_]\w*)\s*(?::[^=\n]*)?=(?!=)", re.MULTILINE)


class _PluginWords:
    """Which plugin files name an identifier they do not define themselves (read once, on the first
    question): a definition another module imports or reads is not the drop's to delete, while a module
    with its own `_original_init` says nothing about this one's."""

    def __init__(self, plugin_root: Path):
        self.plugin_root = plugin_root
        self.words: dict[str, frozenset[str] | None] | None = None  # None for a file that cannot be read

    def read_outside(self, name: str, path: str) -> bool:
        if self.words is None:
            from porter.upgrade.usage import plugin_files

            self.words = {}
            for rel, file in plugin_files(self.plugin_root, _IMPORTERS_EXCLUDE):
                try:
                    text = file.read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError):
                    self.words[rel] = None  # it may name anything
                    continue
                bound = {a or b for a, b in _TOP_BINDING.findall(text)}
                self.words[rel] = frozenset(set(_WORD.findall(text)) - bound)
        return any(rel != path and (words is None or name in words) for rel, words in self.words.items())


_LATER = re.compile(r"\b(remov|drop|delet|clean|deprecat|legacy|compat|once|after|until|when|todo|fixme|hack|workaround)",
                    re.IGNORECASE)


def drop_notes(path: str, source: str, drop: str) -> list[str]:
    """`path:line: comment` for each comment that names the dropped release with a word asking for
    later work (`# TODO: remove this once we drop vllm v0.12.0`): code no guard marks, left for a human."""
    if drop not in source:
        return []
    release = re.compile(rf"(?<![\d.])v?{re.escape(drop)}(?![\d])")
    out: list[str] = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(source.removeprefix("\ufeff")).readline):
            if token.type == tokenize.COMMENT and release.search(token.string) and _LATER.search(token.string):
                out.append(f"{path}:{token.start[0]}: {token.string.lstrip('#').strip()[:160]}")
    except (tokenize.TokenError, SyntaxError):
        return out
    return out


def _drop_notes(plugin_root: Path, drop: str, changed: dict[str, str], removed: set[str]) -> tuple[str, ...]:
    """The drop notes of the plugin's files as the drop leaves them (deleted modules have none)."""
    from porter.upgrade.usage import plugin_files

    out: list[str] = []
    for rel, file in plugin_files(plugin_root, _IMPORTERS_EXCLUDE):
        if rel in removed:
            continue
        try:
            source = changed.get(rel) or file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        out += drop_notes(rel, source, drop)
    return tuple(out)


_IMPORTERS_EXCLUDE = (".*", "build/*", "dist/*", "docs/*")  # the plugin's tests import modules too: they count


def _orphans(plugin_root: Path, results: list[DropResult]) -> tuple[str, ...]:
    """Plugin modules the drop leaves imported by nothing (only the deleted branches loaded them)."""
    if not results:
        return ()
    from porter.upgrade.orphans import orphaned
    from porter.upgrade.usage import plugin_files

    before: dict[str, str] = {}
    for rel, file in plugin_files(plugin_root, _IMPORTERS_EXCLUDE):
        try:
            before[rel] = file.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return ()  # a file we cannot read may import anything: remove nothing
    prefix = plugin_root.name if (plugin_root / "__init__.py").is_file() else ""
    after = {**before, **{r.path: r.source for r in results}}
    # Spans whose imports may be gone (lines of the source before the drop): collapsed guards (not those that
    # only lose a check in their test, nor answered value tests), unreachable code deleted after them, and the
    # dead definitions and predicate functions that went with them (a module only their bodies imported).
    deleted = {r.path: [(e.line, e.end_line) for e in r.edits
                        if (e.action == "collapse" and e.kept not in ("test", "value"))
                        or e.action in ("remove_unreachable", "remove_dead")]
               for r in results}
    return tuple(orphaned(before, after, deleted, prefix))


def pr_summary(plan: DropPlan, upstream: str) -> tuple[str, ...]:
    """The drop in the maintainers' drop-PR shape, for the PR material's summary: dropped gates,
    bumped gates, removed imports, files left for a human."""
    collapse = [e for e in plan.edits if e.action == "collapse"]
    retarget = [e for e in plan.edits if e.action == "retarget"]
    imports = [e for e in plan.edits if e.action == "remove_import"]
    lines = [f"Drop old gates: {len(collapse)} dead version guard(s) collapsed (the branch no lane takes deleted)."]
    kept = {"body": "kept the if branch", "else": "kept the else branch", "predicate": "removed the version predicate",
            "test": "took the decided version checks out of the test"}
    lines += [f"  - {e.path}:{e.line}-{e.end_line} `{e.guard}`: {kept.get(e.kept, 'collapsed')}" for e in collapse[:100]]
    unreachable = [e for e in plan.edits if e.action == "remove_unreachable"]
    if unreachable:
        lines.append(f"Removed code no lane reaches any more (after a kept `return`/`raise`): {len(unreachable)} block(s).")
        lines += [f"  - {e.path}:{e.line}-{e.end_line} `{e.guard}`" for e in unreachable[:100]]
    dead = [e for e in plan.edits if e.action == "remove_dead"]
    if dead:
        lines.append(f"Removed private definitions only the deleted branches used: {len(dead)}.")
        lines += [f"  - {e.path}:{e.line}-{e.end_line} `{e.guard}`" for e in dead[:100]]
    lines.append(f"Bump gates: {len(retarget)} guard(s) retargeted to {plan.target} (their main-lane branch does not "
                 "resolve at the new release while the old branch does).")
    lines += [f"  - {e.path}:{e.line} `{e.guard}` -> `{e.retarget_to}`" for e in retarget[:100]]
    if imports:
        lines.append(f"Removed imports only the deleted branches used: {len(imports)}.")
        lines += [f"  - {e.path}: `{e.guard}`" for e in imports[:100]]
    if plan.removed:
        lines.append(f"Deleted modules only the deleted branches imported: {len(plan.removed)}.")
        lines += [f"  - {path}" for path in plan.removed[:100]]
    lines += [f"Left for a human: {s}" for s in plan.skipped]
    if plan.notes:
        lines.append(f"Left for a human: {len(plan.notes)} comment(s) ask for work once {plan.drop} is dropped "
                     "(the code they mark is under no version guard):")
        lines += [f"  - {note}" for note in plan.notes[:100]]
    return tuple(lines)
