"""A regex compiled on first use.

`re.compile` runs the regex parser and compiler in Python: ~0.1-1 ms a pattern. Module-level
patterns that a `porter diagnose` call rarely needs (secret rules whose literal is absent, the
fuzzy-matching forms when a signature matched) cost that on every process start otherwise.
"""

from __future__ import annotations

import re


class LazyPattern:
    """`re.compile(pattern, flags)`, compiled at the first sub/search/match/finditer."""

    __slots__ = ("pattern", "flags", "_rx")

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self.pattern, self.flags, self._rx = pattern, flags, None

    def compiled(self) -> re.Pattern[str]:
        if self._rx is None:
            from porter.rxcache import compile as compile_cached

            self._rx = compile_cached(self.pattern, self.flags)
        return self._rx

    def sub(self, repl, text: str) -> str:  # noqa: ANN001
        return self.compiled().sub(repl, text)

    def search(self, text: str, pos: int = 0):
        return self.compiled().search(text, pos)

    def match(self, text: str):
        return self.compiled().match(text)

    def finditer(self, text: str):
        return self.compiled().finditer(text)
