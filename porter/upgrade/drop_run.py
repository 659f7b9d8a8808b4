"""`porter upgrade NAME --drop OLD`: the guard cleanup of an analysed plugin tree (which files
change and how), its PR material, and the branch it is written on.

`plan_drop` is pure over an AnalysisReport and the plugin's files; `write_drop_branch` is the one
adapter to the port pipeline (worktree at the fork's committed baseline, commit, byte-compile,
compare-and-swap of `ascend-port/<slug>`), so the integrator can re-point it at porter.port's
public entry point.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from porter.upgrade.drop import DropEdit, DropResult, drop_source
from porter.upgrade.lanes import GuardVerdict
from porter.upgrade.sources import parse_release


@dataclass(frozen=True)
class DropPlan:
    drop: str  # the release lane being dropped ("0.18.0")
    target: str  # the release lane after the drop
    guards: tuple[GuardVerdict, ...]  # the guards the drop edits
    results: tuple[DropResult, ...]  # changed files only
    skipped: tuple[str, ...] = ()  # files that could not be transformed, with why

    @property
    def edits(self) -> list[DropEdit]:
        return [e for r in self.results for e in r.edits]

    def to_dict(self) -> dict[str, Any]:
        return {"drop": self.drop, "target": self.target, "guards": [g.to_dict() for g in self.guards],
                "files": [r.path for r in self.results], "edits": [e.to_dict() for e in self.edits],
                "skipped": list(self.skipped)}


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


def plan_drop(guards: Iterable[GuardVerdict], plugin_root: Path, drop: str | None, target: str,
              version_functions: Iterable[str]) -> DropPlan:
    chosen = tuple(g for g in guards if selects(g, drop))
    by_file: dict[str, dict[int, GuardVerdict]] = {}
    for guard in chosen:
        by_file.setdefault(guard.path, {})[guard.line] = guard
    results: list[DropResult] = []
    skipped: list[str] = []
    for path, decisions in sorted(by_file.items()):
        file = plugin_root / path
        try:
            source = file.read_text(encoding="utf-8")
            result = drop_source(source, path, decisions, version_functions)
        except (OSError, UnicodeDecodeError) as exc:
            skipped.append(f"{path}: {exc}")
            continue
        except Exception as exc:  # noqa: BLE001 - libcst cannot parse it: a human edits this file
            skipped.append(f"{path}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            continue
        if result.changed:
            results.append(result)
    return DropPlan(drop or "", target, chosen, tuple(results), tuple(skipped))


def render_drop_pr(plan: DropPlan, upstream: str, validation: dict[str, Any], branch: str, base_sha: str) -> str:
    """PR material in the maintainers' drop-PR shape: dropped gates, bumped gates, removed imports."""
    name = {"vllm": "vLLM"}.get(upstream, upstream)
    collapse = [e for e in plan.edits if e.action == "collapse"]
    retarget = [e for e in plan.edits if e.action == "retarget"]
    imports = [e for e in plan.edits if e.action == "remove_import"]
    lines = [f"# [Misc] Drop {name} {plan.drop} support" if plan.drop else f"# [Misc] Clean up dead {name} version guards", "",
             "## Outcome", "",
             f"C_PATCH: {len(collapse)} dead version guard(s) collapsed, {len(retarget)} retargeted to {plan.target}, "
             f"{len(imports)} import(s) only the removed branches used deleted, in {len(plan.results)} file(s). "
             f"Branch `{branch}` from `{base_sha[:12]}`.", ""]
    lines += ["## Drop old gates", "", "| file | line | guard | kept |", "|---|---|---|---|"]
    lines += [f"| `{e.path}` | {e.line}-{e.end_line} | `{e.guard}` | {'if' if e.kept == 'body' else 'else'} branch |" for e in collapse]
    lines += ["", "## Bump gates", "", "| file | line | guard | now |", "|---|---|---|---|"]
    lines += [f"| `{e.path}` | {e.line} | `{e.guard}` | `{e.retarget_to}` |" for e in retarget]
    lines += ["", "Retargeted guards are those whose main-lane branch does not resolve at the new release, while the "
              "old branch does: the new release still behaves like the old one there.", ""]
    if imports:
        lines += ["## Removed imports", ""] + [f"- `{e.path}`: `{e.guard}`" for e in imports] + [""]
    if plan.skipped:
        lines += ["## Left for a human", ""] + [f"- {s}" for s in plan.skipped] + [""]
    lines += ["## Reproducer", "", "```", f"porter upgrade <plugin> --to {plan.target} --drop {plan.drop} --dry-run", "```", "",
              "## Validation", ""]
    for check in validation.get("checks", []):
        lines.append(f"- {check['name']}: {check['verdict']} ({check.get('detail', '')})")
        lines += [f"  - {item}" for item in check.get("items", [])]
    lines += ["", f"{name} version: v{plan.target}", ""]
    return "\n".join(lines)


