"""The upgrade analysis as one call: materialize the trees, scan the plugin, index the upstream at
baseline and target, compute drift, decide the outcome.

    from porter.upgrade.analyze import AnalysisRequest, run_analysis
    report = run_analysis(AnalysisRequest(plugin="vllm-ascend", target="0.13.0", baseline="0.11.0",
                                          plugin_path=Path("forks/vllm-ascend")))
    report.records, report.notes, report.outcome, report.to_dict()

`progress` (optional) is anything with `progress(description, total)` (a context manager yielding
`advance(n)`) and `status(message)`, such as porter.output.Reporter.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from porter.config import PACKAGE_ROOT, PorterConfig, load_config
from porter.errors import EnvironmentProblem, InputError, UsageError
from porter.fsutil import atomic_write_bytes
from porter.registry import PluginSpec, Registry, UpstreamSpec, load_forks, load_registry
from porter.upgrade.drift import Verdict, compute_drift
from porter.upgrade.guards import GuardConventions, TargetVersions
from porter.upgrade.index import TreeIndex
from porter.upgrade.lanes import Lanes
from porter.upgrade.models import DriftRecord, OutcomeDecision, Severity
from porter.upgrade.outcome import decide_outcome
from porter.upgrade.sources import LEAN_SKIPPED, Sources, Tree, check_ref_syntax, parse_release
from porter.upgrade.usage import DEFAULT_EXCLUDES, FileUsage, UsageSummary, scan_plugin, summarize

REPORT_SCHEMA = "porter.upgrade.analysis/1"


@dataclass
class AnalysisRequest:
    """What to analyse. Trees are given as paths, or as refs to materialize (release -> PyPI,
    tag/branch/commit -> git mirror of the upstream)."""

    plugin: str
    target: str | None = None  # release (0.13.0), tag (v0.13.0), branch (main) or commit
    baseline: str | None = None  # default: the fork's baseline in forks.yaml
    plugin_path: Path | None = None  # the plugin tree (scanned read-only); default: registry / fork clone / PyPI
    target_path: Path | None = None  # an upstream tree for the target (directory, wheel or sdist)
    baseline_path: Path | None = None
    upstream_paths: dict[str, Path] = field(default_factory=dict)  # VERSION -> DIR, as `--upstream-path VERSION=DIR`
    upstream: str | None = None  # which of the plugin's upstreams; default: its primary one
    config: PorterConfig | None = None
    offline: bool | None = None  # None: from the config
    workers: int | None = None  # parallel parsing processes


@dataclass
class AnalysisReport:
    plugin: str
    upstream: str
    plugin_tree: Tree
    target: Tree
    baseline: Tree | None
    records: list[DriftRecord]
    notes: list[DriftRecord]
    outcome: OutcomeDecision
    usage: UsageSummary
    verdicts: list[Verdict]
    unresolved: list[str]
    timings: dict[str, float]
    index_stats: dict[str, dict[str, int]]
    notices: list[str] = field(default_factory=list)
    plugin_spec: PluginSpec | None = None
    dead_guards: list[Any] = field(default_factory=list)  # GuardVerdict per version guard of the plugin
    dead_modules: dict[str, str] = field(default_factory=dict)
    copies: list[DriftRecord] = field(default_factory=list)  # copied upstream bodies whose original changed
    lanes: dict[str, Any] = field(default_factory=dict)  # release / main lane versions after the move

    @property
    def breaking(self) -> list[DriftRecord]:
        return [r for r in self.records if r.severity == Severity.BREAKING]

    def by_family(self) -> dict[str, list[DriftRecord]]:
        out: dict[str, list[DriftRecord]] = {}
        for record in self.records:
            out.setdefault(record.family.value, []).append(record)
        return out

    def to_dict(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for record in self.records:
            counts[record.family.value] = counts.get(record.family.value, 0) + 1
        verdict_counts: dict[str, int] = {}
        for v in self.verdicts:
            verdict_counts[v.status] = verdict_counts.get(v.status, 0) + 1
        return {
            "report_schema": REPORT_SCHEMA,
            "plugin": self.plugin,
            "upstream": self.upstream,
            "plugin_tree": self.plugin_tree.to_dict(),
            "baseline": self.baseline.to_dict() if self.baseline else None,
            "target": self.target.to_dict(),
            "outcome": self.outcome.to_dict(),
            "summary": {
                "records": len(self.records),
                "breaking": len(self.breaking),
                "notes": len(self.notes),
                "by_family": counts,
                "import_verdicts": verdict_counts,
                "unresolved_at_both": len(self.unresolved),
                "copies": len(self.copies),
                "guards": {v: sum(1 for g in self.dead_guards if g.verdict == v) for v in ("collapse", "retarget", "keep")},
            },
            "lanes": self.lanes,
            "dead_guards": [g.to_dict() for g in self.dead_guards],
            "dead_modules": self.dead_modules,
            "copies": [r.to_dict() for r in self.copies],
            "records": [r.to_dict() for r in self.records],
            "notes": [r.to_dict() for r in self.notes],
            "usage": self.usage.to_dict(),
            "unresolved": self.unresolved,
            "timings": {k: round(v, 3) for k, v in self.timings.items()},
            "index": self.index_stats,
            "notices": self.notices,
        }


# ---------------------------------------------------------------- helpers


class _Quiet:
    @contextmanager
    def progress(self, description: str, total: int | None = None) -> Iterator[Any]:
        yield lambda n=1: None

    def status(self, message: str) -> None:
        pass


def _stage(progress: Any, description: str, total: int | None):
    return progress.progress(description, total) if hasattr(progress, "progress") else nullcontext(lambda n=1: None)


def resolve_upstream_tree(
    sources: Sources,
    upstream: UpstreamSpec,
    ref: str | None,
    path: Path | None,
    upstream_paths: dict[str, Path],
    what: str,
) -> Tree | None:
    """The tree for `ref` of `upstream`: an explicit path, a `--upstream-path` entry, a PyPI
    release, or a git ref of the upstream's repository."""
    lean = _lean(upstream)
    if path is not None:
        return sources.local_tree(Path(path), label=ref or Path(path).name, lean=lean)
    if ref is None:
        return None
    key = upstream_path_key(ref, upstream_paths)
    if key is not None:
        return sources.local_tree(Path(upstream_paths[key]), label=ref, lean=lean)
    check_ref_syntax(ref, what)
    release = parse_release(ref)
    if release is not None and upstream.pypi and not ref.startswith("v"):
        return sources.pypi_tree(upstream.pypi, ref)
    if release is not None and upstream.pypi and not upstream.git:
        return sources.pypi_tree(upstream.pypi, ref[1:])
    if upstream.git:
        return sources.git_tree(upstream.git, ref)
    raise InputError(f"no source for {upstream.name} {ref}: the registry has neither a PyPI name nor a git URL",
                     hint=f"pass the tree with --upstream-path {ref}=DIR")


