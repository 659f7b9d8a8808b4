"""The scanner's shortcuts (token memo for keyless needles, saturated signatures skipped,
required words before a regex) find exactly what testing every signature on every line finds."""

from __future__ import annotations

import porter.kb.matcher as matcher
from porter.kb.index import CompiledKB, required_words
from porter.kb.schema import parse_entry

from .conftest import entry


def _kb(items_per_entry: list[list[dict]]) -> CompiledKB:
    entries = []
    for n, items in enumerate(items_per_entry, 1):
        e, problems = parse_entry(entry(f"VLLM-{n:03d}", "vllm", items), "x.yaml")
        assert e is not None, problems
        entries.append(e)
    return CompiledKB.build(entries)


def _hits(kb: CompiledKB, text: str) -> dict:
    lines = text.splitlines()
    hits, _ = matcher.scan(kb, [lines])
    return hits


def _brute(kb: CompiledKB, text: str) -> dict:
    """Every signature on every line, first MAX_HITS_PER_SIGNATURE hits kept."""
    from porter.kb.index import squeeze
    from porter.kb.normalize import strip_prefix

    out: dict = {}
    for number, line in enumerate(text.splitlines(), 1):
        clean = line.rstrip()
        if not clean:
            continue
        for sig in kb.sigs:
            # needle first, as the scanner does: a literal reaches the check only through its needle or key
            if sig.needles and not any(n in clean for n in sig.needles) and not sig.kind == "literal":
                continue
            if sig.hits(clean, strip_prefix(clean), squeeze(clean)):
                slot = out.setdefault(sig.ei, {}).setdefault(sig.si, [])
                if len(slot) < matcher.MAX_HITS_PER_SIGNATURE:
                    slot.append((number, strip_prefix(clean)))
    return out


def test_keyless_needles_through_the_token_memo_match_like_direct_tests(monkeypatch):
    # more keyless signatures than FEW_KEYLESS, so lines go through the token memo
    items = [[{"regex": rf"Err{i}Kind: (?P<x>\w+) failed", "weight": 0.9}] for i in range(matcher.FEW_KEYLESS + 4)]
    items.append([{"literal": "odule named", "weight": 0.9}])  # keyless literal, needle inside longer words
    kb = _kb(items)
    assert len(kb.always) > matcher.FEW_KEYLESS
    text = "".join(f"[rank{i % 4}]: step {i} xErr{i % 20}Kind: thing{i} failed\n" for i in range(200))
    text += "xmodule namedy\n" + "no needles here at all\n" * 5 + "Err3Kind: again failed\n"
    expected = _brute(kb, text)
    assert _hits(kb, text) == expected
    monkeypatch.setattr(matcher, "TOKEN_MEMO_BYTES", 200)  # cleared every few lines: same hits
    assert _hits(kb, text) == expected
    monkeypatch.setattr(matcher, "TOKEN_MEMO_FRESH_PER_LINE", 0)  # every line tests the needles directly
    assert _hits(kb, text) == expected
    assert set(expected) == set(range(len(items)))  # every entry fired somewhere: the comparison is not vacuous


def test_saturated_signatures_keep_their_first_hits():
    kb = _kb([[{"literal": "device open failed badly", "weight": 0.9}]])
    text = "".join(f"line {i}\ndevice open failed badly at {i}\n" for i in range(10))
    hits = _hits(kb, text)
    assert [n for n, _ in hits[0][0]] == [2, 4, 6]


def test_required_words_gate_regexes_without_changing_matches():
    assert set(required_words("regex", r"ImportError: cannot import name '(?P<symbol>\w+)' from")) == {
        "ImportError:", "cannot", "import", "name", "'", "from"} - {"'"}  # one-character runs are not worth a test
    assert required_words("regex", r"(?i)error") == () and required_words("literal", "a b c") == ()
    assert required_words("regex", r"(foo|bar) baz") == ("baz",)
    kb = _kb([[{"regex": r"Boom\ happened\ in\ (?P<op>\w+)", "weight": 0.9}]])
    squeezed_only = "Boom   happened\tin   aclnnAdd\n"  # the template matches the squeezed line only
    assert _hits(kb, squeezed_only) == _brute(kb, squeezed_only) != {}
    assert _hits(kb, "Boom happened nowhere\n") == {}
