"""Typed view of knowledge/upstreams.yaml (upstreams and plugins) and forks/forks.yaml (the forks
porter commits to, with their run ledger in forks/forks.ledger.jsonl beside it). Loading validates
and names the bad key; saving is atomic (temporary file + rename) and ledger appends are whole
lines under a lock, so a crash never leaves half a registry.
"""

from __future__ import annotations

import fnmatch
import json
import os
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from porter.errors import InputError
from porter.yamlio import load_yaml_file, write_yaml_atomic

FORKS_HEADER = (
    "# The forks porter commits to: where each lives, what it is validated on, which branches porter\n"
    "# produced there, and a ledger of runs (appended by porter through porter/registry.py).\n"
)


# ---------------------------------------------------------------- records


@dataclass(frozen=True)
class Ownership:
    """Which paths of a repository we may patch (C_PATCH) and which we only report (C_REPORT)."""

    patch: tuple[str, ...] = ()
    report: tuple[str, ...] = ()

    def decide(self, path: str) -> str | None:
        """'patch', 'report' or None; patch globs win because they are the narrower exception."""
        path = path.lstrip("./")
        if any(fnmatch.fnmatch(path, g) or fnmatch.fnmatch(path.rsplit("/", 1)[-1], g) for g in self.patch):
            return "patch"
        if any(fnmatch.fnmatch(path, g) for g in self.report):
            return "report"
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"patch": list(self.patch), "report": list(self.report)}


@dataclass(frozen=True)
class GuardSpec:
    version_functions: dict[str, str] = field(default_factory=dict)
    version_names: dict[str, str] = field(default_factory=dict)
    styles: tuple[str, ...] = ()
    helper_module: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"version_functions": self.version_functions, "version_names": self.version_names,
                "styles": list(self.styles), "helper_module": self.helper_module}


@dataclass(frozen=True)
class CompatPair:
    """A plugin release and the upstream versions it is validated with."""

    plugin: str
    versions: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        return {"plugin": self.plugin, **self.versions}


@dataclass(frozen=True)
class UpstreamSpec:
    name: str
    description: str = ""
    git: str = ""
    pypi: str = ""
    packages: tuple[str, ...] = ()
    default_branch: str = "main"
    tag: str = "v{version}"
    ownership: Ownership = field(default_factory=Ownership)
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def tag_for(self, version: str) -> str:
        return self.tag.format(version=version)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description, "git": self.git, "pypi": self.pypi,
                "packages": list(self.packages), "default_branch": self.default_branch, "tag": self.tag,
                "ownership": self.ownership.to_dict()}


@dataclass(frozen=True)
class PluginSpec:
    name: str
    kind: str = "plugin"  # plugin | fork
    description: str = ""
    git: str = ""
    pypi: str = ""
    path: str = ""  # a plugin living in this repository (vime)
    packages: tuple[str, ...] = ()
    upstreams: tuple[str, ...] = ()
    default_branch: str = "main"
    tag: str = "v{version}"
    plugin_root: str = ""  # sub-directory holding the plugin part (forks, transformers' integrations)
    guards: GuardSpec = field(default_factory=GuardSpec)
    shim_dir: str = ""
    ownership: Ownership = field(default_factory=Ownership)
    exclude: tuple[str, ...] = ()
    compatibility: tuple[CompatPair, ...] = ()
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def primary_upstream(self) -> str:
        return self.upstreams[0] if self.upstreams else ""

    def pairs_for(self, upstream: str, version: str) -> list[CompatPair]:
        return [p for p in self.compatibility if p.versions.get(upstream) == version]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "description": self.description, "git": self.git,
                "pypi": self.pypi, "path": self.path, "packages": list(self.packages), "upstreams": list(self.upstreams),
                "default_branch": self.default_branch, "plugin_root": self.plugin_root, "guards": self.guards.to_dict(),
                "shim_dir": self.shim_dir, "ownership": self.ownership.to_dict(), "exclude": list(self.exclude),
                "compatibility": [c.to_dict() for c in self.compatibility]}


