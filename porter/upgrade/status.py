"""Data behind `porter status`: per plugin and upstream, baseline vs newest release vs head of the
default branch, the distance between them, and whether the plugin's default branch already
mentions the newest release in a version guard ("already adapted": no need to port)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import Version

from porter.config import PACKAGE_ROOT, PorterConfig
from porter.errors import EnvironmentProblem, InputError, PorterError
from porter.registry import ForkSpec, PluginSpec, UpstreamSpec, load_forks, load_registry
from porter.upgrade.sources import Sources, parse_release


@dataclass
class StatusRow:
    plugin: str
    upstream: str
    baseline: str | None = None
    newest_release: str | None = None
    releases_between: int | None = None
    head: str | None = None  # sha of the default branch
    head_branch: str = ""
    commits_between: int | None = None  # when a mirror is cached
    adapted: bool | None = None  # None: plugin sources not available locally
    adapted_evidence: str = ""
    error: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class StatusResult:
    rows: list[StatusRow]
    offline: bool
    notices: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"offline": self.offline, "rows": [r.to_dict() for r in self.rows], "notices": self.notices}


def guard_patterns(spec: PluginSpec, upstream: str, version: str) -> list[str]:
    """Source fragments that show a plugin already gates on `version` of `upstream`."""
    out: list[str] = []
    for fn, up in spec.guards.version_functions.items():
        if up == upstream:
            out += [f'{fn}("{version}")', f"{fn}('{version}')"]
    parsed = parse_release(version)
    if parsed is not None and len(parsed.release) >= 2:
        for name, up in spec.guards.version_names.items():
            if up == upstream:
                out.append(f"({parsed.release[0]}, {parsed.release[1]})")
    return out


def _grep_dir(root: Path, patterns: list[str]) -> str:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d != "__pycache__"]
        for name in filenames:
            if name.endswith(".py"):
                path = Path(dirpath) / name
                try:
                    text = path.read_text(encoding="utf-8", errors="replace")
                except OSError:
                    continue
                for pattern in patterns:
                    if pattern in text:
                        return f"{path.relative_to(root)}: {pattern}"
    return ""


def _grep_git(repo: Path, ref: str, patterns: list[str]) -> str | None:
    import git

    try:
        repo_obj = git.Repo(repo)
        args = ["-F", "-l"]
        for p in patterns:
            args += ["-e", p]
        out = repo_obj.git.grep(*args, ref, "--", "*.py")
        first = out.splitlines()[0] if out else ""
        return first.split(":", 1)[-1] if first else ""
    except git.GitCommandError as exc:
        if exc.status == 1:  # git grep: no match
            return ""
        return None
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return None


def adapted_check(spec: PluginSpec, fork: ForkSpec | None, sources: Sources, upstream: str, version: str) -> tuple[bool | None, str]:
    patterns = guard_patterns(spec, upstream, version)
    if not patterns:
        return None, "the plugin has no version-guard convention for this upstream"
    if spec.path:
        root = PACKAGE_ROOT / spec.path
        if root.is_dir():
            hit = _grep_dir(root, patterns)
            return bool(hit), hit or f"no guard mentions {version} in {spec.path}/"
    candidates: list[tuple[Path, str]] = []
    if fork is not None and fork.path.is_dir():
        candidates.append((fork.path, fork.default_branch))
    if spec.git and sources.mirror_path(spec.git).is_dir():
        candidates.append((sources.mirror_path(spec.git), spec.default_branch))
    for repo, branch in candidates:
        if not os.access(repo, os.R_OK | os.X_OK):
            raise EnvironmentProblem(f"fork path {repo} is not readable", hint="fix its permissions or its path in forks/forks.yaml")
        hit = _grep_git(repo, branch, patterns)
        if hit is not None:
            return bool(hit), (f"{branch}:{hit}" if hit else f"no guard mentions {version} on {branch}")
    return None, "plugin sources not available locally (clone the fork or mirror it)"


def release_tags(refs: dict[str, str], pattern: str) -> list[tuple[str, Version]]:
    """(tag, version) of the final-release tags that follow the upstream's tag pattern, oldest first."""
    prefix, _, suffix = pattern.partition("{version}")
    out = []
    for name in refs:
        tag = name.removeprefix("refs/tags/")
        if tag == name or not tag.startswith(prefix) or not tag.endswith(suffix):
            continue
        version = parse_release(tag[len(prefix):len(tag) - len(suffix)] if suffix else tag[len(prefix):])
        if version is not None and not version.is_prerelease:
            out.append((tag, version))
    return sorted(out, key=lambda item: item[1])


def _count_commits(sources: Sources, upstream: UpstreamSpec, baseline: str, head: str,
                   refs: dict[str, str] | None = None) -> int | None:
    mirror = sources.mirror_path(upstream.git) if upstream.git else None
    if mirror is None or not mirror.is_dir():
        return None
    import git

    # A baseline written as the tag itself (`v1`) is used as is; a version (`3.6.0`) through the pattern.
    start = baseline if f"refs/tags/{baseline}" in (refs or {}) else upstream.tag_for(baseline)
    try:
        out = git.Repo(mirror).git.rev_list("--count", f"{start}..{head}")
        return int(out.strip())
    except (git.GitCommandError, ValueError):
        return None


