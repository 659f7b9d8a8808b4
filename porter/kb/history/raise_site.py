"""Where the plugin itself prints a trace's error: its raise or log site, found by the message's text.

A report without plugin frames (an issue's prose, a log of framework frames) often still quotes the
plugin's own message (`Available memory: 0`). Its fixed parts (values, numbers, format fields cut
out) are looked up with `git grep -F` in the plugin's source at the installed version (or the tip);
the function that holds the string is where the failure was reported, and a later commit that
changed that function is a candidate fix. I/O (git) here; the scoring lives in candidates.py.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Sequence

from porter.kb.history import mine
from porter.kb.history.candidates import is_test_path
from porter.kb.history.models import RaiseSite

MIN_LITERAL = 14  # shorter fixed parts (`out of range`) are written by too many messages
MIN_WORDS = 2
MAX_LITERALS = 10  # looked up per trace, in one git grep
MAX_SITES = 3  # a literal found in more functions than this is a phrase, not this error's message
MAX_FILES = 6
_VARIABLE = re.compile(r"\{[^{}]{0,80}\}|%[-#0-9.]*[sdrfix]|'[^']{0,200}'|\"[^\"]{0,200}\"|`|\b0x[0-9a-fA-F]+\b"
                       r"|-?\b\d+(?:\.\d+)?\w*|[()\[\]<>=,;|]")
_EDGE = re.compile(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$")
_ASCII_RUN = re.compile(r"[ -~]+")  # a Chinese report's quoted English message: the ASCII runs only
_BACKTICK = re.compile(r"`([^`\n]{6,200})`")
_QUOTE_CHARS = ("'", '"')
# words of Python's own messages and of any error text: a literal of these alone (`object has no attribute`,
# `index out of range`) is printed by the interpreter or by every library, not by one function of the plugin
_GENERIC_WORDS = frozenset(
    "object has have no not attribute attributes argument arguments positional keyword unexpected expected got takes given "
    "index out of range list tuple dict key keys value values type types name names module import cannot could is are "
    "was were be the a an to in on for with from by at and or but callable subscriptable iterable unsupported operand "
    "must should failed fail error errors invalid found support supported tensor tensors shape size dtype device "
    "none nonetype self missing required defined".split())


def search_literals(texts: Sequence[str]) -> tuple[str, ...]:
    """The fixed parts of the error texts worth looking up (original case; git grep -i ignores it):
    at least MIN_LITERAL characters and MIN_WORDS words, longest first."""
    out: dict[str, None] = {}
    for text in texts:
        for run in _ASCII_RUN.findall(text[:4000]):
            for piece in _VARIABLE.split(run):
                norm = " ".join(_EDGE.sub("", piece).split())
                if len(norm) >= MIN_LITERAL and len(norm.split()) >= MIN_WORDS and _specific(norm):
                    out.setdefault(norm, None)
    return tuple(sorted(out, key=len, reverse=True)[:MAX_LITERALS])


def _specific(literal: str) -> bool:
    """A word of three letters or more that is no generic error word: the literal says what this message is about."""
    return any(len(w) >= 3 and w.lower() not in _GENERIC_WORDS for w in re.findall(r"[A-Za-z_]+", literal))


def report_texts(text: str, exception_message: str, error_text: str) -> tuple[str, ...]:
    """Where a report writes the plugin's message: the exception's message, the error lines, and the
    spans a short report quotes in backticks."""
    spans = [m.group(1) for m in _BACKTICK.finditer(text[:20000])]
    return tuple(t for t in (exception_message, *spans, error_text) if t)


def enclosing_function(lines: Sequence[str], index: int) -> str | None:
    """The innermost def (or class) whose body holds lines[index]: the nearest one above it indented less."""
    indent = len(lines[index]) - len(lines[index].lstrip())
    for i in range(index - 1, -1, -1):
        line = lines[i]
        stripped = line.lstrip()
        if not stripped or stripped.startswith("#"):
            continue
        here = len(line) - len(stripped)
        if here < indent:
            m = mine._DEF.match(line)
            if m:
                return m.group(1) or m.group(2)
            indent = here  # a block (if/for/with) inside the def: keep looking further out
            if here == 0:
                return None
    return None


def sites_in(grep_output: str, files: dict[str, list[str]], literals: Sequence[str]) -> list[RaiseSite]:
    """RaiseSites from `git grep -n` lines (`ref:path:line:text`) and the files' text; a literal that
    lies in more than MAX_SITES functions is dropped (a common phrase), and so are hits outside string
    literals (a comment, a name)."""
    found: dict[str, dict[tuple[str, str], RaiseSite]] = {}
    for row in grep_output.splitlines():
        parts = row.split(":", 3)
        if len(parts) < 4 or not parts[2].isdigit():
            continue
        _, path, num, src = parts
        lines = files.get(path)
        if lines is None or is_test_path(path):
            continue
        low = src.lower()
        for lit in literals:
            at = low.find(lit.lower())
            if at < 0 or not any(q in src[:at] for q in _QUOTE_CHARS):
                continue  # not inside a string: the same words as code or a comment
            if src.lstrip().startswith("#"):
                continue
            idx = int(num) - 1
            func = enclosing_function(lines, idx) if 0 <= idx < len(lines) else None
            if func:
                found.setdefault(lit, {}).setdefault((path, func), RaiseSite(path, func, int(num), src.strip(), lit))
    out: dict[tuple[str, str], RaiseSite] = {}
    for lit in literals:  # longest literal first: its site is the likeliest
        sites = found.get(lit, {})
        if 0 < len(sites) <= MAX_SITES:
            for key, site in sites.items():
                out.setdefault(key, site)
    return list(out.values())[:MAX_SITES]


@functools.lru_cache(maxsize=256)
def raise_sites(repo: Path, ref: str, literals: tuple[str, ...]) -> tuple[RaiseSite, ...]:
    """The plugin's functions at `ref` whose string literals hold one of the literals (git grep -F -i,
    .py files outside tests). Empty when git fails: the search goes on without them."""
    if not literals:
        return ()
    args = ["grep", "-n", "-I", "-F", "-i"]
    for lit in literals:
        args += ["-e", lit]
    result = mine._git(repo, [*args, ref, "--", "*.py"], 60)
    if not result.ok:  # exit 1: no hit
        return ()
    paths = list(dict.fromkeys(row.split(":", 2)[1] for row in result.stdout.splitlines() if row.count(":") >= 3))
    paths = [p for p in paths if not is_test_path(p)][: MAX_FILES * 3]
    files: dict[str, list[str]] = {}
    for path in paths:
        shown = mine._git(repo, ["show", f"{ref}:{path}"], 60)
        if shown.ok:
            files[path] = shown.stdout.splitlines()
    return tuple(sites_in(result.stdout, files, literals))
