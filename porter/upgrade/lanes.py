"""The plugin's two lanes (a vllm release and vllm main) and what a move of one lane does to each
version guard: keep it, collapse it (dead at both lanes: delete the branch no lane takes) or
retarget it (the branch both lanes would take breaks at the target while the other resolves: the
target still behaves like the old release, so bump the guard's version to the target).

Pure functions over usage records and per-branch break facts; drift.py supplies the facts.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable

from packaging.version import Version

from porter.upgrade.guards import (
    Condition,
    GuardConventions,
    HasAttr,
    MainRef,
    TargetVersions,
    combine,
    parse_version,
    evaluate_condition,
    guard_kind,
)
from porter.upgrade.models import GuardKind
from porter.upgrade.usage import GuardBlock


@dataclass(frozen=True)
class Lanes:
    """Versions of the upstream in each lane, after the move (`release`, `main`) and before it
    (`current_release`, `current_main`: to say which lane a site belongs to)."""

    release: TargetVersions
    main: TargetVersions
    current_release: TargetVersions
    current_main: TargetVersions
    target_label: str  # what the user moves to: "0.22.1" or "main"
    retarget_to: str | None  # the version a retargeted guard names (the new release), None for --to main
    patch_release: bool = False  # the target is a patch release of the current one (see is_patch_release)

    @classmethod
    def for_move(cls, upstream: str, target: Version | None, target_label: str, current: Version | None) -> "Lanes":
        """A release target moves the release lane (main stays main, past the target); a branch target
        (`main`) moves the main lane (the release lane stays at the plugin's current release)."""
        if target is not None:
            release, main_floor, retarget = target, target, str(target)
        else:
            release, main_floor, retarget = current, current, None
        return cls(
            release=TargetVersions({upstream: release}),
            main=TargetVersions({upstream: MainRef(main_floor)}),
            current_release=TargetVersions({upstream: current}),
            current_main=TargetVersions({upstream: MainRef(current)}),
            target_label=target_label,
            retarget_to=retarget,
        )

    def as_patch_release(self) -> "Lanes":
        """The same move, marked as one to a patch release of the current one (a release target only:
        `--to main` has no release to retarget to)."""
        return replace(self, patch_release=True) if self.retarget_to else self

    @property
    def replaced_release(self) -> Version | MainRef | None:
        """The release the move replaces (the plugin's current release lane)."""
        return next(iter(self.current_release.versions.values()), None)


# A patch release is cut from the release branch with a few cherry-picks; a feature release from main.
# Share of the modules both trees hold whose file size differs, measured on vllm: patch releases
# 0.14.0->0.14.1 0.4 %, 0.17.0->0.17.1 1 %, 0.19.0->0.19.1 2 %; feature releases 30-100 %. Modules only
# one tree holds do not count: a wheel carries generated and vendored modules its sdist lacks.
PATCH_RELEASE_SHARE = 0.05


def is_patch_release(old_sizes: dict[str, int], new_sizes: dict[str, int]) -> bool:
    """Does the move from the tree of `old_sizes` to that of `new_sizes` (module -> file size) touch so
    few modules that the new release still behaves like the old one (a patch release)?"""
    common = [m for m in old_sizes.keys() & new_sizes.keys() if not m.endswith("._version")]
    if len(common) < 0.5 * min(len(old_sizes), len(new_sizes)):
        return False  # not two releases of one tree
    changed = sum(1 for m in common if old_sizes[m] != new_sizes[m])
    return changed <= PATCH_RELEASE_SHARE * len(common)


@dataclass(frozen=True)
class GuardVerdict:
    """One version guard block and what to do with it at the target."""

    path: str
    line: int
    end_line: int
    guard: str  # the test's source
    verdict: str  # keep | collapse | retarget
    reason: str
    kind: str = "if"  # if | elif | ifexp | assign (a version predicate) | value (a version test used as a value)
    kept: str = ""  # which branch stays after collapse/retarget: body | else | test | value (the answer) ("" for keep)
    retarget_to: str | None = None  # version written into the guard on retarget
    value_at_target: bool | None = None  # the test at the target (release lane)
    # kept == "test": the version checks inside an undecided test that both lanes answer alike, as
    # (check's source, its value); the drop removes them from the test (`x and not is("OLD")` -> `x`).
    decided: tuple[tuple[str, bool], ...] = ()
    simplified: str = ""  # kept == "test": the test that remains
    tested_only: bool = False  # assign, kept == "test": every read is a guard test (only truthiness counts)

    def to_dict(self) -> dict[str, Any]:
        out = {"path": self.path, "line": self.line, "end_line": self.end_line, "guard": self.guard,
               "verdict": self.verdict, "reason": self.reason, "kind": self.kind}
        if self.kept:
            out["kept"] = self.kept
        if self.retarget_to:
            out["retarget_to"] = self.retarget_to
        if self.simplified:
            out["simplified"] = self.simplified
        return out


def lane_of(conditions: tuple[Condition, ...], conventions: GuardConventions, lanes: Lanes,
            aliases: dict[str, str] | None = None) -> str:
    """Which lane (before the move) runs a site: both | release | main | none."""
    if not any(c.kind == "if" and guard_kind(c, conventions) is GuardKind.VERSION for c in conditions):
        return "both"
    release = combine(conditions, conventions, lanes.current_release, None, aliases).live
    main = combine(conditions, conventions, lanes.current_main, None, aliases).live
    return {(True, True): "both", (True, False): "release", (False, True): "main"}.get((release, main), "none")


def innermost_version_block(conditions: tuple[Condition, ...], conventions: GuardConventions) -> Condition | None:
    for cond in reversed(conditions):
        if cond.kind == "if" and cond.line and guard_kind(cond, conventions) is GuardKind.VERSION:
            return cond
    return None


def is_version_guard(source: str, conventions: GuardConventions) -> bool:
    """Does the test read an upstream's version: a version helper (`vllm_version_is`), a version
    name the registry lists (`CURRENT_VERSION`) or `<upstream package>.__version__`?"""
    try:
        expr = ast.parse(source, mode="eval").body
    except SyntaxError:
        return False
    for node in ast.walk(expr):
        if isinstance(node, ast.Call) and ast.unparse(node.func).rsplit(".", 1)[-1] in conventions.version_functions:
            return True
        if isinstance(node, ast.Name) and node.id in conventions.version_names:
            return True
        if isinstance(node, ast.Attribute):
            text = ast.unparse(node)
            if node.attr in conventions.version_names:
                return True
            if node.attr == "__version__" and text.split(".")[0] in conventions.packages:
                return True
    return False


def _retargetable(source: str, conventions: GuardConventions) -> bool:
    """Does the test call a version helper with a literal (so `vllm_version_is("NEW")` can replace it)?"""
    try:
        expr = ast.parse(source, mode="eval").body
    except SyntaxError:
        return False
    for node in ast.walk(expr):
        if isinstance(node, ast.Call) and (ast.unparse(node.func).rsplit(".", 1)[-1] in conventions.version_functions
                                           and node.args and isinstance(node.args[0], ast.Constant)):
            return True
    return False


def _names_only(source: str, conventions: GuardConventions, release: Version | MainRef | None,
                series: bool = False) -> bool:
    """Does every version-helper call in the test name `release` (the release the move replaces), or
    with `series` a release of its major.minor series (0.14.0 for 0.14.1)?"""
    if not isinstance(release, Version):
        return False
    try:
        expr = ast.parse(source, mode="eval").body
    except SyntaxError:
        return False
    named = [parse_version(node.args[0].value) for node in ast.walk(expr)
             if isinstance(node, ast.Call) and ast.unparse(node.func).rsplit(".", 1)[-1] in conventions.version_functions
             and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)]
    if series:
        return bool(named) and all(v is not None and v.release[:2] == release.release[:2] and v <= release for v in named)
    return bool(named) and all(v == release for v in named)


