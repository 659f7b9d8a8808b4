"""The exact commands the transports build: ssh options, quoting, and the docker/podman argv
with the Ascend bind set, device nodes and in-container logical device ids."""

from __future__ import annotations

import shlex

import pytest

from porter.hosts import parse_profile
from porter.transports import make_transport
from porter.transports import script as sh
from porter.transports.container import ASCEND_BINDS, engine_argv

RUN_DIR = "/tmp/porter-runs/a3-20261129T100000Z-abc123"


def _profile(**data):
    return parse_profile("a3", data, "test")


def test_ssh_argv_options_and_single_quoting():
    profile = _profile(address="root@10.0.0.5", port=443, identity_file="/k/id", ssh_config="/c/cfg",
                       ssh_options={"ProxyJump": "bastion", "ServerAliveInterval": 30})
    script = "echo 'hi there'; rm -rf $HOME/x"
    argv = make_transport(profile).host_argv(script)
    assert argv[:8] == ["ssh", "-T", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "LogLevel=ERROR"]
    assert argv[8:12] == ["-F", "/c/cfg", "-p", "443"]
    assert ["-i", "/k/id", "-o", "IdentitiesOnly=yes"] == argv[12:16]
    assert argv[16:20] == ["-o", "ProxyJump=bastion", "-o", "ServerAliveInterval=30"]
    assert argv[20:22] == ["--", "root@10.0.0.5"]  # `--`: an address is never an option
    # The remote command is one string; the remote shell splits it back into exactly bash -c SCRIPT.
    assert shlex.split(argv[22]) == ["bash", "-c", script]


def test_local_argv_runs_bash_directly():
    assert make_transport(_profile(transport="local")).host_argv("true") == ["bash", "-c", "true"]


def test_docker_run_npu_argv_exact():
    profile = _profile(
        address="a3.example", device_kind="npu-a3", visible_devices=[4, 5],
        env={"HF_ENDPOINT": "https://hf-mirror.com"},
        container={"engine": "docker", "mode": "run", "image": "quay.io/ascend/verl:v1", "privileged": True,
                   "binds": ["/data/me:/data/me"], "extra_args": ["--shm-size=64g"]},
    )
    transport = make_transport(profile)
    env = transport.runtime_env(RUN_DIR)
    argv = engine_argv(profile, "SCRIPT", env, RUN_DIR)
    binds = []
    for bind in ASCEND_BINDS:
        binds += ["-v", bind]
    assert argv == [
        "docker", "run", "--rm", "-i", "--name", "porter-a3-20261129T100000Z-abc123", "--network=host", "--ipc=host",
        "--privileged",
        "--device=/dev/davinci_manager", "--device=/dev/devmm_svm", "--device=/dev/hisi_hdc",
        "--device=/dev/davinci4", "--device=/dev/davinci5",
        *binds, "-v", "/data/me:/data/me", "-v", f"{RUN_DIR}:{RUN_DIR}",
        "-e", "PYTHONDONTWRITEBYTECODE=1", "-e", "PYTHONUNBUFFERED=1",
        # host chips 4,5 are devices 0,1 inside the container
        "-e", "ASCEND_RT_VISIBLE_DEVICES=0,1", "-e", "HF_ENDPOINT=https://hf-mirror.com",
        "--shm-size=64g", "-w", RUN_DIR, "quay.io/ascend/verl:v1", "bash", "-c", "SCRIPT",
    ]
    # Read-only driver binds, never the whole driver tree.
    assert all(b.endswith(":ro") for b in ASCEND_BINDS)
    assert not any(b.startswith("/usr/local/Ascend/driver:") for b in ASCEND_BINDS)


def test_docker_exec_keeps_visible_ids_and_sets_env():
    profile = _profile(address="a3", device_kind="npu-a3", visible_devices=[0, 1],
                       container={"name": "easyr1-dev"}, env={"VLLM_ASCEND_ENABLE_NZ": "0"})
    argv = engine_argv(profile, "S", make_transport(profile).runtime_env(RUN_DIR), RUN_DIR)
    assert argv == ["docker", "exec", "-i", "-e", "PYTHONDONTWRITEBYTECODE=1", "-e", "PYTHONUNBUFFERED=1",
                    "-e", "ASCEND_RT_VISIBLE_DEVICES=0,1", "-e", "VLLM_ASCEND_ENABLE_NZ=0",
                    "easyr1-dev", "bash", "-c", "S"]


