"""Configuration: `porter.yaml` in the project (or `[tool.porter]` in its pyproject.toml),
then the user file `$XDG_CONFIG_HOME/porter/config.yaml`, then built-in defaults.

The project is found by walking up from the working directory. Relative paths in a config
file are relative to that file's directory.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from porter import rxcache
from porter.errors import InputError
from porter.record import field, record
from porter.yamlio import load_yaml_file

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing on the diagnose start-up path
if TYPE_CHECKING:
    from typing import Any

# The repository this package was installed from (editable installs): bundled knowledge lives here.
PACKAGE_ROOT = Path(__file__).resolve().parent.parent


def is_checkout() -> bool:
    """porter runs from a clone of its repository (editable install or PYTHONPATH), not a wheel."""
    return (PACKAGE_ROOT / "knowledge").is_dir() and (PACKAGE_ROOT / "pyproject.toml").is_file()


def bundled_root() -> Path:
    """Where the read-only bundled data lies: the checkout itself, or the wheel's package data
    (`porter/_bundled/`: knowledge/, forks.yaml, read through importlib.resources)."""
    if is_checkout():
        return PACKAGE_ROOT
    from importlib.resources import files

    return Path(str(files("porter") / "_bundled"))


def seed_user_file(path: Path, seed: Path, what: str) -> None:
    """User-owned state outside a project (fork registry and ledger, stack pins) starts as a copy
    of the bundled one, created on first use, with a line on stderr saying so."""
    import shutil
    import sys

    if path.exists() or not seed.is_file():
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(seed, path)
    except OSError:
        return  # reading falls back to the bundled copy's absence message; writing names the path
    sys.stderr.write(f"porter: created {path} from the bundled {what} (your copy from now on; "
                     "run porter inside a project with porter.yaml to keep it there instead)\n")

KNOWN_KEYS = {
    "knowledge_dir",
    "cache_dir",
    "runs_dir",
    "forks_file",
    "upstreams_file",
    "hosts",
    "offline",
    "diagnose",
}


def xdg_dir(var: str, fallback: str) -> Path:
    base = os.environ.get(var)
    return Path(base) if base else Path.home() / fallback


@record(frozen=True)
class PorterConfig:
    project_root: Path | None
    knowledge_dir: Path
    cache_dir: Path
    runs_dir: Path
    forks_file: Path
    upstreams_file: Path
    user_config_dir: Path
    offline: bool = False
    hosts: dict[str, Any] = field(default_factory=dict)
    raw: dict[str, Any] = field(default_factory=dict)
    sources: tuple[str, ...] = ()
    # hosts defined by a project's porter.yaml found by searching upward (a cloned repository's
    # file, not one the user named with --config): name -> that file
    project_hosts: dict[str, str] = field(default_factory=dict)
    trust_project: bool = False  # --trust-project: run the project's host setup lines this time

    @property
    def patterns_dir(self) -> Path:
        return self.knowledge_dir / "patterns"

    def to_dict(self) -> dict[str, Any]:
        return {
            "project_root": str(self.project_root) if self.project_root else None,
            "knowledge_dir": str(self.knowledge_dir),
            "cache_dir": str(self.cache_dir),
            "runs_dir": str(self.runs_dir),
            "forks_file": str(self.forks_file),
            "upstreams_file": str(self.upstreams_file),
            "user_config_dir": str(self.user_config_dir),
            "offline": self.offline,
            "hosts": sorted(self.hosts),
            "sources": list(self.sources),
        }


_TOOL_KEY = r"""(?:tool|"tool"|'tool')"""
# every way TOML can define tool.porter: a [tool] or [tool.porter...] header (or [[...]]), or a
# `tool = {...}` / `tool.porter... =` key (searched on every line, inside a table or not)
_TOOL_PORTER = rxcache.compile(
    rf"""^[ \t]*(?:\[\[?[ \t]*{_TOOL_KEY}[ \t]*(?:\]|\.[ \t]*(?:porter|"porter"|'porter')[ \t]*[\].])|{_TOOL_KEY}[ \t]*[.=])""",
    re.M,
)


def may_define_tool_porter(text: str) -> bool:
    """False only when `text` (a pyproject.toml) cannot define a [tool.porter] table; keys
    written with \\u escapes are not recognised, so their presence answers True."""
    return "\\u" in text or "\\U" in text or _TOOL_PORTER.search(text) is not None


def _tool_porter_section(pyproject: Path, text: str) -> Any:
    """`[tool.porter]` of `text` (None when absent). Importing tomllib and parsing a pyproject
    costs more than the rest of a warm `porter diagnose`'s start-up, so the section is memoised
    in the user cache, keyed by the file's content (an edit is a new key). marshal, not JSON:
    `import json` was ~3 % of a warm text-mode diagnose, which needs json for nothing else."""
    from porter import marshalmemo
    from porter.cachehome import cache_home

    memo = Path(cache_home()) / "config" / f"pyproject-{marshalmemo.content_tag(text.encode('utf-8'))}.marshal"
    found = marshalmemo.load(memo)
    if type(found) is dict and found.get("memo") == 1 and "section" in found:
        return found["section"]
    import tomllib

    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{pyproject}: invalid TOML: {exc}") from exc
    section = doc.get("tool", {}).get("porter")
    marshalmemo.store(memo, {"memo": 1, "section": section})  # not for TOML dates and times (marshal has none)
    return section


def find_project_root(start: Path) -> tuple[Path | None, dict[str, Any], str | None]:
    """Walk up from `start` to the first porter.yaml or pyproject.toml with [tool.porter]."""
    start = start.resolve()
    for directory in (start, *start.parents):
        candidate = directory / "porter.yaml"
        if candidate.is_file():
            data = load_yaml_file(candidate) or {}
            if not isinstance(data, dict):
                raise InputError(f"{candidate}: expected a mapping at the top level")
            return directory, data, str(candidate)
        pyproject = directory / "pyproject.toml"
        if pyproject.is_file():
            try:
                text = pyproject.read_text(encoding="utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(f"{pyproject}: invalid TOML: {exc}") from exc
            if not may_define_tool_porter(text):
                continue  # tomllib costs ~15 ms to import: parse only a file that can hold [tool.porter]
            section = _tool_porter_section(pyproject, text)
            if section is not None:
                if not isinstance(section, dict):
                    raise InputError(f"{pyproject}: [tool.porter] must be a table")
                return directory, section, f"{pyproject} [tool.porter]"
    return None, {}, None


def _resolve(base: Path, value: Any, key: str, source: str) -> Path:
    if not isinstance(value, str) or not value:
        raise InputError(f"{source}: `{key}` must be a non-empty path string")
    path = Path(os.path.expandvars(os.path.expanduser(value)))
    return path if path.is_absolute() else (base / path)


def load_config(cwd: Path | None = None, explicit: Path | None = None) -> PorterConfig:
    cwd = Path.cwd() if cwd is None else cwd
    config_home = xdg_dir("XDG_CONFIG_HOME", ".config") / "porter"
    cache_home = xdg_dir("XDG_CACHE_HOME", ".cache") / "porter"
    data_home = xdg_dir("XDG_DATA_HOME", ".local/share") / "porter"

    layers: list[tuple[Path, dict[str, Any], str]] = []
    found_source: str | None = None  # the project file found by searching (untrusted by default)
    user_file = config_home / "config.yaml"
    if user_file.is_file():
        data = load_yaml_file(user_file) or {}
        if not isinstance(data, dict):
            raise InputError(f"{user_file}: expected a mapping at the top level")
        layers.append((config_home, data, str(user_file)))

    project_root: Path | None
    if explicit is not None:
        explicit = explicit.expanduser()
        if not explicit.is_file():
            raise InputError(f"config file {explicit} does not exist", hint="check the --config path")
        data = load_yaml_file(explicit) or {}
        if not isinstance(data, dict):
            raise InputError(f"{explicit}: expected a mapping at the top level")
        project_root = explicit.resolve().parent
        layers.append((project_root, data, str(explicit)))
    else:
        project_root, data, source = find_project_root(cwd)
        if source and project_root is not None:
            layers.append((project_root, data, source))
            found_source = source

    merged: dict[str, Any] = {}
    paths: dict[str, Path] = {}
    hosts: dict[str, Any] = {}
    project_hosts: dict[str, str] = {}
    for base, data, source in layers:
        unknown = sorted(set(data) - KNOWN_KEYS)
        if unknown:
            raise InputError(
                f"{source}: unknown key(s) {', '.join(unknown)}",
                hint=f"known keys: {', '.join(sorted(KNOWN_KEYS))}",
            )
        for key in ("knowledge_dir", "cache_dir", "runs_dir", "forks_file", "upstreams_file"):
            if key in data:
                paths[key] = _resolve(base, data[key], key, source)
        if "hosts" in data:
            if not isinstance(data["hosts"], dict):
                raise InputError(f"{source}: `hosts` must be a mapping of host name to profile")
            hosts.update(data["hosts"])
            if source == found_source:
                project_hosts.update({str(name): source for name in data["hosts"]})
        merged.update(data)

    # Bundled data: the project's own knowledge/ when it has one, else the checkout's or the
    # wheel's. User-owned state (fork registry + ledger, stack pins, runs) lives in the project,
    # in the checkout porter runs from, or under the XDG data directory.
    project_has_data = bool(project_root and (project_root / "knowledge").is_dir())
    data_root = project_root if project_has_data else bundled_root()
    knowledge_dir = paths.get("knowledge_dir", data_root / "knowledge")
    if project_has_data or is_checkout():
        state_root = project_root if project_has_data else PACKAGE_ROOT
        forks_default = state_root / "forks" / "forks.yaml"
    else:
        forks_default = data_home / "forks.yaml"
        if "forks_file" not in paths:
            seed_user_file(forks_default, bundled_root() / "forks.yaml", "fork registry")
    env_cache = os.environ.get("PORTER_CACHE_DIR")
    return PorterConfig(
        project_root=project_root,
        knowledge_dir=knowledge_dir,
        cache_dir=Path(env_cache) if env_cache else paths.get("cache_dir", cache_home),
        runs_dir=paths.get("runs_dir", (project_root / "runs") if project_root else data_home / "runs"),
        forks_file=paths.get("forks_file", forks_default),
        upstreams_file=paths.get("upstreams_file", knowledge_dir / "upstreams.yaml"),
        user_config_dir=config_home,
        offline=bool(merged.get("offline", False)) or os.environ.get("PORTER_OFFLINE") == "1",
        hosts=hosts,
        raw=merged,
        sources=tuple(s for _, _, s in layers),
        project_hosts=project_hosts,
    )
