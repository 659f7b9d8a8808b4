"""A fork that merges its parent (triton-ascend merges triton): merge the upstream tag in a porter
worktree (`--no-ff`, never a rebase), apply the recorded conflict resolutions from
knowledge/merge-resolutions/ where they fit, classify what is left, and either commit the merge
on `ascend-port/<slug>` with PR material or hand a human the list of conflicts to resolve.

Resolution files (YAML, one per fork):

    fork: triton-ascend
    resolutions:
      - id: TA-MERGE-001
        paths: ["cmake/llvm-hash.txt"]      # globs, relative to the fork root
        strategy: ours                      # ours | theirs | recorded | manual
        why: the fork pins its own LLVM commit
        applies_to: ["3.6.0"]               # optional: target versions this was recorded for
        hunks:                              # recorded only: conflict key -> resolved text
          - {conflict: 1a2b3c4d5e6f7a8b, resolution: "..."}

`manual` entries resolve nothing; their `why` is the recipe the PR material shows the human.
A conflict key is the first 16 hex digits of sha256(ours + NUL + theirs) of one conflict hunk.
"""

from __future__ import annotations

import fnmatch
import hashlib
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from porter.port import publish as pub
from porter.port import worktree as forks
from porter.errors import ExitCode, InputError, PorterError, UsageError
from porter.fsutil import atomic_write_text
from porter.redact import redact_text
from porter.yamlio import load_yaml_file

STRATEGIES = ("ours", "theirs", "recorded", "manual")


class MergeConflicts(PorterError):
    """The merge left conflicts no recorded resolution covers: a human must resolve them."""

    exit_code = ExitCode.FINDINGS
    kind = "merge_conflicts"


@dataclass(frozen=True)
class Resolution:
    id: str
    paths: tuple[str, ...]
    strategy: str
    why: str = ""
    applies_to: tuple[str, ...] = ()
    hunks: dict[str, str] = field(default_factory=dict)  # conflict key -> resolved text
    source: str = ""

    def matches(self, path: str, target: str) -> bool:
        if self.applies_to and target.lstrip("v") not in {v.lstrip("v") for v in self.applies_to}:
            return False
        return any(fnmatch.fnmatchcase(path, glob) for glob in self.paths)


def load_resolutions(directory: Path, fork: str) -> list[Resolution]:
    """Recorded resolutions for `fork` from every YAML file in `directory` (missing dir: none)."""
    out: list[Resolution] = []
    if not directory.is_dir():
        return out
    for path in sorted(directory.glob("*.yaml")):
        data = load_yaml_file(path) or {}
        if not isinstance(data, dict) or data.get("fork") != fork:
            continue
        for index, raw in enumerate(data.get("resolutions") or []):
            where = f"{path}: resolutions[{index}]"
            if not isinstance(raw, dict) or not raw.get("id") or not raw.get("paths"):
                raise InputError(f"{where}: needs `id` and `paths`", hint="see porter/port/fork_merge.py for the format")
            strategy = str(raw.get("strategy", "manual"))
            if strategy not in STRATEGIES:
                raise InputError(f"{where}: unknown strategy {strategy!r}", hint=f"use one of {', '.join(STRATEGIES)}")
            paths = raw["paths"] if isinstance(raw["paths"], list) else [raw["paths"]]
            hunks = {str(h["conflict"]): str(h.get("resolution", "")) for h in raw.get("hunks") or [] if "conflict" in h}
            out.append(Resolution(str(raw["id"]), tuple(str(p) for p in paths), strategy, str(raw.get("why", "")),
                                  tuple(str(v) for v in raw.get("applies_to") or ()), hunks, str(path)))
    return out


# ---------------------------------------------------------------- conflict hunks


@dataclass(frozen=True)
class Hunk:
    start: int  # index of the `<<<<<<<` line
    end: int  # index of the `>>>>>>>` line
    ours: str
    theirs: str

    @property
    def key(self) -> str:
        return conflict_key(self.ours, self.theirs)


def conflict_key(ours: str, theirs: str) -> str:
    return hashlib.sha256((ours + "\0" + theirs).replace("\r\n", "\n").encode()).hexdigest()[:16]