@dataclass(frozen=True)
class Registry:
    upstreams: dict[str, UpstreamSpec]
    plugins: dict[str, PluginSpec]
    source: str = ""

    def upstream(self, name: str) -> UpstreamSpec:
        if name not in self.upstreams:
            raise InputError(f"unknown upstream {name!r}", hint=f"known upstreams: {', '.join(sorted(self.upstreams))} "
                             f"(from {self.source})")
        return self.upstreams[name]

    def plugin(self, name: str) -> PluginSpec:
        if name not in self.plugins:
            raise InputError(f"unknown plugin {name!r}", hint=f"known plugins: {', '.join(sorted(self.plugins))} "
                             f"(from {self.source})")
        return self.plugins[name]

    def upstream_of_package(self, package: str) -> str | None:
        for name, spec in self.upstreams.items():
            if package in spec.packages:
                return name
        return None


@dataclass(frozen=True)
class LedgerEntry:
    """One porter run against a fork: what was targeted and what came out of it."""

    slug: str
    branch: str
    upstream: str
    target: str
    outcome: str
    created: str  # ISO 8601 UTC
    baseline: str = ""
    commits: tuple[str, ...] = ()
    pr_material: str = ""
    run_id: str = ""
    notes: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["commits"] = list(self.commits)
        return {k: v for k, v in d.items() if v not in ("", [], None)}


@dataclass(frozen=True)
class ForkSpec:
    name: str
    plugin: str
    path: Path  # absolute clone path
    path_text: str  # as written in forks.yaml
    remote: str = ""
    upstream_remote: str = ""
    default_branch: str = "main"
    baseline: dict[str, str] = field(default_factory=dict)
    branches: tuple[str, ...] = ()
    ledger: tuple[LedgerEntry, ...] = ()
    history_text: str = ""  # `history:` as written: a clone with full history for `diagnose --history`
    history_path: Path | None = None  # the same, resolved

    @property
    def history(self) -> Path:
        """Where `porter diagnose --history NAME` reads the plugin's git history (default: the clone)."""
        return self.history_path or self.path

    def to_dict(self) -> dict[str, Any]:
        d = {"plugin": self.plugin, "remote": self.remote, "upstream_remote": self.upstream_remote,
             "path": self.path_text, "default_branch": self.default_branch, "baseline": dict(self.baseline),
             "branches": list(self.branches), "ledger": [e.to_dict() for e in self.ledger]}
        if self.history_text:
            d["history"] = self.history_text
        return d


# ---------------------------------------------------------------- loading


