"""porter.plain: the diagnosis text without rich must be byte-identical to rich's on a
non-terminal console, or decline (None) so rich renders it."""

from __future__ import annotations

import copy
import io
import random
from pathlib import Path

import pytest

from porter.kb.loader import load_kb
from porter.kb.matcher import diagnose_text
from porter.kb.render import diagnose_payload, plain_diagnosis, render_diagnosis
from porter.plain import divide_line

ROOT = Path(__file__).resolve().parents[2]
SEEDS = sorted((ROOT / "tests" / "data" / "seed-traces").glob("*.txt"))


def rich_text(payload: dict, explain: bool, width: int) -> str:
    from rich.console import Console

    console = Console(file=io.StringIO(), width=width, soft_wrap=False, highlight=False)
    with console.capture() as captured:
        render_diagnosis(console, payload, explain)
    return captured.get()


@pytest.fixture(scope="module")
def payloads() -> list[dict]:
    kb = load_kb(ROOT / "knowledge" / "patterns").compiled()
    out = []
    for path in SEEDS[::4]:  # matches, unknowns with triage, close pairs, codes
        diag = diagnose_text(kb, path.read_text(errors="replace"), top=3)
        out.append(diagnose_payload(diag, path.name, {"entries": 1}, explain=True))
    return out


def test_real_diagnoses_identical_at_several_widths(payloads):
    statuses = {p["status"] for p in payloads}
    assert statuses == {"match", "unknown"}
    declined = 0
    for payload in payloads:
        for width in (20, 47, 80, 131):
            for explain in (False, True):
                plain = plain_diagnosis(payload, explain, width)
                if plain is None:  # content it cannot promise (a backslash, non-ASCII): rich prints it
                    declined += 1
                    continue
                assert plain == rich_text(payload, explain, width), (payload["input"]["source"], width)
    assert declined <= len(payloads)  # most real diagnoses take the plain path


def _fuzz_text(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randrange(0, 14)):
        kind = rng.random()
        if kind < 0.1:
            parts.append("x" * rng.randrange(60, 200))  # longer than a line: folded
        elif kind < 0.2:
            parts.append(" " * rng.randrange(1, 4))
        elif kind < 0.25:
            parts.append("\n")
        elif kind < 0.3:
            parts.append(rng.choice(["[bold]", "[/]", "[x", "]", "[link=a]"]))  # escaped as content
        else:
            parts.append("".join(rng.choice("abcdefgh_.-/:()'\"") for _ in range(rng.randrange(1, 12))) + " ")
    return "".join(parts)


def test_fuzzed_content_identical_or_declined(payloads):
    rng = random.Random(5)
    matched = next(p for p in payloads if p["status"] == "match")
    unknown = next(p for p in payloads if p["status"] == "unknown" and p["signals"]["blocks"])
    rendered = 0
    for i in range(300):
        p = copy.deepcopy(matched if i % 2 else unknown)
        if p["status"] == "match":
            m = p["matches"][0]
            m["title"], m["root_cause"], m["verify"] = _fuzz_text(rng), _fuzz_text(rng), _fuzz_text(rng)
            m["fix"] = [_fuzz_text(rng) for _ in range(rng.randrange(1, 4))]
            for ml in m["matched_lines"]:
                ml["text"] = _fuzz_text(rng).replace("\n", " ")
        else:
            p["signals"]["blocks"][-1]["lines"] = [_fuzz_text(rng).replace("\n", " ") for _ in range(3)]
            if p.get("triage"):
                p["triage"]["reason"] = _fuzz_text(rng)
        p["input"]["source"] = _fuzz_text(rng).replace("\n", "") or "x"
        width = rng.choice([20, 33, 80, 97])
        plain = plain_diagnosis(p, False, width)
        if plain is not None:
            rendered += 1
            assert plain == rich_text(p, False, width), (i, width)
    assert rendered > 250  # only emoji-like `:name:` text declines here


@pytest.mark.parametrize("text", ["naïve ünïcode", "tab\there", "back\\slash", "a :thumbs_up: b", "ctrl\x1b[31m"])
def test_declines_what_it_cannot_promise(payloads, text):
    p = copy.deepcopy(next(p for p in payloads if p["status"] == "match"))
    p["matches"][0]["root_cause"] = text
    assert plain_diagnosis(p, False, 80) is None


def test_divide_line_folds_like_rich():
    from rich._wrap import divide_line as rich_divide

    rng = random.Random(3)
    for _ in range(500):
        text = _fuzz_text(rng).replace("\n", " ")
        width = rng.randrange(5, 90)
        assert divide_line(text, width) == rich_divide(text, width), (text, width)