def conflict_hunks(text: str) -> list[Hunk]:
    lines = text.splitlines(keepends=True)
    hunks, index = [], 0
    while index < len(lines):
        if lines[index].startswith("<<<<<<< "):
            start, ours, theirs, mode = index, [], [], "ours"
            index += 1
            while index < len(lines) and not lines[index].startswith(">>>>>>> "):
                line = lines[index]
                if line.startswith("||||||| "):
                    mode = "base"
                elif line.rstrip("\n") == "=======":
                    mode = "theirs"
                elif mode == "ours":
                    ours.append(line)
                elif mode == "theirs":
                    theirs.append(line)
                index += 1
            hunks.append(Hunk(start, index, "".join(ours), "".join(theirs)))
        index += 1
    return hunks


def apply_recorded(text: str, recorded: dict[str, str]) -> tuple[str, list[str]]:
    """Replace every hunk whose key is recorded; returns the new text and the keys left unresolved."""
    lines = text.splitlines(keepends=True)
    hunks = conflict_hunks(text)
    missing = [h.key for h in hunks if h.key not in recorded]
    if missing:
        return text, missing
    for hunk in reversed(hunks):
        lines[hunk.start:hunk.end + 1] = [recorded[hunk.key]]
    return "".join(lines), []


# ---------------------------------------------------------------- the merge


@dataclass(frozen=True)
class Conflict:
    path: str
    kind: str  # content | add/add | deleted by us | deleted by them
    resolved_by: str = ""  # resolution id, or "" when a human must resolve it
    strategy: str = ""
    recipe: str = ""  # `why` of a matching manual/recorded entry
    hunks: int = 0
    unresolved_keys: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "resolved_by": self.resolved_by or None, "strategy": self.strategy,
                "recipe": self.recipe, "hunks": self.hunks, "unresolved_keys": list(self.unresolved_keys)}


@dataclass(frozen=True)
class MergeRequest:
    fork: str
    fork_path: Path
    upstream: str
    target: str  # label, e.g. v3.6.0
    target_ref: str  # commit-ish to merge (a sha, or a ref known in the fork)
    fetch_from: str | None = None  # URL / path to fetch `fetch_ref` from when the fork lacks the commit
    fetch_ref: str | None = None  # e.g. refs/tags/v3.6.0
    fork_ref: str | None = None
    slug: str | None = None
    resolutions_dir: Path | None = None
    allow_dirty: bool = False
    force: bool = False
    push: bool = False
    remote: str = "origin"
    work_dir: Path = Path("/tmp/porter-worktrees")
    runs_dir: Path | None = None
    forks_file: Path | None = None
    reproducer: str = ""


@dataclass(frozen=True)
class MergeResult:
    run_id: str
    fork: str
    upstream: str
    target: str
    branch: str
    base_sha: str
    target_sha: str
    conflicts: tuple[Conflict, ...]
    branch_moved: bool = False
    tip: str | None = None
    previous_sha: str | None = None
    validation: dict[str, Any] = field(default_factory=dict)
    pr_material: str = ""
    record_dir: str = ""
    message: str = ""
    pushed: str = ""

    @property
    def outcome(self) -> str:
        return "C_PATCH"

    @property
    def exit_code(self) -> int:
        return 0 if self.branch_moved else int(ExitCode.FINDINGS)

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "fork": self.fork, "upstream": self.upstream, "target": self.target,
                "branch": self.branch, "base_sha": self.base_sha, "target_sha": self.target_sha,
                "conflicts": [c.to_dict() for c in self.conflicts], "branch_moved": self.branch_moved, "tip": self.tip,
                "previous_sha": self.previous_sha, "validation": self.validation, "record_dir": self.record_dir,
                "message": self.message, "pushed": self.pushed, "outcome": self.outcome}


def _unmerged(wt: forks.Worktree) -> dict[str, set[int]]:
    stages: dict[str, set[int]] = {}
    for line in wt.git("ls-files", "-u", "-z").stdout.split("\0"):
        if not line.strip():
            continue
        meta, _, path = line.partition("\t")
        stages.setdefault(path, set()).add(int(meta.split()[2]))
    return stages


def _kind(stages: set[int]) -> str:
    if {2, 3} <= stages:
        return "content" if 1 in stages else "add/add"
    return "deleted by them" if 2 in stages else "deleted by us"


def _open_hunks(wt: forks.Worktree, path: str, kind: str) -> tuple[int, tuple[str, ...]]:
    """Hunk count and conflict keys of a file left to a human: the keys a `recorded` entry needs."""
    if kind not in ("content", "add/add"):
        return 0, ()
    try:
        hunks = conflict_hunks((wt.path / path).read_text(encoding="utf-8", errors="surrogateescape"))
    except OSError:
        return 0, ()
    return len(hunks), tuple(h.key for h in hunks)


