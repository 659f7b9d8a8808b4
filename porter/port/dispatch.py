"""`porter upgrade NAME --to REF` without --dry-run: turn the analysis report into the right kind of
run (shims on a port branch, a merge for forks of their parent, the NPU integration check for
transformers consumers). The analysis is reused when it ran on the fork's committed baseline (a clean
checkout at that commit), so it runs once per port."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from porter.errors import InputError, UsageError
from porter.fsutil import atomic_write_text
from porter.redact import redact_data, redact_text
from porter.port.plan import PortAnalysis, PortRequest, PortResult, check_fork, check_versions, new_run_id
from porter.port.shim_port import run_port
from porter.upgrade.models import DriftRecord


def _guard_function(spec) -> str | None:
    functions = getattr(spec.guards, "version_functions", {}) or {}
    helper = getattr(spec.guards, "helper_module", "") or ""
    if functions and helper:
        return f"{helper}.{next(iter(functions))}"
    return None


def port_after_analysis(
    analysis_request: Any,
    report: Any,
    config: Any,
    status: Callable[[str], None] = lambda _m: None,
    *,
    push: bool = False,
    force: bool = False,
    allow_dirty: bool = False,
    fork_ref: str | None = None,
    slug: str | None = None,
) -> PortResult:
    """Port the plugin that `report` (porter.upgrade.analyze.AnalysisReport) analysed.

    The fork is the `--plugin-path` checkout or the clone named in forks.yaml; the analysis is
    re-run by porter on the fork's committed baseline (in the worktree), not on the checkout."""
    from porter.upgrade.analyze import AnalysisRequest, run_analysis

    spec = report.plugin_spec
    name = report.plugin
    fork_name, fork_path, registered, remote = _fork_of(name, analysis_request.plugin_path, config)
    if spec is not None and spec.kind == "fork":
        return _merge_for_fork(fork_name, Path(fork_path), report, config, status, push=push, force=force,
                               allow_dirty=allow_dirty, fork_ref=fork_ref, slug=slug, registered=registered)
    if report.upstream == "transformers" and report.baseline is not None and not report.breaking:
        return _compare_transformers(report, analysis_request, config)
    if report.baseline is None:
        raise UsageError(f"no baseline for {name}: porter needs both versions to build shims",
                         hint="pass --from REF (or set the fork's baseline in forks/forks.yaml)")
    plugin_root = (spec.plugin_root if spec is not None else "") or ""
    target, baseline = report.target, report.baseline
    trees = {target.label: target.root, baseline.label: baseline.root}

    def analyze(tree: Path) -> PortAnalysis:
        again = run_analysis(AnalysisRequest(
            plugin=name, target=target.label, baseline=baseline.label, plugin_path=tree / plugin_root if plugin_root else tree,
            upstream_paths=trees, upstream=report.upstream, config=config,
        ))
        records, notes = list(again.records), list(again.notes)
        if plugin_root:  # sites are relative to the plugin root; commits are relative to the fork root
            records = [_prefix_sites(r, plugin_root) for r in records]
            notes = [_prefix_sites(r, plugin_root) for r in notes]
        return PortAnalysis(tuple(records), tuple(notes), again.outcome,
                            {"timings": again.timings, "usage": again.usage.to_dict()})

    hint = {}
    if spec is not None:
        package = spec.packages[0] if spec.packages else None
        if package and plugin_root:
            package = f"{plugin_root.strip('/')}/{package}"
        hint = {k: v for k, v in {"package": package, "shim_dir": spec.shim_dir or None,
                                  "shim_style": spec.raw.get("shim_style") or None,
                                  "guard_function": _guard_function(spec)}.items() if v}
    # Relative to a fresh clone of the fork: no local paths (the trees come from PyPI / git by version).
    reproducer = f"porter upgrade {name} --to {target.label} --from {baseline.label}"
    if analysis_request.plugin_path is not None:
        reproducer += " --plugin-path ."
    tests = tuple(str(t) for t in ((spec.raw.get("port_tests") if spec is not None else None) or ()))
    entry_points = tuple(str(e) for e in ((spec.raw.get("entry_points") if spec is not None else None) or ()))
    request = PortRequest(
        fork=fork_name, fork_path=Path(fork_path), upstream=report.upstream, baseline=baseline.label, target=target.label,
        baseline_tree=baseline.root, target_tree=target.root, fork_ref=fork_ref,
        package=hint.pop("package", None), convention_hint=hint, slug=slug, plugin_tests=tests, push=push, remote=remote,
        allow_dirty=allow_dirty, force=force, work_dir=Path(config.cache_dir) / "worktrees", runs_dir=Path(config.runs_dir),
        forks_file=Path(config.forks_file) if registered else None, reproducer=reproducer,
        entry_points=entry_points, plugin_root=plugin_root.strip("/"),
    )
    return run_port(request, analyze, status, analysis=_baseline_analysis(report, Path(fork_path), plugin_root,
                                                                          allow_dirty, fork_ref))


