"""`diagnose --history`: from a trace's signals to a HistoryReport, against one repository.

I/O lives here (git, the cache); frames.py, candidates.py do the thinking.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from porter.errors import InputError
from porter.kb.history import mine
from porter.kb.history.candidates import QuoteMask, distinctive_names, quoted_code_lines, rank
from porter.kb.history.frames import PathMapper, first_exception, trace_facts, versions_in_text
from porter.kb.history.issues import fixing_commits, repo_names
from porter.kb.history.models import CommitRecord, HistoryIndex, HistoryReport, Installed, TraceFacts
from porter.kb.history.named import named_functions, named_paths
from porter.kb.history.raise_site import raise_sites, report_texts, search_literals
from porter.kb.history.release_line import release_line_commits
from porter.kb.history.snippets import fenced_code_lines
from porter.kb.history.version import installed_version
from porter.kb.matcher import MATCH_THRESHOLD

# Knowledge-base entry kinds that are environment faults: a firm signature match of one raises
# the bar for calling the same trace a plugin bug.
ENVIRONMENT_KINDS = frozenset({"env", "config", "packaging", "build", "hardware", "network", "process"})
# The signatures' own score (before calibration) at which an entry is a diagnosis: the calibration is refitted with the KB corpus,
# and the history gate must not move with it.
STRICT_SIGNATURE_SCORE = MATCH_THRESHOLD
# Error-code families (porter.kb.extract) that only the host raises: driver (dcmi) and HCCL codes.
ENVIRONMENT_CODE_FAMILIES = frozenset({"driver", "hccl"})
TEXT_SCAN_CHARS = 2_000_000  # versions are looked for in the first and last MB of the text
SHORT_TEXT_CHARS = 4_000
EMBEDDED_SCAN_CHARS = 200_000  # a pasted snippet's `Type: message` inside prose is looked for this far
# an exception class a report names: `ValueError`, `OutOfMemoryError`, and Python's own `Exception`
# (`raise Exception("...")` prints `Exception: ...`), which the `<Prefix>Exception` form misses
EXCEPTION_CLASS = r"(?:[A-Z][A-Za-z0-9_]{0,60}(?:Error|Exception)|Exception)"


@dataclass(frozen=True)
class HistorySource:
    """One repository history to search: where it is, what its packages are called, how to get it."""

    label: str  # plugin name or the path as given
    repo: Path
    packages: tuple[str, ...] = ()  # distribution names whose installed version --env / the text may give
    remote: str = ""  # where a clone would come from (for the "would need" note)
    ref: str = "HEAD"


def availability_problem(source: HistorySource) -> str | None:
    """Why this history cannot be searched (and what it would need), or None when it can."""
    repo = source.repo
    how = f"git clone {source.remote} {repo}" if source.remote else f"clone the plugin's repository to {repo}"
    if not repo.exists():
        return f"history for {source.label} is not available: {repo} does not exist; it needs a clone with full history ({how}), or pass --history PATH"
    result = mine._git(repo, ["rev-parse", "--is-shallow-repository"], 30)
    if not result.ok:
        return f"history for {source.label} is not available: {repo} is not a git repository ({how})"
    if result.stdout.strip() == "true":
        return f"history for {source.label} is shallow: fixes before its oldest commit are invisible (run `git -C {repo} fetch --unshallow`)"
    return None


def _rename_closure(commits: Sequence[CommitRecord]) -> dict[str, set[str]]:
    """Every path -> all names the same file had (renames, both ways)."""
    groups: dict[str, set[str]] = {}
    for c in commits:
        for ch in c.changes:
            if ch.old_path and ch.path and ch.old_path != ch.path:
                merged = groups.get(ch.path, {ch.path}) | groups.get(ch.old_path, {ch.old_path})
                for p in merged:
                    groups[p] = merged
    return groups


def _live_commits(source: HistorySource, head: str, facts: TraceFacts, cache_dir: Path) -> list[CommitRecord]:
    """Without an index: the log of each frame's file, following renames."""
    seen: dict[str, CommitRecord] = {}
    for path in dict.fromkeys(f.repo_path for f in facts.frames):
        for c in mine.log_commits(source.repo, cache_dir, [head], paths=[path], follow=True):
            prev = seen.get(c.sha)
            if prev is None:
                seen[c.sha] = c
            else:  # the same commit seen through two files: keep the changes of both
                merged = {ch.path: ch for ch in (*prev.changes, *c.changes)}
                seen[c.sha] = CommitRecord(c.sha, c.time, c.subject, c.pr, c.is_fix, c.error_strings, tuple(merged.values()), c.body,
                                           c.pasted)
    return sorted(seen.values(), key=lambda c: c.time, reverse=True)


