"""porter.rxcache: compiled regexes kept between processes behave exactly like re.compile's."""

from __future__ import annotations

import json
import marshal
import os
import re
import subprocess
import sys
from pathlib import Path

from porter.rxcache import RegexStore

PATTERNS = [
    (r"\w+", 0),
    (r"(?P<type>[A-Za-z_]\w{0,80}(?:Error|Exception))(?::\s?(?P<msg>.*))?$", 0),
    (r"""^(?:
        \[rank\s?\d{1,6}\]:?[ \t]?   # [rank3]:
      | (?:INFO|ERROR)\s+)""", re.VERBOSE),
    (r"(?i)password\s*=\s*(\S+)", 0),
    (r"^\s*File \"(?P<path>[^\"]{1,1000})\", line (?P<line>\d+)", re.M),
]
TEXTS = ["", "ERROR boom", "[rank3]: RuntimeError: x", "  File \"/a/b.py\", line 12, in f", "PassWord = hunter2", "é ü 日本"]


def _same(a: re.Pattern, b: re.Pattern) -> None:
    assert a == b and a.flags == b.flags and a.groupindex == b.groupindex and a.groups == b.groups
    for text in TEXTS:
        assert [m.span() for m in a.finditer(text)] == [m.span() for m in b.finditer(text)]
        ma, mb = a.search(text), b.search(text)
        assert (ma and ma.groupdict()) == (mb and mb.groupdict())


def test_a_stored_pattern_is_rebuilt_equal_to_re_compile(tmp_path):
    path = str(tmp_path / "re" / "store.marshal")
    first = RegexStore(path)
    for pattern, flags in PATTERNS:
        _same(first.compile(pattern, flags), re.compile(pattern, flags))
    first.save()
    assert Path(path).is_file()
    second = RegexStore(path)
    assert len(second._entries()) == len(PATTERNS)
    for pattern, flags in PATTERNS:
        _same(second.compile(pattern, flags), re.compile(pattern, flags))
    assert second._added == {}  # every pattern came from the store


def test_a_damaged_or_foreign_store_falls_back_to_re_compile(tmp_path):
    path = tmp_path / "store.marshal"
    path.write_bytes(b"\x00garbage")
    store = RegexStore(str(path))
    _same(store.compile(r"\d{4}"), re.compile(r"\d{4}"))
    # an entry whose code the engine rejects: compiled as usual, never used as stored
    path.write_bytes(marshal.dumps({(r"\d{4}", 0): marshal.dumps((0, (1, 2, 3), 0, {}, ()))}))
    store = RegexStore(str(path))
    _same(store.compile(r"\d{4}"), re.compile(r"\d{4}"))


def test_invalid_patterns_raise_as_re_does(tmp_path):
    store = RegexStore(str(tmp_path / "s.marshal"))
    try:
        store.compile("(unclosed")
    except re.error:
        pass
    else:
        raise AssertionError("expected re.error")


def test_the_cli_writes_the_store_and_later_calls_read_it(tmp_path):
    trace = tmp_path / "t.txt"
    trace.write_text("Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\nRuntimeError: boom\n")
    env = {**os.environ, "PORTER_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    runs = [subprocess.run([sys.executable, "-m", "porter", "diagnose", str(trace), "--json"], env=env, capture_output=True, text=True)
            for _ in range(2)]
    assert [r.returncode for r in runs] == [runs[0].returncode] * 2 and runs[0].returncode in (0, 1)
    first, second = (json.loads(r.stdout) for r in runs)
    assert first["kb"].pop("cached") is False and second["kb"].pop("cached") is True
    assert first == second  # the second call built its regexes from the store: the same diagnosis
    stores = list((tmp_path / "cache" / "re").glob("sre-*.marshal"))
    assert len(stores) == 1 and len(marshal.loads(stores[0].read_bytes())) > 20