def guard_verdicts(
    blocks: Iterable[GuardBlock],
    broken: set[tuple[str, int, bool]],
    conventions: GuardConventions,
    lanes: Lanes,
    aliases_of: dict[str, dict[str, str]] | None = None,
    hasattr_fn: HasAttr | None = None,
    installs_unchanged: dict[tuple[str, int], tuple[str, ...]] | None = None,
) -> list[GuardVerdict]:
    """A verdict per version guard. `broken` holds (path, line, negated) of every branch with a use
    that does not resolve at the target (negated=False: the body; True: the else branch).
    `installs_unchanged`: guards whose body installs plugin modules that no upstream change between
    the releases touches (path, line) -> modules."""
    out: list[GuardVerdict] = []
    aliases_of = aliases_of or {}
    blocks = list(blocks)
    for block in blocks:
        cond = Condition("if", block.source, False, line=block.line)
        if block.kind == "assign" or not is_version_guard(block.source, conventions):
            continue
        aliases = aliases_of.get(block.path, {})
        at_release = evaluate_condition(cond, conventions, lanes.release, hasattr_fn, aliases)
        at_main = evaluate_condition(cond, conventions, lanes.main, hasattr_fn, aliases)
        common = dict(path=block.path, line=block.line, end_line=block.end_line, guard=block.source, kind=block.kind,
                      value_at_target=at_release)
        if block.kind == "value":
            out.append(_value_verdict(block, at_release, at_main, conventions, lanes, common))
            continue
        if at_release is None or at_main is None:
            partial = _decided_checks(block.source, conventions, lanes, hasattr_fn, aliases)
            if partial is not None:
                decided, rest = partial
                out.append(GuardVerdict(verdict="collapse", kept="test", decided=decided, simplified=rest, reason=(
                    f"the version check{'s' if len(decided) > 1 else ''} in the test "
                    f"{'are' if len(decided) > 1 else 'is'} decided alike at {lanes.target_label} and at main: "
                    f"the test becomes `{rest}`"), **common))
                continue
            out.append(GuardVerdict(verdict="keep", reason="the test cannot be decided for both lanes", **common))
            continue
        if at_release != at_main:
            out.append(GuardVerdict(verdict="keep", reason="still tells the release lane from main", **common))
            continue
        kept = "body" if at_release else "else"
        kept_breaks = (block.path, block.line, not at_release) in broken
        dropped_breaks = (block.path, block.line, at_release) in broken
        if kept_breaks and not dropped_breaks and lanes.retarget_to and _retargetable(block.source, conventions):
            out.append(GuardVerdict(verdict="retarget", kept=kept, retarget_to=lanes.retarget_to,
                                    reason=f"the branch both lanes take breaks at {lanes.target_label} and the dead "
                                           f"branch resolves there: retarget the guard to {lanes.retarget_to}", **common))
            continue
        if (lanes.patch_release and not dropped_breaks and _retargetable(block.source, conventions)
                and _names_only(block.source, conventions, lanes.replaced_release)):
            out.append(GuardVerdict(verdict="retarget", kept=kept, retarget_to=lanes.retarget_to, reason=(
                f"{lanes.target_label} is a patch release of the release this guard names: it keeps that release's "
                f"behaviour and the release branch resolves there, so retarget the guard to {lanes.retarget_to}"),
                **common))
            continue
        installed = (installs_unchanged or {}).get((block.path, block.line))
        if (installed and kept == "else" and not block.has_else and not dropped_breaks and lanes.retarget_to
                and _retargetable(block.source, conventions)
                and _names_only(block.source, conventions, lanes.replaced_release, series=True)):
            # A release-only patch: upstream did not change what it patches, so the new release still needs it.
            out.append(GuardVerdict(verdict="retarget", kept=kept, retarget_to=lanes.retarget_to, reason=(
                f"the release-only branch installs {', '.join(installed[:3])}, and nothing upstream it uses changed "
                f"between {lanes.replaced_release} and {lanes.target_label}: the release lane still needs it, "
                f"retarget the guard to {lanes.retarget_to}"), **common))
            continue
        why = f"dead at {lanes.target_label} and at main: collapse (keep the {'if' if kept == 'body' else 'else'} branch)"
        if kept_breaks:
            why += f"; the kept branch still breaks at {lanes.target_label} (see the records)"
        out.append(GuardVerdict(verdict="collapse", kept=kept, reason=why, **common))
    out = _follow_retargets(out, blocks, broken, conventions, lanes)
    predicates = _predicate_verdicts(blocks, out, conventions, lanes)
    retargeted = {(v.path, v.line) for v in predicates if v.verdict == "retarget"}
    if retargeted:  # the guards reading a retargeted predicate move with it (their test is that predicate)
        via = {(b.path, b.line): b.via for b in blocks if b.via}
        out = [replace(v, verdict="retarget", retarget_to=lanes.retarget_to,
                       reason=f"reads a version predicate retargeted to {lanes.retarget_to}")
               if v.verdict == "collapse" and any((v.path, line) in retargeted for line in via.get((v.path, v.line), ()))
               else v for v in out]
    return sorted(out + predicates, key=lambda v: (v.path, v.line))


