"""The text rich prints when stdout is not a terminal, without importing rich.

Importing rich and rendering a diagnosis through it is ~120 M instructions, a third of a
`porter diagnose` call. When the output is not a terminal rich prints no styles, so its output
is plain text laid out by a few rules: markup tags removed, lines folded at the console width
by `rich._wrap.divide_line`, panels boxed with the rounded box. `PlainPage` applies those
rules to printable-ASCII content (one character, one cell) and answers None for anything else
(other characters, tabs, text rich would turn into an emoji, markup-like escapes), so the
caller renders through rich instead: the output is byte-identical either way
(tests/kb/test_plain_render.py compares the two).
"""

from __future__ import annotations

import os
import sys

from porter import rxcache

_WORD = rxcache.compile(r"\s*\S+\s*")  # rich._wrap.re_word
# rich.markup's emoji codes (`:name:` / `:name-emoji:`), tried at every colon
_EMOJI_CANDIDATE = rxcache.compile(r"(?=(:(\S*?)(?:(?:\-)(emoji|text))?:))")
_PRINTABLE = frozenset(map(chr, range(0x20, 0x7F))) | {"\n", "·", "×"}  # one cell each (template characters)


class Unrenderable(Exception):
    """Content the plain layout cannot guarantee to print as rich would."""


def plain_width(stream=None) -> int | None:
    """The width rich's Console would use for `stream` (default stdout) when it is not a
    terminal; None when rich would style the output or lay it out differently."""
    import builtins

    stream = sys.stdout if stream is None else stream
    environ = os.environ
    if os.name == "nt" or hasattr(builtins, "get_ipython") or "idlelib" in sys.modules:
        return None  # legacy Windows consoles, Jupyter, IDLE: rich's own rules
    tty_compatible = environ.get("TTY_COMPATIBLE", "")
    if tty_compatible == "1" or (tty_compatible != "0" and environ.get("FORCE_COLOR") is not None):
        return None  # a terminal to rich: styled
    if tty_compatible != "0":
        try:
            if stream.isatty():
                return None
        except (AttributeError, ValueError):
            return None
    if not (getattr(stream, "encoding", "utf-8") or "utf-8").lower().startswith("utf"):
        return None  # rich would draw ASCII boxes
    width = None
    for fd in (0, 1, 2):  # rich's Console.size: the first standard stream that is a terminal
        try:
            width = os.get_terminal_size(fd)[0]
            break
        except (AttributeError, ValueError, OSError):
            continue
    columns = environ.get("COLUMNS")
    if columns is not None and columns.isdigit():
        width = int(columns)
    width = width or 80
    return width if width >= 20 else None


def checked(text: str) -> str:
    """`text` when the plain layout prints it as rich does (printable ASCII and the middle dot;
    no backslash, which rich's markup escaping treats specially), else Unrenderable."""
    if not _PRINTABLE.issuperset(text) or "\\" in text:
        raise Unrenderable(text[:40])
    return text


def divide_line(text: str, width: int) -> list[int]:
    """rich._wrap.divide_line with fold=True, for text of single-cell characters."""
    breaks: list[int] = []
    offset = 0
    for m in _WORD.finditer(text):
        start, word = m.start(), m.group(0)
        length = len(word.rstrip())
        if width - offset >= length:
            offset += len(word)
        elif length > width:
            chunks = [word[i : i + width] for i in range(0, len(word), width)]
            for i, chunk in enumerate(chunks):
                if start:
                    breaks.append(start)
                if i == len(chunks) - 1:
                    offset = len(chunk)
                else:
                    start += len(chunk)
        elif offset and start:
            breaks.append(start)
            offset = len(word)
    return breaks


def wrap(text: str, width: int) -> list[str]:
    """The lines rich's Text.wrap makes of `text` (justify default, overflow fold)."""
    out: list[str] = []
    for line in text.split("\n"):
        cuts = [0, *divide_line(line, width), len(line)]
        for a, b in zip(cuts, cuts[1:]):
            piece = line[a:b]
            if len(piece) > width:  # Text.rstrip_end: whitespace beyond the width goes
                trailing = len(piece) - len(piece.rstrip())
                piece = piece[: len(piece) - min(trailing, len(piece) - width)]
            out.append(piece[:width])
    return out


class PlainPage:
    """Lines as rich's Console(soft_wrap=False, highlight=False).print would write them to a
    non-terminal, for markup-free text (the caller passes the plain text of the markup)."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.lines: list[str] = []

    def print(self, text: str, soft_wrap: bool = False) -> None:
        checked(text)
        self.lines.extend(text.split("\n") if soft_wrap else wrap(text, self.width))

    def panel(self, title: str, body: str) -> None:
        """rich Panel(body, title=title, title_align="left", expand=True), rounded box, padding (0, 1)."""
        checked(title)
        checked(body)
        inner = self.width - 2
        head = (" " + title.replace("\n", " ") + " ")[: inner - 2]
        self.lines.append("╭─" + head + "─" * (inner - 2 - len(head)) + "─╮")
        for line in wrap(body, inner - 2):
            self.lines.append("│ " + line.ljust(inner - 2) + " │")
        self.lines.append("╰" + "─" * inner + "╯")

    def text(self) -> str:
        out = "".join(line + "\n" for line in self.lines)
        if ":" in out:
            names = [m.group(2) for m in _EMOJI_CANDIDATE.finditer(out) if m.group(2)]
            if names:
                try:
                    from rich._emoji_codes import EMOJI
                except ImportError:
                    raise Unrenderable("emoji table") from None
                if any(name.lower() in EMOJI for name in names):
                    raise Unrenderable("emoji code")
        return out
