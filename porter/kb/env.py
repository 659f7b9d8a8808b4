"""Installed-version facts for `porter diagnose --env`.

Each `--env` value is either `package==version` or a JSON file: a smoke report
(`porter smoke --json` / `python -m vime.smoke`, whose `environment.packages` maps names to
versions), a bare environment-facts document (`packages` at the top), or a flat mapping.
"""

from __future__ import annotations

import re
from pathlib import Path

from porter import rxcache
from porter.errors import InputError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the diagnose start-up path
if TYPE_CHECKING:
    from typing import Any, Iterable


def normalise_package(name: str) -> str:
    """PEP 503 form, so torch_npu, torch-npu and Torch.NPU compare equal."""
    return re.sub(r"[-_.]+", "-", name).lower()


def version_facts(packages: Any, cann: Any) -> dict[str, str]:
    """{package: version} (PEP 503 names) plus the CANN version, from an environment report."""
    facts: dict[str, str] = {}
    for name, version in (packages or {}).items():
        if isinstance(version, str) and version:
            facts[normalise_package(name)] = version
    if isinstance(cann, dict) and isinstance(cann.get("version"), str):
        facts["cann"] = cann["version"]
    return facts


# Where the environment facts sit in the documents porter and vime write.
_ENV_PATHS = (("run", "report", "environment"), ("report", "environment"), ("environment",))


def _find_environment(doc: dict) -> dict:
    for path in _ENV_PATHS:
        node: Any = doc
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict):
            return node
    return doc  # an environment-facts document itself, or a flat {package: version}


def _from_mapping(doc: Any, source: str) -> dict[str, str]:
    if not isinstance(doc, dict):
        raise InputError(f"{source}: expected a JSON object", hint="pass a smoke report or {\"package\": \"version\"}")
    env = _find_environment(doc)
    packages = env.get("packages") if isinstance(env.get("packages"), dict) else None
    flat = packages if packages is not None else {k: v for k, v in env.items() if isinstance(v, str) and k != "schema"}
    facts = version_facts(flat, env.get("cann"))
    if not facts:
        raise InputError(
            f"{source}: no package versions found",
            hint="expected `porter smoke --json` / `python -m vime.smoke --json` output (environment.packages) or {\"torch_npu\": \"2.7.1\"}",
        )
    return facts


_PACKAGE_NAME = rxcache.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,100}[A-Za-z0-9])?$")


def _check_version(value: str, version: str) -> None:
    """A version `porter diagnose` can compare with applies_to (PEP 440; CANN's 8.0.RC1 style too)."""
    from packaging.version import InvalidVersion, Version

    try:
        Version(version)
    except InvalidVersion:
        if not re.match(r"^\d+(?:\.\d+){0,3}(?:\.?[A-Za-z]{1,8}\d{0,4}){0,2}$", version):
            raise InputError(f"--env {value!r}: {version!r} is not a version", hint="e.g. --env torch_npu==2.7.1 or --env cann==8.1.RC1") from None


def parse_env(values: Iterable[str]) -> dict[str, str]:
    facts: dict[str, str] = {}
    for value in values:
        value = value.strip()
        if "==" in value and not Path(value).exists():
            name, _, version = value.partition("==")
            if not name.strip() or not version.strip():
                raise InputError(f"--env {value!r}: expected package==version", hint="e.g. --env torch_npu==2.7.1")
            if not _PACKAGE_NAME.match(name.strip()):
                raise InputError(f"--env {value!r}: {name.strip()!r} is not a package name", hint="e.g. --env torch_npu==2.7.1")
            _check_version(value, version.strip())
            facts[normalise_package(name.strip())] = version.strip()
            continue
        path = Path(value)
        if not path.is_file():
            raise InputError(
                f"--env {value!r}: neither package==version nor an existing JSON file",
                hint="use --env torch_npu==2.7.1 or --env smoke-report.json",
            )
        import json

        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(f"--env {value}: not readable JSON: {exc}", hint="pass the file written by `porter smoke --json`") from exc
        facts.update(_from_mapping(doc, value))
    return facts
