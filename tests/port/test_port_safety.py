"""The user's checkout, index, stash and refs are byte-identical after a failed, an interrupted
or a refused run; bad input gets a clear error and the right exit code."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.port.helpers import REPO, git, snapshot
from porter.errors import EnvironmentProblem, InputError, UsageError
from porter.port.plan import PortAnalysis, PortFailed
from porter.port.shim_port import run_port
from porter.upgrade.models import DriftFamily, DriftRecord, Location, Outcome, OutcomeDecision, Site


def with_stash(repo: Path) -> None:
    """Give the checkout a stash entry and an uncommitted-but-ignored state worth protecting."""
    readme = repo / "README.md"
    readme.write_text(readme.read_text() + "stashed change\n")
    git(repo, "stash", "-q")


def assert_untouched(repo: Path, before: dict, work_dir: Path) -> None:
    assert snapshot(repo) == before
    assert git(repo, "worktree", "list").count("\n") == 1
    assert not work_dir.exists() or not any(work_dir.iterdir())


def test_failure_half_way_leaves_everything_as_it_was(example, request_for, tmp_path, monkeypatch):
    with_stash(example["plugin"])
    before = snapshot(example["plugin"])
    monkeypatch.setenv("PORTER_TEST_HOOK", "fail:commit-3")
    with pytest.raises(EnvironmentProblem, match="injected failure at commit-3"):
        run_port(request_for(), example["analyze"])
    assert_untouched(example["plugin"], before, tmp_path / "worktrees")
    assert "stashed change" in git(example["plugin"], "stash", "show", "-p")


def test_failed_validation_does_not_move_the_branch(example, request_for, tmp_path):
    before = snapshot(example["plugin"])
    calls = []

    def analyze(path):
        result = example["analyze"](path)
        calls.append(path)
        if len(calls) == 1:
            return result
        ghost = DriftRecord(DriftFamily.REMOVED, "hostlib.ghost", Location("hostlib", "ghost"), (Site("tiny_npu/moe.py", 1),))
        return PortAnalysis((*result.records, ghost), result.notes, result.outcome)

    with pytest.raises(PortFailed) as info:
        run_port(request_for(), analyze)
    assert info.value.exit_code == 1 and "residual drift" in info.value.message
    # The port branch did not move; the result is kept on `-failed` for inspection, nothing else changed.
    after = snapshot(example["plugin"])
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    assert changed == {".git/refs/heads/ascend-port/hostlib-v2-failed", ".git/logs/refs/heads/ascend-port/hostlib-v2-failed"}
    assert git(example["plugin"], "branch", "--list", "ascend-port/hostlib-v2").strip() == ""
    failed = info.value.result
    assert failed.failed_branch == "ascend-port/hostlib-v2-failed" and not failed.branch_moved
    assert git(example["plugin"], "rev-parse", failed.failed_branch).strip() == failed.tip
    runs = list((tmp_path / "runs" / "upgrade").iterdir())
    assert len(runs) == 1 and (runs[0] / "PR_MATERIAL.md").is_file()  # the record explains the failure
    assert f"{runs[0]}/run.json" in info.value.message  # the error names the record ...
    (check,) = info.value.details["checks"]  # ... and the failing check with its output
    assert check["name"] == "residual drift" and any("hostlib.ghost" in item for item in check["items"])
    assert not (tmp_path / "worktrees").exists() or not any((tmp_path / "worktrees").iterdir())


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_mid_run_leaves_everything_as_it_was(example, tmp_path, signum):
    """`porter upgrade` in a subprocess, interrupted (SIGINT or SIGTERM) after its second shim commit."""
    with_stash(example["plugin"])
    before = snapshot(example["plugin"])
    marker = tmp_path / "paused"
    cache = tmp_path / "cache"
    env = {**os.environ, "PORTER_TEST_HOOK": f"pause:commit-2:{marker}", "PORTER_TEST_PAUSE_S": "60",
           "PORTER_CACHE_DIR": str(cache), "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "porter", "upgrade", "example-plugin", "--to", "v2"],
                            cwd=example["root"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 90
        while not marker.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the run never reached the pause point"
            time.sleep(0.05)
        assert len(list((cache / "worktrees").iterdir())) == 1  # mid-run: the worktree exists
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err.decode()
    assert "interrupted" in err.decode()
    assert_untouched(example["plugin"], before, cache / "worktrees")
    assert "ledger: []" in example["forks_file"].read_text()  # no ledger entry for an interrupted run


def test_dirty_fork_is_refused(example, request_for, tmp_path):
    (example["plugin"] / "tiny_npu" / "ops.py").write_text("# local edit\n")
    before = snapshot(example["plugin"])
    with pytest.raises(InputError, match="uncommitted changes") as info:
        run_port(request_for(), example["analyze"])
    assert info.value.exit_code == 2
    assert_untouched(example["plugin"], before, tmp_path / "worktrees")
    result = run_port(request_for(allow_dirty=True), example["analyze"])  # the committed baseline is ported
    assert result.branch_moved
    assert (example["plugin"] / "tiny_npu" / "ops.py").read_text() == "# local edit\n"


def test_missing_fork_and_not_a_repository(example, request_for, tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        run_port(request_for(fork_path=tmp_path / "nowhere"), example["analyze"])
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(InputError, match="not a git repository"):
        run_port(request_for(fork_path=plain), example["analyze"])


def test_detached_head_needs_an_explicit_ref(example, request_for):
    git(example["plugin"], "checkout", "-q", "--detach")
    with pytest.raises(InputError, match="detached"):
        run_port(request_for(), example["analyze"])
    assert run_port(request_for(fork_ref="main"), example["analyze"]).branch_moved


def test_target_equal_to_baseline(example, request_for):
    with pytest.raises(UsageError, match="equals the baseline") as info:
        run_port(request_for(target="v1"), example["analyze"])
    assert info.value.exit_code == 2


def test_unknown_fork_ref(example, request_for):
    with pytest.raises(InputError, match="does not exist"):
        run_port(request_for(fork_ref="no-such-branch"), example["analyze"])


def test_diverged_branch_is_refused_unless_forced(example, request_for, tmp_path):
    repo = example["plugin"]
    git(repo, "branch", "ascend-port/hostlib-v2")
    git(repo, "checkout", "-q", "ascend-port/hostlib-v2")
    (repo / "NOTES.md").write_text("a maintainer's own work\n")
    git(repo, "add", "NOTES.md")
    git(repo, "commit", "-qm", "maintainer work on the port branch")
    git(repo, "checkout", "-q", "main")
    before = snapshot(repo)
    with pytest.raises(InputError, match="diverged") as info:
        run_port(request_for(), example["analyze"])
    assert info.value.exit_code == 2
    assert_untouched(repo, before, tmp_path / "worktrees")
    assert run_port(request_for(force=True), example["analyze"]).branch_moved


def test_checked_out_port_branch_is_refused(example, request_for):
    run_port(request_for(), example["analyze"])
    git(example["plugin"], "checkout", "-q", "ascend-port/hostlib-v2")
    with pytest.raises(InputError, match="checked out"):
        run_port(request_for(fork_ref="main"), example["analyze"])


def test_template_error_leaves_nothing_half_written(example, request_for, tmp_path, monkeypatch):
    from porter.shims import render

    override = tmp_path / "templates"
    override.mkdir()
    (override / "removed.py.j2").write_text("{{ undefined_thing }}")
    monkeypatch.setenv("PORTER_SHIM_TEMPLATES", str(override))
    render._environment.cache_clear()
    before = snapshot(example["plugin"])
    try:
        with pytest.raises(InputError, match="undefined_thing"):
            run_port(request_for(), example["analyze"])
    finally:
        render._environment.cache_clear()
    assert_untouched(example["plugin"], before, tmp_path / "worktrees")


def test_c_report_makes_no_branch(example, request_for):
    def analyze(path):
        result = example["analyze"](path)
        return PortAnalysis(result.records, result.notes, OutcomeDecision(Outcome.C_REPORT, ("site outside ownership",)))

    result = run_port(request_for(), analyze)
    assert result.exit_code == 1 and not result.branch_moved and "C_REPORT" in result.message


def _start_paused(example, tmp_path, stage: str, pause_s: float = 60) -> tuple[subprocess.Popen, Path]:
    """`porter upgrade example-plugin --to v2` in a subprocess, paused at `stage` (returns once it is there)."""
    marker = tmp_path / f"paused-{stage}"
    env = {**os.environ, "PORTER_TEST_HOOK": f"pause:{stage}:{marker}", "PORTER_TEST_PAUSE_S": str(pause_s),
           "PORTER_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "porter", "upgrade", "example-plugin", "--to", "v2"],
                            cwd=example["root"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 90
    while not marker.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"the run never reached {stage}: {proc.communicate()}")
        time.sleep(0.05)
    return proc, marker


@pytest.mark.parametrize("stage", ["worktree", "commit-1", "validated", "pr-material"])
def test_interrupt_at_each_step_before_the_move_changes_nothing(example, tmp_path, stage):
    from porter.registry import load_forks

    before = snapshot(example["plugin"])
    proc, _ = _start_paused(example, tmp_path, stage)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err.decode()
    assert_untouched(example["plugin"], before, tmp_path / "cache" / "worktrees")
    assert load_forks(example["forks_file"])["example-plugin"].ledger == ()


def test_interrupt_right_after_the_move_is_reported_truthfully(example, tmp_path):
    """Ctrl-C in the window between the branch move and its record: the record and the ledger are
    still written, and the message says the branch moved (it is not 'nothing was written')."""
    import json

    from porter.registry import load_forks

    proc, _ = _start_paused(example, tmp_path, "moved", pause_s=2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    message = err.decode()
    assert proc.returncode == 130, message
    assert "moved to" in message and "nothing was left half-written" not in message
    tip = git(example["plugin"], "rev-parse", "ascend-port/hostlib-v2").strip()
    (entry,) = load_forks(example["forks_file"])["example-plugin"].ledger
    assert entry.commits[-1] == tip
    (record,) = (example["root"] / "runs" / "upgrade").iterdir()
    doc = json.loads((record / "run.json").read_text())
    assert doc["branch_moved"] is True and doc["tip"] == tip
    assert git(example["plugin"], "worktree", "list").count("\n") == 1  # and the worktree is gone


def test_interrupt_after_the_record_is_written_is_reported_truthfully(example, tmp_path):
    """Ctrl-C after the move, the record and the ledger (while the worktree is being removed): the message
    must not say that nothing was written, and the ledger keeps exactly one entry for the run."""
    from porter.registry import load_forks

    proc, _ = _start_paused(example, tmp_path, "branch-moved", pause_s=30)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    message = err.decode()
    tip = git(example["plugin"], "rev-parse", "ascend-port/hostlib-v2").strip()
    assert proc.returncode == 130, message
    assert "nothing was left half-written" not in message and "moved to" in message, message
    (entry,) = load_forks(example["forks_file"])["example-plugin"].ledger
    assert entry.commits[-1] == tip
    assert git(example["plugin"], "worktree", "list").count("\n") == 1  # the worktree is gone


def test_sigkill_leaves_a_worktree_that_the_next_run_prunes(example, request_for, tmp_path):
    proc, _ = _start_paused(example, tmp_path, "commit-2")
    proc.kill()  # SIGKILL: no cleanup runs
    proc.communicate(timeout=30)
    work_dir = tmp_path / "cache" / "worktrees"
    (stale,) = list(work_dir.iterdir())
    assert str(stale) in git(example["plugin"], "worktree", "list")  # git still has it registered
    result = run_port(request_for(work_dir=work_dir), example["analyze"])
    assert result.branch_moved
    assert git(example["plugin"], "worktree", "list").count("\n") == 1
    assert not stale.exists() and not any(work_dir.iterdir())


def test_a_live_runs_worktree_is_not_pruned(example, request_for, tmp_path):
    """Two runs at once: the second must not take the first one's worktree for a stale one."""
    from porter.port.worktree import prune_stale

    proc, _ = _start_paused(example, tmp_path, "commit-1")
    try:
        work_dir = tmp_path / "cache" / "worktrees"
        assert prune_stale(example["plugin"], work_dir) == []
        assert len(list(work_dir.iterdir())) == 1
    finally:
        proc.kill()
        proc.communicate(timeout=30)


