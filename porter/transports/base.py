"""What every transport provides: local argument lists for scripts run on the host."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Mapping

from porter.errors import EnvironmentProblem
from porter.hosts import HostProfile, is_secret_env
from porter.transports import script as sh


class Transport(ABC):
    def __init__(self, profile: HostProfile):
        self.profile = profile

    # -- what a transport must say -------------------------------------------------------
    @abstractmethod
    def host_argv(self, script: str) -> list[str]:
        """Argv that runs `script` with bash on the host itself (outside any container)."""

    def runtime_argv(self, script: str, env: Mapping[str, str], run_dir: str, lock: str | None = None,
                     lock_hold_s: float | None = None) -> list[str]:
        """Argv that runs `script` where the runtime lives, with `env` set before the script's
        setup lines run (so set_env.sh extends PYTHONPATH instead of being overwritten), holding
        the host lock `lock` if given (for at most `lock_hold_s` before a later run may take it
        over). Default: the host, with `env` exported at the top."""
        head = sh.export_lines(env) + (sh.lock_lines(lock, run_dir, lock_hold_s) if lock else [])
        return self.host_argv("\n".join(head) + "\n" + script if head else script)

    def ship_argv(self, run_dir: str) -> list[str]:
        """Argv that reads a tar.gz on stdin and unpacks it into `run_dir` where the runtime sees it."""
        return self.runtime_argv(sh.unpack_script(run_dir), {}, run_dir)

    def kill_argv(self, run_dir: str) -> list[str]:
        return self.runtime_argv(sh.kill_script(run_dir), {}, run_dir)

    def cleanup_argv(self, run_dir: str) -> list[str]:
        return self.runtime_argv(sh.remove_script(run_dir), {}, run_dir)

    def runtime_env(self, run_dir: str) -> dict[str, str]:
        """Variables the runtime needs: the profile's env and visible devices. (The run script
        puts the shipped code first on PYTHONPATH after the setup lines ran.)"""
        env = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}
        env.update(self.visible_devices_env())
        env.update({k: v for k, v in self.profile.env if not is_secret_env(k, v)})
        return env

    def secret_env(self) -> dict[str, str]:
        """The profile's secret-looking variables: anyone on a host can read process arguments,
        so these travel in the shipped bundle (see `script.run_script(env_file=...)`), never in argv."""
        return {k: v for k, v in self.profile.env if is_secret_env(k, v)}

    def visible_devices_env(self) -> dict[str, str]:
        ids = self.profile.visible_devices
        if not ids:
            return {}
        key = "ASCEND_RT_VISIBLE_DEVICES" if self.profile.device_family == "npu" else "CUDA_VISIBLE_DEVICES"
        return {key: ",".join(str(i) for i in ids)}

    def failure(self, returncode: int, stderr: str, what: str) -> EnvironmentProblem | None:
        """A transport-level failure (cannot connect, cannot authenticate) or None."""
        return None

    def describe(self) -> str:
        return self.profile.transport
