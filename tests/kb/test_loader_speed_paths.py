"""The fast paths of a warm `porter diagnose` give what the plain ones gave."""

from __future__ import annotations

import os

from porter.kb.loader import entry_files, load_entries, load_kb
from porter.kb.schema import KBEntry

from .conftest import entry


def test_entry_files_lists_what_rglob_lists(tmp_path):
    root = tmp_path / "patterns"
    for rel in ("a/x.yaml", "a-b/y.yaml", "a/b/z.yaml", "top.yaml", ".hidden/h.yaml", "a/.dot.yaml", "a/notes.txt", "dir.yaml/inner.yaml"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("id: X\n")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "linked.yaml").write_text("id: Y\n")
    os.symlink(tmp_path / "elsewhere", root / "linkdir")  # rglob does not follow it
    os.symlink(tmp_path / "elsewhere" / "linked.yaml", root / "a" / "alias.yaml")  # a linked file counts
    expected = sorted(p for p in root.rglob("*.yaml") if p.is_file() and not p.name.startswith("."))
    assert entry_files(root) == expected
    shown = [p.relative_to(root).as_posix() for p in expected]
    assert shown.index("a/b/z.yaml") < shown.index("a-b/y.yaml")  # by components, not as strings
    assert "linkdir/linked.yaml" not in shown and "a/.dot.yaml" not in shown


def test_cached_entries_equal_parsed_ones(tmp_path, fixture_kb):
    fixture_kb.add(entry("VLLM-009", "vllm", [{"literal": "some distinctive failure text", "weight": 0.9}]))
    parsed = load_entries(fixture_kb.patterns).entries
    load_kb(fixture_kb.patterns, tmp_path / "cache")
    cached = load_kb(fixture_kb.patterns, tmp_path / "cache")
    assert cached.from_cache and cached.entries == parsed
    assert [hash(e) for e in cached.entries] == [hash(e) for e in parsed]
    assert all(type(e) is KBEntry for e in cached.entries)
    # a record missing a field goes through the constructor (and its defaults)
    partial = {k: v for k, v in parsed[0].to_dict().items() if k != "within"}
    assert KBEntry.from_dict(partial) == parsed[0]
