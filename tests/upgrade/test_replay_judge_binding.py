"""bench/replay/judge.py on an override that lacks a parameter the base gained: a `self.m(...)` call in the
base's own module that does not bind to the override proves the break (a positional now fills the slot a
keyword names); a method passed by reference (`run(self.m, **kwargs)`) leaves it unjudged instead of
"no call passes it by keyword" (synthetic NEW tree in a tmp dir)."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "replay"))

from judge import Tree, judge  # noqa: E402  (bench/replay/judge.py)

BASE = """
    class Spec:
        def draft(self, n, meta, slots, across=None):
            return n

        def propose(self):
            {call}

        def capture(self):
            run(self.draft, n=1, meta={{}}, slots=[])


    def run(fn, **kwargs):
        return fn(**kwargs)
"""
MESSAGE = ("vllm.spec.Spec.draft gained parameter(s) slots that the override does not accept "
           "(override MySpec.draft(self, n, meta, across))")


def _verdict(tmp_path: Path, call: str):
    root = tmp_path / "vllm-2"
    (root / "vllm").mkdir(parents=True)
    (root / "vllm" / "__init__.py").write_text("")
    (root / "vllm" / "spec.py").write_text(textwrap.dedent(BASE.format(call=call)))
    record = {"key": "F3:vllm.spec.Spec.draft", "family": "F3", "symbol": "vllm.spec.Spec.draft", "severity": "breaking",
              "message": MESSAGE, "detail": {"change": "override_mismatch", "method": "draft"},
              "sites": [{"path": "myplug/spec.py", "line": 3}]}
    tree = Tree(root, None)
    return judge(record, tree, None, lambda path: "")


def test_a_self_call_in_the_base_that_does_not_bind_is_real(tmp_path):
    got = _verdict(tmp_path, "self.draft(1, {}, [], across=None)")  # `[]` lands in `across`, then across= again
    assert got is not None and got[0] == "known_real" and "vllm/spec.py:7" in got[1]


def test_a_method_passed_by_reference_is_left_unjudged(tmp_path):
    assert _verdict(tmp_path, "return None") is None
