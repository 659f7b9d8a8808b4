"""The user's release line: the branch that carries fixes onto the installed version's release.

A user on v0.23.0rc1 gets the fixes of `releases/v0.23.0` in the next patch release; a fix that only
landed on main reaches them a minor release later, if at all. The commits after the installed tag on
the branch whose version is the tag's (major.minor.patch, `x` a wildcard) are that line.
I/O (git) in release_line_commits; the matching is pure.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Iterable

from porter.kb.history import mine

_TAG_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?")
_BRANCH_VERSION = re.compile(r"(?:^|[/_-])v?(\d+)\.(\d+|x)(?:\.(\d+|x))?")


def line_branch(tag: str, branches: Iterable[str]) -> str | None:
    """The release branch whose version is the tag's (`releases/v0.23.0` for `v0.23.0rc1`,
    `v0.9.1-dev` for `v0.9.1`, `release/3.2.x` for `v3.2.4`), or None."""
    m = _TAG_VERSION.match(tag)
    if not m:
        return None
    version = (m.group(1), m.group(2), m.group(3) or "0")
    for name in branches:
        if not mine.is_release_branch(name):
            continue
        b = _BRANCH_VERSION.search(name.rsplit("/", 1)[-1]) or _BRANCH_VERSION.search(name)
        if not b:
            continue
        parts = (b.group(1), b.group(2), b.group(3) or "x")
        if all(p == "x" or p == v for p, v in zip(parts, version)):
            return name
    return None


@functools.lru_cache(maxsize=64)
def release_line_commits(repo: Path, tag: str) -> tuple[str | None, frozenset[str]]:
    """(branch, shas after `tag` on it) of the installed version's release line; (None, empty) when the
    repository has no such branch or git fails."""
    refs = mine._git(repo, ["for-each-ref", "--format=%(refname:short)", "refs/heads"], 60)
    if not refs.ok:
        return None, frozenset()
    branch = line_branch(tag, refs.stdout.split())
    if branch is None:
        return None, frozenset()
    shas = mine._git(repo, ["rev-list", f"{tag}^{{commit}}..refs/heads/{branch}"], 60)
    return (branch, frozenset(shas.stdout.split())) if shas.ok else (None, frozenset())
