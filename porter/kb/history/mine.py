"""Per-commit facts from `git log -p -U0`: functions changed, removed lines, bug-fix flag, error
strings quoted in the message; the first tag containing each commit; the cached index.

One parser serves both paths: the whole branch for `porter kb mine-history`, and the log of the
frames' files (following renames) when no index is there yet.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from packaging.version import InvalidVersion, Version

from porter import proc
from porter.errors import EnvironmentProblem, InputError
from porter.kb.history.frames import strip_log_prefix
from porter.kb.history.models import INDEX_SCHEMA, CommitRecord, FileChange, HistoryIndex

_SEP_COMMIT = "\x00C"
_LOG_FORMAT = "%x00C%H%x1f%ct%x1f%B%x1e"
_FIX = re.compile(r"\b(?:bug\s?fix(?:es|ed)?|fix(?:es|ed|ing)?|hot\s?fix|bugs?|crash(?:es|ed)?|broken|wrong|incorrect|regression|revert)\b", re.I)
_PR = re.compile(r"\(#(\d{1,7})\)\s*$")
_DEF = re.compile(r"^\s*(?:async\s+)?def\s+(\w+)|^\s*class\s+(\w+)")
_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@ ?(?P<ctx>.*)$")
# `Type: message`, or `Type, 'value' ...` as prose often writes it (a quoted value after the comma: a message, not a clause)
# ASCII boundaries: a Chinese description writes the class against CJK text (`报错RuntimeError: ...`)
_ERR_LINE = re.compile(r"(?<![A-Za-z0-9_])[A-Z][A-Za-z0-9_]{0,60}(?:Error|Exception)(?![A-Za-z0-9_])(?::[^\n`]{3,240}|,[ \t]?['\"][^\n`]{3,240})?")
_BACKTICK = re.compile(r"`([^`\n]{1,240}(?:\n[^`\n]{1,240})?)`")  # a span prose wrapping split over two lines too
_TYPE_WRAPPED = re.compile(r"[ \t]*\n[ \t]*([^\n`]{3,240})")  # `TypeError:` at a line's end, its message on the next
_WRAPPED = re.compile(r"\n\s*(['\"][^\n`]{1,120})")
_BODY_END = re.compile(r"^(?:### Does this PR introduce|- vLLM version:|Signed-off-by:|Co-authored-by:)", re.M)
_CODE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{4,80}")
MAX_BODY = 1200
MAX_NAMES = 400  # code names kept per changed file (a vendored or generated file would add thousands)
MAX_LITERALS = 120  # error-text fragments kept per changed file
MAX_PASTED = 40  # traceback frames kept per commit message
# a traceback frame pasted in a message (any indentation, a Markdown quote or a log prefix before it), its source line next
_PASTED_FRAME = re.compile(r'File "[^"\n]{1,400}", line \d{1,7}, in ([A-Za-z_]\w{0,120})[ \t]*\n[ \t>]*([^\n]{1,400})')
_STRING = re.compile(r"[rfbu]{0,2}(?:\"([^\"\\\n]{12,300})\"|'([^'\\\n]{12,300})')")
# what splits an error text into its fixed parts: quoted values, numbers, format fields, brackets
_VARIABLE = re.compile(r"\{[^{}]{0,80}\}|%[-#0-9.]*[sdrfix]|'[^']{0,200}'|\"[^\"]{0,200}\"|\b0x[0-9a-fA-F]+\b|\b\d+(?:\.\d+)?\b|[()\[\]<>]")
MIN_FRAGMENT = 12
MIN_LINE_KEY = 8  # shorter removed lines (`)`, `else:`, `return x`) say little about which code it was
GIT_TIMEOUT = 600


def line_key(text: str) -> str | None:
    """A short, stable key for one source line (whitespace-insensitive), or None when too short."""
    norm = " ".join(text.split())
    if len(norm) < MIN_LINE_KEY:
        return None
    return hashlib.blake2b(norm.encode("utf-8", "surrogatepass"), digest_size=4).hexdigest()


def is_code_name(name: str) -> bool:
    """snake_case or CamelCase: a name that points at code, not an English word."""
    core = name.strip("_")
    if not core:
        return False
    return "_" in core or (any(c.isupper() for c in core[1:]) and any(c.islower() for c in core))


def code_names(text: str) -> list[str]:
    return [n for n in _CODE_NAME.findall(text) if is_code_name(n)]


def message_fragments(text: str) -> list[str]:
    """The fixed parts of an error text (values, numbers and format fields cut out), normalised:
    `f"Shape: {n} out of considered ranges: {r}"` and `Shape: 2304 out of considered ranges: [(1, 2048)]`
    share `out of considered ranges`."""
    out: list[str] = []
    for piece in _VARIABLE.split(text):
        norm = " ".join(re.sub(r"^[^0-9a-z]+|[^0-9a-z]+$", "", piece.lower()).split())
        if len(norm) >= MIN_FRAGMENT and " " in norm:
            out.append(norm)
    return out


def fragment_key(fragment: str) -> str:
    return hashlib.blake2b(fragment.encode("utf-8", "surrogatepass"), digest_size=4).hexdigest()


def literal_keys(line: str) -> list[str]:
    """fragment_key() of the error-text fragments in a source line's string literals."""
    keys: list[str] = []
    for m in _STRING.finditer(line):
        keys.extend(fragment_key(f) for f in message_fragments(m.group(1) or m.group(2)))
    return keys


