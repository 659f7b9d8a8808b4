"""The code a report blames by name: the functions and classes it writes as code.

An issue without a traceback often says where the bug is: `BaseModelMerger.save_hf_model_and_tokenizer()`
in backticks, or a pasted snippet's `def calculate_debug_metrics(...)` line. Where no frame of the
trace lies in the plugin, a commit that changed a function of that name changed the code the
report points at. Pure: text in, names out.
"""

from __future__ import annotations

import builtins
import re

from porter.kb.history.mine import is_code_name

_SPAN = re.compile(r"`([^`\n]{2,200})`")  # one backtick span (a fenced block's ``` opens none: the line ends first)
_DEF = re.compile(r"^[ \t>]*(?:async\s+)?def\s+(\w+)|^[ \t>]*class\s+(\w+)", re.M)  # a pasted snippet's definitions
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{7,80}")  # 8+ characters: `forward`, `_run`, `step` name every module's code
_PATH = re.compile(r"(?<![\w.-])/?((?:[\w.-]+/)+[\w.-]+\.py)\b")  # `verl/utils/debug/metrics.py`: a file the report names
MAX_NAMED = 8
_BUILTINS = frozenset(dir(builtins))


def named_functions(text: str) -> tuple[str, ...]:
    """Code names (snake_case, CamelCase) the report writes in backticks or defines in a pasted
    snippet, in the order written. Dunders and Python's own names are left out: every class has them."""
    out: dict[str, None] = {}

    def add(name: str) -> None:
        if is_code_name(name) and not (name.startswith("__") and name.endswith("__")) and name not in _BUILTINS:
            out.setdefault(name, None)

    for m in _SPAN.finditer(text):
        for name in _IDENT.findall(m.group(1)):
            add(name)
    for m in _DEF.finditer(text):
        add(m.group(1) or m.group(2))
    return tuple(list(out)[:MAX_NAMED])


def named_paths(text: str) -> tuple[str, ...]:
    """The Python files the report names by path (`verl/utils/debug/metrics.py`, a traceback's or a link's path
    included), in the order written; the caller keeps those that are files of the repository."""
    return tuple(list(dict.fromkeys(m.group(1) for m in _PATH.finditer(text)))[:4 * MAX_NAMED])
