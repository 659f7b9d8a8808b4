"""The `ssh+container` transport: `docker`/`podman` on an ssh host.

`exec` mode runs inside a container that is already up; `run` mode starts a fresh `--rm`
container per run with the Ascend device nodes and driver bind set derived from the profile
(the convention in npu-knowledge 4.2: never the whole driver tree; in-container logical device
ids in ASCEND_RT_VISIBLE_DEVICES). The per-run directory is bind-mounted at the same path.
"""

from __future__ import annotations

import posixpath
import shlex
from typing import Mapping

from porter.errors import EnvironmentProblem
from porter.hosts import ContainerSpec, HostProfile
from porter.transports import script as sh
from porter.transports.base import Transport
from porter.transports.ssh import SshTransport, classify_ssh_failure

NPU_DEVICE_NODES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
# Read-only: the container gets the driver's libraries and tools, never a writable driver tree.
ASCEND_BINDS = (
    "/usr/local/Ascend/driver/lib64:/usr/local/Ascend/driver/lib64:ro",
    "/usr/local/Ascend/driver/version.info:/usr/local/Ascend/driver/version.info:ro",
    "/usr/local/dcmi:/usr/local/dcmi:ro",
    "/etc/ascend_install.info:/etc/ascend_install.info:ro",
    "/usr/local/bin/npu-smi:/usr/local/bin/npu-smi:ro",
    "/etc/hccn.conf:/etc/hccn.conf:ro",
)
RUN_FLAGS = ("--network=host", "--ipc=host")


def run_name_for(run_dir: str) -> str:
    return "porter-" + posixpath.basename(run_dir.rstrip("/"))


def container_env(profile: HostProfile, env: Mapping[str, str]) -> dict[str, str]:
    """The environment for the container: in `run` mode the engine renumbers the devices it
    passes, so the visible ids inside are 0..n-1 (logical), not the host's chip ids."""
    out = dict(env)
    spec = profile.container
    ids = profile.visible_devices
    if spec is not None and spec.mode == "run" and ids:
        logical = ",".join(str(i) for i in range(len(ids)))
        if profile.device_family == "npu":
            out["ASCEND_RT_VISIBLE_DEVICES"] = logical
        elif profile.device_family == "cuda":
            out.pop("CUDA_VISIBLE_DEVICES", None)  # --gpus already selects them
    return out


def device_args(profile: HostProfile, spec: ContainerSpec) -> list[str]:
    ids = profile.visible_devices
    if profile.device_family == "npu":
        nodes = [*NPU_DEVICE_NODES, *(f"/dev/davinci{i}" for i in ids)]
        return [f"--device={node}" for node in nodes]
    if profile.device_family == "cuda":
        if spec.engine_name == "podman":  # podman speaks CDI, not --gpus
            return [f"--device=nvidia.com/gpu={i}" for i in ids] or ["--device=nvidia.com/gpu=all"]
        return ["--gpus", "device=" + ",".join(str(i) for i in ids) if ids else "all"]
    return []


def engine_argv(profile: HostProfile, script: str, env: Mapping[str, str], run_dir: str) -> list[str]:
    """The exact docker/podman argument list that runs `bash -c script` in the container."""
    spec = profile.container
    assert spec is not None, "ssh+container profile without a container section"
    env_args: list[str] = []
    for key, value in container_env(profile, env).items():
        env_args += ["-e", f"{key}={value}"]
    if spec.mode == "exec":
        return [spec.engine, "exec", "-i", *env_args, spec.name, "bash", "-c", script]
    binds = list(ASCEND_BINDS) if spec.default_binds and profile.device_family == "npu" else []
    binds += list(spec.binds)
    binds.append(f"{run_dir}:{run_dir}")
    argv = [spec.engine, "run", "--rm", "-i", "--name", run_name_for(run_dir), *RUN_FLAGS]
    if spec.privileged:
        argv.append("--privileged")
    argv += device_args(profile, spec)
    for bind in binds:
        argv += ["-v", bind]
    argv += env_args
    argv += list(spec.extra_args)
    argv += ["-w", run_dir, spec.image, "bash", "-c", script]
    return argv


