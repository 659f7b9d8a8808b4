"""The extractor's code pretests (extract._CODE_PRETESTS) only skip lines their pattern cannot match."""

from __future__ import annotations

import random

from porter.kb import extract


def _codes(lines: list[str]) -> dict:
    ex = extract.Extractor()
    for number, line in enumerate(lines, 1):
        ex._record_codes(number, line)
    return ex._codes


def test_pretests_are_necessary_for_their_pattern():
    rng = random.Random(13)
    pieces = ["E", "e", "rr", "or", "rror", " ", "_", "Code", "code", "c", "is", " is", "=", ":", "[", "]", "\t",
              "1", "12", "123", "5078", "99", "000000", "x", "ErrCode", "err_code", "Error code", "error"]
    lines = ["".join(rng.choice(pieces) for _ in range(rng.randrange(2, 14))) for _ in range(20000)]
    lines += ["error code 507899", "ErrCode=161002", "errcode: [123456]", "err_code is 999999", "Error 500001",
              "error_Code  = 1234567", "error 12345", "xerror123456y", "Error code is [561003]"]
    assert {p.pattern for _, p in extract._CODES} >= set(extract._CODE_PRETESTS)  # each pretest still has its pattern
    assert len(extract._CODES) == len(extract._CODE_LITERALS)
    for _, pattern in extract._CODES:
        pretest = extract._CODE_PRETESTS.get(pattern.pattern)
        if pretest is None:
            continue
        for line in lines:
            if pattern.search(line):
                assert pretest.search(line), (pattern.pattern, line)
    assert sum(1 for line in lines if extract._CODES[2][1].search(line)) > 100  # the fuzz reaches the pattern


def test_codes_found_with_and_without_pretests_are_the_same(monkeypatch):
    lines = [f"[rank{i % 8}]: error {i}  step {i * 7}  loss 0.{i}" for i in range(990, 1100)]
    lines += ["RuntimeError: error code 507899 EZ9999", "ret is -3 dcmi get fail ret = 8", "ErrCode=161002 result = 500001"]
    with_pretests = _codes(lines)
    monkeypatch.setattr(extract, "_CODE_PLAN", extract._code_plan({}))
    assert _codes(lines) == with_pretests
    assert {"507899", "161002", "EZ9999", "500001"} <= set(with_pretests)


def _gate_first_codes(lines: list[str]) -> dict:
    """What _record_codes found when it ran _CODE_GATE first on every line (before _GATE_IMPLIED)."""
    found: dict = {}
    for number, text in enumerate(lines, 1):
        if len(found) >= extract.MAX_CODES or not extract._CODE_GATE.search(text):
            continue
        for (family, pattern), literal in zip(extract._CODES, extract._CODE_LITERALS):
            if literal not in text:
                continue
            for m in pattern.finditer(text):
                start = m.start()
                if start and (text[start - 1].isalnum() and pattern.pattern[0] in "E5"):
                    continue
                code = m.group(1) if pattern.groups else m.group()
                code = f"HCCL:{code}" if family == "hccl" else code
                if code not in found and len(found) < extract.MAX_CODES:
                    found[code] = (code, family, number)
    return found


_GATE_PIECES = ["ret is ", "ret is -", "dcmi ", "ret = ", "ret code: ", "ret code=-80", "ret code: -80", "-80", "code=", "result = ", "retCode=0x", "drvRetCode=",
                "HCCL function error: ", " error code is ", "ERR", "EZ", "E", "507", "error ", "Error code ", "rr", "0x", "x", " ",
                "1", "12", "123", "9", "٣", "a", "1234", "12345", "123456", ":", "="]


def test_patterns_said_to_imply_the_gate_do():
    rng = random.Random(21)
    lines = ["".join(rng.choice(_GATE_PIECES) for _ in range(rng.randrange(1, 10))) for _ in range(30000)]
    patterns = {p.pattern: p for _, p in extract._CODES}
    assert extract._GATE_IMPLIED <= set(patterns)  # each still names a pattern
    for text in extract._GATE_IMPLIED:
        matched = [line for line in lines if patterns[text].search(line)]
        assert len(matched) > 20, text  # the fuzz reaches the pattern
        for line in matched:
            assert extract._CODE_GATE.search(line), (text, line)


def test_codes_are_those_the_gate_first_scan_found():
    rng = random.Random(22)
    for _ in range(300):
        lines = ["".join(rng.choice(_GATE_PIECES) for _ in range(rng.randrange(1, 10))) for _ in range(40)]
        assert _codes(lines) == _gate_first_codes(lines)
    # short driver codes only count on a line the gate passes (four digits, 0x, ...), as before
    assert _codes(["ret is -3 dcmi get fail ret = 8"]) == {}
    assert set(_codes(["ret is -3 after 1234 ms"])) == {"-3"}
