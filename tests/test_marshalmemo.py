"""porter.marshalmemo: a memo is a speed-up only, so every failure reads as MISSING or writes nothing."""

from __future__ import annotations

import datetime

from porter import marshalmemo


def test_a_stored_value_loads_back_and_a_missing_or_foreign_file_is_missing(tmp_path):
    memo = tmp_path / "sub" / "doc.marshal"
    assert marshalmemo.load(memo) is marshalmemo.MISSING
    marshalmemo.store(memo, {"a": [1, 2.5, "x"], "b": None})
    assert marshalmemo.load(memo) == {"a": [1, 2.5, "x"], "b": None}
    memo.write_bytes(b"not marshal data")
    assert marshalmemo.load(memo) is marshalmemo.MISSING


def test_a_value_marshal_cannot_hold_or_an_unwritable_cache_writes_nothing(tmp_path):
    marshalmemo.store(tmp_path / "date.marshal", {"when": datetime.date(2026, 1, 1)})
    assert not (tmp_path / "date.marshal").exists()
    blocker = tmp_path / "file"
    blocker.write_text("x")
    marshalmemo.store(blocker / "under-a-file.marshal", [1])  # parent is a file: OSError, swallowed
    assert marshalmemo.load(blocker / "under-a-file.marshal") is marshalmemo.MISSING


def test_the_content_tag_changes_with_any_edit():
    assert marshalmemo.content_tag(b"abc") == marshalmemo.content_tag(b"abc")
    assert marshalmemo.content_tag(b"abc") != marshalmemo.content_tag(b"abd")
    assert marshalmemo.content_tag(b"abc") != marshalmemo.content_tag(b"abc\n")