class ContainerTransport(Transport):
    def __init__(self, profile: HostProfile):
        super().__init__(profile)
        self._ssh = SshTransport(profile)
        assert profile.container is not None
        self.spec: ContainerSpec = profile.container

    def host_argv(self, script: str) -> list[str]:
        return self._ssh.host_argv(script)

    def _engine_on_host(self, argv: list[str], bind_dir: str | None = None, lock: str | None = None,
                        run_dir: str | None = None, lock_hold_s: float | None = None) -> list[str]:
        lines = sh.setup_lines(self.spec.host_setup)
        if lock:  # on the host, not in the container: every container of this host shares it
            lines += sh.lock_lines(lock, run_dir, lock_hold_s)
        if bind_dir:  # made by the ssh user, not by the engine (which would create it as root)
            lines.append(f"mkdir -p {sh.q(bind_dir)}")
        lines.append("exec " + shlex.join(argv))
        return self.host_argv("\n".join(lines) + "\n")

    def runtime_argv(self, script: str, env: Mapping[str, str], run_dir: str, lock: str | None = None,
                     lock_hold_s: float | None = None) -> list[str]:
        bind_dir = run_dir if self.spec.mode == "run" else None
        # an exec container's run directory is not the host's: no pgid file to kill on takeover
        return self._engine_on_host(engine_argv(self.profile, script, env, run_dir), bind_dir, lock,
                                    run_dir if bind_dir else "", lock_hold_s)

    def ship_argv(self, run_dir: str) -> list[str]:
        if self.spec.mode == "run":  # unpack on the host; the run binds the directory in
            return self.host_argv(sh.unpack_script(run_dir))
        return super().ship_argv(run_dir)

    def kill_argv(self, run_dir: str) -> list[str]:
        if self.spec.mode == "run":
            return self._engine_on_host([self.spec.engine, "kill", run_name_for(run_dir)])
        return super().kill_argv(run_dir)

    def cleanup_argv(self, run_dir: str) -> list[str]:
        if self.spec.mode == "run":
            return self.host_argv(sh.remove_script(run_dir))
        return super().cleanup_argv(run_dir)

    def failure(self, returncode: int, stderr: str, what: str) -> EnvironmentProblem | None:
        found = classify_ssh_failure(self.profile, returncode, stderr, what)
        if found is not None:
            return found
        lowered = stderr.lower()
        engine = self.spec.engine_name
        missing = (f"{engine}: command not found", f"{engine}: not found", f"{engine}: no such file or directory")
        if any(text in lowered for text in missing):
            return EnvironmentProblem(
                f"{engine} not found on host {self.profile.name} while {what}",
                hint=f"install {engine} there, give its path as `container.engine`, or extend PATH in `container.host_setup`",
                details={"stage": what, "failure": "engine_missing"},
            )
        if "no such container" in lowered or "is not running" in lowered:
            return EnvironmentProblem(
                f"container {self.spec.name!r} is not running on host {self.profile.name} while {what}",
                hint=f"start it (`{engine} start {self.spec.name}`) or use `container.mode: run` with an image",
                details={"stage": what, "failure": "container_missing"},
            )
        # `docker run` with binds or devices asks the daemon for its OS first; with no daemon
        # that request fails as "unknown server OS: " (empty OS name).
        daemon = ("cannot connect to the docker daemon", "permission denied while trying to connect",
                  "unknown server os")
        if any(text in lowered for text in daemon):
            return EnvironmentProblem(
                f"{engine} on host {self.profile.name} cannot reach its daemon while {what}",
                hint="start the daemon or add the ssh user to the docker group",
                details={"stage": what, "failure": "engine_daemon"},
            )
        # 125: the engine failed before the container ran; OCI errors: the runtime could not start the command.
        if returncode == 125 or "oci runtime" in lowered:
            tail = " | ".join(stderr.strip().splitlines()[-3:]) or f"exit {returncode}"
            return EnvironmentProblem(
                f"{engine} on host {self.profile.name} failed while {what}: {tail}",
                hint=f"the message is {engine}'s own: try the engine command from `porter hosts show {self.profile.name}` on the host",
                details={"stage": what, "failure": "engine"},
            )
        return None

    def describe(self) -> str:
        target = self.spec.name if self.spec.mode == "exec" else self.spec.image
        return f"ssh {self.profile.address} + {self.spec.engine_name} {self.spec.mode} {target}"
