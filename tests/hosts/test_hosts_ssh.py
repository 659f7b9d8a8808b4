"""The ssh and ssh+container transports against a real OpenSSH server on 127.0.0.1
(scripts/ci-sshd.sh): end to end with the real runtime, a ProxyJump through an ssh config
file, a wrong key, a dead port, a remote timeout that leaves nothing running, and the
container path through a fake `docker` on the ssh host's PATH."""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path

import pytest

from tests.smoke.smoke_helpers import STALL_BODY, fake_python, invoke, process_gone, write_config

pytestmark = pytest.mark.ssh


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when the block ends: nothing listens there


def test_ssh_end_to_end_l2(project, sshd, tmp_path):
    write_config(project, {"a3": sshd.profile(workdir=str(tmp_path / "remote"))})
    code, doc, output = invoke("smoke", "--host", "a3", "--level", "L2", "--json")
    assert code == 0, output[-3000:]
    run = doc["run"]
    assert run["transport"] == f"ssh {sshd.host}"
    gates = {r["gate"]: r for r in run["report"]["results"]}
    assert gates["L2.matmul"]["verdict"] == "pass" and gates["L1.import.torch"]["verdict"] == "pass"
    # The runtime that ran is the shipped copy in the per-run directory, not the checkout.
    assert gates["L1.import.vime"]["values"]["path"].startswith(str(tmp_path / "remote"))
    assert [p.name for p in (tmp_path / "remote").iterdir()] == [".porter-lock"]  # run directory removed
    log = Path(run["log"]).read_text()
    assert "vime.smoke: L2.collective pass" in log


def test_hosts_check_over_ssh(project, sshd):
    write_config(project, {"a3": sshd.profile()})
    code, doc, _ = invoke("hosts", "check", "a3", "--json")
    assert code == 0
    assert doc["reachable"] is True and doc["facts"]["packages"]["torch"].startswith("2.")
    assert doc["facts"]["python"]["executable"] == sys.executable
    assert doc["facts"]["devices"]["kind"] == "cpu" and doc["problems"] == []


def _jump_config(tmp_path: Path, sshd, jump_port: int) -> Path:
    config = tmp_path / "ssh_config"
    common = (f"  User {sshd.user}\n  IdentityFile {sshd.key}\n  IdentitiesOnly yes\n"
              f"  UserKnownHostsFile {sshd.known_hosts}\n  StrictHostKeyChecking yes\n")
    config.write_text(
        f"Host porter-jump\n  HostName {sshd.host}\n  Port {jump_port}\n{common}"
        f"Host porter-target\n  HostName {sshd.host}\n  Port {sshd.port}\n  ProxyJump porter-jump\n{common}"
    )
    return config


def test_proxyjump_through_ssh_config(project, sshd, tmp_path):
    """The profile names an alias; ~/.ssh/config-style options (ProxyJump) do the routing."""
    good = _jump_config(tmp_path, sshd, sshd.port)
    profile = {"transport": "ssh", "address": "porter-target", "ssh_config": str(good), "python": sys.executable,
               "workdir": str(tmp_path / "remote"), "connect_timeout": 5}
    write_config(project, {"behind": profile})
    code, doc, output = invoke("smoke", "--host", "behind", "--level", "L0", "--json")
    assert code == 0, output[-2000:]
    assert doc["run"]["report"]["results"][0]["gate"] == "L0.python"
    # Break only the jump host: the target is now unreachable, so the jump was really used.
    (tmp_path / "broken").mkdir()
    broken = _jump_config(tmp_path / "broken", sshd, _dead_port())
    write_config(project, {"behind": {**profile, "ssh_config": str(broken)}})
    code, doc, _ = invoke("hosts", "check", "behind", "--json")
    assert code == 3 and doc["error"]["details"]["failure"] == "unreachable"


def test_wrong_key_is_an_authentication_failure(project, sshd):
    write_config(project, {"a3": sshd.profile(identity_file=sshd.wrong_key)})
    code, doc, _ = invoke("smoke", "--host", "a3", "--level", "L0", "--json")
    assert code == 3
    error = doc["run"]["error"]
    assert error["details"]["failure"] == "auth" and "authentication to host a3" in error["message"]
    assert "identity_file" in error["hint"]
    assert Path(doc["run"]["log"]).is_file()  # partial log kept even when nothing ran