def _strs(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(f"{where}: expected a list of strings")
    return tuple(value)


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InputError(f"{where}: expected a mapping")
    return value


def _str_map(value: Any, where: str) -> dict[str, str]:
    return {str(k): str(v) for k, v in _mapping(value, where).items()}


def _ownership(value: Any, where: str) -> Ownership:
    data = _mapping(value, where)
    return Ownership(_strs(data.get("patch"), f"{where}.patch"), _strs(data.get("report"), f"{where}.report"))


def load_registry(path: Path) -> Registry:
    data = load_yaml_file(Path(path))
    source = str(path)
    if not isinstance(data, dict):
        raise InputError(f"{source}: expected a mapping with `upstreams` and `plugins`")
    upstreams: dict[str, UpstreamSpec] = {}
    for name, raw in _mapping(data.get("upstreams"), f"{source}: upstreams").items():
        where = f"{source}: upstreams.{name}"
        raw = _mapping(raw, where)
        upstreams[name] = UpstreamSpec(
            name=name,
            description=str(raw.get("description", "")),
            git=str(raw.get("git", "")),
            pypi=str(raw.get("pypi", "")),
            packages=_strs(raw.get("packages"), f"{where}.packages") or (name.replace("-", "_"),),
            default_branch=str(raw.get("default_branch", "main")),
            tag=str(raw.get("tag", "v{version}")),
            ownership=_ownership(raw.get("ownership"), f"{where}.ownership"),
            raw=raw,
        )
    plugins: dict[str, PluginSpec] = {}
    for name, raw in _mapping(data.get("plugins"), f"{source}: plugins").items():
        where = f"{source}: plugins.{name}"
        raw = _mapping(raw, where)
        ups = _strs(raw.get("upstreams"), f"{where}.upstreams")
        unknown = [u for u in ups if u not in upstreams]
        if unknown:
            raise InputError(f"{where}.upstreams names unknown upstream(s) {', '.join(unknown)}",
                             hint=f"define them under `upstreams:` (known: {', '.join(sorted(upstreams))})")
        guards = _mapping(raw.get("guards"), f"{where}.guards")
        pairs = []
        for i, pair in enumerate(raw.get("compatibility") or []):
            pair = _str_map(pair, f"{where}.compatibility[{i}]")
            if "plugin" not in pair:
                raise InputError(f"{where}.compatibility[{i}]: missing `plugin` version")
            plugin_version = pair.pop("plugin")
            pairs.append(CompatPair(plugin_version, pair))
        plugins[name] = PluginSpec(
            name=name,
            kind=str(raw.get("kind", "plugin")),
            description=str(raw.get("description", "")),
            git=str(raw.get("git", "")),
            pypi=str(raw.get("pypi", "")),
            path=str(raw.get("path", "")),
            packages=_strs(raw.get("packages"), f"{where}.packages") or (name.replace("-", "_"),),
            upstreams=ups,
            default_branch=str(raw.get("default_branch", "main")),
            tag=str(raw.get("tag", "v{version}")),
            plugin_root=str(raw.get("plugin_root", "")),
            guards=GuardSpec(
                version_functions=_str_map(guards.get("version_functions"), f"{where}.guards.version_functions"),
                version_names=_str_map(guards.get("version_names"), f"{where}.guards.version_names"),
                styles=_strs(guards.get("styles"), f"{where}.guards.styles"),
                helper_module=str(guards.get("helper_module", "")),
            ),
            shim_dir=str(raw.get("shim_dir", "")),
            ownership=_ownership(raw.get("ownership"), f"{where}.ownership"),
            exclude=_strs(raw.get("exclude"), f"{where}.exclude"),
            compatibility=tuple(pairs),
            raw=raw,
        )
    return Registry(upstreams, plugins, source)


def _ledger_entry(raw: Any, where: str) -> LedgerEntry:
    raw = _mapping(raw, where)
    missing = [k for k in ("slug", "branch", "upstream", "target", "outcome", "created") if k not in raw]
    if missing:
        raise InputError(f"{where}: ledger entry lacks {', '.join(missing)}")
    return LedgerEntry(
        slug=str(raw["slug"]), branch=str(raw["branch"]), upstream=str(raw["upstream"]), target=str(raw["target"]),
        outcome=str(raw["outcome"]), created=str(raw["created"]), baseline=str(raw.get("baseline", "")),
        commits=_strs(raw.get("commits"), f"{where}.commits"), pr_material=str(raw.get("pr_material", "")),
        run_id=str(raw.get("run_id", "")), notes=str(raw.get("notes", "")),
    )


def load_forks(path: Path) -> dict[str, ForkSpec]:
    """Forks by name; clone paths are resolved relative to the directory above forks/forks.yaml's folder
    (the project root), as written in the file."""
    path = Path(path)
    if not path.exists():
        return {}
    data = load_yaml_file(path) or {}
    source = str(path)
    if not isinstance(data, dict):
        raise InputError(f"{source}: expected a mapping with `forks`")
    root = path.resolve().parent.parent if path.parent.name == "forks" else path.resolve().parent
    forks: dict[str, ForkSpec] = {}
    for name, raw in _mapping(data.get("forks"), f"{source}: forks").items():
        where = f"{source}: forks.{name}"
        raw = _mapping(raw, where)
        path_text = str(raw.get("path") or f"forks/{name}")
        clone = Path(path_text).expanduser()
        forks[name] = ForkSpec(
            name=name,
            plugin=str(raw.get("plugin", name)),
            path=clone if clone.is_absolute() else (root / clone).resolve(),
            path_text=path_text,
            remote=str(raw.get("remote", "")),
            upstream_remote=str(raw.get("upstream_remote", "")),
            default_branch=str(raw.get("default_branch", "main")),
            baseline=_str_map(raw.get("baseline"), f"{where}.baseline"),
            branches=_strs(raw.get("branches"), f"{where}.branches"),
            ledger=tuple(_ledger_entry(e, f"{where}.ledger[{i}]") for i, e in enumerate(raw.get("ledger") or [])),
            history_text=str(raw.get("history") or ""),
            history_path=_history_path(raw.get("history"), root, f"{where}.history"),
        )
    return _read_ledger_file(path, forks)


def ledger_path(forks_file: Path) -> Path:
    """The run ledger beside forks.yaml (forks/forks.ledger.jsonl): one JSON object per run.

    A separate append-only file rather than a `ledger:` list rewritten inside forks.yaml: porter
    never rewrites the user's forks.yaml, so its comments, key order, unknown keys and file mode
    stay exactly as written (no YAML round-trip, and no ruamel.yaml dependency for the CLI), and
    concurrent runs append whole lines under an exclusive lock instead of racing a read-modify-write."""
    forks_file = Path(forks_file)
    return forks_file.with_name(f"{forks_file.stem}.ledger.jsonl")


def _read_ledger_file(forks_file: Path, forks: dict[str, ForkSpec]) -> dict[str, ForkSpec]:
    path = ledger_path(forks_file)
    if not path.is_file():
        return forks
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}: not a JSON ledger line ({exc.msg})",
                             hint="porter appends one JSON object per line; fix or delete that line") from exc
        raw = _mapping(raw, where)
        fork = str(raw.pop("fork", ""))
        if fork not in forks:
            continue  # a fork removed from forks.yaml keeps its history in the file
        entry = _ledger_entry(raw, where)
        spec = forks[fork]
        branches = spec.branches if not entry.branch or entry.branch in spec.branches else (*spec.branches, entry.branch)
        forks[fork] = replace(spec, ledger=(*spec.ledger, entry), branches=branches)
    return forks


