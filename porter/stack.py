"""The stack file (`vime/stack.yaml`): which upstream releases and which fork branches make up
the stack that `porter smoke` verifies. `porter apply` writes it; smoke ships it and reports it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from porter.errors import InputError
from porter.slug import port_branch

STACK_SCHEMA = "porter.stack/1"
BRANCH_PREFIX = "ascend-port/"
# Longest first: a slug is `<upstream>-<target>` and some upstream names contain hyphens.
KNOWN_UPSTREAMS = ("vllm-ascend", "torch-npu", "triton-ascend", "transformers", "triton", "torch", "vllm")
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]*)\s*==\s*(\S+)$")
_SHA = re.compile(r"^[0-9a-f]{7,40}$")


def default_stack_path() -> Path:
    """vime/stack.yaml of the checkout porter runs from; installed from a wheel, the user's own
    copy under the XDG data directory (seeded from the bundled one), never site-packages."""
    import vime.results  # a module file: `vime` itself may load as a namespace in editable installs

    from porter.config import is_checkout, seed_user_file, xdg_dir

    bundled = Path(vime.results.__file__).resolve().parent / "stack.yaml"
    if is_checkout():
        return bundled
    user = xdg_dir("XDG_DATA_HOME", ".local/share") / "porter" / "stack.yaml"
    seed_user_file(user, bundled, "vime stack file")
    return user


@dataclass(frozen=True)
class ForkPin:
    plugin: str
    branch: str
    commit: str
    upstream: str = ""
    target: str = ""
    repo: str = ""
    applied: str = ""

    def to_dict(self) -> dict[str, str]:
        return {k: v for k, v in self.__dict__.items() if k != "plugin" and v}


def empty_stack() -> dict[str, Any]:
    return {"schema": STACK_SCHEMA, "runtime": "vime", "upstreams": {}, "forks": {}, "ship": []}


def validate_stack(data: Any, source: str) -> dict[str, Any]:
    if data is None:
        return empty_stack()
    if not isinstance(data, dict):
        raise InputError(f"{source}: a stack file is a mapping (schema, upstreams, forks)")
    schema = data.get("schema", STACK_SCHEMA)
    if schema != STACK_SCHEMA:
        raise InputError(f"{source}: unsupported stack schema {schema!r}", hint=f"expected {STACK_SCHEMA}")
    out = empty_stack()
    out.update({k: v for k, v in data.items() if k in ("runtime", "description")})
    upstreams = data.get("upstreams") or {}
    if not isinstance(upstreams, dict):
        raise InputError(f"{source}: `upstreams` maps an upstream name to {{version: ...}}")
    for name, pin in upstreams.items():
        version = pin.get("version") if isinstance(pin, dict) else pin
        if not isinstance(version, (str, int, float)) or not str(version).strip():
            raise InputError(f"{source}: upstream {name!r} needs a version")
        out["upstreams"][str(name)] = {"version": str(version)}
    forks = data.get("forks") or {}
    if not isinstance(forks, dict):
        raise InputError(f"{source}: `forks` maps a plugin name to {{branch, commit, ...}}")
    for plugin, pin in forks.items():
        if not isinstance(pin, dict) or not str(pin.get("branch", "")).startswith(BRANCH_PREFIX):
            raise InputError(f"{source}: fork {plugin!r} needs `branch: {BRANCH_PREFIX}<slug>`")
        if not _SHA.match(str(pin.get("commit", ""))):
            raise InputError(f"{source}: fork {plugin!r} needs `commit` (a git commit id)")
        out["forks"][str(plugin)] = {str(k): str(v) for k, v in pin.items()}
    ship = data.get("ship") or []
    if not isinstance(ship, list) or not all(isinstance(s, str) and not s.startswith("/") and ".." not in s for s in ship):
        raise InputError(f"{source}: `ship` is a list of relative directories shipped with the runtime")
    out["ship"] = list(ship)
    return out


def load_stack(path: Path | None = None) -> dict[str, Any]:
    from porter.yamlio import load_yaml_file

    default = default_stack_path()
    path = Path(path) if path else default
    if not path.is_file():
        if path == default:
            return empty_stack()
        raise InputError(f"stack file {path} does not exist", hint="check --stack, or create one with `porter apply`")
    return validate_stack(load_yaml_file(path), str(path))


def ship_sources(stack: dict[str, Any], stack_path: Path | None) -> list[tuple[Path, str]]:
    """The directories a stack ships next to the runtime, as (source, top-level name on the host).
    Paths are relative to the stack file's directory (the repository root for vime/stack.yaml);
    each lands under its own name, importable from the run directory."""
    from porter.config import is_checkout

    default = default_stack_path()
    # vime/stack.yaml's paths are relative to the repository root; any other stack file's to its directory
    base = Path(stack_path).resolve().parent if stack_path else (default.parent.parent if is_checkout() else default.parent)
    out: list[tuple[Path, str]] = []
    for rel in stack.get("ship", []):
        source = (base / rel).resolve()
        name = source.name
        if not source.is_dir():
            raise InputError(f"stack ships {rel!r} but {source} is not a directory", hint="fix `ship:` in the stack file")
        if name in ("vime", "porter-stack.json") or name in {n for _, n in out}:
            raise InputError(f"stack ships two things named {name!r} (or one named like the runtime)",
                             hint="each shipped directory needs its own name")
        out.append((source, name))
    return out


def save_stack(path: Path, stack: dict[str, Any]) -> None:
    import os

    from porter.fsutil import shared_file_mode
    from porter.yamlio import write_yaml_atomic

    header = "# The stack `porter smoke` verifies. Written by `porter apply`; edit with care.\n"
    try:
        mode = shared_file_mode(path)  # a tracked, shared file: keep its permissions
        write_yaml_atomic(path, validate_stack(stack, str(path)), header=header)
        os.chmod(path, mode)
    except OSError as exc:
        raise InputError(f"cannot write the stack file {path}: {exc.strerror or exc}",
                         hint="pass --stack a file path in a writable directory") from None


def split_slug(slug: str) -> tuple[str, str]:
    """`vllm-main` -> (vllm, main); `torch-npu-v2.9.0` -> (torch-npu, v2.9.0)."""
    for upstream in KNOWN_UPSTREAMS:
        if slug.startswith(upstream + "-") and len(slug) > len(upstream) + 1:
            return upstream, slug[len(upstream) + 1:]
    head, _, tail = slug.partition("-")
    return head, tail


def parse_pin(spec: str) -> tuple[str, str] | None:
    """`transformers==5.4.0` -> (transformers, 5.4.0); None when `spec` is not a version pin."""
    match = _PIN.match(spec.strip())
    if not match:
        return None
    from packaging.version import InvalidVersion, Version

    try:
        Version(match.group(2))
    except InvalidVersion:
        raise InputError(f"{match.group(2)!r} is not a PEP 440 version", hint="for example torch==2.12.0rc3") from None
    return match.group(1).lower(), match.group(2)


def branch_of(spec: str) -> str:
    spec = spec.strip()
    return spec if spec.startswith(BRANCH_PREFIX) else port_branch(spec)


def now_utc() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def apply_pin(stack: dict[str, Any], upstream: str, version: str) -> dict[str, Any]:
    out = validate_stack(stack, "stack")
    out["upstreams"][upstream] = {"version": version}
    return out


def apply_fork(stack: dict[str, Any], pin: ForkPin) -> dict[str, Any]:
    out = validate_stack(stack, "stack")
    out["forks"][pin.plugin] = pin.to_dict()
    return out


def summary(stack: dict[str, Any]) -> list[str]:
    """One line per pin, for tables and the smoke header."""
    lines = [f"{name}=={pin['version']}" for name, pin in sorted((stack.get("upstreams") or {}).items())]
    lines += [
        f"{plugin} @ {pin.get('branch')} {str(pin.get('commit', ''))[:12]}"
        for plugin, pin in sorted((stack.get("forks") or {}).items())
    ]
    return lines
