"""`--drop OLD` layout after a collapse: the spacing isort/ruff give the neighbours a drop makes, isort
fences, and one import where two collapsed guards lift the same one."""

from __future__ import annotations

from porter.upgrade.drop import drop_source
from porter.upgrade.lanes import GuardVerdict


def _collapse(line: int, end: int, kept: str = "else") -> GuardVerdict:
    return GuardVerdict("m.py", line, end, 'vllm_version_is("0.11.0")', "collapse", "", kept=kept)


def test_imports_the_drop_makes_neighbours_are_spaced_as_isort_spaces_them():
    source = '''from vllm.utils import logger

from vllm_ascend.utils import vllm_version_is

if vllm_version_is("0.11.0"):
    from vllm.utils import cdiv
else:
    from vllm.utils.math_utils import cdiv

from vllm.v1.core import BlockHash


X = (logger, cdiv, BlockHash)
'''
    new = drop_source(source, "m.py", [_collapse(5, 8)]).source
    compile(new, "m.py", "exec")
    # One package's imports are one run; the code after the block keeps the gap the drop did not make.
    assert new == ('from vllm.utils import logger\nfrom vllm.utils.math_utils import cdiv\n'
                   'from vllm.v1.core import BlockHash\n\n\nX = (logger, cdiv, BlockHash)\n')


def test_code_after_the_import_block_gets_one_blank_line_when_the_guard_between_goes():
    source = '''import torch
from vllm.a import A

from vllm_ascend.utils import vllm_version_is, weak

if vllm_version_is("0.11.0"):
    from vllm.old import B
else:
    from vllm.new import B


# a limit
LIMIT = 1


def f():
    return torch, A, B, weak, LIMIT
'''
    new = drop_source(source, "m.py", [_collapse(6, 9)]).source
    assert "from vllm_ascend.utils import weak\n\n# a limit\nLIMIT = 1\n\n\ndef f():" in new


def test_an_isort_fence_the_drop_did_not_empty_stays_and_one_around_a_lone_lifted_import_goes():
    source = '''import torch

from vllm_ascend.utils import pcp_enabled, vllm_version_is

# isort: off
if pcp_enabled():
    from vllm.distributed import get_pcp_group
# isort: on

# isort: off
if vllm_version_is("0.11.0"):
    from vllm.attention.backends.utils import PAD  # type: ignore
else:
    from vllm.v1.attention.backends.utils import PAD  # type: ignore
# isort: on


def f():
    return torch, PAD, get_pcp_group
'''
    new = drop_source(source, "m.py", [_collapse(11, 14)]).source
    compile(new, "m.py", "exec")
    assert "# isort: off\nif pcp_enabled():\n    from vllm.distributed import get_pcp_group\n# isort: on\n" in new
    assert new.count("isort") == 2  # the fence around the collapsed guard went with it
    assert "from vllm.v1.attention.backends.utils import PAD  # type: ignore\n" in new


def test_two_collapsed_guards_that_lift_the_same_import_leave_one():
    source = '''import torch
from vllm.config import Config

from vllm_ascend.utils import vllm_version_is

if vllm_version_is("0.11.0"):
    from vllm.attention import Attention
else:
    from vllm.attention.layer import MLAAttention

if vllm_version_is("0.11.0"):
    from vllm.attention import Attention
else:
    from vllm.attention.layer import MLAAttention


def f():
    return torch, Config, MLAAttention
'''
    new = drop_source(source, "m.py", [_collapse(6, 9), _collapse(11, 14)]).source
    compile(new, "m.py", "exec")
    assert new.count("from vllm.attention.layer import MLAAttention") == 1
    assert new.startswith("import torch\nfrom vllm.attention.layer import MLAAttention\nfrom vllm.config import Config\n")
