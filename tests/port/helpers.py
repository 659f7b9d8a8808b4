"""Shared fixtures for the port tests: the bundled example and an analysis function over it."""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

from porter.port import PortAnalysis
from porter.upgrade.models import Outcome, OutcomeDecision, Severity

REPO = Path(__file__).resolve().parents[2]


def load_example_module():
    spec = importlib.util.spec_from_file_location("porter_make_example", REPO / "examples" / "make_example.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_example(target: Path) -> dict[str, Path]:
    return load_example_module().make_example(target)


def drift_analyzer(baseline_tree: Path, target_tree: Path, packages=("hostlib",), target_version="2.0.0"):
    """An AnalyzeFn over the example built from porter.upgrade's index, usage scan and drift."""
    from porter.upgrade.drift import compute_drift
    from porter.upgrade.guards import GuardConventions, TargetVersions, parse_version
    from porter.upgrade.index import TreeIndex
    from porter.upgrade.usage import scan_plugin

    target = TreeIndex(target_tree, packages)
    baseline = TreeIndex(baseline_tree, packages)
    conventions = GuardConventions(version_functions={"hostlib_version_is": "hostlib"})
    versions = TargetVersions({"hostlib": parse_version(target_version)})

    def analyze(plugin_root: Path) -> PortAnalysis:
        files = scan_plugin(plugin_root, packages)
        result = compute_drift(files, target, baseline, conventions, versions)
        breaking = [r for r in result.records if r.severity is not Severity.NOTE]
        outcome = OutcomeDecision(Outcome.C_PATCH if breaking else Outcome.A, (f"{len(breaking)} breaking",))
        return PortAnalysis(tuple(result.records), tuple(result.notes), outcome)

    return analyze


def snapshot(repo: Path) -> dict[str, str]:
    """Hash of everything a user would notice: working files, index, HEAD, refs, stash, worktree list."""
    out: dict[str, str] = {}
    git_dir = repo / ".git"
    for path in sorted(repo.rglob("*")):
        rel = path.relative_to(repo).as_posix()
        if rel == ".git" or rel.startswith(".git/"):
            continue
        if path.is_file():
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    for name in ("HEAD", "index", "packed-refs", "ORIG_HEAD", "FETCH_HEAD", "config"):
        path = git_dir / name
        if path.is_file():
            out[f".git/{name}"] = hashlib.sha256(path.read_bytes()).hexdigest()
    for sub in ("refs", "logs", "worktrees"):
        base = git_dir / sub
        if base.exists():
            for path in sorted(base.rglob("*")):
                if path.is_file():
                    out[f".git/{path.relative_to(git_dir).as_posix()}"] = hashlib.sha256(path.read_bytes()).hexdigest()
            out[f".git/{sub}/"] = "dir"
    return out
