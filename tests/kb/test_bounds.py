"""Input bounds: malformed --env, unsafe regexes in a user KB, a KB cache shared by several KBs."""

from __future__ import annotations

import json

import pytest

from porter.errors import InputError
from porter.kb.loader import load_kb

from .conftest import LORA_TRACE, entry


@pytest.mark.parametrize("value", ["torch_npu=2.7", "torch_npu==", "==2.7", "torch_npu==not-a-version", "a==b==c", "bad name==1.0"])
def test_malformed_env_is_exit_2(small_kb, cli, tmp_path, value):
    trace = tmp_path / "t.txt"
    trace.write_text(LORA_TRACE)
    code, out = cli(["diagnose", str(trace), "--kb", str(small_kb.patterns), "--env", value, "--json"])
    assert code == 2, out
    assert json.loads(out)["error"]["exit_code"] == 2


def test_unsafe_regex_in_a_user_kb_is_refused(fixture_kb, cli, tmp_path):
    fixture_kb.add(entry("VLLM-001", "vllm", [{"regex": "(a+)+b", "weight": 0.9}]), "aab\n")
    trace = tmp_path / "t.txt"
    trace.write_text("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaac\n")
    code, out = cli(["diagnose", str(trace), "--kb", str(fixture_kb.patterns), "--json"])
    assert code == 2
    err = json.loads(out)["error"]
    assert "unsafe regex" in err["message"] and "VLLM-001" in err["message"]
    with pytest.raises(InputError):
        load_kb(fixture_kb.patterns, tmp_path / "cache")


def test_two_kbs_share_one_cache_without_evicting_each_other(tmp_path, fixture_kb):
    from tests.kb.conftest import FixtureKB

    other = FixtureKB(tmp_path / "other")
    fixture_kb.add(entry("VLLM-001", "vllm", [{"literal": "first knowledge base", "weight": 0.9}]), "first knowledge base\n")
    other.add(entry("VLLM-002", "vllm", [{"literal": "second knowledge base", "weight": 0.9}]), "second knowledge base\n")
    cache = tmp_path / "cache"
    assert not load_kb(fixture_kb.patterns, cache).from_cache
    assert not load_kb(other.patterns, cache).from_cache
    for _ in range(3):  # alternating processes: every load after the first is a cache hit
        assert load_kb(fixture_kb.patterns, cache).from_cache
        assert load_kb(other.patterns, cache).from_cache


def test_cache_is_keyed_by_content_not_mtime(tmp_path, fixture_kb):
    import os

    path = fixture_kb.add(entry("VLLM-001", "vllm", [{"literal": "some knowledge base", "weight": 0.9}]), "some knowledge base\n")
    cache = tmp_path / "cache"
    load_kb(fixture_kb.patterns, cache)
    os.utime(path, (1, 1))  # a checkout or copy changes mtimes, not content
    assert load_kb(fixture_kb.patterns, cache).from_cache
    path.write_text(path.read_text().replace("some knowledge", "other knowledge"))
    loaded = load_kb(fixture_kb.patterns, cache)
    assert not loaded.from_cache and loaded.entries[0].signatures[0].pattern == "other knowledge base"


def test_recent_line_memo_is_bounded_in_bytes(small_kb, monkeypatch):
    import porter.kb.matcher as matcher

    monkeypatch.setattr(matcher, "LINE_MEMO_BYTES", 10_000)
    text = "".join(f"error {i} " + "x" * 2000 + "\n" for i in range(50)) + LORA_TRACE
    diag = matcher.diagnose_text(small_kb.compiled(), text)
    assert diag.top is not None and diag.top.entry.id == "VLLM-001"
