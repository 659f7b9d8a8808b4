"""The code lines a report pastes in a fenced block: where an issue says which line is wrong.

An issue without a traceback often pastes the line it blames in a ``` block ("The following code is
executed: ```python image_data = (kwargs.get("multi_modal_data") or {}).get("image", None) ```").
A commit that removed or rewrote that very line changed the code the report points at, as one that
rewrote a backticked statement did (candidates.quoted_code_lines). Pure: text in, lines out.
"""

from __future__ import annotations

import re

from porter.kb.history.mine import line_key

_FENCE = re.compile(r"^[ \t>]*```\s*([\w+-]*)")  # a fence line and its language tag (```python)
# an assignment, a call or a subscript whose target is code (`x = f(...)`, `obj.attr[...]`, `f(x)`), not prose
_STATEMENT = re.compile(r"^[A-Za-z_][\w.]*(?:\[[^\]]*\])?\s*(?:[-+*/]?=(?!=)|\()|^(?:return|raise|assert|if|elif|while|for|with)\s+\S.*[\w)\]]:?$")
# a pasted traceback or log: its source lines are frames' (frames.py reads them), its other lines are no code
_NOT_CODE = re.compile(r'Traceback \(most recent call last\)|^\s*File "|^\s*\(\w+ pid=\d+\)|^\s*(?:INFO|WARNING|ERROR|DEBUG)\b', re.M)
MIN_LINE = 24  # a shorter statement (`x = 0`, `self.a = a`) is written in many places
MAX_LINES = 6


def fenced_blocks(text: str) -> list[str]:
    """The bodies of the text's fenced blocks. A fence with a language tag always opens one (a pasted
    excerpt often lost a closing fence: pairing bare fences alone would then read prose as code)."""
    blocks: list[str] = []
    current: list[str] | None = None
    for line in text.splitlines():
        m = _FENCE.match(line)
        if not m:
            if current is not None:
                current.append(line)
            continue
        if current is not None:
            blocks.append("\n".join(current))
        current = [] if (m.group(1) or current is None) else None
    return blocks


def fenced_code_lines(text: str) -> tuple[str, ...]:
    """Statement lines of the report's fenced code blocks (not tracebacks or logs), whitespace-normalised,
    in the order written: at most MAX_LINES of MIN_LINE characters or more."""
    out: dict[str, None] = {}
    for block in fenced_blocks(text):
        if _NOT_CODE.search(block):
            continue
        for raw in block.splitlines():
            line = " ".join(raw.split())
            if len(line) >= MIN_LINE and not line.startswith(("#", ">>>", "$")) and _STATEMENT.match(line) and line_key(line):
                out.setdefault(line, None)
                if len(out) >= MAX_LINES:
                    return tuple(out)
    return tuple(out)