def test_podman_cuda_uses_cdi_devices_and_no_ascend_binds():
    profile = _profile(address="gpu", device_kind="cuda", visible_devices=[1],
                       container={"engine": "podman", "mode": "run", "image": "img"})
    argv = engine_argv(profile, "S", {}, RUN_DIR)
    assert argv[0] == "podman" and "--device=nvidia.com/gpu=1" in argv
    assert "--gpus" not in argv and not any("Ascend" in a for a in argv)
    docker = _profile(address="gpu", device_kind="cuda", visible_devices=[1, 2],
                      container={"engine": "docker", "mode": "run", "image": "img"})
    argv = engine_argv(docker, "S", {"CUDA_VISIBLE_DEVICES": "1,2"}, RUN_DIR)
    assert argv[argv.index("--gpus") + 1] == "device=1,2"
    assert "CUDA_VISIBLE_DEVICES=1,2" not in argv  # --gpus renumbers; host ids would be wrong inside


def test_container_over_ssh_runs_host_setup_then_engine():
    profile = _profile(address="a3", container={"name": "c1", "host_setup": ["export DOCKER_HOST=unix:///run/d.sock"]})
    argv = make_transport(profile).runtime_argv("python -V", {}, RUN_DIR)
    assert argv[0] == "ssh" and argv[-2] == "a3"
    bash, dash_c, host_script = shlex.split(argv[-1])
    assert (bash, dash_c) == ("bash", "-c")
    assert "export DOCKER_HOST=unix:///run/d.sock" in host_script
    assert host_script.strip().splitlines()[-1] == "exec docker exec -i c1 bash -c 'python -V'"


def test_run_mode_ships_to_host_and_kills_by_container_name():
    profile = _profile(address="a3", device_kind="npu-a3", visible_devices=[0],
                       container={"mode": "run", "image": "img"})
    transport = make_transport(profile)
    ship = shlex.split(transport.ship_argv(RUN_DIR)[-1])
    assert "docker" not in ship[2] and "tar -xzf -" in ship[2]
    kill = shlex.split(transport.kill_argv(RUN_DIR)[-1])[2]
    assert "exec docker kill porter-a3-20261129T100000Z-abc123" in kill


def test_run_script_quotes_values_once():
    script = sh.run_script(setup=["source /usr/local/Ascend/ascend-toolkit/set_env.sh"], cwd="/w/run 1",
                           python="/opt/py thon", argv=["-m", "vime.smoke", "--gates", "G1;reboot"], timeout_s=30)
    assert "'/w/run 1'" in script
    # setup and run share one timed process group: the inner script is one quoted word of the
    # outer shell, and within it every value is quoted once
    assert "\ntimeout -k 5 30 bash -c '" in script
    quoted = script.split("\ntimeout -k 5 30 bash -c ", 1)[1].split(" &\npg=$!", 1)[0]
    words = shlex.split(quoted)
    assert len(words) == 1
    inner = words[0]
    assert "source /usr/local/Ascend/ascend-toolkit/set_env.sh" in inner
    assert inner.index("set_env.sh") < inner.index("exec '/opt/py thon' -m vime.smoke --gates 'G1;reboot'")


@pytest.mark.parametrize(
    "data, message",
    [
        ({"transport": "ssh"}, "needs `address`"),
        ({"transport": "ftp"}, "transport 'ftp'"),
        ({"address": "-oProxyCommand=evil"}, "is not a host name"),
        ({"address": "h", "port": 70000}, "not a TCP port"),
        ({"address": "h", "ssh_options": {"Proxy Command": "x"}}, "not an OpenSSH option"),
        ({"address": "h", "device_kind": "tpu"}, "device_kind 'tpu'"),
        ({"address": "h", "workdir": "/"}, "workdir"),
        ({"address": "h", "workdir": "relative/dir"}, "workdir"),
        ({"address": "h", "transport": "ssh+container"}, "needs a `container` section"),
        ({"address": "h", "transport": "ssh+container", "container": {"mode": "run"}}, "needs `container.image`"),
        ({"address": "h", "transport": "ssh+container", "container": {"engine": "rkt", "name": "c"}}, "not docker or podman"),
        ({"address": "h", "transport": "ssh+container", "device_kind": "npu-a3",
          "container": {"mode": "run", "image": "i"}}, "needs `visible_devices`"),
        ({"address": "h", "transport": "ssh", "container": "c"}, "only used with transport ssh+container"),
        ({"address": "h", "pyhton": "python3"}, "unknown key(s) pyhton"),
        ({"address": "h", "env": {"BAD-NAME": "1"}}, "`env` must map"),
        ({"address": "h", "python": "python3 -X"}, "python"),
    ],
)
def test_profile_validation_names_host_and_field(data, message):
    from porter.errors import InputError

    with pytest.raises(InputError) as info:
        parse_profile("a3", data, "porter.yaml")
    assert message in info.value.message and "a3" in info.value.message