def _lean(upstream: UpstreamSpec) -> bool:
    """An upstream archive is unpacked without the folders its index never reads (tests/, docs/
    ...), unless one of its packages is named like one of them."""
    return not LEAN_SKIPPED & set(upstream.packages)


def upstream_path_key(ref: str | None, upstream_paths: dict[str, Path]) -> str | None:
    """The `--upstream-path` entry for `ref`: the same text, or the same release (`2` = `v2.0` = `2.0.0`)."""
    if ref is None:
        return None
    if ref in upstream_paths:
        return ref
    wanted = parse_release(ref)
    return next((k for k in upstream_paths if wanted is not None and parse_release(k) == wanted), None)


def _check_upstream_paths(upstream_paths: dict[str, Path], refs: list[str | None]) -> None:
    """An entry that matches neither version would be ignored silently and the tree fetched instead."""
    used = {upstream_path_key(ref, upstream_paths) for ref in refs}
    unused = [k for k in upstream_paths if k not in used]
    if unused:
        wanted = " and ".join(repr(r) for r in refs if r) or "no version"
        raise UsageError(f"--upstream-path {unused[0]}={upstream_paths[unused[0]]} matches neither version of this run "
                         f"({wanted})", hint="name the version exactly as --to / --from give it, e.g. "
                         f"--upstream-path {refs[0] or 'VERSION'}=DIR")


def _check_local_paths(request: AnalysisRequest) -> None:
    """A local tree that does not exist is bad input: say so before any upstream is fetched."""
    named = [("--plugin-path", request.plugin_path), ("--to", request.target_path), ("--from", request.baseline_path),
             *((f"--upstream-path {v}=", p) for v, p in request.upstream_paths.items())]
    for option, path in named:
        if path is not None and not Path(path).expanduser().exists():
            raise InputError(f"{Path(path).expanduser()}: no such directory", hint=f"check the path given for {option.rstrip('=')}")