@dataclass
class DropBranch:
    branch: str
    tip: str | None
    base_sha: str
    moved: bool
    validation: dict[str, Any] = field(default_factory=dict)
    pr_material: str = ""
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"branch": self.branch, "tip": self.tip, "base_sha": self.base_sha, "branch_moved": self.moved,
                "validation": self.validation, "message": self.message}


def write_drop_branch(
    fork_path: Path,
    plan_in: Callable[[Path], DropPlan],
    slug: str,
    upstream: str,
    *,
    fork_ref: str | None = None,
    allow_dirty: bool = False,
    force: bool = False,
    work_dir: Path = Path("/tmp/porter-worktrees"),
    status: Callable[[str], None] = lambda _m: None,
) -> tuple[DropPlan, DropBranch]:
    """The adapter to the port pipeline: plan the drop on the fork's committed baseline in a detached
    worktree, commit it with PR_MATERIAL.md, byte-compile what changed, and only then move
    `ascend-port/<slug>` (compare-and-swap). Any failure leaves the fork as it was."""
    from porter import forks
    from porter.port import PortFailed, check_fork, new_run_id
    from porter.port_validation import byte_compile
    from porter.slug import port_branch

    root, base_sha, ref_name = check_fork(fork_path, allow_dirty=allow_dirty, fork_ref=fork_ref)
    branch = port_branch(slug)
    existing = forks.check_branch(root, branch, base_sha, force=force)
    run_id = new_run_id()
    identity = forks.commit_identity(root)
    status(f"porter run {run_id}: drop on {ref_name} ({base_sha[:12]}) -> {branch}")
    with forks.worktree(root, base_sha, work_dir, run_id) as wt:
        plan = plan_in(wt.path)
        if not plan.results:
            return plan, DropBranch(branch, None, base_sha, False, message="no guard to drop: branch not made")
        for result in plan.results:
            (wt.path / result.path).write_text(result.source, encoding="utf-8")
        changed = [r.path for r in plan.results]
        check = byte_compile(wt.path, changed)
        validation = {"ok": check.verdict != "fail", "checks": [check.to_dict()]}
        subject = f"Drop {upstream} {plan.drop} version guards" if plan.drop else f"Collapse dead {upstream} version guards"
        body = "\n".join(f"- {e.path}:{e.line} {e.action} {e.guard}" for e in plan.edits[:200])
        trailers = forks.trailer_block(("guards",), (), f"{upstream} {plan.target}", run_id)
        if wt.commit(changed, f"{subject}\n\n{body}\n\n{trailers}\n", identity) is None:
            return plan, DropBranch(branch, None, base_sha, False, message="the baseline already has these edits")
        pr_text = render_drop_pr(plan, upstream, validation, branch, base_sha)
        (wt.path / "PR_MATERIAL.md").write_text(pr_text, encoding="utf-8")
        wt.commit(["PR_MATERIAL.md"], f"PR_MATERIAL.md: drop {upstream} {plan.drop}\n\n{trailers}\n", identity)
        tip = wt.head()
        if not validation["ok"]:
            raise PortFailed(f"the drop does not byte-compile: {branch} was not moved",
                             hint="see the byte-compile errors; the guard blocks named there need a human",
                             details={"run_id": run_id, "checks": validation["checks"]})
        forks.move_branch(root, branch, tip, existing.sha if existing else None, run_id)
    return plan, DropBranch(branch, tip, base_sha, True, validation, pr_text,
                            f"{branch} -> {tip[:12]}: {len(plan.edits)} edit(s) in {len(plan.results)} file(s) + PR_MATERIAL.md")
