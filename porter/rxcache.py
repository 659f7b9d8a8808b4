"""Compiled regular expressions kept between processes.

`re.compile` parses and compiles a pattern in Python (`re._parser`, `re._compiler`): about
0.1-1 ms a pattern, and the ~60 patterns one `porter diagnose` call needs (the extractor's,
the line normaliser's, the signatures that hit, the secret rules) were about a fifth of a warm
call's CPU. The compiler's output is plain data (a list of ints, the group names), so it is
stored in the user cache (`<cache>/re/`, one file per Python build and regex engine version)
and handed to the engine directly (`_sre.compile`, what `re.compile` itself ends with).

Safe by construction: a stored pattern is used only when the engine accepts its code (the
engine validates it), the file is keyed by the interpreter version and the engine's MAGIC, and
a pattern is stored only after the rebuilt object compared equal to `re.compile`'s (same code,
flags and pattern). Anything unexpected means "compile as usual". Only processes that call
`persist()` (the CLI) write the file back, once at exit and only when something was added.
"""

from __future__ import annotations

import marshal
import os
import re
import sys

try:
    import _sre
except ImportError:  # pragma: no cover - not CPython: plain re.compile
    _sre = None

MAX_PATTERNS = 4096  # entries kept in the file (a `porter kb eval` compiles every signature once)


def _store_path() -> str | None:
    if _sre is None or sys.implementation.name != "cpython":
        return None
    from porter.cachehome import cache_home

    version = ".".join(map(str, sys.version_info[:3]))
    return os.path.join(cache_home(), "re", f"sre-{version}-{_sre.MAGIC}-{_sre.CODESIZE}.marshal")


class RegexStore:
    """(pattern, flags) -> the engine's arguments, read from `path` on first use."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._known: dict | None = None  # (pattern, flags) -> marshalled arguments
        self._added: dict = {}
        self._persist = False

    def _entries(self) -> dict:
        if self._known is None:
            self._known = {}
            if self.path is not None:
                try:
                    with open(self.path, "rb", buffering=0) as fh:
                        data = marshal.loads(fh.read())
                    if type(data) is dict:
                        self._known = data
                except (OSError, ValueError, EOFError, TypeError):
                    pass
        return self._known

    def compile(self, pattern: str, flags: int = 0) -> re.Pattern[str]:
        """`re.compile(pattern, flags)` for a str pattern, from the store when it holds it."""
        flags = int(flags)
        key = (pattern, flags)
        blob = self._entries().get(key)
        if type(blob) is bytes:
            try:
                args = marshal.loads(blob)
                return _sre.compile(pattern, args[0], list(args[1]), args[2], dict(args[3]), tuple(args[4]))
            except Exception:  # noqa: BLE001 - a damaged or foreign entry: compile as usual
                pass
        rx = re.compile(pattern, flags)
        if self.path is not None and type(pattern) is str:
            args = _engine_args(pattern, flags)
            if args is not None:
                try:
                    self._known[key] = self._added[key] = marshal.dumps(args)
                except ValueError:  # a group name marshal cannot write: not stored
                    pass
        return rx

    def persist(self) -> None:
        """Write what this process added back to the store when the process exits."""
        if not self._persist and self.path is not None:
            import atexit

            self._persist = True
            atexit.register(self.save)

    def save(self) -> None:
        if not self._added or self.path is None:
            return
        try:
            from porter.fsutil import atomic_write_bytes

            on_disk = RegexStore(self.path)._entries()  # what other processes wrote meanwhile
            merged = {**on_disk, **self._added} if len(on_disk) + len(self._added) <= MAX_PATTERNS else dict(self._added)
            atomic_write_bytes(self.path, marshal.dumps(merged), durable=False)
            self._added = {}
        except (OSError, ValueError):
            pass  # a read-only cache only costs speed


def _engine_args(pattern: str, flags: int) -> tuple | None:
    """The arguments `re._compiler.compile` passes to `_sre.compile`, or None when this
    interpreter's compiler does not produce them the way this function expects (checked by
    building the pattern from them and comparing it with `re.compile`'s)."""
    try:
        from re import _compiler, _parser

        parsed = _parser.parse(pattern, flags)
        code = _compiler._code(parsed, flags)
        groupindex = dict(parsed.state.groupdict)
        indexgroup = [None] * parsed.state.groups
        for name, i in groupindex.items():
            indexgroup[i] = name
        # ints, not the compiler's named opcode constants (an int subclass marshal refuses)
        args = (int(flags | parsed.state.flags), tuple(map(int, code)), int(parsed.state.groups - 1), groupindex, tuple(indexgroup))
        rebuilt = _sre.compile(pattern, args[0], list(args[1]), args[2], dict(args[3]), tuple(args[4]))
        if rebuilt != re.compile(pattern, flags) or rebuilt.groupindex != re.compile(pattern, flags).groupindex:
            return None
        return args
    except Exception:  # noqa: BLE001 - an interpreter whose internals differ: nothing stored
        return None


STORE = RegexStore(_store_path())
compile = STORE.compile  # noqa: A001 - the drop-in for re.compile
persist = STORE.persist