def default_baseline(config: PorterConfig, plugin: str, upstream: str) -> str | None:
    # A missing forks file means no forks; a broken one is an error (hiding it misleads about the baseline).
    for fork in load_forks(config.forks_file).values():
        if fork.plugin == plugin and upstream in fork.baseline:
            return fork.baseline[upstream]
    return None


def resolve_plugin_tree(sources: Sources, config: PorterConfig, spec: PluginSpec, path: Path | None) -> Tree:
    if path is not None:
        tree = sources.local_tree(Path(path), label="local")
    elif spec.path:
        base = config.project_root or PACKAGE_ROOT
        tree = sources.local_tree(base / spec.path if (base / spec.path).exists() else PACKAGE_ROOT / spec.path, label="local")
    else:
        tree = None
        forks = load_forks(config.forks_file)  # a broken forks file is reported, not taken for "no fork"
        missing = [f for f in forks.values() if f.plugin == spec.name and not f.path.exists()]
        for fork in forks.values():
            if fork.plugin == spec.name and fork.path.exists():
                if not fork.path.is_dir() or not os.access(fork.path, os.R_OK | os.X_OK):
                    raise EnvironmentProblem(
                        f"fork clone path {fork.path} of {fork.name} is not a readable directory",
                        hint="fix `path` in forks/forks.yaml or the directory's permissions, or pass --plugin-path DIR")
                tree = sources.local_tree(fork.path, label=f"fork:{fork.name}")
                break
        if tree is None:
            where = f" (the fork clone {missing[0].path} named in {config.forks_file} does not exist)" if missing else ""
            if not spec.pypi:
                raise InputError(f"no tree for plugin {spec.name}{where}",
                                 hint="clone the fork there, fix its `path` in forks.yaml, or pass --plugin-path DIR")
            releases = sources.pypi_releases(spec.pypi)
            if not releases:
                raise InputError(f"{spec.pypi} has no releases on PyPI", hint="pass --plugin-path DIR")
            if missing:  # a dry run can still analyse the release; say which tree it is
                sources.notices.append(f"fork clone {missing[0].path} does not exist: analysing {spec.pypi} "
                                       f"{releases[-1]} from PyPI instead")
            tree = sources.pypi_tree(spec.pypi, releases[-1])
    if spec.plugin_root:
        # A source checkout has `src/pkg/...`; a wheel has `pkg/...`: accept both spellings.
        for sub in (spec.plugin_root, spec.plugin_root.removeprefix("src/")):
            if (tree.root / sub).is_dir():
                tree = Tree(tree.root / sub, tree.label, tree.kind, tree.version, tree.commit, tree.origin, tree.from_cache)
                break
    return tree


def _paired_upstream(spec: PluginSpec, plugin_tree: Tree, upstream: str) -> str | None:
    if plugin_tree.kind != "pypi" or plugin_tree.version is None:
        return None
    for pair in spec.compatibility:
        if parse_release(pair.plugin) == plugin_tree.version and parse_release(pair.versions.get(upstream, "")):
            return pair.versions[upstream]
    return None


def guard_conventions(registry: Registry, spec: PluginSpec) -> GuardConventions:
    packages: dict[str, str] = {}
    for name in spec.upstreams:
        for package in registry.upstream(name).packages:
            packages[package] = name
    return GuardConventions(dict(spec.guards.version_functions), dict(spec.guards.version_names), packages)


_ANALYSIS_MODULES = ("index.py", "usage.py", "guards.py", "drift.py", "models.py", "lanes.py", "inherit.py",
                     "callers.py", "predicates.py", "bindings.py")


_RESULT_VERSION = 2  # 2: an entry holds (drift result, usage summary), so a hit skips the plugin scan


def _result_key(listed: list[tuple[str, Path]], excludes, packages, target: TreeIndex, baseline: TreeIndex | None,
                conventions: GuardConventions, versions: dict, scan: tuple = ()) -> str:
    """Identity of one drift computation: the plugin files (`listed`: plugin_files' answer), both
    trees, the conventions, the versions, what else the plugin scan depends on (`scan`: plugin
    packages, singletons, module prefix) and the analysis code itself (so a porter change never
    serves a stale result)."""
    digest = hashlib.blake2b(digest_size=20)
    digest.update(f"result-v{_RESULT_VERSION}\n".encode())
    here = Path(__file__).resolve().parent
    for name in _ANALYSIS_MODULES:
        digest.update((here / name).read_bytes())
    for rel, path in listed:
        st = path.stat()
        digest.update(f"{rel}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    digest.update(repr((tuple(packages), target.fingerprint(), baseline.fingerprint() if baseline else None,
                        sorted(conventions.version_functions.items()), sorted(conventions.version_names.items()),
                        sorted(conventions.packages.items()), sorted((k, str(v)) for k, v in versions.items()),
                        scan)).encode())
    return digest.hexdigest()


