"""yamlio.load_yaml_file memoizes parsed files (marshal, keyed by path, size, mtime, inode):
a hit parses nothing, any change of the file parses it again, fresh or unmarshallable data is not kept."""

from __future__ import annotations

import datetime
import os
import time

import pytest

from porter import yamlio


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PORTER_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _aged(path, seconds=60):
    old = time.time() - seconds
    os.utime(path, (old, old))


def _no_parse(monkeypatch):
    def refuse(text, source="<text>"):
        raise AssertionError(f"parsed {source} again")

    monkeypatch.setattr(yamlio, "load_yaml_text", refuse)


def test_a_second_load_is_served_from_the_memo(tmp_path, cache, monkeypatch):
    doc = tmp_path / "a.yaml"
    doc.write_text("schema: 1\nplugins:\n  p: {packages: [x, y], n: 2.5, ok: true, none: null}\n", encoding="utf-8")
    _aged(doc)
    first = yamlio.load_yaml_file(doc)
    assert list((cache / "yaml").iterdir())
    _no_parse(monkeypatch)
    second = yamlio.load_yaml_file(doc)
    assert second == first == {"schema": 1, "plugins": {"p": {"packages": ["x", "y"], "n": 2.5, "ok": True, "none": None}}}
    second["schema"] = 2  # each load is a fresh copy
    assert yamlio.load_yaml_file(doc)["schema"] == 1


def test_an_edit_is_parsed_again(tmp_path, cache):
    doc = tmp_path / "a.yaml"
    doc.write_text("a: 1\n", encoding="utf-8")
    _aged(doc, 120)
    assert yamlio.load_yaml_file(doc) == {"a": 1}
    doc.write_text("a: 2\n", encoding="utf-8")  # same size: the mtime differs
    _aged(doc, 60)
    assert yamlio.load_yaml_file(doc) == {"a": 2}


def test_fresh_files_and_dates_are_not_memoized(tmp_path, cache):
    fresh = tmp_path / "fresh.yaml"
    fresh.write_text("a: 1\n", encoding="utf-8")  # mtime now: a same-size edit could keep it
    assert yamlio.load_yaml_file(fresh) == {"a": 1}
    assert not (cache / "yaml").exists()
    dated = tmp_path / "dated.yaml"
    dated.write_text("when: 2026-12-01\n", encoding="utf-8")
    _aged(dated)
    assert yamlio.load_yaml_file(dated) == {"when": datetime.date(2026, 12, 1)}
    assert not (cache / "yaml").exists()


def test_errors_are_unchanged(tmp_path, cache):
    with pytest.raises(Exception, match="no such file"):
        yamlio.load_yaml_file(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1\n", encoding="utf-8")
    _aged(bad)
    with pytest.raises(Exception, match="invalid YAML"):
        yamlio.load_yaml_file(bad)
    with pytest.raises(Exception, match="invalid YAML"):  # an error is never memoized
        yamlio.load_yaml_file(bad)
