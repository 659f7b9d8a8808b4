"""`porter upgrade NAME --to REF` (no --dry-run) on the bundled example project, end to end."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from typer.testing import CliRunner

from tests.port.helpers import make_example, snapshot
from porter.cli import app


def test_upgrade_example_makes_branch_and_pr(tmp_path, monkeypatch):
    paths = make_example(tmp_path / "ex")
    monkeypatch.chdir(paths["root"])
    monkeypatch.setenv("PORTER_CACHE_DIR", str(tmp_path / "cache"))
    forks_before = paths["forks_file"].read_text()
    result = CliRunner().invoke(app, ["upgrade", "example-plugin", "--to", "v2", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    port = doc["port"]
    assert port["imports_at_target"]["verdict"] == "yes"
    assert port["branch"] == "ascend-port/hostlib-v2" and port["branch_moved"]
    assert port["outcome"]["outcome"] == "C_PATCH"
    assert port["needs_human"] == ["F1:hostlib.layers.moe.legacy_router"]
    assert all(c["verdict"] == "pass" for c in port["validation"]["checks"])
    pr = subprocess.run(["git", "show", "ascend-port/hostlib-v2:PR_MATERIAL.md"], cwd=paths["plugin"],
                        capture_output=True, text=True, check=True).stdout
    assert "porter upgrade example-plugin --to v2 --from v1" in pr
    assert pr.startswith("**imports at hostlib v2: yes")  # the verdict is the first line
    assert str(tmp_path) not in pr  # relative paths only
    from porter.registry import load_forks

    (entry,) = load_forks(paths["forks_file"])["example-plugin"].ledger
    assert entry.run_id == port["run_id"] and entry.branch == "ascend-port/hostlib-v2"
    assert paths["forks_file"].read_text() == forks_before  # comments and layout of forks.yaml untouched


def test_upgrade_on_dirty_fork_exits_2_and_changes_nothing(tmp_path, monkeypatch):
    paths = make_example(tmp_path / "ex")
    (paths["plugin"] / "scratch.txt").write_text("work in progress\n")
    before = snapshot(paths["plugin"])
    monkeypatch.chdir(paths["root"])
    monkeypatch.setenv("PORTER_CACHE_DIR", str(tmp_path / "cache"))
    result = CliRunner().invoke(app, ["upgrade", "example-plugin", "--to", "v2", "--json"])
    assert result.exit_code == 2, result.output
    assert "uncommitted changes" in json.loads(result.stdout)["error"]["message"]
    assert snapshot(paths["plugin"]) == before


def test_allow_dirty_flag_ports_committed_baseline_and_keeps_the_dirty_file(tmp_path, monkeypatch):
    paths = make_example(tmp_path / "ex")
    (paths["plugin"] / "scratch.txt").write_text("work in progress\n")
    before = snapshot(paths["plugin"])
    monkeypatch.chdir(paths["root"])
    monkeypatch.setenv("PORTER_CACHE_DIR", str(tmp_path / "cache"))
    result = CliRunner().invoke(app, ["upgrade", "example-plugin", "--to", "v2", "--allow-dirty", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["port"]["branch_moved"]
    # Only the new port branch (ref + reflog) is added; working files, index, HEAD stay identical.
    after = {k: v for k, v in snapshot(paths["plugin"]).items() if "ascend-port/" not in k}
    assert after == before


def test_fork_ref_flag_rejects_a_ref_that_does_not_exist(tmp_path, monkeypatch):
    paths = make_example(tmp_path / "ex")
    before = snapshot(paths["plugin"])
    monkeypatch.chdir(paths["root"])
    monkeypatch.setenv("PORTER_CACHE_DIR", str(tmp_path / "cache"))
    result = CliRunner().invoke(app, ["upgrade", "example-plugin", "--to", "v2", "--fork-ref", "no-such-ref", "--json"])
    assert result.exit_code == 2, result.output
    assert "no-such-ref" in json.loads(result.stdout)["error"]["message"]
    assert snapshot(paths["plugin"]) == before


def test_missing_fork_clone_is_named_with_the_fix(tmp_path, monkeypatch):
    """forks.yaml names a clone that is not there: the error says which path, exit 2, nothing written."""
    import shutil

    paths = make_example(tmp_path / "ex")
    shutil.rmtree(paths["plugin"])
    ledger_before = paths["forks_file"].read_text()
    monkeypatch.chdir(paths["root"])
    monkeypatch.setenv("PORTER_CACHE_DIR", str(tmp_path / "cache"))
    for extra in ([], ["--dry-run"]):
        result = CliRunner().invoke(app, ["upgrade", "example-plugin", "--to", "v2", "--json", *extra])
        assert result.exit_code == 2, result.output
        error = json.loads(result.stdout)["error"]
        assert str(paths["plugin"]) in error["message"] and "does not exist" in error["message"]
        assert "--plugin-path" in error["hint"]
    assert paths["forks_file"].read_text() == ledger_before
    assert not (paths["root"] / "runs").exists()


def test_status_of_a_git_only_upstream_uses_its_release_tags(tmp_path, monkeypatch):
    """The example's upstream has no PyPI project: its tags are the releases."""
    paths = make_example(tmp_path / "ex")
    monkeypatch.chdir(paths["root"])
    monkeypatch.setenv("PORTER_CACHE_DIR", str(tmp_path / "cache"))
    result = CliRunner().invoke(app, ["status", "--json"])
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout)["rows"][0]
    assert (row["baseline"], row["newest_release"], row["releases_between"]) == ("v1", "v2", 1)
    assert row["commits_between"] == 1 and row["adapted"] is False
    guard = paths["plugin"] / "tiny_npu" / "gate.py"
    guard.write_text('from tiny_npu.utils import hostlib_version_is\n\nNEW = hostlib_version_is("2")\n')
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    import os

    for args in (["add", "tiny_npu/gate.py"], ["commit", "-qm", "gate on hostlib 2"]):
        subprocess.run(["git", *args], cwd=paths["plugin"], check=True, env={**os.environ, **env})
    row = json.loads(CliRunner().invoke(app, ["status", "--json"]).stdout)["rows"][0]
    assert row["adapted"] is True and "gate.py" in row["adapted_evidence"]