def _singletons(spec: PluginSpec, upstream: str) -> dict[str, str]:
    """Well-known upstream objects and their class (`vllm.platforms.current_platform` -> Platform)."""
    return {str(k): str(v) for k, v in (spec.raw.get("singletons") or {}).items()}


def _module_prefix(root: Path, packages: tuple[str, ...]) -> str:
    """The package a scanned root *is* (the tree was narrowed to `vllm_ascend/`): its files' module prefix."""
    return root.name if root.name in packages and (root / "__init__.py").is_file() else ""


def _module_sizes(index: TreeIndex) -> dict[str, int]:
    return {module: st.st_size for module, st in index.file_stats().items()}


def _with_patch_release(lanes: Lanes, baseline: Tree | None, target_index: TreeIndex, baseline_index: TreeIndex | None) -> Lanes:
    """The lanes, marked as a patch-release move when the baseline tree is the current release and few
    modules differ from the target. A pure function of the trees the result key already hashes, so it
    is computed only when the result is (a warm run skips the file stats)."""
    from porter.upgrade.lanes import is_patch_release

    if baseline is None or baseline_index is None or baseline.version != lanes.replaced_release or not lanes.retarget_to:
        return lanes
    patch = is_patch_release(_module_sizes(baseline_index), _module_sizes(target_index))
    return lanes.as_patch_release() if patch else lanes


def _lanes(spec: PluginSpec, plugin_tree: Tree, upstream: str, target: Tree, baseline: Tree | None) -> Lanes:
    """The lanes after this move. The plugin's current release lane: its release-tag file, else the baseline."""
    from porter.upgrade.lanes import read_release_tag

    lanes_spec = spec.raw.get("lanes") or {}
    current = None
    if lanes_spec.get("release_tag_file"):
        current = read_release_tag(plugin_tree.root, lanes_spec["release_tag_file"])
    if current is None and baseline is not None:
        current = baseline.version
    return Lanes.for_move(upstream, target.version, target.label if target.version is None else str(target.version), current)


def _load_pickle(path: Path) -> Any:
    if not path.is_file():
        return None
    try:
        return pickle.loads(path.read_bytes())
    except Exception:  # noqa: BLE001 - a damaged cache entry is recomputed
        return None


# ---------------------------------------------------------------- the analysis


class _LazyPool:
    """A ProcessPoolExecutor created at the first job: a warm run (result-cache hit, trees extracted)
    submits none and so never imports concurrent.futures.process and multiprocessing (~20 ms)."""

    def __init__(self, workers: int) -> None:
        self.workers = workers
        self._pool: Any = None

    def _executor(self) -> Any:
        if self._pool is None:
            from concurrent.futures import ProcessPoolExecutor

            self._pool = ProcessPoolExecutor(max_workers=self.workers)
        return self._pool

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        return self._executor().submit(fn, *args, **kwargs)

    def map(self, fn: Any, *iterables: Any, timeout: float | None = None, chunksize: int = 1) -> Any:
        return self._executor().map(fn, *iterables, timeout=timeout, chunksize=chunksize)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=wait, cancel_futures=cancel_futures)

    @property
    def started(self) -> bool:
        return self._pool is not None


def _worker_pool(workers: int | None) -> Any:
    """The run's worker processes (archive extraction, plugin scan, index parsing share them, so they
    start once and overlap); None on a single core. The executor is made at the first submitted job."""
    count = workers or min(4, os.cpu_count() or 1)
    return _LazyPool(count) if count > 1 else None


def run_analysis(request: AnalysisRequest, progress: Any = None) -> AnalysisReport:
    from porter import gcpause

    pool = _worker_pool(request.workers)
    try:
        # No cyclic GC during the run: it builds ~10^6 short-lived acyclic objects (syntax trees,
        # unpickled index records) and the collector's passes over the growing heap cost seconds.
        with gcpause.paused():
            return _run_analysis(request, progress, pool)
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


@dataclass
class _EarlyScan:
    tree: Tree
    listed: list[tuple[str, Path]]
    collect: Any  # usage.start_scan's collector, None when the tree holds no plugin file