def _resolve(wt: forks.Worktree, path: str, kind: str, rules: list[Resolution], target: str) -> Conflict:
    rule = next((r for r in rules if r.matches(path, target)), None)
    if rule is None:
        count, keys = _open_hunks(wt, path, kind)
        return Conflict(path, kind, hunks=count, unresolved_keys=keys)
    if rule.strategy == "manual":
        count, keys = _open_hunks(wt, path, kind)
        return Conflict(path, kind, strategy="manual", recipe=rule.why, hunks=count, unresolved_keys=keys)
    if rule.strategy in ("ours", "theirs"):
        side_exists = not ((rule.strategy == "ours" and kind == "deleted by us") or
                           (rule.strategy == "theirs" and kind == "deleted by them"))
        if side_exists:
            wt.git("checkout", f"--{rule.strategy}", "--", path)
            wt.git("add", "--", path)
        else:
            wt.git("rm", "-q", "--", path)
        return Conflict(path, kind, rule.id, rule.strategy, rule.why)
    # recorded: every hunk of the file must have a recorded resolution
    if kind != "content" and kind != "add/add":
        return Conflict(path, kind, strategy="recorded", recipe=rule.why)
    text = (wt.path / path).read_text(encoding="utf-8", errors="surrogateescape")
    hunks = conflict_hunks(text)
    new_text, missing = apply_recorded(text, rule.hunks)
    if missing:
        return Conflict(path, kind, strategy="recorded", recipe=rule.why, hunks=len(hunks), unresolved_keys=tuple(missing))
    atomic_write_text(wt.path / path, new_text)
    wt.git("add", "--", path)
    return Conflict(path, kind, rule.id, "recorded", rule.why, hunks=len(hunks))


