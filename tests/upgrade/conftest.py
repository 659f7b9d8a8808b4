"""Fixtures for the upgrade tests; the builders live in upgrade_fixtures.py."""

from __future__ import annotations

from pathlib import Path

import git
import pytest

from tests.upgrade.upgrade_fixtures import PLUGIN, REGISTRY, UPKG_V1, UPKG_V2, commit_all, write_tree


@pytest.fixture
def trees(tmp_path: Path) -> dict[str, Path]:
    v1 = write_tree(tmp_path / "upkg-1.0", UPKG_V1)
    v2 = write_tree(tmp_path / "upkg-2.0", UPKG_V2)
    plugin = write_tree(tmp_path / "myplug", PLUGIN)
    return {"v1": v1, "v2": v2, "plugin": plugin}


@pytest.fixture
def upstream_repo(tmp_path: Path) -> Path:
    """A git repository of upkg with tags v1.0 and v2.0 and a branch main at 2.0."""
    root = tmp_path / "upkg-repo"
    root.mkdir()
    repo = git.Repo.init(root, initial_branch="main")
    with repo.config_writer() as cw:
        cw.set_value("user", "name", "t")
        cw.set_value("user", "email", "t@example.invalid")
    write_tree(root, UPKG_V1)
    commit_all(repo, "v1")
    repo.create_tag("v1.0")
    for rel in UPKG_V1:
        (root / rel).unlink()
    write_tree(root, UPKG_V2)
    commit_all(repo, "v2")
    repo.create_tag("v2.0")
    return root


@pytest.fixture
def project(tmp_path: Path, trees, upstream_repo, monkeypatch) -> Path:
    """A porter project in tmp_path: registry, forks file, isolated cache; cwd set to it."""
    proj = tmp_path / "proj"
    (proj / "knowledge").mkdir(parents=True)
    (proj / "forks").mkdir()
    (proj / "knowledge" / "upstreams.yaml").write_text(
        REGISTRY.format(git=str(upstream_repo), plugin_git=str(tmp_path / "no-plugin-mirror")), encoding="utf-8")
    (proj / "forks" / "forks.yaml").write_text(
        "schema: 1\nforks:\n  myplug:\n    plugin: myplug\n    path: forks/myplug\n    baseline: {upkg: '1.0'}\n    ledger: []\n",
        encoding="utf-8")
    (proj / "porter.yaml").write_text("knowledge_dir: knowledge\nforks_file: forks/forks.yaml\n", encoding="utf-8")
    monkeypatch.chdir(proj)
    monkeypatch.setenv("PORTER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PORTER_OFFLINE", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    return proj