def _value_verdict(block: GuardBlock, at_release: bool | None, at_main: bool | None, conventions: GuardConventions,
                   lanes: Lanes, common: dict[str, Any]) -> GuardVerdict:
    """A version test used as a value (values.py): answered alike in both lanes, the drop writes the answer
    in its place (collapse, kept `value`); a patch release of the release it names keeps that release's
    answer (retarget, as for a guard); otherwise it still tells the lanes apart (keep)."""
    common = {**common, "value_at_target": at_release}
    if at_release is None or at_main is None:
        return GuardVerdict(verdict="keep", reason="the test cannot be decided for both lanes", **common)
    if at_release != at_main:
        return GuardVerdict(verdict="keep", reason="still tells the release lane from main", **common)
    if lanes.patch_release and _retargetable(block.source, conventions) and \
            _names_only(block.source, conventions, lanes.replaced_release):
        return GuardVerdict(verdict="retarget", kept="value", retarget_to=lanes.retarget_to, reason=(
            f"{lanes.target_label} is a patch release of the release this test names: it keeps that release's "
            f"answer, so retarget the test to {lanes.retarget_to}"), **common)
    return GuardVerdict(verdict="collapse", kept="value", reason=(
        f"a version test used as a value, {at_release} at {lanes.target_label} and at main: the drop writes "
        f"`{at_release}` in its place"), **common)


