"""The `ssh` transport: the system OpenSSH client, so ~/.ssh/config, ProxyJump and agents work.

The remote command is one string for the remote login shell: `bash -c <script>` with the
script quoted once. BatchMode keeps ssh from ever prompting (a prompt would hang a smoke run).
"""

from __future__ import annotations

import re
import shlex

from porter.errors import EnvironmentProblem
from porter.hosts import HostProfile
from porter.transports.base import Transport

_AUTH = re.compile(r"Permission denied|Too many authentication failures|no matching host key type|"
                   r"Load key .*: (?:invalid format|bad permissions|No such file)")
_HOSTKEY = re.compile(r"Host key verification failed|REMOTE HOST IDENTIFICATION HAS CHANGED")
_UNREACHABLE = re.compile(
    r"Connection refused|Connection timed out|timed out|No route to host|Could not resolve hostname|"
    r"Name or service not known|Network is unreachable|Connection closed by|Connection reset|"
    r"kex_exchange_identification|port \d+: Broken pipe|stdio forwarding failed"
)


def ssh_base_argv(profile: HostProfile) -> list[str]:
    argv = ["ssh", "-T", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={profile.connect_timeout}",
            "-o", "LogLevel=ERROR"]
    if profile.ssh_config:
        argv += ["-F", profile.ssh_config]
    if profile.port:
        argv += ["-p", str(profile.port)]
    if profile.user:
        argv += ["-l", profile.user]
    if profile.identity_file:
        argv += ["-i", profile.identity_file, "-o", "IdentitiesOnly=yes"]
    for key, value in profile.ssh_options:
        argv += ["-o", f"{key}={value}"]
    return argv


def classify_ssh_failure(profile: HostProfile, returncode: int, stderr: str, what: str) -> EnvironmentProblem | None:
    """ssh exits 255 for its own errors; turn them into a message a user can act on."""
    if returncode != 255:
        return None
    tail = " | ".join(stderr.strip().splitlines()[-3:]) or "no message from ssh"
    where = f"{profile.name} ({profile.address}{':' + str(profile.port) if profile.port else ''})"
    if _AUTH.search(stderr):
        return EnvironmentProblem(
            f"authentication to host {where} failed while {what}: {tail}",
            hint="check the profile's `identity_file`/`user`, your ssh-agent, and that the key is in the "
            f"host's authorized_keys; try the connect command from `porter hosts show {profile.name}` by hand",
            details={"stage": what, "failure": "auth"},
        )
    if _HOSTKEY.search(stderr):
        return EnvironmentProblem(
            f"host key of {where} could not be verified while {what}: {tail}",
            hint="add the host key to known_hosts (ssh once by hand) or fix the stale entry",
            details={"stage": what, "failure": "host_key"},
        )
    if _UNREACHABLE.search(stderr):
        return EnvironmentProblem(
            f"host {where} is unreachable while {what}: {tail}",
            hint="check the address, port, VPN or jump host (ProxyJump) and that sshd runs there",
            details={"stage": what, "failure": "unreachable"},
        )
    return EnvironmentProblem(
        f"ssh to host {where} failed while {what}: {tail}",
        hint="run `porter hosts check " + profile.name + "` and try the ssh command by hand",
        details={"stage": what, "failure": "ssh"},
    )


class SshTransport(Transport):
    def host_argv(self, script: str) -> list[str]:
        # `--` ends ssh's options: an address can never be read as one.
        return [*ssh_base_argv(self.profile), "--", self.profile.address, shlex.join(["bash", "-c", script])]

    def failure(self, returncode: int, stderr: str, what: str) -> EnvironmentProblem | None:
        return classify_ssh_failure(self.profile, returncode, stderr, what)

    def describe(self) -> str:
        return f"ssh {self.profile.address}"
