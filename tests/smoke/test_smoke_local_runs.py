"""`porter smoke` on the local transport: the real runtime end to end, and every way a run can
break (no python, setup failure, timeout, killed, partial output) with nothing left running."""

from __future__ import annotations

import json
from contextlib import contextmanager
import sys
import time
from pathlib import Path

import pytest

from tests.smoke.smoke_helpers import STALL_BODY, fake_python, invoke, process_gone, write_config


def _host(tmp_path: Path, **fields) -> dict:
    base = {"transport": "local", "python": sys.executable, "workdir": str(tmp_path / "remote")}
    base.update(fields)
    return base


@pytest.mark.slow
def test_local_l3_end_to_end(project, local_tmp):
    """The one full run: bundled `local` host, all levels, stored record, stack reported."""
    code, doc, output = invoke("smoke", "--host", "local", "--level", "L3", "--json")
    run = doc["run"]
    failed = [r for r in run["report"]["results"] if r["verdict"] in ("fail", "error")]
    assert code == 0, (failed, output[-2000:])
    levels = {r["level"] for r in run["report"]["results"]}
    assert levels == {"L0", "L1", "L2", "L3"}
    gates = {r["gate"]: r for r in run["report"]["results"]}
    assert {"L0.devices", "L1.import.torch", "L1.import.vime", "L2.matmul", "L2.softmax", "L2.layernorm",
            "L2.dtype.bfloat16", "L2.dtype.float16", "L2.collective", "G1", "G4"} <= set(gates)
    assert gates["L2.matmul"]["values"]["max_rel_err"] <= gates["L2.matmul"]["thresholds"]["max_rel_err"]
    assert gates["L2.collective"]["values"]["backend"] == "gloo"
    assert {f"G{i}" for i in range(1, 9)} <= set(gates)  # the registry ran every gate
    assert not any(r["reason"] == "gate registry not available" for r in gates.values())
    assert run["stack"]["upstreams"]["torch"]["version"] == "2.13.0"
    assert any(r["gate"] == "L1.stack.torch" and r["verdict"] == "pass" for r in run["report"]["results"])
    stored = Path(run["run_dir"])
    assert stored.parent.parent == project / "runs" and stored.parent.name == "local"
    assert json.loads((stored / "result.json").read_text())["report"]["ok"] is True
    log = (stored / "log.txt").read_text()
    assert "vime.smoke: L2.matmul pass" in log and "porter: shipping the runtime" in log
    # The per-run directory on the "host" is gone; only the workdir remains.
    assert [p.name for p in (local_tmp / "porter-runs").iterdir()] == [".porter-lock"]
    assert run["timings"]["run_s"] > 0 and run["transport"] == "local"


def test_failed_import_is_diagnosed_with_the_kb(project, tmp_path):
    """A torch_npu whose import fails the way an unsourced CANN does: L1 fails, KB names CANN-002."""
    site = tmp_path / "fake-site" / "torch_npu"
    site.mkdir(parents=True)
    (site / "__init__.py").write_text(
        "raise ImportError(\"libhccl.so: cannot open shared object file: No such file or directory. \"\n"
        "                  \"Please run 'source set_env.sh' in the CANN installation path.\")\n"
    )
    # A stand-in transformers keeps this test about torch_npu (and fast).
    (site.parent / "transformers").mkdir()
    (site.parent / "transformers" / "__init__.py").write_text("__version__ = '0.0.0-stand-in'\n")
    write_config(project, {"box": _host(tmp_path, env={"PYTHONPATH": str(site.parent)})})
    code, _, text = invoke("smoke", "--host", "box", "--level", "L1")
    assert code == 1 and "CANN-002" in text  # the cause is shown next to the table
    (stored,) = (project / "runs" / "box").iterdir()
    run = json.loads((stored / "result.json").read_text())
    results = {r["gate"]: r for r in run["report"]["results"]}
    assert results["L1.import.torch_npu"]["verdict"] == "error"
    assert "libhccl.so" in results["L1.import.torch_npu"]["traceback"]
    diagnosis = run["diagnoses"]["L1.import.torch_npu"]
    assert diagnosis["status"] == "match"
    assert diagnosis["matches"][0]["id"] == "CANN-002"


def test_missing_python_exit_3_with_record(project, tmp_path):
    write_config(project, {"box": _host(tmp_path, python=str(tmp_path / "no" / "python3"))})
    code, doc, _ = invoke("smoke", "--host", "box", "--level", "L0", "--json")
    assert code == 3
    error = doc["run"]["error"]
    assert "python not found" in error["message"] and error["details"]["failure"] == "python_missing"
    stored = Path(doc["run"]["run_dir"])
    assert json.loads((stored / "result.json").read_text())["exit_code"] == 3
    assert "python not found" in (stored / "log.txt").read_text()


