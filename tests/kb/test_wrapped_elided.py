"""Wording that generalises: an exception message wrapped onto the next line is matched joined
(evidence split over two lines), and a template's value elided as `...` in a quoted message
still matches the template."""

from __future__ import annotations

import os
import random
import re

import pytest

import porter.kb.matcher as matcher
import porter.kb.normalize as normalize
import porter.kb.split as split
from porter.kb.families import template_regex
from porter.kb.matcher import diagnose_text, scan, wrapped_rest
from porter.kb.regexsafety import check_regex
from porter.kb.render import diagnose_payload

from .conftest import entry

SIG_ENTRY = entry(
    "VLLM-001", "vllm",
    [{"exception": "TypeError", "template": "{name}() missing {number} required positional argument: '{arg}'", "weight": 0.9}],
    fix=["Pass {arg} to {name}."],
)
WRAPPED = ("This also fixes the CI issue about `TypeError: Group.__init__()\n"
           "missing 1 required positional argument: 'spec'`\n")


@pytest.fixture
def wrap_kb(fixture_kb):
    fixture_kb.add(SIG_ENTRY, "TypeError: Group.__init__() missing 1 required positional argument: 'spec'\n")
    fixture_kb.add(entry("VLLM-002", "vllm", [{"literal": "required positional argument: 'spec'", "weight": 0.9}]),
                   "missing 1 required positional argument: 'spec'\n")
    return fixture_kb.compiled()


def test_a_wrapped_exception_message_is_matched_joined(wrap_kb):
    diag = diagnose_text(wrap_kb, WRAPPED)
    m = next(m for m in diag.matches if m.entry.id == "VLLM-001")
    assert [ml.line for ml in m.lines] == [1]  # recorded at the message's first line
    assert "__init__() missing 1 required" in m.lines[0].text
    assert m.captures == {"name": "Group.__init__", "number": "1", "arg": "spec"}
    # a signature the second line holds alone is that line's hit, not a joined one
    other = next(m for m in diag.matches if m.entry.id == "VLLM-002")
    assert [ml.line for ml in other.lines] == [2]


@pytest.mark.parametrize("text", [
    "TypeError: Group.__init__().\nmissing 1 required positional argument: 'spec'\n",  # the first line ends a sentence
    "TypeError: Group.__init__()\nMissing 1 required positional argument: 'spec'\n",  # a new sentence
    "TypeError: Group.__init__()\n\nmissing 1 required positional argument: 'spec'\n",  # a blank line between
    "Group.__init__()\nmissing 1 required positional argument: 'spec'\n",  # no exception message on the first line
    "(pid=1) TypeError: Group.__init__()\n(pid=2) missing 1 required positional argument: 'spec'\n",  # another record
])
def test_lines_that_are_no_wrapped_message_are_not_joined(wrap_kb, text):
    diag = diagnose_text(wrap_kb, text)
    assert "VLLM-001" not in {m.entry.id for m in diag.matches + diag.near_misses}


def test_wrapped_rest_rules():
    assert wrapped_rest("x TypeError: f()", "x TypeError: f()", "missing 1") == "missing 1"
    assert wrapped_rest("AttributeError: 'f' object has no attribute", "AttributeError: 'f' object has no attribute",
                        "  'weight_loader'`") == "'weight_loader'`"
    assert wrapped_rest("TypeError: f()", "TypeError: f()", '  File "/x.py", line 1, in f') is None
    assert wrapped_rest("TypeError: f()", "TypeError: f()", "hint: try again") is None  # a label of its own
    # a logger that prints the same prefix on every line of a multi-line message
    clean = "(pid=1) TypeError: f()"
    assert wrapped_rest(clean, "TypeError: f()", "(pid=1) missing 1") == "missing 1"


def test_the_same_prefix_on_both_lines_is_joined(wrap_kb):
    text = ("(EngineCore pid=7) TypeError: Group.__init__()\n"
            "(EngineCore pid=7) missing 1 required positional argument: 'spec'\n")
    assert diagnose_text(wrap_kb, text).top.entry.id == "VLLM-001"


