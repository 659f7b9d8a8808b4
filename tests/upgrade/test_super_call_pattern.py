"""drift.calls_super answers what a search of the per-name pattern answers (one pattern for every name)."""

from __future__ import annotations

import random
import re

from porter.upgrade.drift import calls_super


def _per_name(method: str, body: str) -> bool:
    return re.search(r"\bsuper\s*\([^()]*\)\s*\.\s*" + re.escape(method) + r"\s*\(", body) is not None


CASES = [
    ("forward", "return super().forward(x)"),
    ("forward", "return super().forward_native(x)"),  # a longer name is another method
    ("forward", "return super(Cls, self).forward  (x)"),
    ("forward", "y = super().\n    forward(x)"),
    ("forward", "super().forwardd(x)"),
    ("forward", "xsuper().forward(x)"),  # not the word super
    ("m", "super().super().m(1)"),  # a call that starts inside another candidate
    ("m", "super(super).m(1)"),
    ("m", "super((a)).m(1)"),  # parentheses inside the super call: no match either way
    ("__init__", "super().__init__(**kwargs)"),
    ("init", "super().__init__()"),
    ("f", ""),
    ("f", "super.f()"),
    ("caf\u00e9", "super().caf\u00e9(1)"),  # a non-ASCII name: the per-name pattern itself
    ("caf", "super().caf\u00e9(1)"),
]


def test_known_shapes():
    for method, body in CASES:
        assert calls_super(method, body) == _per_name(method, body), (method, body)
    assert calls_super("forward", "return super().forward(x)") and not calls_super("forward", "super().forwardd(x)")
    assert calls_super("m", "super().super().m(1)")


def test_random_bodies_agree():
    rng = random.Random(7)
    pieces = ["super", "(", ")", ".", " ", "\n", "m", "mm", "m2", "f", "_", "x", "self", ",", "super()", "(a)", "\t", "é"]
    for _ in range(4000):
        body = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 14)))
        for method in ("m", "mm", "f", "_", "m2"):
            assert calls_super(method, body) == _per_name(method, body), (method, body)