def is_fix(subject: str) -> bool:
    return bool(_FIX.search(subject))


_WRAP = re.compile(r"(?<=[^\n`:])\n(?=[a-z'\"])")  # a prose line wrapped at 72 columns goes on in lowercase


def unwrap_prose(text: str) -> str:
    """Lines of prose wrapped at a fixed width joined again (the next line goes on in lowercase)."""
    return _WRAP.sub(" ", text)


def error_strings(message: str) -> tuple[str, ...]:
    """Error texts the message quotes: `Type: message` lines and backticked spans (prose wrapped
    onto the next line is joined first: `AssertionError: Some layers are` + `not correctly ...`)."""
    found: dict[str, None] = {}
    message = unwrap_prose(message)
    for m in _ERR_LINE.finditer(message):
        text = m.group().strip()
        if message.startswith(":", m.end()):  # `raising `TypeError:` + newline + `__init__() takes ...`
            rest = _TYPE_WRAPPED.match(message, m.end() + 1)
            if rest:
                text = f"{text}: {rest.group(1).strip()}"
        wrapped = _WRAPPED.match(message, m.end())  # `...has no attribute` + newline + `'name'`
        found.setdefault(f"{text} {wrapped.group(1)}" if wrapped and ":" in text else text, None)
    for m in _BACKTICK.finditer(message):
        span = " ".join(m.group(1).split())
        if len(span) >= 6:
            found.setdefault(span, None)
    return tuple(list(found)[:24])


def pasted_frames(message: str) -> str:
    """" f:k ... ": function and line_key() of the source line of each traceback frame the message
    pastes, read from the whole message (a PR's pasted trace sits below the sections trim_body cuts)."""
    found: dict[str, None] = {}
    for m in _PASTED_FRAME.finditer(message):
        source = strip_log_prefix(m.group(2)).strip()
        key = line_key(source) if not source.startswith(("File ", "^", "~")) else None
        if key:
            found.setdefault(f"{m.group(1)}:{key}", None)
        if len(found) >= MAX_PASTED:
            break
    return (" " + " ".join(found) + " ") if found else ""


def trim_body(body: str) -> str:
    body = body.strip()
    m = _BODY_END.search(body)
    if m:
        body = body[: m.start()]
    body = body.replace("### What this PR does / why we need it?", "").strip()
    return body[:MAX_BODY]