def test_rerun_says_what_changed_on_the_console(tmp_path, monkeypatch):
    paths = make_example(tmp_path / "ex")
    monkeypatch.chdir(paths["root"])
    monkeypatch.setenv("PORTER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("COLUMNS", "400")  # one line per message
    first = CliRunner().invoke(app, ["upgrade", "example-plugin", "--to", "v2"])
    assert first.exit_code == 0, first.output
    assert "replaced previous series" not in first.stdout
    again = CliRunner().invoke(app, ["upgrade", "example-plugin", "--to", "v2"])
    assert again.exit_code == 0, again.output
    assert "new fixes none, dropped none; files identical to the previous tip" in again.stdout


def test_a_fork_that_cannot_be_ported_is_refused_before_any_download(tmp_path, monkeypatch):
    """Dirty, detached or equal versions: refused before the analysis materializes an upstream tree."""
    paths = make_example(tmp_path / "ex")
    monkeypatch.chdir(paths["root"])
    cache = tmp_path / "cache"
    monkeypatch.setenv("PORTER_CACHE_DIR", str(cache))
    (paths["plugin"] / "scratch.txt").write_text("work in progress\n")
    dirty = CliRunner().invoke(app, ["upgrade", "example-plugin", "--to", "v2", "--json"])
    assert dirty.exit_code == 2 and "uncommitted changes" in json.loads(dirty.stdout)["error"]["message"]
    same = CliRunner().invoke(app, ["upgrade", "example-plugin", "--to", "v2", "--from", "v2", "--allow-dirty", "--json"])
    assert same.exit_code == 2 and "equals the baseline" in json.loads(same.stdout)["error"]["message"]
    assert not (cache / "trees").exists(), "nothing may be downloaded or materialized for a run that cannot happen"
    assert not (paths["root"] / "runs").exists()


def test_push_without_a_remote_is_refused_before_the_run(tmp_path, monkeypatch):
    paths = make_example(tmp_path / "ex")
    before = snapshot(paths["plugin"])
    monkeypatch.chdir(paths["root"])
    monkeypatch.setenv("PORTER_CACHE_DIR", str(tmp_path / "cache"))
    result = CliRunner().invoke(app, ["upgrade", "example-plugin", "--to", "v2", "--push", "--json"])
    assert result.exit_code == 2, result.output
    assert "no git remote 'origin'" in json.loads(result.stdout)["error"]["message"]
    assert snapshot(paths["plugin"]) == before  # no branch was made only to fail at the push


def test_a_release_number_of_a_tagged_upstream_points_at_its_tag(tmp_path, monkeypatch):
    """`--to 2.0` on an upstream that tags releases `v2`: the error names the tag to pass."""
    paths = make_example(tmp_path / "ex")
    monkeypatch.chdir(paths["root"])
    monkeypatch.setenv("PORTER_CACHE_DIR", str(tmp_path / "cache"))
    result = CliRunner().invoke(app, ["upgrade", "example-plugin", "--to", "2.0", "--dry-run", "--json"])
    assert result.exit_code == 2, result.output
    error = json.loads(result.stdout)["error"]
    assert "tagged v2" in error["message"] and "--to v2" in error["hint"]


def test_porting_an_archive_says_to_use_a_checkout_or_dry_run(tmp_path, monkeypatch):
    paths = make_example(tmp_path / "ex")
    monkeypatch.chdir(paths["root"])
    monkeypatch.setenv("PORTER_CACHE_DIR", str(tmp_path / "cache"))
    wheel = tmp_path / "tiny_npu-1.0-py3-none-any.whl"
    wheel.write_bytes(b"PK\x05\x06" + b"\x00" * 18)  # an empty zip
    result = CliRunner().invoke(app, ["upgrade", "example-plugin", "--to", "v2", "--plugin-path", str(wheel), "--json"])
    assert result.exit_code == 2, result.output
    error = json.loads(result.stdout)["error"]
    assert "not a directory" in error["message"] and "--dry-run" in error["hint"]


def test_the_baseline_analysis_runs_once_per_port(tmp_path, monkeypatch):
    """A clean checkout at the baseline: the report's analysis is the port's; only the result tree is
    analysed again (residual drift)."""
    import porter.upgrade.analyze as analyze

    paths = make_example(tmp_path / "ex")
    monkeypatch.chdir(paths["root"])
    monkeypatch.setenv("PORTER_CACHE_DIR", str(tmp_path / "cache"))
    seen = []
    real = analyze.run_analysis

    def counting(request, *args, **kwargs):
        seen.append(Path(request.plugin_path).resolve() if request.plugin_path else None)
        return real(request, *args, **kwargs)

    monkeypatch.setattr(analyze, "run_analysis", counting)
    result = CliRunner().invoke(app, ["upgrade", "example-plugin", "--to", "v2", "--json"])
    assert result.exit_code == 0, result.output
    assert len(seen) == 2  # the checkout (= the committed baseline), then the ported tree
    assert (tmp_path / "cache" / "worktrees") in seen[1].parents