def test_two_processes_join_the_same_way(fixture_kb, tmp_path, monkeypatch):
    fixture_kb.add(SIG_ENTRY, "TypeError: Group.__init__() missing 1 required positional argument: 'spec'\n")
    kb = fixture_kb.compiled()
    monkeypatch.setattr(normalize, "CHUNK_SIZE", 4096)
    monkeypatch.setattr(split, "LEAD_BYTES", 512)
    monkeypatch.setattr(matcher, "SPLIT_MIN_BYTES", 0)
    monkeypatch.setattr(split, "SPLIT_AT", 0.3)
    rng = random.Random(5)
    parts = []
    for i in range(3000):
        r = rng.random()
        if r < 0.02:
            parts.append(f"[rank{i % 8}]: TypeError: Group.__init__()\n[rank{i % 8}]: missing 1 required positional argument: 'spec'\n")
        elif r < 0.05:
            parts.append(f"ERROR step {i} failed: TypeError: x{i}\nMissing data\n")
        else:
            parts.append(f"INFO 05-01 12:00:{i % 60:02d} [engine.py:{i}] tokens/s {rng.random():.3f}\n")
    path = tmp_path / "big.log"
    path.write_text("".join(parts))
    with path.open("rb") as fh:
        one = scan(kb, split.Masker().batches(normalize.iter_batches(fh)))
    with path.open("rb") as fh:
        two = split.scan_file(kb, fh, fh.fileno())
    assert [(ei, list(s.items())) for ei, s in one[0].items()] == [(ei, list(s.items())) for ei, s in two[0].items()]
    assert one[0]  # the joined message was found
    assert one[1].to_dict() == two[1].to_dict()


ELIDED_ENTRY = entry(
    "VASC-001", "vllm-ascend",
    [{"template": "Current device type: {current} does not match the installed version's device type: {installed}",
      "captures": {"current": r"[\w.]{1,60}", "installed": r"[\w.]{1,60}"}, "weight": 0.9}],
    fix=["Install the build for {current} (installed: {installed})."],
)


def test_an_elided_value_still_matches_the_template(fixture_kb):
    fixture_kb.add(ELIDED_ENTRY, "Current device type: A3 does not match the installed version's device type: A2\n")
    kb = fixture_kb.compiled()
    full = diagnose_text(kb, "RuntimeError: Current device type: A3 does not match the installed version's device type: A2\n")
    assert full.top.captures == {"current": "A3", "installed": "A2"}
    quoted = "If the error says `Current device type ... does not match the installed version's device type ...`, reinstall\n"
    diag = diagnose_text(kb, quoted)
    assert diag.top.entry.id == "VASC-001" and diag.top.captures == {}
    payload = diagnose_payload(diag, "-", {})
    assert "<current>" in payload["matches"][0]["fix"][0]  # the elided capture shows as a placeholder
    assert diagnose_text(kb, "Current device type does not match the installed version's device type\n").status == "unknown"


def test_elision_forms_and_limits():
    rx = re.compile(template_regex("cannot import name '{symbol}' from '{module}'"))
    assert rx.search("cannot import name '...' from 'vllm.config'")
    assert rx.search("cannot import name '\u2026' from '\u2026'")
    assert not rx.search("cannot import name '' from 'vllm'")
    # a capture checked against an upstream's symbols is the evidence itself: never elided
    constrained = template_regex("'{api}' object has no attribute '{attribute}'", defined_in={"api": "vllm"})
    assert "'(?P<api__in_vllm>" in constrained and "(?:(?P<attribute>" in constrained
    assert check_regex(template_regex("type: {a} and {b}={c} end")).ok


def test_template_whose_elision_alternatives_are_unsafe_compiles_without_them():
    # many values with gaps: the `...` alternatives multiply the backtracking paths past the safety bound
    template = ("{trainer} {version} requires {package}{spec}, but you have {package2} {installed} which is "
                "incompatible{*}{extra} {more} {again}")
    caps = {"trainer": "(?:llamafactory|trl|peft|verl)", "version": r"[\w.+-]{1,40}", "spec": r"[<>=!~][\w.,<>=!~*]{1,80}",
            "installed": r"[\w.+]{1,40}"}
    elided = template_regex(template, caps, elide=True, prefix="")
    plain = template_regex(template, caps, elide=False)
    assert elided == plain  # fell back: the elided form would fail the check
    assert check_regex(elided).ok
    line = "verl 0.4.0 requires transformers<4.52, but you have transformers 4.53.0 which is incompatible. x y z w"
    assert re.search(elided, line)


def test_template_with_few_values_keeps_its_elision():
    rx = template_regex("Current device type {device} does not match {other}", elide=True)
    assert rx != template_regex("Current device type {device} does not match {other}", elide=False)
    assert re.search(rx, "Current device type ... does not match ...")
