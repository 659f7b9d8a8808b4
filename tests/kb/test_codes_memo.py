"""The error-code tables read through the cache memo are the tables parsed from the YAML."""

from __future__ import annotations

import shutil
from pathlib import Path

from porter.kb.codes import decode, load_tables

ROOT = Path(__file__).resolve().parents[2]


def test_memoised_tables_equal_the_parsed_ones_and_follow_edits(tmp_path):
    codes = tmp_path / "codes"
    shutil.copytree(ROOT / "knowledge" / "codes", codes)
    cache = tmp_path / "cache"
    parsed = load_tables(codes)
    assert load_tables(codes, cache) == parsed  # written
    assert list((cache / "kb").glob("codes-*.marshal"))
    assert load_tables(codes, cache) == parsed  # read back
    table = next(p for p in sorted(codes.glob("*.yaml")))
    table.write_text(table.read_text(encoding="utf-8").replace("meaning:", "meaning: EDITED", 1), encoding="utf-8")
    edited = load_tables(codes, cache)
    assert edited == load_tables(codes) and edited != parsed
    assert len(list((cache / "kb").glob("codes-*.marshal"))) == 2


def test_a_broken_table_is_reported_and_not_memoised(tmp_path):
    codes = tmp_path / "codes"
    codes.mkdir()
    (codes / "bad.yaml").write_text("family: [unclosed\n", encoding="utf-8")
    (codes / "ok.yaml").write_text('family: x\nlayer: cann\nsource: doc\ncodes:\n  - {code: "EZ9999", meaning: boom}\n', encoding="utf-8")
    tables, problems = load_tables(codes, tmp_path / "cache")
    assert [t.family for t in tables] == ["x"] and len(problems) == 1 and "bad.yaml" in problems[0].file
    assert decode(tables, "EZ9999").meaning == "boom"
    assert not list((tmp_path / "cache").rglob("codes-*.marshal"))
