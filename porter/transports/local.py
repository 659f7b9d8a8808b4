"""The `local` transport: bash on this machine."""

from __future__ import annotations

from porter.transports.base import Transport


class LocalTransport(Transport):
    def host_argv(self, script: str) -> list[str]:
        return ["bash", "-c", script]

    def describe(self) -> str:
        return "local"