def test_setup_failure_exit_3(project, tmp_path):
    write_config(project, {"box": _host(tmp_path, setup=["source /nonexistent/set_env.sh"])})
    code, doc, output = invoke("smoke", "--host", "box", "--level", "L0", "--json")
    assert code == 3 and "setup line failed: source /nonexistent/set_env.sh" in doc["run"]["error"]["message"]


def test_timeout_kills_the_whole_group_and_keeps_partial_log(project, tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    python = fake_python(tmp_path / "stall-python", STALL_BODY.format(pids=pids))
    write_config(project, {"box": _host(tmp_path, python=str(python))})
    code, doc, _ = invoke("smoke", "--host", "box", "--level", "L0", "--timeout", "2", "--json")
    assert code == 3
    assert doc["run"]["error"]["details"]["failure"] == "timeout"
    assert "timed out after 2 s" in doc["run"]["error"]["message"]
    log = Path(doc["run"]["log"]).read_text()
    assert "vime.smoke: L0.python pass" in log  # the partial output is kept
    # ... and the check that finished is in the stored report, so --compare does not call it gone
    assert doc["run"]["report_partial"] is True
    assert [r["gate"] for r in doc["run"]["report"]["results"]] == ["L0.python"]
    for name in ("main.pid", "child.pid"):
        assert process_gone(int((pids / name).read_text())), f"{name} still running"


def test_killed_remote_command_exit_3(project, tmp_path):
    python = fake_python(tmp_path / "killed-python", 'echo "vime.smoke: L0.python pass" >&2\nkill -9 $$\n')
    write_config(project, {"box": _host(tmp_path, python=str(python))})
    code, doc, _ = invoke("smoke", "--host", "box", "--level", "L0", "--json")
    assert code == 3
    assert doc["run"]["error"]["details"]["failure"] == "killed"
    assert "SIGKILL" in doc["run"]["error"]["message"]


def test_partial_output_exit_3(project, tmp_path):
    python = fake_python(tmp_path / "partial-python", "echo '{\"schema\":\"vime.smoke/1\",\"level\":\"L0\",\"res'\nexit 0\n")
    write_config(project, {"box": _host(tmp_path, python=str(python))})
    code, doc, output = invoke("smoke", "--host", "box", "--level", "L0", "--json")
    assert code == 3
    assert doc["run"]["error"]["details"]["failure"] == "partial_output"
    assert "without a complete result" in doc["run"]["error"]["message"]


def test_secrets_in_remote_output_are_redacted(project, tmp_path):
    python = fake_python(tmp_path / "leaky-python", "echo 'HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz123456' >&2\nexit 3\n")
    write_config(project, {"box": _host(tmp_path, python=str(python))})
    code, doc, _ = invoke("smoke", "--host", "box", "--level", "L0", "--json")
    assert code == 3
    stored = Path(doc["run"]["run_dir"])
    for name in ("log.txt", "result.json"):
        text = (stored / name).read_text()
        assert "hf_abcdefghijklmnop" not in text
    assert "[REDACTED]" in (stored / "log.txt").read_text()


def test_usage_errors(project):
    assert invoke("smoke")[0] == 2
    assert invoke("smoke", "--host", "local", "--level", "L9")[0] == 2
    assert invoke("smoke", "--host", "local", "--gates", "G1;rm -rf /")[0] == 2
    code, doc, _ = invoke("smoke", "--host", "nowhere", "--json")
    assert code == 2 and "unknown host" in doc["error"]["message"]
    for args in (["smoke", "--host", "local", "--timeout", "-1"], ["smoke", "--compare", "local", "--drift", "-0.1"],
                 ["hosts", "check", "local", "--timeout", "-1"]):
        code, doc, _ = invoke(*args, "--json")
        assert code == 2 and doc["error"]["kind"] == "usage_error", (args, doc)
    # A mistyped gate is refused before anything ships (the registry is the shipped one).
    code, doc, _ = invoke("smoke", "--host", "local", "--gates", "G1,G99", "--json")
    assert code == 2 and doc["error"]["message"] == "unknown gate(s): G99" and "run" not in doc


@pytest.mark.parametrize("signo", [2, 15])  # Ctrl-C, and SIGTERM (a cancelled CI job)
def test_interrupt_kills_the_run_and_keeps_the_record(project, tmp_path, signo):
    """Ctrl-C/TERM on porter: exit 130, the run's process group killed, the partial record stored."""
    import os
    import subprocess
    import time

    pids = tmp_path / "pids"
    pids.mkdir()
    python = fake_python(tmp_path / "stall-python", STALL_BODY.format(pids=pids))
    write_config(project, {"box": _host(tmp_path, python=str(python))})
    porter = Path(sys.executable).parent / "porter"
    # With --json (the TERM case, as from a CI job) stdout still carries one document.
    json_flag = ["--json"] if signo == 15 else []
    proc = subprocess.Popen([str(porter), "smoke", "--host", "box", "--level", "L0", *json_flag], cwd=project,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not (pids / "child.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.2)
    os.kill(proc.pid, signo)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    if json_flag:
        doc = json.loads(out)
        assert doc["schema"] == "porter.smoke/1" and doc["exit_code"] == 130
        assert doc["error"]["details"]["failure"] == "interrupted" and doc["run"]["run_id"]
    else:
        assert "interrupted" in err
    for name in ("main.pid", "child.pid"):
        assert process_gone(int((pids / name).read_text())), f"{name} still running"
    (stored,) = (project / "runs" / "box").iterdir()
    record = json.loads((stored / "result.json").read_text())
    assert record["error"]["details"]["failure"] == "interrupted"
    assert "vime.smoke: L0.python pass" in (stored / "log.txt").read_text()


def test_progress_lines_are_redacted_and_not_markup(project, tmp_path, capsys):
    """Host output streamed to the terminal: secrets masked, `[/path]` shown as text."""
    from porter.smoke.runner import SmokeRequest, SmokeRunner
    from porter.smoke.store import RunStore
    from porter.hosts import parse_profile

    python = fake_python(tmp_path / "chatty-python",
                         "echo 'vime.smoke: token=ghp_abcdefghijklmnopqrstuvwxyz0123 in [/usr/lib]' >&2\nexit 3\n")
    profile = parse_profile("box", _host(tmp_path, python=str(python)), "test")
    shown: list[str] = []
    run = SmokeRunner(RunStore(project / "runs"), on_line=shown.append).execute(SmokeRequest(profile, level="L0"))
    assert run.exit_code == 3
    line = next(l for l in shown if l.startswith("vime.smoke:"))
    assert "ghp_abcdef" not in line and "[REDACTED]" in line
    # And the CLI prints it without tripping over the bracketed path.
    write_config(project, {"box": _host(tmp_path, python=str(python))})
    code, _, output = invoke("smoke", "--host", "box", "--level", "L0")
    assert code == 3 and "in [/usr/lib]" in output


def test_second_run_on_a_busy_host_is_refused(project, tmp_path):
    """The host lock: while one run holds the host, another fails at once (exit 3, busy)."""
    import shutil
    import subprocess
    import time

    if shutil.which("flock") is None:
        pytest.skip("flock (util-linux) not installed: runs are unlocked")
    pids = tmp_path / "pids"
    pids.mkdir()
    python = fake_python(tmp_path / "stall-python", STALL_BODY.format(pids=pids))
    write_config(project, {"box": _host(tmp_path, python=str(python))})
    porter = Path(sys.executable).parent / "porter"
    first = subprocess.Popen([str(porter), "smoke", "--host", "box", "--level", "L0", "--timeout", "20"], cwd=project,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while not (pids / "child.pid").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        code, doc, _ = invoke("smoke", "--host", "box", "--level", "L0", "--json")
        assert code == 3 and doc["error"]["details"]["failure"] == "busy"
    finally:
        first.send_signal(2)
        first.wait(timeout=30)
    assert process_gone(int((pids / "child.pid").read_text()))


@contextmanager
def _lock_holder(tmp_path: Path, deadline_offset_s: int):
    """A process that holds the host lock of `tmp_path/remote` (fd 9, as a run script does) and
    wrote a deadline `deadline_offset_s` from now into it, then hangs on."""
    import shutil
    import subprocess

    if shutil.which("flock") is None:
        pytest.skip("flock (util-linux) not installed: runs are unlocked")
    workdir = tmp_path / "remote"
    workdir.mkdir()
    lock = workdir / ".porter-lock"
    holder = subprocess.Popen(["bash", "-c", f"exec 9>>{lock}; flock -n 9; : > {lock}; "
                               f"echo \"$$ $(( $(date +%s) + {deadline_offset_s} )) {workdir}/old-run\" >&9; sleep 300"])
    try:
        deadline = time.monotonic() + 10
        while not (lock.exists() and lock.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.05)
        yield holder
    finally:
        if holder.poll() is None:
            holder.kill()


def _smoke_box(project, tmp_path) -> tuple[int, dict]:
    python = fake_python(tmp_path / "ok-python", "exit 1\n")
    write_config(project, {"box": _host(tmp_path, python=str(python))})
    code, doc, _ = invoke("smoke", "--host", "box", "--level", "L0", "--json")
    return code, doc


def test_overdue_lock_holder_is_killed_and_the_lock_taken_over(project, tmp_path):
    """A process that still holds the host lock past the deadline its run wrote (its porter died,
    the process hangs on) is killed and the next run proceeds instead of 'host busy' forever."""
    with _lock_holder(tmp_path, -5) as holder:
        code, doc = _smoke_box(project, tmp_path)
        assert doc["run"]["error"] is None or doc["run"]["error"]["details"].get("failure") != "busy", doc
        assert "took over the host lock" in Path(doc["run"]["log"]).read_text()
        assert holder.wait(timeout=10) is not None


def test_lock_within_its_deadline_is_still_busy(project, tmp_path):
    with _lock_holder(tmp_path, 600) as holder:
        code, doc = _smoke_box(project, tmp_path)
        assert code == 3 and doc["error"]["details"]["failure"] == "busy"
        assert holder.poll() is None  # a run within its time is never killed


def test_unknown_cause_pointer_only_for_tracebacks(project, tmp_path):
    """A failed measurement explains itself; only a check that raised gets the `porter diagnose` pointer."""
    report = {"schema": "vime.smoke/1", "level": "L1", "results": [
        {"gate": "L1.stack.torch", "name": "pin", "level": "L1", "verdict": "fail", "values": {"installed": "2.1"},
         "thresholds": {"version": "2.13.0"}, "reason": "torch 2.1 installed, stack pins 2.13.0"},
        {"gate": "L1.import.vllm", "name": "import", "level": "L1", "verdict": "error",
         "reason": "RuntimeError: qwxz", "traceback": "Traceback (most recent call last):\nRuntimeError: qwxz zzyq\n"},
    ]}
    python = fake_python(tmp_path / "report-python", f"echo '{json.dumps(report)}'\nexit 1\n")
    write_config(project, {"box": _host(tmp_path, python=str(python))})
    code, _, output = invoke("smoke", "--host", "box", "--level", "L1")
    assert code == 1
    assert "L1.import.vllm: no known cause" in output
    assert "L1.stack.torch: no known cause" not in output


def test_secret_env_reaches_the_run_but_never_a_command_line(project, tmp_path, monkeypatch):
    """Shared hosts: anyone can read process arguments, so secret-looking `env:` values travel
    in the shipped bundle (a 0600 file sourced and deleted by the run script), not in argv."""
    import porter.proc
    from porter.hosts import parse_profile
    from porter.smoke.runner import SmokeRequest, SmokeRunner
    from porter.smoke.store import RunStore

    secret = "hf_" + "q" * 34
    seen = tmp_path / "seen"
    python = fake_python(tmp_path / "env-python",
                         f'echo "$HF_TOKEN|$VLLM_USE_V1|$(ls -a . | grep -c porter-env)" > {seen}\nexit 3\n')
    argvs: list[list[str]] = []
    real = porter.proc.run_streaming

    def spy(argv, *args, **kwargs):
        argvs.append(list(argv))
        return real(argv, *args, **kwargs)

    monkeypatch.setattr("porter.smoke.runner.run_streaming", spy)
    profile = parse_profile("box", _host(tmp_path, python=str(python), env={"HF_TOKEN": secret, "VLLM_USE_V1": "1"}),
                            "test")
    SmokeRunner(RunStore(project / "runs")).execute(SmokeRequest(profile, level="L0"))
    assert seen.read_text().strip() == f"{secret}|1|0"  # set for python; the file already gone
    assert len(argvs) == 2 and not any(secret in arg for argv in argvs for arg in argv)


def test_unusable_lock_file_is_not_reported_as_busy(project, tmp_path):
    """A lock file porter cannot open (another user's, here a directory in its place) is a host
    problem with its own message, not "host busy"."""
    import shutil

    if shutil.which("flock") is None:
        pytest.skip("flock (util-linux) not installed: runs are unlocked")
    (tmp_path / "remote" / ".porter-lock").mkdir(parents=True)
    write_config(project, {"box": _host(tmp_path)})
    code, doc, _ = invoke("smoke", "--host", "box", "--level", "L0", "--json")
    assert code == 3 and doc["error"]["details"]["failure"] == "host_tools", doc["error"]
    assert "cannot open the host lock" in doc["error"]["message"]
