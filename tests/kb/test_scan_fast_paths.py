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


def _crafted(lines: int) -> str:
    """Unique lines of signature words joined by odd whitespace, every one with an error word
    and a fresh number (what bench/diagnose.py's crafted log does to the scanner)."""
    words = ["Running", "init", "device", "busy", "Err7Kind:", "E40021", "aclnnFoo", "failed", "odule", "named", "in"]
    out = []
    for n in range(lines):
        picked = [words[(n * 7 + k * 5) % len(words)] for k in range(6)]
        out.append(f"[rank{n % 8}]: error {n}  " + "  \t".join(picked))
    return "\n".join(out) + "\n"


# each hits once, after the bulk: found (or not) through the memo, the widened index, a pretokenized chunk
_TAIL = ("x ---> Running  initialise error", "E40020 error 77", "aclnnFoo failed\tin  Add", "xmodule named error",
         "device  busy\tfailed error", "[rank2]: Err7Kind: thing failed 12")


def _crafted_kb() -> CompiledKB:
    items = [[{"regex": rf"Err{i}Kind: (?P<x>\w+) failed", "weight": 0.9}] for i in range(matcher.FEW_KEYLESS + 4)]
    items += [
        [{"literal": " ---> Running in ", "weight": 0.9}],  # trailing space: "in" may start a longer word once squeezed
        [{"literal": "device busy failed", "weight": 0.9}],  # keyed; all three words must be tokens of the line
        [{"literal": "E40020", "weight": 0.9}],  # keyless (one word), digits: found through the zeroed-token memo
        [{"literal": "odule named", "weight": 0.9}],  # (a whole-literal needle: exact spaces only)
        [{"regex": r"aclnnFoo\ failed\ in\ (?P<op>\w+)", "weight": 0.9}],
    ]
    return _kb(items)


def test_pretokenized_chunks_and_required_tokens_match_like_direct_tests(monkeypatch):
    kb = _crafted_kb()
    # the scanner looks at lines with an error word or a needle
    text = _crafted(3000) + "\n".join(_TAIL) + "\n"
    monkeypatch.setattr(matcher, "TOKEN_MEMO_AFTER_LINES", 2)  # the widened index and the memo from the start
    expected = _brute(kb, text)
    lines = text.splitlines()
    fired = {kb.entries[ei].signatures[si].pattern for ei, sigs in expected.items() for si in sigs}
    assert {" ---> Running in ", "E40020", "odule named", "device busy failed", r"aclnnFoo\ failed\ in\ (?P<op>\w+)"} <= fired
    real = matcher._chunk_words
    for size in (400, len(lines)):  # chunks after the first are pretokenized; one chunk is not
        calls = []
        monkeypatch.setattr(matcher, "_chunk_words", lambda *a: calls.append(real(*a)) or calls[-1])
        hits, _ = matcher.scan(kb, [lines[i : i + size] for i in range(0, len(lines), size)])
        assert hits == expected
        assert calls[0] is None and all(words is not None for words in calls[1:])  # the chunk path did the work
    monkeypatch.setattr(matcher, "TOKEN_MEMO_AFTER_LINES", 10**9)  # the plain index and direct needle tests
    assert _hits(kb, text) == expected


def test_chunk_words_are_the_regex_tokens():
    from porter.kb.index import ASCII_TOKEN

    lines = ["[rank1]: a_b-c.d  e\tf", "", "x=1,y=22;z__ (q)", "\x1c\x1fsep", "tail   "]
    text = "\n".join(lines)
    words = matcher._chunk_words(text, len(lines), len(lines))
    assert words is not None and [w.split() for w in words] == [ASCII_TOKEN.findall(line) for line in lines]
    assert matcher._chunk_words(text + " é", len(lines), len(lines)) is None  # not ASCII: per-line regex
    assert matcher._chunk_words(text, 1, len(lines)) is None  # few lines looked at: not worth the chunk


def test_required_tokens_of_collapsed_literals_and_regex_runs():
    from porter.kb.index import required_tokens

    assert required_tokens("literal", " ---> Running in ") == ("Running",)  # "in" ends the collapsed form
    assert required_tokens("literal", "device busy failed") == ("busy",)
    assert required_tokens("regex", r"ImportError: cannot import name '(?P<s>\w+)' from") == ("cannot", "import", "name")
    assert required_tokens("regex", r"(?i)cannot import name") == () and required_tokens("code", "EZ9999") == ()


def test_only_a_prefix_with_a_w_can_label_a_line_a_warning():
    # the scan tests the warning-prefix regex only on a stripped prefix holding "w" or "W"
    import random
    import re
    import sys

    rx = matcher._WARNING_PREFIX.compiled()
    folded = [chr(c) for c in range(sys.maxunicode + 1) if re.fullmatch(r"(?i:w)", chr(c))]
    assert sorted(folded) == ["W", "w"]  # no other character case-folds to the regex's "w"
    rng = random.Random(3)
    pieces = ["W", "w", "WARN", "warning", "Warn", "W0501", "[W", "] ", " ", "(pid=3) ", "INFO", "12:00:01", "[rank0]: ", "x", "0", ")"]
    for _ in range(20000):
        prefix = "".join(rng.choice(pieces) for _ in range(rng.randrange(1, 6)))
        if rx.search(prefix):
            assert "w" in prefix or "W" in prefix, prefix


def test_prefixes_without_a_w_skip_the_warning_regex(monkeypatch):
    class Refuse:
        def search(self, text, pos=0):
            raise AssertionError(f"regex run on {text!r}")

    kb = _kb([[{"literal": "boom failed", "weight": 0.9}]])
    monkeypatch.setattr(matcher, "_WARNING_PREFIX", Refuse())
    lines = [f"[rank{i % 8}]: boom failed step {i}" for i in range(600)] + ["INFO 05-01 12:00:00 [x.py:1] boom failed"]
    hits, signals = matcher.scan(kb, [lines])
    assert hits and not signals.warning_lines
