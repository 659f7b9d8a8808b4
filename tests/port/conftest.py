from __future__ import annotations

import pytest

from tests.port.helpers import drift_analyzer, isolate_git_config, make_example


@pytest.fixture(autouse=True)
def _no_global_git_identity(monkeypatch, tmp_path_factory):
    """Every port test runs like CI: no global git identity (porter must bring its own)."""
    isolate_git_config(monkeypatch, tmp_path_factory.mktemp("home"))


@pytest.fixture
def example(tmp_path):
    paths = make_example(tmp_path / "ex")
    paths["analyze"] = drift_analyzer(paths["upstream_v1"], paths["upstream_v2"])
    return paths


@pytest.fixture
def request_for(example, tmp_path):
    from porter.port.plan import PortRequest

    def build(**overrides):
        fields = dict(
            fork="example-plugin", fork_path=example["plugin"], upstream="hostlib", baseline="v1", target="v2",
            baseline_tree=example["upstream_v1"], target_tree=example["upstream_v2"],
            work_dir=tmp_path / "worktrees", runs_dir=tmp_path / "runs",
        )
        fields.update(overrides)
        return PortRequest(**fields)

    return build