def status_row(sources: Sources, spec: PluginSpec, upstream: UpstreamSpec, fork: ForkSpec | None) -> StatusRow:
    row = StatusRow(plugin=spec.name, upstream=upstream.name, head_branch=upstream.default_branch)
    if fork is not None:
        row.baseline = fork.baseline.get(upstream.name)
    if row.baseline is None:
        pairs = [p.versions.get(upstream.name) for p in spec.compatibility if p.versions.get(upstream.name)]
        pairs = [p for p in pairs if parse_release(p) is not None]
        row.baseline = max(pairs, key=Version) if pairs else None
    failures: list[EnvironmentProblem] = []
    newest_version = ""  # the newest release as a version (a tag `v2` is version `2`)
    if upstream.pypi:
        try:
            releases = sources.pypi_releases(upstream.pypi)
        except EnvironmentProblem as exc:
            failures.append(exc)
            releases = []
            sources.notices.append(f"{upstream.name}: releases unknown ({exc.message})")
        if releases:
            row.newest_release = newest_version = releases[-1]
            base = parse_release(row.baseline) if row.baseline else None
            if base is not None:
                row.releases_between = sum(1 for r in releases if base < Version(r) <= Version(releases[-1]))
    if upstream.git:
        try:
            refs = sources.ls_remote(upstream.git)
        except EnvironmentProblem as exc:
            failures.append(exc)
            refs = {}
            sources.notices.append(f"{upstream.name}: head of {upstream.default_branch} unknown ({exc.message})")
        row.head = refs.get(f"refs/heads/{upstream.default_branch}") or refs.get("HEAD")
        if row.head and row.baseline:
            row.commits_between = _count_commits(sources, upstream, row.baseline, row.head, refs)
        tags = release_tags(refs, upstream.tag) if not upstream.pypi else []
        if tags:  # no PyPI project: the releases are the upstream's tags
            row.newest_release, newest_version = tags[-1][0], str(tags[-1][1])
            base = parse_release(row.baseline) if row.baseline else None
            if base is not None:
                row.releases_between = sum(1 for _tag, v in tags if v > base)
    if failures and row.newest_release is None and row.head is None:
        raise failures[0]  # neither source answered: nothing to show for this row
    if row.newest_release:
        row.adapted, row.adapted_evidence = adapted_check(spec, fork, sources, upstream.name, newest_version)
    return row


def collect_status(config: PorterConfig, name: str | None = None, all_upstreams: bool = False,
                   offline: bool | None = None) -> StatusResult:
    registry = load_registry(config.upstreams_file)
    forks = load_forks(config.forks_file)
    if name is None:
        plugins = list(registry.plugins.values())
    elif name in registry.plugins:
        plugins = [registry.plugins[name]]
    elif name in registry.upstreams:
        plugins = [p for p in registry.plugins.values() if name in p.upstreams]
    else:
        raise InputError(f"unknown plugin or upstream {name!r}",
                         hint=f"plugins: {', '.join(sorted(registry.plugins))}; upstreams: {', '.join(sorted(registry.upstreams))}")
    sources = Sources(Path(config.cache_dir), offline=config.offline if offline is None else offline)
    rows: list[StatusRow] = []
    failures: list[PorterError] = []
    for spec in plugins:
        fork = next((f for f in forks.values() if f.plugin == spec.name), None)
        names = list(spec.upstreams) if all_upstreams else spec.upstreams[:1]
        if name in registry.upstreams and name not in registry.plugins:
            names = [name]
        for upstream_name in names:
            try:
                rows.append(status_row(sources, spec, registry.upstream(upstream_name), fork))
            except PorterError as exc:
                failures.append(exc)
                rows.append(StatusRow(plugin=spec.name, upstream=upstream_name, error=exc.message))
    if failures and len(failures) == len(rows):
        raise failures[0]  # nothing could be answered: the first error says why (and sets the exit code)
    return StatusResult(rows, sources.degraded, list(dict.fromkeys(sources.notices)))


def render_status(result: StatusResult, console: Any) -> None:
    from rich.table import Table

    table = Table(title="upstream status" + (" (some answers from the cache: network unavailable or offline)" if result.offline else ""), title_justify="left")
    for col in ("plugin", "upstream", "baseline", "newest", "releases since", "head", "commits since", "adapted"):
        table.add_column(col, overflow="fold")
    for r in result.rows:
        if r.error:
            table.add_row(r.plugin, r.upstream, "[red]error[/]", r.error, "", "", "", "")
            continue
        adapted = {True: "[green]yes[/]", False: "[yellow]no[/]", None: "[dim]unknown[/]"}[r.adapted]
        table.add_row(r.plugin, r.upstream, r.baseline or "—", r.newest_release or "—",
                      "—" if r.releases_between is None else str(r.releases_between),
                      f"{r.head_branch}@{r.head[:10]}" if r.head else "—",
                      "—" if r.commits_between is None else str(r.commits_between), adapted)
    console.print(table)
    for notice in result.notices:
        console.print(f"[yellow]notice:[/] {notice}")