def _decided_checks(source: str, conventions: GuardConventions, lanes: Lanes, hasattr_fn: HasAttr | None,
                    aliases: dict[str, str]) -> tuple[tuple[tuple[str, bool], ...], str] | None:
    """An undecided `and`/`or` test whose version checks both lanes answer alike (`self.x and not
    vllm_version_is("OLD")`): ((check, value), ...) and the test without them; None when no version check
    is decided alike, or the rest would still read a version."""
    try:
        expr = ast.parse(source, mode="eval").body
    except SyntaxError:
        return None
    decided: dict[str, bool] = {}

    def leaf_value(node: ast.expr) -> bool | None:
        text = ast.unparse(node)
        if not is_version_guard(text, conventions):
            return None
        cond = Condition("if", text, False)
        at_release = evaluate_condition(cond, conventions, lanes.release, hasattr_fn, aliases)
        at_main = evaluate_condition(cond, conventions, lanes.main, hasattr_fn, aliases)
        if at_release is None or at_release != at_main:
            return None
        decided[text] = at_release
        return at_release

    def simplify(node: ast.expr) -> tuple[bool | None, ast.expr | None]:
        if isinstance(node, ast.BoolOp):
            rest: list[ast.expr] = []
            for value in node.values:
                known, left = simplify(value)
                if known is None:
                    rest.append(left)  # type: ignore[arg-type]
                elif known is isinstance(node.op, ast.Or):
                    return known, None  # `x or True`, `x and False`: decided
            if not rest:
                return not isinstance(node.op, ast.Or), None
            return None, rest[0] if len(rest) == 1 else ast.BoolOp(node.op, rest)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not) and not isinstance(node.operand, ast.Call):
            known, inner = simplify(node.operand)
            return (None if known is None else not known), (None if inner is None else ast.UnaryOp(ast.Not(), inner))
        known = leaf_value(node)
        return known, (node if known is None else None)

    if not isinstance(expr, (ast.BoolOp, ast.UnaryOp)):
        return None
    known, rest = simplify(expr)
    if known is not None or rest is None or not decided:
        return None
    text = ast.unparse(rest)
    if is_version_guard(text, conventions):
        return None  # a version check both lanes answer differently stays: so does the guard
    return tuple(sorted(decided.items())), text


