"""What a folded answer leaves behind is tidied as a maintainer would write it: no `assert True`, no
`while False:` loop, no `**{}` argument, no `else: pass`, no `x and True` in a test, and an `if True:` /
`a if True else b` gives way to the branch it always takes."""

from __future__ import annotations

import dataclasses

from porter.upgrade.drop import drop_source
from tests.upgrade.test_drop_values import _feature_lanes, _verdicts

PATH = "vllm_ascend/m.py"

STATEMENTS = '''from vllm_ascend.utils import vllm_version_is
from vllm.layers import Runner


def build(layer, x, items):
    assert not vllm_version_is("0.10.0")
    while vllm_version_is("0.10.0"):
        layer.step()
    runner = Runner(layer, **({"legacy": 1} if vllm_version_is("0.10.0") else {}))
    other = Runner(
        layer,
        **({"legacy": 1} if vllm_version_is("0.10.0") else {}),
    )
    kept = Runner(layer, **{})
    flags = [i for i in items if x and not vllm_version_is("0.10.0")]
    if x:
        other.go()
    else:
        if vllm_version_is("0.10.0"):
            other.stop()
    return runner, other, kept, flags
'''


def _dropped(source: str, verdicts=None) -> str:
    new = drop_source(source, PATH, verdicts if verdicts is not None else _verdicts(source, _feature_lanes())).source
    compile(new, PATH, "exec")
    return new


def test_answered_asserts_loops_unpackings_and_filters_are_tidied():
    new = _dropped(STATEMENTS)
    assert "assert" not in new  # `assert True` checks nothing
    assert "while" not in new and "layer.step()" not in new  # `while False:` never ran
    assert "runner = Runner(layer)\n" in new  # `**{}` passes nothing
    assert "    other = Runner(\n        layer,\n    )\n" in new  # the trailing comma of a one-a-line call stays
    assert "kept = Runner(layer, **{})\n" in new  # an empty unpacking the source already had is not the drop's
    assert "flags = [i for i in items if x]\n" in new  # `x and True` filters as `x` does
    assert "    if x:\n        other.go()\n    return" in new  # no `else: pass`


BRANCHES = '''from vllm_ascend.utils import vllm_version_is


def build(layer, x):
    if vllm_version_is("0.10.0"):
        layer.old()
    else:
        layer.new()
        layer.done()
    if x and not vllm_version_is("0.10.0"):
        layer.go()
    mode = "a" if vllm_version_is("0.10.0") else "b"
    return mode
'''


def test_an_if_or_conditional_whose_test_got_answered_takes_its_branch():
    # Each test here answered as a value (the scan's `value` verdict at that line), not decided as a guard.
    value = next(v for v in _verdicts(STATEMENTS, _feature_lanes()) if v.kind == "value")
    verdicts = [dataclasses.replace(value, line=line) for line in (5, 10, 12)]
    new = _dropped(BRANCHES, verdicts)
    assert "    layer.new()\n    layer.done()\n" in new and "old()" not in new  # `if False:` -> its else, dedented
    assert "    if x:\n        layer.go()\n" in new  # `x and True` in an `if` is `x`
    assert 'mode = "b"\n' in new  # `"a" if False else "b"`
    assert "True" not in new and "False" not in new