def test_invalid_slug_is_a_usage_error_before_anything(example, request_for, tmp_path):
    before = snapshot(example["plugin"])
    with pytest.raises(UsageError, match="invalid slug") as info:
        run_port(request_for(slug="bad..slug"), example["analyze"])
    assert info.value.exit_code == 2
    assert_untouched(example["plugin"], before, tmp_path / "worktrees")


def test_stale_ref_lock_is_named(example, request_for, tmp_path):
    from porter.port.publish import RefLocked

    lock = example["plugin"] / ".git" / "refs" / "heads" / "ascend-port" / "hostlib-v2.lock"
    lock.parent.mkdir(parents=True)
    lock.write_text("")
    with pytest.raises(RefLocked) as info:
        run_port(request_for(), example["analyze"])
    assert str(lock) in info.value.message and "delete" in info.value.hint
    assert git(example["plugin"], "branch", "--list", "ascend-port/*").strip() == ""


def test_concurrent_change_of_the_branch_is_named(example, request_for, tmp_path, monkeypatch):
    from porter.port import shim_port
    from porter.port.publish import ConcurrentChange

    real = shim_port.checkpoint

    def someone_else_moves_it(stage):
        if stage == "pr-material":  # after porter looked at the branch, before it moves it
            git(example["plugin"], "branch", "ascend-port/hostlib-v2", "main")
        real(stage)

    monkeypatch.setattr(shim_port, "checkpoint", someone_else_moves_it)
    with pytest.raises(ConcurrentChange, match="changed while porter was running"):
        run_port(request_for(), example["analyze"])
    main = git(example["plugin"], "rev-parse", "main").strip()
    assert git(example["plugin"], "rev-parse", "ascend-port/hostlib-v2").strip() == main  # theirs, kept


def test_two_concurrent_ledger_writers_keep_every_entry(tmp_path):
    from porter.registry import load_forks

    forks_file = tmp_path / "forks" / "forks.yaml"
    forks_file.parent.mkdir()
    text = "# my forks: keep this comment\nschema: 1\nforks:\n  f:\n    plugin: p\n    custom_key: kept  # mine\n"
    forks_file.write_text(text)
    forks_file.chmod(0o600)
    writer = (
        "import sys\nfrom pathlib import Path\nfrom porter.registry import LedgerEntry, append_ledger\n"
        "for i in range(25):\n"
        "    append_ledger(Path(sys.argv[1]), 'f', LedgerEntry(slug='s', branch='ascend-port/s', upstream='u',\n"
        "                  target='2', outcome='C_PATCH', created='t', run_id=f'{sys.argv[2]}-{i}'))\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", writer, str(forks_file), name], env={**os.environ, "PYTHONPATH": str(REPO)})
             for name in ("a", "b")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    runs = {e.run_id for e in load_forks(forks_file)["f"].ledger}
    assert runs == {f"{n}-{i}" for n in "ab" for i in range(25)}
    assert forks_file.read_text() == text and (forks_file.stat().st_mode & 0o777) == 0o600
