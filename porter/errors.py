"""Exit codes and the errors a user can act on.

Every command exits with one of the documented codes; an error carries what happened
and what to do about it, and the CLI layer renders it (plain or JSON).
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    OK = 0
    FINDINGS = 1  # findings reported, checks failed, or diagnosis unknown
    USAGE = 2  # bad option, malformed or unusable input
    ENVIRONMENT = 3  # host, network, git, tool or filesystem problem
    INTERNAL = 4  # a bug in porter: please report it with the traceback
    INTERRUPTED = 130  # Ctrl-C / SIGINT; nothing is left half-written


class PorterError(Exception):
    """An error the user can act on. `hint` says what to do."""

    exit_code: ExitCode = ExitCode.ENVIRONMENT
    kind: str = "error"

    def __init__(self, message: str, hint: str | None = None, *, details: dict | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.details = details or {}

    def to_dict(self) -> dict:
        out = {"kind": self.kind, "message": self.message, "exit_code": int(self.exit_code)}
        if self.hint:
            out["hint"] = self.hint
        if self.details:
            out["details"] = self.details
        return out


class UsageError(PorterError):
    """Bad command-line usage or unusable input (a file, a version, a ref)."""

    exit_code = ExitCode.USAGE
    kind = "usage_error"


class InputError(UsageError):
    """Input that cannot be used: malformed YAML, unknown name, corrupt archive."""

    kind = "input_error"


class EnvironmentProblem(PorterError):
    """The environment failed us: network, git, a host, a missing tool."""

    exit_code = ExitCode.ENVIRONMENT
    kind = "environment_error"


class Interrupted(PorterError):
    """The user interrupted the command (Ctrl-C)."""

    exit_code = ExitCode.INTERRUPTED
    kind = "interrupted"