def test_host_lock_is_taken_where_all_runs_of_the_host_see_it():
    lock = "/tmp/porter-runs/.porter-lock"
    plain = make_transport(_profile(address="a3"))
    script = shlex.split(plain.runtime_argv("python -V", {"A": "1"}, RUN_DIR, lock=lock)[-1])[2]
    assert script.index("export A=1") < script.index("flock -n 9") < script.index("python -V")
    boxed = make_transport(_profile(address="a3", container={"name": "c1"}))
    host_script = shlex.split(boxed.runtime_argv("python -V", {}, RUN_DIR, lock=lock)[-1])[2]
    # On the host, before the engine starts: containers of one host share the lock.
    assert host_script.index("flock -n 9") < host_script.index("exec docker exec")
    inner = shlex.split(host_script.strip().splitlines()[-1])[-1]
    assert "flock" not in inner


@pytest.mark.parametrize(
    "mode, returncode, stderr, failure",
    [
        # docker run with -v/--device asks the daemon for its OS first; without a daemon the
        # only message is this one (seen with docker 28 and no dockerd).
        ("run", 125, "docker: unknown server OS: \n\nRun 'docker run --help' for more information\n", "engine_daemon"),
        ("exec", 1, "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?\n",
         "engine_daemon"),
        # 125: the engine itself failed (bad flag, image pull refused) before the container ran.
        ("run", 125, "docker: Error response from daemon: pull access denied for img.\n", "engine"),
        ("exec", 126, "OCI runtime exec failed: exec failed: unable to start container process\n", "engine"),
    ],
)
def test_container_engine_failures_are_named(mode, returncode, stderr, failure):
    container = {"mode": mode, "image": "img"} if mode == "run" else {"name": "c1"}
    transport = make_transport(_profile(address="a3", container=container))
    problem = transport.failure(returncode, stderr, "running the smoke")
    assert problem is not None and problem.details["failure"] == failure
    assert "a3" in problem.message and problem.hint


def test_container_exit_codes_of_the_run_itself_are_not_engine_failures():
    transport = make_transport(_profile(address="a3", container={"mode": "run", "image": "img"}))
    assert transport.failure(1, "Traceback ...\nRuntimeError: boom\n", "running the smoke") is None
    assert transport.failure(137, "", "running the smoke") is None


@pytest.mark.parametrize("exit_code", [0, 3])
def test_run_script_reports_the_status_without_job_control_chatter(tmp_path, exit_code):
    """The run gets its own process group (job control), but bash's "[1]+ Done ..." notice
    must not reach the log or the terminal."""
    import subprocess

    python = tmp_path / "py"
    python.write_text(f"#!/bin/bash\necho out; echo err >&2; exit {exit_code}\n")
    python.chmod(0o755)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    script = sh.run_script(setup=[], cwd=str(run_dir), python=str(python), argv=["-m", "x"], timeout_s=30)
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=30)
    assert done.returncode == exit_code
    assert done.stdout == "out\n" and done.stderr == "err\n"


def test_killed_run_versus_killed_ssh_client():
    from porter.smoke.runner import classify_exit

    profile = _profile(address="a3")
    transport = make_transport(profile)
    remote = classify_exit(profile, transport, 137, "", None, timeout_s=900, elapsed_s=3)
    assert remote.details["failure"] == "killed" and "the smoke run on host a3 was killed by SIGKILL" in remote.message
    local = classify_exit(profile, transport, -9, "", None, timeout_s=900, elapsed_s=3)
    assert local.details["failure"] == "killed" and "ssh client for host a3 was killed by SIGKILL" in local.message


def test_kill_script_ends_the_recorded_process_group(tmp_path):
    """The script a second connection runs to stop a run: TERM (then KILL) to the group in .porter-pgid."""
    import subprocess
    import time

    run = subprocess.Popen(["setsid", "bash", "-c", "sleep 300 & sleep 300 & wait"])
    try:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and len(subprocess.run(["pgrep", "-g", str(run.pid)], capture_output=True,
                                                                  text=True).stdout.split()) < 3:
            time.sleep(0.05)
        (tmp_path / sh.PGID_FILE).write_text(f"{run.pid}\n")
        done = subprocess.run(["bash", "-c", sh.kill_script(str(tmp_path))], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        run.wait(timeout=10)
        assert subprocess.run(["pgrep", "-g", str(run.pid)], capture_output=True).returncode == 1  # nothing left
    finally:
        if run.poll() is None:
            run.kill()
    # no recorded group: nothing to do, still success
    assert subprocess.run(["bash", "-c", sh.kill_script(str(tmp_path / "absent"))], timeout=10).returncode == 0
