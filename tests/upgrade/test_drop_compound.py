"""`--drop OLD` on compound version tests outside an `if`: the answer a drop writes for a version test
used as a value is folded into the `and`/`or` it heads (`False or x` -> `x`), and a version predicate
whose value mixes a decided version check with plugin state (`legacy = vllm_version_is("OLD") or
envs.X`) loses the check instead of being kept whole (no guard reading the name can drop it)."""

from __future__ import annotations

from packaging.version import Version

from porter.upgrade.drop import drop_source
from porter.upgrade.guards import GuardConventions
from porter.upgrade.lanes import Lanes, guard_verdicts
from porter.upgrade.usage import scan_source


def _drop(source: str):
    usage = scan_source("m.py", source.encode(), ["vllm"], ["vllm_ascend"])
    lanes = Lanes.for_move("vllm", Version("0.10.1"), "0.10.1", Version("0.10.0"))
    verdicts = guard_verdicts(usage.guard_blocks, set(), GuardConventions({"vllm_version_is": "vllm"}), lanes)
    result = drop_source(source, "m.py", verdicts)
    compile(result.source, "m.py", "exec")
    return {v.line: v for v in verdicts}, result


VALUES = '''from vllm_ascend.utils import vllm_version_is
import os


def f(g, xs):
    a = g(legacy=vllm_version_is("0.10.0") or os.environ.get("A"))
    b = g(fast=not vllm_version_is("0.10.0") and os.environ.get("B"))
    c = g(z=(vllm_version_is("0.10.0") or vllm_version_is("0.9.2")))
    d = [x for x in xs if not vllm_version_is("0.10.0") or x]
    e = g(k=vllm_version_is("0.10.0") and os.environ.get("E"))
    h = g(k=os.environ.get("H") or vllm_version_is("0.10.0"))
    return a, b, c, d, e, h
'''


def test_an_answered_value_test_folds_into_the_operation_it_heads():
    _, result = _drop(VALUES)
    new = result.source
    assert 'a = g(legacy=os.environ.get("A"))' in new  # False or x -> x
    assert 'b = g(fast=os.environ.get("B"))' in new  # not False and x -> x
    assert "c = g(z=False)" in new  # both checks answered, no brackets left round a name
    assert "d = [x for x in xs]\n" in new  # True or x -> True: the filter goes
    assert "e = g(k=False)" in new  # False and x -> False (x is never evaluated)
    # a right-hand answer stays: `x or False` is not `x` as a value
    assert 'h = g(k=os.environ.get("H") or False)' in new
    assert "vllm_version_is" not in new


PREDICATES = '''from vllm_ascend.utils import vllm_version_is
import os

use_x = vllm_version_is("0.10.0") or os.environ.get("X")
both = vllm_version_is("0.10.0") and vllm_version_is("0.9.2")


def f(g):
    legacy = not vllm_version_is("0.10.0") and os.environ.get("Y")
    if use_x:
        return g(legacy)
    return g(flag=use_x)


def h(x):
    keep = vllm_version_is("0.10.1") or x
    return keep
'''


def test_a_predicate_mixing_a_decided_check_with_other_state_loses_the_check():
    verdicts, result = _drop(PREDICATES)
    assert (verdicts[4].verdict, verdicts[4].kept) == ("collapse", "test")
    assert (verdicts[9].verdict, verdicts[9].kept) == ("collapse", "test")
    assert 16 not in verdicts or verdicts[16].verdict == "keep"  # a check the lanes answer differently: the predicate stays as it is
    new = result.source
    assert 'use_x = os.environ.get("X")\n' in new and 'legacy = os.environ.get("Y")\n' in new
    assert "if use_x:\n        return g(legacy)" in new  # the guard reading the name is untouched
    assert 'keep = vllm_version_is("0.10.1") or x' in new  # so the helper import stays too
    assert "0.10.0" not in new
    kinds = sorted((e.line, e.action, e.kept) for e in result.edits if e.kept == "test")
    assert kinds == [(4, "collapse", "test"), (9, "collapse", "test")]


def test_a_predicate_decided_whole_is_not_a_partial_collapse():
    verdicts, result = _drop(PREDICATES)
    assert verdicts[5].kept != "test"  # both checks decided: the predicate is answered, not simplified
    assert "both = False\n" in result.source


def test_a_predicate_read_only_by_guards_keeps_just_the_rest_of_its_test():
    source = ('from vllm_ascend.utils import vllm_version_is\nimport os\n\n'
              'use_y = os.environ.get("Y") and not vllm_version_is("0.10.0")\n'
              'as_value = os.environ.get("Z") and not vllm_version_is("0.10.0")\n\n\n'
              'def f():\n    if use_y:\n        return 1\n    return as_value\n')
    verdicts, result = _drop(source)
    assert verdicts[4].tested_only and not verdicts[5].tested_only
    assert 'use_y = os.environ.get("Y")\n' in result.source  # only its truth is read: `x and True` is `x`
    assert 'as_value = os.environ.get("Z") and True\n' in result.source  # returned: the exact value stays