def _early_scan(request: AnalysisRequest, sources: Sources, config: PorterConfig, spec: PluginSpec,
                upstream: UpstreamSpec, pool: Any) -> _EarlyScan | None:
    """On a run that unpacks archives (a cold one: trees unpacked now have fresh file times, so no
    stored result can match), a plugin given by path is resolved and its scan submitted before the
    upstream trees are awaited: the workers scan while the last archive unpacks, instead of idling
    until every tree is there. None otherwise (the scan then runs after the result-cache check)."""
    if pool is None or request.plugin_path is None or not sources.extracting():
        return None
    from porter.upgrade.usage import plugin_files, start_scan

    tree = resolve_plugin_tree(sources, config, spec, request.plugin_path)
    excludes = spec.exclude or DEFAULT_EXCLUDES
    listed = plugin_files(tree.root, excludes)
    if not listed:  # reported as usual below
        return _EarlyScan(tree, listed, None)
    collect = start_scan(tree.root, upstream.packages, Path(config.cache_dir), excludes, request.workers, spec.packages,
                         _singletons(spec, upstream.name), _module_prefix(tree.root, spec.packages), pool)
    return _EarlyScan(tree, listed, collect)


def _run_analysis(request: AnalysisRequest, progress: Any, pool: Any) -> AnalysisReport:
    progress = progress or _Quiet()
    timings: dict[str, float] = {}
    started = time.perf_counter()
    config = request.config or load_config()
    offline = config.offline if request.offline is None else request.offline
    sources = Sources(Path(config.cache_dir), offline=offline, status=getattr(progress, "status", None),
                      stage=lambda description, total: _stage(progress, description, total))
    if pool is not None:  # local archives (sdists, wheels) unpack side by side while the registry is read
        sources.prepare_archives([request.plugin_path], pool)
    registry = load_registry(config.upstreams_file)
    spec = registry.plugin(request.plugin)
    upstream_name = request.upstream or spec.primary_upstream
    if upstream_name not in spec.upstreams:
        raise InputError(f"{spec.name} does not depend on {upstream_name!r}",
                         hint=f"its upstreams: {', '.join(spec.upstreams)}")
    upstream = registry.upstream(upstream_name)
    if pool is not None:
        sources.prepare_archives([request.target_path, request.baseline_path, *request.upstream_paths.values()], pool,
                                 lean=_lean(upstream))
    if request.target is None and request.target_path is None:
        raise InputError("no target given", hint="pass --to REF (a release, tag, branch or commit)")
    _check_local_paths(request)

    if request.baseline is not None or request.baseline_path is not None:  # else the baseline is known only below
        _check_upstream_paths(request.upstream_paths, [request.target, request.baseline])
    t0 = time.perf_counter()
    early = _early_scan(request, sources, config, spec, upstream, pool)
    target = resolve_upstream_tree(sources, upstream, request.target, request.target_path, request.upstream_paths, "--to")
    plugin_tree = early.tree if early is not None else resolve_plugin_tree(sources, config, spec, request.plugin_path)
    baseline_ref = request.baseline
    if baseline_ref is None and request.baseline_path is None:
        # A released plugin is validated on its paired upstream release; a fork on its recorded baseline.
        paired = _paired_upstream(spec, plugin_tree, upstream_name)
        baseline_ref = paired or default_baseline(config, spec.name, upstream_name)
    _check_upstream_paths(request.upstream_paths, [request.target, baseline_ref])
    baseline = resolve_upstream_tree(sources, upstream, baseline_ref, request.baseline_path, request.upstream_paths, "--from")
    timings["materialize"] = time.perf_counter() - t0
    assert target is not None

    from porter.upgrade.usage import plugin_files

    excludes = spec.exclude or DEFAULT_EXCLUDES
    listed = early.listed if early is not None else plugin_files(plugin_tree.root, excludes)  # once: key and progress total
    if not listed:  # a wrong --plugin-path would otherwise read as "A: nothing breaks"
        raise InputError(f"the plugin tree {plugin_tree.root} holds no Python files of {spec.name}",
                         hint="point --plugin-path (or the fork's path in forks.yaml) at the plugin's checkout")
    singletons = _singletons(spec, upstream_name)
    module_prefix = _module_prefix(plugin_tree.root, spec.packages)
    timings["scan"] = 0.0  # a result-cache hit scans nothing

    t0 = time.perf_counter()
    target_index = TreeIndex(target.root, upstream.packages, Path(config.cache_dir), f"{upstream_name} {target.label}", pool=pool)
    if not target_index.files:
        raise InputError(f"{target.root} holds no {'/'.join(upstream.packages)} package",
                         hint="point --upstream-path / the tree at the directory that contains the package")
    baseline_index = None
    if baseline is not None:
        baseline_index = TreeIndex(baseline.root, upstream.packages, Path(config.cache_dir), f"{upstream_name} {baseline.label}",
                                   pool=pool)
        if not baseline_index.files:
            raise InputError(f"{baseline.root} holds no {'/'.join(upstream.packages)} package",
                             hint="point the baseline tree at the directory that contains the package")
    timings["discover"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    versions = {upstream_name: target.version}
    conventions = guard_conventions(registry, spec)
    lanes = _lanes(spec, plugin_tree, upstream_name, target, baseline)
    versions_key = dict(versions, lanes=repr(lanes))
    scan_inputs = (tuple(sorted(set(spec.packages))), tuple(sorted(singletons.items())), module_prefix)
    result_key = _result_key(listed, excludes, upstream.packages, target_index, baseline_index, conventions, versions_key,
                             scan_inputs)
    result_path = Path(config.cache_dir) / "results" / result_key[:2] / f"{result_key}.pkl"
    cached = _load_pickle(result_path)
    # a hit holds the usage summary too: the plugin's files are not read again (their stats are in the key)
    result, usage = cached if isinstance(cached, tuple) and len(cached) == 2 else (None, None)
    cache_state = "hit" if result is not None else "miss"
    timings["drift"] = time.perf_counter() - t0
    if result is None:
        t0 = time.perf_counter()
        with _stage(progress, f"scanning {spec.name}", len(listed)) as advance:
            if early is not None and early.collect is not None:
                files: list[FileUsage] = early.collect(advance)
            else:
                files = scan_plugin(plugin_tree.root, upstream.packages, Path(config.cache_dir), excludes, advance,
                                    workers=request.workers, plugin_packages=spec.packages,
                                    singletons=singletons, module_prefix=module_prefix, pool=pool)
        timings["scan"] = time.perf_counter() - t0
        usage = summarize(files)
        t0 = time.perf_counter()
        lanes = _with_patch_release(lanes, baseline, target_index, baseline_index)
        result = compute_drift(files, target_index, baseline_index, conventions, TargetVersions(versions),
                               stage=lambda description, total: _stage(progress, description, total), lanes=lanes)
        atomic_write_bytes(result_path, pickle.dumps((result, usage), protocol=pickle.HIGHEST_PROTOCOL), durable=False)
        for index in (target_index, baseline_index):  # modules the checks parsed on demand join the tree's pack
            if index is not None:
                index.save()
        timings["drift"] += time.perf_counter() - t0
    if usage.uses == 0:
        sources.notices.append(f"no use of {upstream_name} found in {usage.files_scanned} file(s) of {plugin_tree.root}: "
                               "is this the plugin's tree?")

    pairs = [p.plugin for p in spec.pairs_for(upstream_name, str(target.version))] if target.version else []
    outcome = decide_outcome(result.records, result.notes, spec.ownership, spec.name, pairs,
                             str(plugin_tree.version) if plugin_tree.version and plugin_tree.kind == "pypi" else None)
    timings["total"] = time.perf_counter() - started
    stats: dict[str, Any] = {"target": dict(target_index.stats, modules=len(target_index.files)), "result_cache": cache_state}
    if baseline_index is not None:
        stats["baseline"] = dict(baseline_index.stats, modules=len(baseline_index.files))
    return AnalysisReport(
        plugin=spec.name,
        upstream=upstream_name,
        plugin_tree=plugin_tree,
        target=target,
        baseline=baseline,
        records=result.records,
        notes=result.notes,
        outcome=outcome,
        usage=usage,
        verdicts=result.verdicts,
        unresolved=result.unresolved,
        timings=timings,
        index_stats=stats,
        notices=list(dict.fromkeys(sources.notices + [
            f"offline: {t.kind} tree {t.label} from the cache ({t.root})"
            for t in (target, baseline, plugin_tree) if t is not None and t.from_cache and sources.degraded])),
        plugin_spec=spec,
        dead_guards=list(getattr(result, "dead_guards", [])),
        dead_modules=dict(getattr(result, "dead_modules", {})),
        copies=list(getattr(result, "copies", [])),
        lanes={"target": lanes.target_label, "release": str(lanes.release.of(upstream_name)),
               "main": str(lanes.main.of(upstream_name)), "current_release": str(lanes.current_release.of(upstream_name)),
               "retarget_to": lanes.retarget_to},
    )