def _first_tag_live(source: HistorySource, sha: str, tags: Sequence[str]) -> str | None:
    result = mine._git(source.repo, ["tag", "--contains", sha], 60)
    have = set(result.stdout.split()) if result.ok else set()
    return next((t for t in tags if t in have), None)


def analyse(
    source: HistorySource,
    traceback_blocks: Sequence[Sequence[str]],
    text: str,
    env: Mapping[str, str],
    cache_dir: Path,
    *,
    top: int = 3,
    gate: str = "",
    index: HistoryIndex | None = None,
    fallback_exception: tuple[str, str] | None = None,
    use_message: bool = True,
    error_text: str = "",
    mask_quotes: bool = False,
    title_line: str = "",
    quoted: Sequence[str] = (),
    issue: int | None = None,
    named: Sequence[str] = (),
) -> HistoryReport:
    """Candidate fix commits in `source` for the trace. `index`: a loaded index (else the cached
    one for the repository's tip is used when present, and git log on the frames' files if not).
    `mask_quotes`: leave out commit-message lines that quote this trace (benchmark ablation).
    `title_line`: the first line of a short input (an issue title), which a fix's title may restate.
    `quoted`: code statements the input quotes in backticks or fenced blocks (reported_lines).
    `issue`: the number of the repository's issue the trace came from, when the user names it.
    `named`: functions the input names as code (named.named_functions).
    `gate`: why the trace looks like an environment fault (environment_verdict), "" when it does not:
    then only candidates tied to the trace itself (a quote of its error, a change to a failing frame)
    are proposed."""
    started = time.perf_counter()
    problem = availability_problem(source)
    if problem and "shallow" not in problem:
        return HistoryReport(source.label, "unavailable", Installed(None, None, "unknown"), note=problem)
    head = mine.resolve(source.repo, source.ref)
    if index is None or index.head != head and not index.head.startswith("branches-"):
        # an index of every branch (release lines too) when there is one for the current tips
        index = mine.cached_index(cache_dir, source.repo, mine.index_key(source.repo, mine.ALL_BRANCHES)[0]) \
            or mine.cached_index(cache_dir, source.repo, head)
    if index:
        mapper = PathMapper(set(index.files) | mine.known_paths(index.commits))
    else:
        mapper = PathMapper(mine.repo_files(source.repo, head), existed=lambda p: mine.path_existed(source.repo, head, p))
    facts = trace_facts(traceback_blocks, mapper, fallback_exception)
    packages = (*source.packages, *dict.fromkeys(f.repo_path.split("/", 1)[0] for f in facts.frames))
    tags = index.tags if index else mine.sorted_tags(source.repo)
    scan = text if len(text) <= TEXT_SCAN_CHARS else text[: TEXT_SCAN_CHARS // 2] + "\n" + text[-TEXT_SCAN_CHARS // 2:]
    installed = installed_version(env, packages, versions_in_text(scan, packages), tags, source.repo, facts.frames)
    report = HistoryReport(source.label, "none", installed, frames=list(facts.frames), note=problem or "", index_used=index is not None,
                           gate=gate)
    # no plugin frame says where it failed: the plugin's own string of the error text may (its raise or log site),
    # read at the installed version, else at the tip the index was built from
    sites = () if facts.frames else raise_sites(
        source.repo, installed.ref or head, search_literals(report_texts(text, facts.exception_message, error_text)))
    if not facts.frames and not facts.exception_message and not facts.other_frames and not distinctive_names(error_text) \
            and not title_line and not quoted and issue is None and not named and not sites:
        report.status = "no-frames"  # nothing of the trace points into this repository
        report.elapsed_s = time.perf_counter() - started
        return report
    contained: set[str] | None = None
    if installed.ref:
        contained = set(mine.git_ok(source.repo, ["rev-list", f"{installed.ref}^{{commit}}"], "rev-list").split())
    # without an index only the frames' files are read: a message-only search needs the index
    commits = index.commits if index else _live_commits(source, head, facts, cache_dir)
    report.commits_considered = sum(1 for c in commits if contained is None or c.sha not in contained)
    first_tag = index.first_tag if index else {}
    candidates, inside = rank(commits, facts, first_tag, contained, _rename_closure(commits), top=top, strict=bool(gate),
                                 use_message=use_message, error_text=error_text, guessed=installed.source == "frames",
                                 mask=QuoteMask.of(text) if mask_quotes else None, report=title_line, quoted=quoted,
                                 issue=(issue, fixing_commits(source.repo, issue, repo_names(source.label, source.remote)))
                                 if issue is not None else None, named=named, sites=sites,
                                 line=release_line_commits(source.repo, installed.ref) if installed.ref else (None, frozenset()),
                                 named_files=tuple(dict.fromkeys(p for p in map(mapper, named_paths(text[:EMBEDDED_SCAN_CHARS]))
                                                                 if p)) if named and not facts.frames else ())
    if not index:
        from dataclasses import replace

        candidates = [replace(c, first_tag=_first_tag_live(source, c.sha, tags)) for c in candidates]
        inside = [replace(c, first_tag=_first_tag_live(source, c.sha, tags)) for c in inside]
    # "already contains this fix" only for a fix that quotes this very error, not one that touched the code
    report.contained = [c for c in inside if any(e.startswith("message ") for e in c.evidence)]
    report.candidates = candidates
    report.status = "candidates" if candidates else "none"
    report.elapsed_s = time.perf_counter() - started
    return report


def resolve_sources(values: Sequence[str], forks_file: Path, registry_file: Path | None = None) -> list[HistorySource]:
    """`--history` values: a path to a git repository, or a plugin/fork name from forks.yaml
    (its `history:` clone, by default its fork clone under forks/)."""
    from porter.registry import load_forks

    forks = None
    out: list[HistorySource] = []
    for value in values:
        path = Path(value).expanduser()
        if path.exists() or "/" in value or value.startswith("."):
            out.append(HistorySource(value, path.resolve() if path.exists() else path))
            continue
        if forks is None:
            forks = load_forks(forks_file)
        spec = forks.get(value) or next((f for f in forks.values() if f.plugin == value), None)
        if spec is None:
            raise InputError(f"--history {value!r}: neither a path nor a fork in {forks_file}",
                             hint=f"pass a git clone's path, or one of: {', '.join(sorted(forks)) or 'no forks configured'}")
        out.append(HistorySource(spec.name, spec.history, packages=(spec.plugin, spec.name),
                                 remote=spec.upstream_remote or spec.remote))
    return out


def analyse_diagnosis(source: HistorySource, diag, text: str, env: Mapping[str, str], cache_dir: Path, *,
                      top: int = 3, index: HistoryIndex | None = None, use_message: bool = True,
                      mask_quotes: bool = False, issue: int | None = None) -> HistoryReport:
    """`analyse` for a knowledge-base Diagnosis: its traceback blocks, first exception and matches.
    `issue`: the repository's issue the trace came from, when the user names it."""
    # error blocks too: a traceback behind a log prefix the extractor did not strip lands there
    blocks = [b.lines for b in diag.signals.blocks if b.kind in ("traceback", "error")]
    errors = error_lines(diag.signals.error_texts(12))
    if not errors.strip() and len(text) <= SHORT_TEXT_CHARS:  # a pasted description or issue title: its words are the error
        errors = error_lines(text.splitlines()[:40])
    # a short report's first line is its title: a fix's title may restate it
    title_line = next((line.strip() for line in text.splitlines() if line.strip()), "") if len(text) <= SHORT_TEXT_CHARS else ""
    return analyse(source, blocks, text, env, cache_dir, top=top, gate=environment_verdict(diag), index=index,
                   fallback_exception=fallback_exception(first_exception(diag.signals.exceptions), errors, text),
                   use_message=use_message, error_text=errors, mask_quotes=mask_quotes, title_line=title_line,
                   quoted=reported_lines(text[:EMBEDDED_SCAN_CHARS]), issue=issue,
                   named=named_functions(text[:EMBEDDED_SCAN_CHARS]))


def reported_lines(text: str) -> tuple[str, ...]:
    """The code statements a report quotes: in backticks, then the lines of its fenced code blocks."""
    return tuple(dict.fromkeys((*quoted_code_lines(text), *fenced_code_lines(text))))


def fallback_exception(first: tuple[str, str] | None, errors: str, text: str) -> tuple[str, str] | None:
    """The extractor's first exception, else one inside an error line or the prose; the prose's when
    it goes on where the extractor's line stopped (`RuntimeError: The` + `expanded size of ...`)."""
    embedded = embedded_exception(text[:EMBEDDED_SCAN_CHARS])
    # the error line cut where the prose wraps (`raise error "ValueError: Attention backend` + `reorders decodes ...`):
    # the prose goes on with the same message
    picked = first or embedded_exception(errors)
    if picked and embedded and picked[0] == embedded[0] and embedded[1].startswith(picked[1]) and len(embedded[1]) > len(picked[1]):
        return embedded
    return picked or embedded or named_exception(text[:SHORT_TEXT_CHARS])


def named_exception(text: str) -> tuple[str, str] | None:
    """An exception printed by repr, else a class a report names without its message (`IndexError
    from `x[i] = y[j]``): the type alone, which a fix's message may name."""
    import re

    m = re.search(rf"""(?<![A-Za-z0-9_])({EXCEPTION_CLASS})\((['"])(.{{4,300}}?)\2\)""", text)
    if m:  # an exception printed by repr (`ValueError('...')`, as Ray and loggers do): its message too
        return m.group(1), m.group(3)
    m = re.search(rf"(?<![A-Za-z0-9_])({EXCEPTION_CLASS})(?![A-Za-z0-9_])(?!\s*[:(])", text)
    return (m.group(1), "") if m else None


def error_lines(texts: Sequence[str]) -> str:
    """The trace's error lines without frames, log prefixes and paths: where code names in an
    error that has no `Type: message` line come from."""
    import re

    from porter.kb.history.frames import strip_log_prefix

    out = []
    for t in texts:
        t = strip_log_prefix(t).strip()
        if t.startswith(("File ", "Traceback")):
            continue
        out.append(re.sub(r"\S*/\S*", " ", t))  # paths name files, not the failing code
    return "\n".join(out)


def embedded_exception(text: str) -> tuple[str, str] | None:
    """`Type: message` inside an error line or a sentence (`... failed with KeyError: 'x'`), when
    no line starts with one. A message wrapped onto the next line (pasted prose) is joined when
    that line goes on with a quoted value."""
    import re

    from porter.kb.history.mine import unwrap_prose

    text = unwrap_prose(text)
    # `Type: message`, or `Type, 'value' ...` (a report's prose: the comma, then the message from its quoted value on)
    # ASCII boundaries, not \b: in a Chinese report the class name is written against CJK text (`显示AssertionError: ...`),
    # which \w counts as word characters
    m = re.search(rf"(?<![A-Za-z0-9_])({EXCEPTION_CLASS})(?![A-Za-z0-9_])(?::\s*|,[ \t]?(?=['\"]))([^\n`]{{4,300}})(?:\n([^\n`]{{1,200}}))?", text)
    if not m:
        return None
    message = m.group(2).strip()
    more = (m.group(3) or "").strip()
    if more[:1] in ("'", '"') and not message.endswith("."):
        message = f"{message} {more}"
    opener = text[m.start() - 1] if m.start() else ""
    if opener in ("'", '"') and opener in message:
        # prose that quotes the error (`raise error "ValueError: ... threshold 8" when you launch`) ends it at the quote
        message = message[: message.index(opener)].strip() or message
    return m.group(1), message


def environment_verdict(diag) -> str:
    """Why the trace looks like an environment fault, "" when it does not: a knowledge-base entry
    of an environment kind (driver, CANN setup, config, packaging, ...) whose signatures score
    STRICT_SIGNATURE_SCORE or more, or an error code of a host-only family (driver, HCCL). The
    signatures' own score is read, not the calibrated confidence, and abstained answers count:
    the gate depends on what the trace says, not on the calibration fitted to the KB corpus."""
    for m in (*diag.matches, *diag.near_misses):
        entry = getattr(m, "entry", None)
        if entry is None or m.method != "signature" or entry.kind not in ENVIRONMENT_KINDS:
            continue
        raw = m.explain.get("score", m.confidence)
        if raw >= STRICT_SIGNATURE_SCORE:
            return f"the knowledge base explains this trace as an environment fault ({entry.id}, {entry.layer})"
    for code, family, _line in diag.signals.codes:
        if family in ENVIRONMENT_CODE_FAMILIES:
            return f"the trace shows a {family} error code ({code})"
    return ""
