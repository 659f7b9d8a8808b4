"""Wording that generalises: an exception message wrapped onto the next line is matched joined
(evidence split over two lines)."""

from __future__ import annotations

import os
import random

import pytest

import porter.kb.matcher as matcher
import porter.kb.normalize as normalize
import porter.kb.split as split
from porter.kb.matcher import diagnose_text, scan, wrapped_rest

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