def test_dead_port_is_unreachable(project, sshd):
    write_config(project, {"a3": sshd.profile(port=_dead_port())})
    code, doc, _ = invoke("hosts", "check", "a3", "--json")
    assert code == 3 and doc["error"]["details"]["failure"] == "unreachable"
    code, doc, _ = invoke("smoke", "--host", "a3", "--level", "L0", "--json")
    assert code == 3 and "unreachable" in doc["run"]["error"]["message"]


def test_remote_timeout_leaves_nothing_running(project, sshd, tmp_path):
    pids = tmp_path / "pids"
    pids.mkdir()
    python = fake_python(tmp_path / "stall-python", STALL_BODY.format(pids=pids))
    write_config(project, {"a3": sshd.profile(python=str(python), workdir=str(tmp_path / "remote"))})
    code, doc, _ = invoke("smoke", "--host", "a3", "--level", "L0", "--timeout", "2", "--json")
    assert code == 3 and doc["run"]["error"]["details"]["failure"] == "timeout"
    assert "vime.smoke: L0.python pass" in Path(doc["run"]["log"]).read_text()
    for name in ("main.pid", "child.pid"):  # the "remote" processes live on this machine
        assert process_gone(int((pids / name).read_text())), f"remote {name} still running"


def test_hung_setup_line_is_killed_by_the_timeout_and_frees_the_host(project, sshd, tmp_path):
    """A setup line that never returns runs in the timed process group: killed like a hung run,
    and the host lock is free for the next run (no "host busy" forever)."""
    pids = tmp_path / "pids"
    pids.mkdir()
    ok_python = fake_python(tmp_path / "ok-python", "exit 1\n")
    hang = f"echo $$ > {pids}/setup.pid; sleep 300"
    write_config(project, {"a3": sshd.profile(python=str(ok_python), workdir=str(tmp_path / "remote"), setup=[hang])})
    code, doc, _ = invoke("smoke", "--host", "a3", "--level", "L0", "--timeout", "2", "--json")
    assert code == 3 and doc["run"]["error"]["details"]["failure"] == "timeout"
    assert process_gone(int((pids / "setup.pid").read_text())), "the hung setup line still runs"
    write_config(project, {"a3": sshd.profile(python=str(ok_python), workdir=str(tmp_path / "remote"))})
    code, doc, _ = invoke("smoke", "--host", "a3", "--level", "L0", "--json")
    assert doc["run"]["error"] is None or doc["run"]["error"]["details"].get("failure") != "busy"


FAKE_DOCKER = r'''
"""A stand-in for `docker` on the ssh host: records its argv, then runs the command locally."""
import json, os, sys

args = sys.argv[1:]
with open(os.environ["FAKE_DOCKER_LOG"], "a") as log:
    log.write(json.dumps(args) + "\n")
verb, rest = args[0], args[1:]
if verb == "kill":
    sys.exit(0)
env = dict(os.environ)
takes_value = {"-e", "-v", "-w", "--name", "--gpus"}
i = 0
while rest[i].startswith("-"):
    flag = rest[i]
    if flag in takes_value:
        if flag == "-e":
            key, _, value = rest[i + 1].partition("=")
            env[key] = value
        if flag == "-w":
            os.chdir(rest[i + 1])
        i += 2
    else:
        i += 1
command = rest[i + 1:]  # skip the container name (exec) or the image (run)
os.execvpe(command[0], command, env)
'''


