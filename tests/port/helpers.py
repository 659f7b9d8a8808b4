"""Shared fixtures for the port tests: the bundled example and an analysis function over it."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import subprocess
from pathlib import Path

from porter.port.plan import PortAnalysis
from porter.upgrade.models import Outcome, OutcomeDecision, Severity

REPO = Path(__file__).resolve().parents[2]
# The tests' own commits carry this identity; porter's commits must work without any (see conftest).
TEST_IDENTITY = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def git(repo, *args: str) -> str:
    """git as a user of the fork would run it (with an identity of its own), stdout."""
    return subprocess.run(["git", "-c", "init.defaultBranch=main", *args], cwd=repo, capture_output=True, text=True,
                          check=True, env={**os.environ, **TEST_IDENTITY}).stdout


def isolate_git_config(monkeypatch, home: Path) -> None:
    """No global or system git config, as on a CI machine: no user.name/user.email to fall back on."""
    home.mkdir(parents=True, exist_ok=True)
    empty = home / "gitconfig"
    empty.write_text("")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(empty))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    for name in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "EMAIL"):
        monkeypatch.delenv(name, raising=False)


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