def _baseline_analysis(report: Any, fork_path: Path, plugin_root: str, allow_dirty: bool,
                       fork_ref: str | None) -> PortAnalysis | None:
    """The report as a PortAnalysis when it was made on exactly the committed baseline: the
    checkout is clean (no tracked or untracked change) and no other baseline ref was asked for.
    Otherwise None: the port analyses the committed tree in its worktree (once)."""
    from porter.port import worktree as git_work

    if fork_ref or report.plugin_tree is None:
        return None
    try:
        state = git_work.inspect_fork(fork_path)
    except Exception:  # noqa: BLE001 - run_port reports a bad fork with the right error
        return None
    if state.dirty or Path(report.plugin_tree.root).resolve() != (fork_path / plugin_root).resolve():
        return None
    records, notes = list(report.records), list(report.notes)
    if plugin_root:
        records = [_prefix_sites(r, plugin_root) for r in records]
        notes = [_prefix_sites(r, plugin_root) for r in notes]
    return PortAnalysis(tuple(records), tuple(notes), report.outcome,
                        {"timings": report.timings, "usage": report.usage.to_dict()})


def _fork_of(name: str, plugin_path: Path | None, config: Any) -> tuple[str, Path, bool, str]:
    """(fork name, checkout, registered in forks.yaml, remote) of the plugin to port."""
    from porter.registry import load_forks

    fork_name, fork_path = name, plugin_path
    registered = False  # the ledger records runs on the registered clone only, not on ad-hoc checkouts
    remote = "origin"
    for fork in load_forks(config.forks_file).values():
        if fork.plugin == name or fork.name == name:
            if fork_path is None or Path(fork_path).resolve() == fork.path.resolve():
                fork_name, fork_path, registered = fork.name, fork.path, True
                remote = fork.remote or remote
            break
    if fork_path is None:
        raise InputError(
            f"no fork checkout of {name} to port",
            hint="register the fork in forks/forks.yaml (path:) or pass --plugin-path to a git checkout of it",
        )
    return fork_name, Path(fork_path), registered, remote


def preflight(name: str, config: Any, *, plugin_path: Path | None = None, upstream: str | None = None,
              baseline: str | None = None, target: str | None = None, allow_dirty: bool = False,
              fork_ref: str | None = None, push: bool = False) -> None:
    """Refuse a port that cannot happen (missing, dirty or detached fork; target equal to the
    baseline) before the analysis downloads and indexes anything. Reads only."""
    from porter.registry import load_registry

    spec = load_registry(config.upstreams_file).plugin(name)
    if (upstream or spec.primary_upstream) == "transformers":
        return  # a transformers consumer may end in the NPU integration check, which needs no fork checkout
    if baseline and target:
        check_versions(baseline, target)
    _name, fork_path, _registered, remote = _fork_of(name, plugin_path, config)
    root, _sha, _ref = check_fork(fork_path, allow_dirty=allow_dirty, fork_ref=fork_ref)
    if push and "://" not in remote and "@" not in remote and not Path(remote).exists():
        from porter.port import worktree as git_work

        if not git_work.git(root, "remote", "get-url", remote, check=False).ok:
            raise UsageError(f"--push: the fork {root} has no git remote {remote!r}",
                             hint="set `remote:` for the fork in forks/forks.yaml, or add the remote with git remote add")


def _prefix_sites(record: DriftRecord, prefix: str) -> DriftRecord:
    from porter.upgrade.models import Site

    prefix = prefix.strip("/")
    sites = tuple(Site(f"{prefix}/{s.path}", s.line, s.code) for s in record.sites)
    return replace(record, sites=sites)


def _merge_for_fork(fork_name: str, fork_path: Path, report: Any, config: Any, status: Callable[[str], None], *,
                    push: bool, force: bool, allow_dirty: bool, fork_ref: str | None, slug: str | None,
                    registered: bool = True):
    """A fork that merges its parent (triton-ascend): merge the target ref instead of writing shims."""
    from porter.port.fork_merge import MergeRequest, run_merge
    from porter.upgrade.sources import Sources

    target = report.target
    if target.kind != "git" or not target.commit:
        raise UsageError(f"{fork_name} merges {report.upstream}: the target must be a git ref of it, not a {target.kind} tree",
                         hint=f"pass --to TAG (for example v3.6.0) without --upstream-path")
    mirror = Sources(Path(config.cache_dir)).mirror_path(target.origin)
    request = MergeRequest(
        fork=fork_name, fork_path=fork_path, upstream=report.upstream, target=target.label, target_ref=target.commit,
        fetch_from=str(mirror), fetch_ref=target.label, fork_ref=fork_ref, slug=slug,
        resolutions_dir=Path(config.knowledge_dir) / "merge-resolutions", allow_dirty=allow_dirty, force=force, push=push,
        work_dir=Path(config.cache_dir) / "worktrees", runs_dir=Path(config.runs_dir),
        forks_file=Path(config.forks_file) if registered else None, reproducer=f"porter upgrade {fork_name} --to {target.label}",
    )
    return run_merge(request, status)


def _compare_transformers(report: Any, analysis_request: Any, config: Any):
    """A consumer of transformers with no breaking use: the NPU integration fast path decides A / A_WITH_NOTE."""
    from porter.port.transformers_compare import compare, to_markdown

    result = compare(report.baseline.root, report.target.root, report.plugin_tree.root,
                     report.baseline.label, report.target.label)
    directory = Path(config.runs_dir) / "upgrade" / f"{new_run_id()}-transformers"
    atomic_write_text(directory / "NPU_INTEGRATION.md", redact_text(to_markdown(result)))
    atomic_write_text(directory / "run.json", json.dumps(redact_data(result.to_dict()), indent=2) + "\n")
    return result