def test_container_exec_through_fake_docker_on_the_host(project, sshd, tmp_path):
    bin_dir = tmp_path / "host-bin"
    bin_dir.mkdir()
    fake_python(bin_dir / "docker", FAKE_DOCKER, shebang=f"#!{sys.executable}")
    calls = tmp_path / "docker-calls.jsonl"
    profile = sshd.profile(
        transport="ssh+container",
        container={"engine": "docker", "mode": "exec", "name": "vime-dev",
                   "host_setup": [f"export PATH={bin_dir}:$PATH", f"export FAKE_DOCKER_LOG={calls}"]},
        env={"HF_ENDPOINT": "https://hf-mirror.example"},
        workdir=str(tmp_path / "remote"),
        visible_devices=[2, 3],
    )
    write_config(project, {"a3c": profile})
    code, doc, output = invoke("smoke", "--host", "a3c", "--level", "L0", "--json")
    assert code == 0, output[-3000:]
    assert doc["run"]["transport"] == f"ssh {sshd.host} + docker exec vime-dev"
    env = doc["run"]["report"]["environment"]["env"]
    assert env["HF_ENDPOINT"] == "https://hf-mirror.example"
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3"  # cpu/cuda profile: passed through as given
    argvs = [json.loads(line) for line in calls.read_text().splitlines()]
    verbs = [a[:2] for a in argvs]
    assert verbs == [["exec", "-i"]] * 2  # ship, then run (which removes its directory): both in the container
    assert [p.name for p in (tmp_path / "remote").iterdir()] == [".porter-lock"]
    run_call = argvs[1]
    assert run_call[run_call.index("vime-dev") + 1:run_call.index("vime-dev") + 3] == ["bash", "-c"]
    assert "-e" in run_call and "HF_ENDPOINT=https://hf-mirror.example" in run_call
    assert "PYTHONDONTWRITEBYTECODE=1" in run_call


def test_interrupt_kills_the_remote_group(project, sshd, tmp_path):
    """Ctrl-C while the remote run stalls: the ssh session dies, and porter kills the remote
    process group through a second connection (a closed session alone would not stop it)."""
    import os
    import signal
    import subprocess
    import time

    pids = tmp_path / "pids"
    pids.mkdir()
    python = fake_python(tmp_path / "stall-python", STALL_BODY.format(pids=pids))
    write_config(project, {"a3": sshd.profile(python=str(python), workdir=str(tmp_path / "remote"))})
    porter = Path(sys.executable).parent / "porter"
    proc = subprocess.Popen([str(porter), "smoke", "--host", "a3", "--level", "L0"], cwd=project,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not (pids / "child.pid").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.2)
    os.kill(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    for name in ("main.pid", "child.pid"):
        assert process_gone(int((pids / name).read_text())), f"remote {name} still running"


def test_container_run_mode_and_check_through_fake_docker(project, sshd, tmp_path):
    """`run` mode: shipped to the host, bind-mounted at the same path, killed/removed by name."""
    bin_dir = tmp_path / "host-bin"
    bin_dir.mkdir()
    fake_python(bin_dir / "docker", FAKE_DOCKER, shebang=f"#!{sys.executable}")
    calls = tmp_path / "docker-calls.jsonl"
    profile = sshd.profile(
        transport="ssh+container",
        container={"mode": "run", "image": "quay.io/ascend/verl:test", "default_binds": False,
                   "host_setup": [f"export PATH={bin_dir}:$PATH", f"export FAKE_DOCKER_LOG={calls}"]},
        workdir=str(tmp_path / "remote"),
    )
    write_config(project, {"fresh": profile})
    code, doc, _ = invoke("hosts", "check", "fresh", "--json")
    assert code == 0 and doc["facts"]["python"]["executable"] == sys.executable
    code, doc, output = invoke("smoke", "--host", "fresh", "--level", "L0", "--json")
    assert code == 0, output[-3000:]
    run_call = json.loads(calls.read_text().splitlines()[-1])
    run_dir = run_call[run_call.index("-w") + 1]
    assert run_call[:5] == ["run", "--rm", "-i", "--name", "porter-" + Path(run_dir).name]
    assert f"{run_dir}:{run_dir}" in run_call and run_call[run_call.index("-w") + 2] == "quay.io/ascend/verl:test"
    assert not Path(run_dir).exists()


def test_missing_container_engine_is_named(project, sshd):
    profile = sshd.profile(transport="ssh+container", container={"engine": "/nonexistent/docker", "name": "c1"})
    write_config(project, {"a3c": profile})
    code, doc, _ = invoke("smoke", "--host", "a3c", "--level", "L0", "--json")
    assert code == 3
    assert doc["error"]["details"]["failure"] == "engine_missing"
    assert "docker not found on host a3c while shipping the runtime" in doc["error"]["message"]
