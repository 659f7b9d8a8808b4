"""The issue a report came from, when the user names it (`porter diagnose --issue N`): a commit whose
message says it fixes that issue (`Fixes #N`, `close #N`, `Fix https://github.com/o/r/issues/N`) is
the maintainers' own answer. The index keeps only the head of each message (the reference often
stands further down, after the PR template's sections), so the full messages are searched with git."""

from __future__ import annotations

import functools
import re
from pathlib import Path

# the verbs GitHub itself links an issue with, and their variants in the wild (`Resolves`, `fixed`, `Closes:`)
_VERB = r"(?:fix(?:e[sd])?|close[sd]?|resolve[sd]?)"
_SEP = "\x1e"


@functools.lru_cache(maxsize=64)
def _pattern(number: int, repos: tuple[str, ...]) -> re.Pattern[str]:
    # a URL names its repository: another project's issue of the same number is not this one (a moved
    # repository's old owner is fine: github.com/volcengine/verl/issues/N is verl-project/verl's)
    where = "|".join(re.escape(r) for r in repos) if repos else r"[\w.-]+"
    target = rf"(?:#|https?://github\.com/[\w.-]+/(?:{where})/issues/){number}(?![\w])"
    return re.compile(rf"\b{_VERB}\b[\s:]*(?:(?:the\s+)?issue\s*)?{target}", re.I)


def message_fixes(message: str, number: int, repos: tuple[str, ...] = ()) -> bool:
    """The commit message says it fixes (closes, resolves) issue `number`. `repos`: the repository
    names (`vllm-ascend`) an issue URL must point into; empty: any URL's issue of that number counts."""
    return bool(_pattern(number, repos).search(message))


def repo_names(label: str, remote: str = "") -> tuple[str, ...]:
    """The repository names a history goes by: its plugin label and its remote's last path part."""
    names = {label.rstrip("/").rsplit("/", 1)[-1]}
    if remote:
        names.add(remote.rstrip("/").removesuffix(".git").rsplit("/", 1)[-1])
    return tuple(sorted(n for n in names if n))


def fixing_commits(repo: Path, number: int, repos: tuple[str, ...] = ()) -> frozenset[str]:
    """The commits of the repository's branches whose full message says it fixes issue `number`
    (git's --grep finds the messages that hold the number, message_fixes() reads each)."""
    from porter.kb.history.mine import git_ok

    out = git_ok(repo, ["log", "--branches", "-E", "-i", f"--grep=(#|/issues/){number}([^0-9]|$)",
                        f"--format={_SEP}%H%n%B"], "log --grep")
    shas = set()
    for chunk in out.split(_SEP)[1:]:
        sha, _, message = chunk.partition("\n")
        if message_fixes(message, number, repos):
            shas.add(sha.strip())
    return frozenset(shas)
