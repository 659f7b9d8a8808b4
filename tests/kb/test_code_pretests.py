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
    monkeypatch.setattr(extract, "_CODE_PRETESTS", {})
    assert _codes(lines) == with_pretests
    assert {"507899", "161002", "EZ9999", "500001"} <= set(with_pretests)