def _branches(block: GuardBlock, kept: str) -> tuple[tuple[tuple[str, ...], tuple[str, ...]], tuple[tuple[str, ...], tuple[str, ...]]]:
    """((bound, read) of the kept branch, (bound, read) of the other one)."""
    return (block.body_names, block.else_names) if kept == "body" else (block.else_names, block.body_names)


def _follow_retargets(verdicts: list[GuardVerdict], blocks: list[GuardBlock], broken: set[tuple[str, int, bool]],
                      conventions: GuardConventions, lanes: Lanes) -> list[GuardVerdict]:
    """A retargeted guard's main-lane branch stops running at the target, and with it the names only it
    binds (an import, a class, a method, `self.runner`). A collapse whose kept branch reads one of them
    would break at the target: it is retargeted too, until nothing changes."""
    if not lanes.retarget_to:
        return verdicts
    by_place = {(b.path, b.line): b for b in blocks}
    out = list(verdicts)
    while True:
        bound_at_target: dict[str, set[str]] = {}
        main_only: dict[str, dict[str, int]] = {}  # path -> name -> line of the retargeted guard that binds it
        for v in out:
            block = by_place.get((v.path, v.line))
            if block is None or v.verdict not in ("collapse", "retarget") or v.kept == "test":
                continue
            kept, other = _branches(block, v.kept)
            if v.verdict == "retarget":
                bound_at_target.setdefault(v.path, set()).update(other[0])
                for name in kept[0]:
                    main_only.setdefault(v.path, {}).setdefault(name, v.line)
            else:
                bound_at_target.setdefault(v.path, set()).update(kept[0])
        changed = False
        for i, v in enumerate(out):
            block = by_place.get((v.path, v.line))
            if block is None or v.verdict != "collapse" or v.kept == "test" or v.path not in main_only:
                continue
            only = {n: line for n, line in main_only[v.path].items() if n not in bound_at_target.get(v.path, ())}
            kept, dropped = _branches(block, v.kept)
            needed = sorted(n for n in kept[1] if n in only)
            if not needed or any(n in only for n in dropped[1]) or (v.path, v.line, v.kept == "body") in broken:
                continue
            if not _retargetable(block.source, conventions):
                continue
            lines = sorted({only[n] for n in needed})
            out[i] = replace(v, verdict="retarget", retarget_to=lanes.retarget_to, reason=(
                f"the branch both lanes take reads {', '.join(needed[:3])}, which only the main-lane branch of the "
                f"retargeted guard at line {', '.join(map(str, lines[:3]))} binds: retarget it to {lanes.retarget_to} too"))
            changed = True
        if not changed:
            return out