def _history_path(value: Any, root: Path, where: str) -> Path | None:
    """`history:` is a path (relative to the project root) or absent."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise InputError(f"{where}: expected a path to a git clone", hint="e.g. history: forks/vllm-ascend")
    p = Path(value).expanduser()
    return p if p.is_absolute() else (root / p).resolve()


def save_forks(path: Path, forks: dict[str, ForkSpec]) -> None:
    write_yaml_atomic(Path(path), {"schema": 1, "forks": {n: f.to_dict() for n, f in forks.items()}}, header=FORKS_HEADER)


def append_ledger(path: Path, fork: str, entry: LedgerEntry) -> ForkSpec:
    """Add `entry` to a fork's ledger: one line appended to ledger_path(path) under an exclusive
    lock (forks.yaml itself is only read). Returns the fork with its ledger as now recorded."""
    import fcntl

    forks = load_forks(path)
    if fork not in forks:
        raise InputError(f"unknown fork {fork!r} in {path}", hint=f"known forks: {', '.join(sorted(forks)) or 'none'}")
    line = json.dumps({"fork": fork, **entry.to_dict()}, sort_keys=True) + "\n"
    target = ledger_path(path)
    fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # one writer at a time; a line never interleaves with another
        os.write(fd, line.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)  # releases the lock
    return load_forks(path)[fork]
