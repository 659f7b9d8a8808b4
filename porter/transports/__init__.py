"""Transports: how porter runs a command where a host's runtime lives.

`local` runs on this machine, `ssh` through the system OpenSSH client (so ~/.ssh/config, jump
hosts and agents work), `ssh+container` through `docker`/`podman` on the ssh host. Every transport
turns a shell script for the host into a local argument list; nothing goes through a local shell.
"""

from __future__ import annotations

from porter.hosts import HostProfile
from porter.transports.base import Transport


def make_transport(profile: HostProfile) -> Transport:
    if profile.transport == "local":
        from porter.transports.local import LocalTransport

        return LocalTransport(profile)
    if profile.transport == "ssh":
        from porter.transports.ssh import SshTransport

        return SshTransport(profile)
    from porter.transports.container import ContainerTransport

    return ContainerTransport(profile)


__all__ = ["Transport", "make_transport"]