def _git(repo: Path, args: Sequence[str], timeout: float = GIT_TIMEOUT) -> proc.Completed:
    return proc.run(["git", "-c", "core.fsmonitor=false", "-c", "gc.auto=0", *args], cwd=repo, timeout=timeout,
                    extra_env={"GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0"})


def git_ok(repo: Path, args: Sequence[str], what: str, timeout: float = GIT_TIMEOUT) -> str:
    result = _git(repo, args, timeout)
    if not result.ok:
        tail = (result.stderr or result.stdout).strip().splitlines()[-2:]
        raise EnvironmentProblem(f"git {what} failed in {repo}: {' | '.join(tail) or f'exit {result.returncode}'}",
                                 hint="check that the history path is a git repository with its full history")
    return result.stdout


def _funcname(ctx: str) -> str | None:
    m = _DEF.match(ctx)
    return (m.group(1) or m.group(2)) if m else None


def parse_log(text: str) -> Iterator[CommitRecord]:
    """Commits from `git log --format=<_LOG_FORMAT> -p -U0` output (python diff driver on)."""
    for chunk in text.split(_SEP_COMMIT):
        if not chunk.strip():
            continue
        head, _, diff = chunk.partition("\x1e")
        sha, _, rest = head.partition("\x1f")
        ctime, _, message = rest.partition("\x1f")
        message = message.strip("\n")
        subject, _, body = message.partition("\n")
        pr = _PR.search(subject)
        yield CommitRecord(
            sha=sha.strip(), time=int(ctime or 0), subject=subject.strip(), pr=int(pr.group(1)) if pr else None,
            is_fix=is_fix(subject), error_strings=error_strings(message), changes=tuple(_parse_diff(diff)),
            body=trim_body(body), pasted=pasted_frames(message),
        )


def _parse_diff(diff: str) -> Iterator[FileChange]:
    path = old = ""
    funcs: dict[str, None] = {}
    removed: dict[str, None] = {}
    names: dict[str, None] = {}
    literals: dict[str, None] = {}
    started = False

    def joined(keys: dict[str, None], cap: int) -> str:
        kept = list(keys)[:cap]
        return (" " + " ".join(kept) + " ") if kept else ""

    def flush() -> FileChange | None:
        if started and path:
            return FileChange(path, old, tuple(funcs), joined(removed, len(removed)), joined(names, MAX_NAMES),
                              joined(literals, MAX_LITERALS))
        return None

    for line in diff.split("\n"):
        if line.startswith("diff --git "):
            done = flush()
            if done:
                yield done
            started, path, old, funcs, removed, names, literals = True, "", "", {}, {}, {}, {}
            m = re.match(r"diff --git a/(.*) b/(.*)$", line)
            if m:
                old, path = m.group(1), m.group(2)
            continue
        if not started:
            continue
        if line.startswith("--- "):
            old = "" if line == "--- /dev/null" else line[6:] if line.startswith("--- a/") else old
        elif line.startswith("+++ "):
            path = old if line == "+++ /dev/null" else line[6:] if line.startswith("+++ b/") else path
        elif line.startswith("rename from "):
            old = line[len("rename from "):]
        elif line.startswith("rename to "):
            path = line[len("rename to "):]
        elif line.startswith("@@"):
            m = _HUNK.match(line)
            name = _funcname(m.group("ctx")) if m else None
            if name:
                funcs.setdefault(name, None)
        elif line.startswith("-") or line.startswith("+"):
            body = line[1:]
            name = _funcname(body)
            if name:
                funcs.setdefault(name, None)
            if len(names) < MAX_NAMES:
                for n in code_names(body):
                    names.setdefault(n, None)
            if len(literals) < MAX_LITERALS and ("'" in body or '"' in body):
                for k in literal_keys(body):
                    literals.setdefault(k, None)
            if line[0] == "-":
                key = line_key(body)
                if key:
                    removed.setdefault(key, None)
    done = flush()
    if done:
        yield done


