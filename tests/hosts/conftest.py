"""Fixtures for the host and transport tests: an isolated porter project and the loopback
OpenSSH server started by scripts/ci-sshd.sh."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

import pytest

from tests.smoke.conftest import project  # noqa: F401  (one isolated-project fixture for both suites)


@dataclass(frozen=True)
class Sshd:
    host: str
    port: int
    user: str
    key: str
    wrong_key: str
    known_hosts: str

    def profile(self, **fields) -> dict:
        """A host profile that reaches this server without reading or writing ~/.ssh."""
        base = {
            "transport": "ssh",
            "address": self.host,
            "port": self.port,
            "user": self.user,
            "identity_file": self.key,
            "ssh_config": "/dev/null",
            "ssh_options": {"UserKnownHostsFile": self.known_hosts, "StrictHostKeyChecking": "yes"},
            "python": sys.executable,
            "connect_timeout": 5,
        }
        base.update(fields)
        return base


@pytest.fixture(scope="session")
def sshd() -> Sshd:
    """Skips without a configured server, unless PORTER_REQUIRE_SSH=1 (CI), where it fails."""
    names = ("PORTER_SSH_HOST", "PORTER_SSH_PORT", "PORTER_SSH_USER", "PORTER_SSH_KEY", "PORTER_SSH_WRONG_KEY",
             "PORTER_SSH_KNOWN_HOSTS")
    missing = [n for n in names if not os.environ.get(n)]
    if missing:
        message = 'no loopback sshd: run eval "$(scripts/ci-sshd.sh start)" first (missing ' + ", ".join(missing) + ")"
        if os.environ.get("PORTER_REQUIRE_SSH") == "1":
            pytest.fail(message)
        pytest.skip(message)
    env = os.environ
    return Sshd(env["PORTER_SSH_HOST"], int(env["PORTER_SSH_PORT"]), env["PORTER_SSH_USER"], env["PORTER_SSH_KEY"],
                env["PORTER_SSH_WRONG_KEY"], env["PORTER_SSH_KNOWN_HOSTS"])