def _predicate_verdicts(blocks: list[GuardBlock], verdicts: list[GuardVerdict], conventions: GuardConventions,
                        lanes: Lanes) -> list[GuardVerdict]:
    """A version predicate (`is_legacy = vllm_version_is("0.10.0")`) follows the guards that read it:
    retargeted when one of them is (the guard's test is the predicate), dropped when every one collapses
    and nothing else reads the name, kept otherwise."""
    by_place = {(v.path, v.line): v for v in verdicts}
    readers: dict[tuple[str, int], list[GuardVerdict]] = {}
    for block in blocks:
        for line in block.via:
            verdict = by_place.get((block.path, block.line))
            readers.setdefault((block.path, line), []).append(verdict)  # type: ignore[arg-type]
    out: list[GuardVerdict] = []
    for block in blocks:
        if block.kind != "assign" or not is_version_guard(block.source, conventions):
            continue
        users = readers.get((block.path, block.line), [])
        common = dict(path=block.path, line=block.line, end_line=block.end_line, guard=block.source, kind="assign")
        partial = _undecided_predicate(block, conventions, lanes)
        if partial is not None and not any(u is not None and u.verdict == "retarget" for u in users):
            # `legacy = vllm_version_is("OLD") or envs.X`: no guard reading the name can drop the check
            # (its test is the name), so the value loses it (the drop writes the checks' answers and folds them).
            decided, rest = partial
            out.append(GuardVerdict(verdict="collapse", kept="test", decided=decided, simplified=rest, reason=(
                f"the version check{'s' if len(decided) > 1 else ''} in the predicate "
                f"{'are' if len(decided) > 1 else 'is'} decided alike at {lanes.target_label} and at main: "
                f"the drop writes {'their answers' if len(decided) > 1 else 'its answer'} (`{rest}` remains)"),
                tested_only=block.pure and bool(users), **common))
            continue
        if not users or not block.pure and all(u is not None and u.verdict == "collapse" for u in users):
            # Nothing branches on it, or something also reads it as a value: its answer takes its place
            # (`legacy = False`) once both lanes give the same one; the guards that read it collapse anyway.
            cond = Condition("if", block.source, False, line=block.line)
            verdict = _value_verdict(block, evaluate_condition(cond, conventions, lanes.release),
                                     evaluate_condition(cond, conventions, lanes.main), conventions, lanes, common)
            if users or verdict.verdict != "keep":
                out.append(verdict)
            continue
        if any(u is not None and u.verdict == "retarget" for u in users) and _retargetable(block.source, conventions):
            out.append(GuardVerdict(verdict="retarget", retarget_to=lanes.retarget_to, reason=(
                f"a guard that reads this predicate is retargeted to {lanes.retarget_to}"), **common))
        elif block.pure and all(u is not None and u.verdict == "collapse" for u in users):
            out.append(GuardVerdict(verdict="collapse", reason=(
                f"every guard that reads it collapses at {lanes.target_label}: the predicate goes with them"), **common))
        else:
            out.append(GuardVerdict(verdict="keep", reason="a kept guard or other code still reads the predicate", **common))
    return out


def _undecided_predicate(block: GuardBlock, conventions: GuardConventions,
                         lanes: Lanes) -> tuple[tuple[tuple[str, bool], ...], str] | None:
    """A predicate's value that neither lane decides whole but whose version checks both decide alike:
    those checks and what remains (`_decided_checks`); None otherwise."""
    cond = Condition("if", block.source, False, line=block.line)
    if None not in (evaluate_condition(cond, conventions, lanes.release), evaluate_condition(cond, conventions, lanes.main)):
        return None
    return _decided_checks(block.source, conventions, lanes, None, {})


def read_release_tag(plugin_root: Path, tag_file: str) -> Version | None:
    """The plugin's release lane from `.github/vllm-release-tag.commit` (`v0.18.0`), looked up from
    the scanned root upwards (the scan may start at the package directory)."""
    from porter.upgrade.sources import parse_release

    for root in (plugin_root, *plugin_root.parents[:2]):
        path = root / tag_file
        if path.is_file():
            text = path.read_text(encoding="utf-8", errors="replace").strip().split()
            return parse_release(text[0]) if text else None
    return None