def run_merge(request: MergeRequest, status: Callable[[str], None] = lambda _m: None) -> MergeResult:
    from porter.port.plan import checkpoint, new_run_id
    from porter.port.validate import Validation, byte_compile

    fork = forks.inspect_fork(request.fork_path)
    root = fork.root
    if fork.dirty and not request.allow_dirty:
        raise InputError(f"the fork checkout {root} has uncommitted changes",
                         hint="commit or stash them first, or pass --allow-dirty (porter merges the committed baseline)")
    if request.fork_ref:
        base_sha, fork_ref = forks.resolve_commit(root, request.fork_ref), request.fork_ref
    elif fork.head_branch is None:
        raise InputError(f"HEAD is detached in {root}: porter cannot tell which branch is the baseline",
                         hint="check out the fork's branch, or name the baseline with --fork-ref")
    else:
        base_sha, fork_ref = fork.head_sha, fork.head_branch
    if request.fetch_from and request.fetch_ref:
        # Objects only: no ref, no FETCH_HEAD, so the user's repository looks exactly as before.
        fetched = forks.git(root, "fetch", "-q", "--no-tags", "--no-write-fetch-head", request.fetch_from,
                            request.fetch_ref, check=False)
        if not fetched.ok:
            raise InputError(f"cannot fetch {request.fetch_ref} from {request.fetch_from}: {fetched.stderr.strip()[-200:]}",
                             hint="check the upstream URL in knowledge/upstreams.yaml and the tag name")
    target_sha = forks.resolve_commit(root, request.target_ref)
    if forks.is_ancestor(root, target_sha, base_sha):
        raise UsageError(f"{request.upstream} {request.target} is already merged into {fork_ref} (target equals baseline)",
                         hint="pick a newer target with --to")
    start = forks.start_run(root, base_sha, request)
    slug, branch, existing, identity = start.slug, start.branch, start.existing, start.identity
    run_id = new_run_id()
    rules = load_resolutions(request.resolutions_dir, request.fork) if request.resolutions_dir else []
    status(f"porter run {run_id}: merging {request.upstream} {request.target} ({target_sha[:12]}) into {fork_ref}")

    with forks.worktree(root, base_sha, request.work_dir, run_id) as wt:
        merge = wt.git("-c", "merge.conflictStyle=merge", "-c", "rerere.enabled=false", "merge", "--no-ff", "--no-commit",
                       "--no-edit", target_sha, check=False, env=forks.identity_env(identity))
        checkpoint("merged")
        stages = _unmerged(wt)
        if not merge.ok and not stages:
            raise InputError(f"git merge of {request.target} failed: {(merge.stderr or merge.stdout).strip()[-300:]}")
        conflicts = tuple(_resolve(wt, path, _kind(s), rules, request.target) for path, s in sorted(stages.items()))
        open_conflicts = [c for c in conflicts if not c.resolved_by]
        result = MergeResult(run_id, request.fork, request.upstream, request.target, branch, base_sha, target_sha,
                             conflicts, previous_sha=existing.sha if existing else None)
        if open_conflicts:
            text = render_merge_material(request, result, fork_ref, root, validation=None, stat="")
            recorded = _record(request, replace(result, pr_material=text, message="unresolved conflicts: no branch"))
            shown = ", ".join(c.path for c in open_conflicts[:5]) + (" ..." if len(open_conflicts) > 5 else "")
            where = f"{recorded.record_dir}/PR_MATERIAL.md" if recorded.record_dir else "the PR material"
            raise MergeConflicts(
                f"merging {request.upstream} {request.target} left {len(open_conflicts)} conflict(s) a human must resolve: "
                f"{shown}; {branch} was not touched",
                hint=f"resolve them on a branch of your own ({where} lists them with their conflict keys and recipes), "
                     "then record the resolutions in knowledge/merge-resolutions/",
                details={"run_id": run_id, "record_dir": recorded.record_dir or None,
                         "conflicts": [c.to_dict() for c in open_conflicts]},
            )
        message = (f"Merge {request.upstream} {request.target} into {fork_ref}\n\n"
                   + "".join(f"- {c.path}: {c.kind}, resolved by {c.resolved_by} ({c.strategy})\n" for c in conflicts)
                   + "\n" + forks.trailer_block(["merge"], [f"{request.upstream}@{target_sha[:12]}"],
                                                f"{request.upstream} {request.target}", run_id) + "\n")
        merge_sha = wt.commit_index(message, identity)
        changed = [p for p in wt.git("diff", "--name-only", base_sha, merge_sha).stdout.splitlines() if p.endswith(".py")]
        validation = Validation((byte_compile(wt.path, changed),))
        stat = forks.git(root, "diff", "--shortstat", base_sha, merge_sha).stdout.strip()
        text = render_merge_material(request, result, fork_ref, root, validation=validation, stat=stat, merge_sha=merge_sha)
        atomic_write_text(wt.path / "PR_MATERIAL.md", redact_text(text))
        wt.commit(["PR_MATERIAL.md"], f"PR_MATERIAL.md: merge {request.upstream} {request.target}\n\n"
                  + forks.trailer_block(["merge"], [f"{request.upstream}@{target_sha[:12]}"],
                                        f"{request.upstream} {request.target}", run_id) + "\n", identity)
        tip = wt.head()
        result = replace(result, tip=tip, validation=validation.to_dict(), pr_material=text)
        if not validation.ok:
            _record(request, replace(result, message="validation failed: branch not moved"))
            raise MergeConflicts(f"the merged tree does not byte-compile: {branch} was not moved",
                                 details={"validation": validation.to_dict()})
        final = replace(result, branch_moved=True,
                        message=f"{branch} -> {tip[:12]}: merge of {request.target} + PR_MATERIAL.md")

        def after_move() -> MergeResult:
            pub.record_ledger(request.forks_file, request.fork, slug=slug, branch=branch, upstream=request.upstream,
                              target=request.target, outcome="C_PATCH", run_id=run_id, commits=(merge_sha, tip),
                              notes=f"merge; {len(conflicts)} conflict(s) resolved from knowledge/merge-resolutions")
            return _record(request, final)

        result = pub.publish(root, branch, tip, existing.sha if existing else None, run_id, identity, after_move)
    if request.push:
        result = _record(request, replace(result, pushed=pub.push_branch(root, request.remote, branch,
                                                                         force=existing is not None)))
    return result


def render_merge_material(request: MergeRequest, result: MergeResult, fork_ref: str, root: Path, *, validation,
                          stat: str, merge_sha: str = "") -> str:
    from porter.shims.render import render

    return render(
        "pr_merge.md.j2", fork=request.fork, upstream=request.upstream, target=request.target, branch=result.branch,
        run_id=result.run_id, created=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), fork_ref=fork_ref,
        base_sha=result.base_sha, target_sha=result.target_sha, merge_sha=merge_sha,
        conflicts=[c.to_dict() for c in result.conflicts], open=[c.to_dict() for c in result.conflicts if not c.resolved_by],
        validation=validation.to_dict() if validation else None, stat=stat, fork_path=str(root),
        reproducer=request.reproducer or f"porter upgrade {request.fork} --to {request.target}",
    )


def _record(request: MergeRequest, result: MergeResult) -> MergeResult:
    return pub.write_record(request.runs_dir, result)
