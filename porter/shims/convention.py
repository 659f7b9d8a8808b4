"""How a fork already writes its compat code, so porter's shims look like the maintainers' own.

Detected from the tree: an existing `<pkg>/compat/` or `<pkg>/_compat/` package (torch_npu style,
with `COMPAT(>= X.Y)` / `CAN REMOVE` markers), and a version-guard function such as
`vllm_ascend.utils.vllm_version_is`. A registry hint (knowledge/upstreams.yaml) wins over detection.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from porter.errors import InputError

_GUARD_DEF = re.compile(r"^def (\w+_version_is|is_\w+_version_\w*)\s*\(", re.MULTILINE)


@dataclass(frozen=True)
class Convention:
    package: str  # top-level import package of the plugin, e.g. vllm_ascend
    compat_dir: str  # where shim modules go, relative to the fork root
    style: str  # "compat_module" | "torch_compat" (COMPAT markers) | "version_guard" (the fork's gate picks the path)
    guard_function: str | None = None  # dotted, e.g. vllm_ascend.utils.vllm_version_is
    test_dir: str = "tests/porter_compat"
    import_root: str = ""  # directory that is on sys.path (src/ layouts), relative to the fork root

    def module_of(self, path: str) -> str:
        """Import name of a fork file (`vllm_ascend/compat/x.py` -> `vllm_ascend.compat.x`)."""
        rel = path[:-3] if path.endswith(".py") else path
        if self.import_root and rel.startswith(self.import_root + "/"):
            rel = rel[len(self.import_root) + 1:]
        return rel.replace("/", ".")

    @property
    def compat_package(self) -> str:
        return self.module_of(self.compat_dir)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"compat_package": self.compat_package}


def find_package(root: Path, hint: str | None = None) -> str:
    """The plugin's top-level package: the hint, else the only package directory at the root."""
    if hint:
        if not (root / hint / "__init__.py").is_file():
            raise InputError(
                f"{root}: package {hint!r} not found (no {hint}/__init__.py)",
                hint="check the plugin's package name in forks/forks.yaml",
            )
        return hint
    candidates = sorted(
        p.name
        for p in root.iterdir()
        if p.is_dir() and (p / "__init__.py").is_file() and p.name not in {"tests", "test", "docs", "examples", "benchmarks"}
    )
    for src in (root / "src",):
        if src.is_dir():
            candidates += sorted(f"src/{p.name}" for p in src.iterdir() if (p / "__init__.py").is_file())
    if len(candidates) != 1:
        found = ", ".join(candidates) or "none"
        raise InputError(
            f"{root}: cannot tell the plugin's package (found: {found})",
            hint="name it with `package:` in the fork's forks.yaml entry",
        )
    return candidates[0]


def detect(root: Path, package: str | None = None, hint: dict[str, Any] | None = None) -> Convention:
    hint = hint or {}
    pkg_dir = find_package(root, package or hint.get("package"))
    import_name = pkg_dir.split("/")[-1]
    compat_dir = hint.get("shim_dir")
    style = hint.get("shim_style")
    if not compat_dir:
        if (root / pkg_dir / "_compat").is_dir():
            compat_dir, style = f"{pkg_dir}/_compat", style or "torch_compat"
        else:
            compat_dir = f"{pkg_dir}/compat"
    style = style or "compat_module"
    guard = hint.get("guard_function") or _find_guard(root / pkg_dir, import_name)
    if style == "version_guard" and not guard:
        raise InputError(f"{root}: shim_style version_guard needs the fork's guard function",
                         hint="name it with guards.version_functions + guards.helper_module in the registry")
    import_root = pkg_dir.rpartition("/")[0]
    return Convention(package=import_name, compat_dir=compat_dir.strip("/"), style=style, guard_function=guard,
                      import_root=import_root)


def _find_guard(pkg_root: Path, package: str) -> str | None:
    for name in ("utils.py", "version.py", "_compat/version.py", "compat/version.py"):
        path = pkg_root / name
        if path.is_file():
            match = _GUARD_DEF.search(path.read_text(encoding="utf-8", errors="replace"))
            if match:
                module = f"{package}.{name[:-3].replace('/', '.')}"
                return f"{module}.{match.group(1)}"
    return None
