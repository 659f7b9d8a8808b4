"""publish.py's small contracts: a failed push says what to do next; the ledger only records
registered forks."""

from __future__ import annotations

import subprocess

import pytest
import yaml

from porter.errors import EnvironmentProblem
from porter.port import publish as pub


def _repo(tmp_path):
    repo = tmp_path / "fork"
    repo.mkdir()
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e",
           "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    for args in (["init", "-q", "-b", "main"], ["commit", "-q", "--allow-empty", "-m", "c"],
                 ["branch", "ascend-port/x"]):
        subprocess.run(["git", "-C", str(repo), *args], check=True, env=env)
    return repo


def test_failed_push_names_the_branch_and_the_way_out(tmp_path):
    repo = _repo(tmp_path)
    with pytest.raises(EnvironmentProblem) as info:
        pub.push_branch(repo, str(tmp_path / "no-such-remote"), "ascend-port/x", force=False)
    assert info.value.message.startswith("push of ascend-port/x to ")
    assert "does not appear to be a git repository" in info.value.message  # git's own reason
    assert "push it by hand" in (info.value.hint or "")


def test_ledger_records_only_registered_forks(tmp_path):
    forks = tmp_path / "forks.yaml"
    forks.write_text(yaml.safe_dump({"schema": 1, "forks": {"f": {"plugin": "f", "path": str(tmp_path)}}}))
    kwargs = dict(slug="s", branch="ascend-port/s", upstream="u", target="2", outcome="C_PATCH", run_id="r1",
                  commits=("abc",))
    assert pub.record_ledger(forks, "f", **kwargs) is True
    assert pub.record_ledger(forks, "not-registered", **kwargs) is False
    assert pub.record_ledger(None, "f", **kwargs) is False
    from porter.registry import load_forks

    assert [e.run_id for e in load_forks(forks)["f"].ledger] == ["r1"]