def _attributes_file(cache_dir: Path) -> Path:
    """A gitattributes file that turns on git's python diff driver (hunk headers name the def)."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_dir / "python.gitattributes"
    if not path.exists():
        fd, tmp = tempfile.mkstemp(dir=cache_dir)
        with os.fdopen(fd, "w") as fh:
            fh.write("*.py diff=python\n")
        os.replace(tmp, path)
    return path


def log_commits(repo: Path, cache_dir: Path, revs: Sequence[str], paths: Sequence[str] = ("*.py",), follow: bool = False) -> list[CommitRecord]:
    args = ["-c", f"core.attributesFile={_attributes_file(cache_dir)}", "log", "--no-merges", f"--format={_LOG_FORMAT}",
            "-p", "-U0", "--no-color", "--no-ext-diff", "-M", *(["--follow"] if follow else []), *revs, "--", *paths]
    return list(parse_log(git_ok(repo, args, "log")))


def _with_message_only(py_commits: list[CommitRecord], repo: Path, revs: Sequence[str]) -> list[CommitRecord]:
    """All commits of `revs`, newest first: those that changed no .py file (a Dockerfile, C++,
    a requirement pin) carry their message only, so a quoted error still finds them."""
    have = {c.sha: c for c in py_commits}
    out = git_ok(repo, ["log", "--no-merges", f"--format={_LOG_FORMAT}", *revs], "log")
    return [have.get(c.sha, c) for c in parse_log(out)]


# -- tags and the index -----------------------------------------------------------------------------
def _version_of(tag: str) -> Version | None:
    try:
        return Version(tag.lstrip("vV"))
    except InvalidVersion:
        return None


def sorted_tags(repo: Path) -> list[str]:
    """Release tags in version order, oldest first (tags that are not versions are left out)."""
    out = git_ok(repo, ["for-each-ref", "--format=%(refname:short)", "refs/tags"], "for-each-ref")
    tags = [(v, t) for t in out.split() if (v := _version_of(t)) is not None]
    return [t for _, t in sorted(tags)]


def first_tags(repo: Path, tags: Sequence[str]) -> dict[str, str]:
    """sha -> the first tag, in version order, whose history contains the commit."""
    first: dict[str, str] = {}
    earlier: list[str] = []
    for tag in tags:
        out = git_ok(repo, ["rev-list", f"{tag}^{{commit}}", *(["--not", *earlier] if earlier else [])], "rev-list")
        for sha in out.split():
            first.setdefault(sha, tag)
        earlier.append(f"{tag}^{{commit}}")
    return first


def resolve(repo: Path, ref: str) -> str:
    result = _git(repo, ["rev-parse", "--verify", "-q", f"{ref}^{{commit}}"], 60)
    if not result.ok:
        raise InputError(f"{repo}: no commit {ref!r}", hint="pass a branch or tag that exists in the history repository")
    return result.stdout.strip()


def repo_files(repo: Path, rev: str) -> list[str]:
    out = git_ok(repo, ["ls-tree", "-r", "--name-only", rev], "ls-tree")
    return [p for p in out.splitlines() if p.endswith(".py")]


def path_existed(repo: Path, rev: str, path: str) -> bool:
    """Whether any commit of `rev` touched `path` (a file since removed or renamed)."""
    result = _git(repo, ["log", "-1", "--format=%H", rev, "--", path], 60)
    return result.ok and bool(result.stdout.strip())


def index_dir(cache_dir: Path, repo: Path) -> Path:
    key = hashlib.sha256(str(repo.resolve()).encode()).hexdigest()[:16]
    return cache_dir / "history" / f"{repo.resolve().name}-{key}"


def _read(path: Path) -> HistoryIndex | None:
    try:
        raw = json.loads(path.read_bytes())
    except (OSError, ValueError, EOFError):
        return None
    if raw.get("schema") != INDEX_SCHEMA:
        return None
    return HistoryIndex.from_dict(raw)


ALL_BRANCHES = "--branches"  # `ref` that indexes the current branch and every release line
# a release line's branch name holds a version (`releases/v0.13.0`, `v0.9.1-dev`, `release/3.2.x`, `v0.4.x`);
# feature, revert and bot branches (`songlin/dsv4-lora`, `revert-4430-...`, `dependabot/...`) hold unmerged work
_RELEASE_BRANCH = re.compile(r"(?:^|[/_-])v?\d+\.(?:\d+|x)\b|(?:^|/)v\d+(?:\b|\.)")


def is_release_branch(name: str) -> bool:
    return bool(_RELEASE_BRANCH.search(name)) and not name.startswith(("dependabot/", "revert-"))


def index_key(repo: Path, ref: str) -> tuple[str, list[str]]:
    """(cache key, tips) of `ref`: its commit id, or for ALL_BRANCHES a digest of the tips of HEAD
    and of every release branch (is_release_branch)."""
    if ref != ALL_BRANCHES:
        head = resolve(repo, ref)
        return head, [head]
    out = git_ok(repo, ["for-each-ref", "--format=%(objectname) %(refname:short)", "refs/heads"], "for-each-ref")
    tips = [line.split(" ", 1)[0] for line in out.splitlines() if " " in line and is_release_branch(line.split(" ", 1)[1])]
    head = _git(repo, ["rev-parse", "--verify", "-q", "HEAD^{commit}"], 60)
    if head.ok and head.stdout.strip():
        tips.append(head.stdout.strip())
    tips = sorted(set(tips))
    if not tips:
        raise InputError(f"{repo}: no branches", hint="index a repository that has commits")
    return "branches-" + hashlib.sha256("\n".join(tips).encode()).hexdigest()[:24], tips


def cached_index(cache_dir: Path, repo: Path, head: str) -> HistoryIndex | None:
    path = index_dir(cache_dir, repo) / f"{head}.json"
    return _read(path) if path.is_file() else None


def is_ancestor(repo: Path, a: str, b: str) -> bool:
    return _git(repo, ["merge-base", "--is-ancestor", a, b], 60).returncode == 0


def build_index(repo: Path, cache_dir: Path, ref: str = "HEAD") -> tuple[HistoryIndex, Path, bool]:
    """The index of `ref` (cached by its commit id): (index, file, built_now). An older cached index
    of an ancestor is extended with the new commits only. `ref=ALL_BRANCHES` indexes every local
    branch (keyed by all their tips, rebuilt whole when any moves)."""
    head, tips = index_key(repo, ref)
    folder = index_dir(cache_dir, repo)
    target = folder / f"{head}.json"  # plain JSON: gunzip cost more per diagnose than the disk it saves
    if target.is_file() and (done := _read(target)) is not None:
        return done, target, False
    base: HistoryIndex | None = None
    if folder.is_dir() and ref != ALL_BRANCHES:
        for old in sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True):
            prev = _read(old)
            if prev is not None and len(prev.head) == 40 and prev.head != head and is_ancestor(repo, prev.head, head):
                base = prev
                break
    revs = [head, f"^{base.head}"] if base else list(tips)
    commits = _with_message_only(log_commits(repo, cache_dir, revs), repo, revs)
    if base:
        commits += base.commits
    tags = sorted_tags(repo)
    index = HistoryIndex(head=head, ref=ref, commits=commits, first_tag=first_tags(repo, tags), tags=tags,
                         files=repo_files(repo, "HEAD" if ref == ALL_BRANCHES else head))
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(json.dumps(index.to_dict(), separators=(",", ":")).encode("utf-8"))
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return index, target, True


def known_paths(commits: Iterable[CommitRecord]) -> set[str]:
    """Every .py path the commits touched (old names included): lets renamed or removed files map."""
    out: set[str] = set()
    for c in commits:
        for ch in c.changes:
            if ch.path:
                out.add(ch.path)
            if ch.old_path:
                out.add(ch.old_path)
    return out
