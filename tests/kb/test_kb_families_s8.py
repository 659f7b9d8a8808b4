"""Issue 13, session 8: the raw-traceback forms added to CANN-005 (a toolkit dependency missing under a tbe frame)
and TNPU-020 (torch_npu's inductor helpers importing a triton-ascend submodule the installed release lacks), and the
two entries written from new dev threads; each fires on wording the entry was not written from and stays quiet on
the look-alike that shares one of its lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from porter.kb.matcher import diagnose_text

ROOT = Path(__file__).resolve().parents[2]
PATTERNS = ROOT / "knowledge" / "patterns"

pytestmark = pytest.mark.skipif(not any(PATTERNS.rglob("*.yaml")), reason="no knowledge-base entries in this checkout")

TBE_FRAME = '  File "/opt/cann/python/site-packages/tbe/common/utils/para_check.py", line 9, in check\n'
TE_FRAME = '  File "/opt/cann/python/site-packages/te/platform/cce_conf.py", line 3, in <module>\n'


def ids(diag):
    return [m.entry.id for m in diag.matches]


def test_a_toolkit_dependency_missing_under_a_tbe_frame_is_cann_005(bundled_kb):
    trace = "Traceback (most recent call last):\n" + TBE_FRAME + "    import psutil\nModuleNotFoundError: No module named 'psutil'\n"
    diag = diagnose_text(bundled_kb, trace)
    assert diag.top is not None and diag.top.entry.id == "CANN-005"
    assert diag.top.captures.get("module") == "psutil"


def test_an_op_compile_error_with_tbe_and_te_frames_alone_is_not_cann_005(bundled_kb):
    # a parameter check that fails inside TBE shows both frames: no missing module, not this entry
    trace = ("Traceback (most recent call last):\n" + TBE_FRAME + TE_FRAME
             + "RuntimeError: ({'errCode': 'E80000', 'op_name': 'strided_slice_grad_d', 'param_name': 'stride'})\n")
    assert "CANN-005" not in ids(diagnose_text(bundled_kb, trace))


def test_a_missing_user_module_under_a_tbe_frame_is_not_cann_005(bundled_kb):
    # only the toolkit's own dependencies are named: a user's package missing is another problem
    trace = "Traceback (most recent call last):\n" + TBE_FRAME + "ModuleNotFoundError: No module named 'my_kernels'\n"
    assert "CANN-005" not in ids(diagnose_text(bundled_kb, trace))


def test_torch_npu_inductor_importing_a_missing_triton_submodule_is_tnpu_020(bundled_kb):
    trace = ('  File "/usr/lib/python3.11/site-packages/torch_npu/_inductor/codegen/triton.py", line 7, in <module>\n'
             "    from triton.backends.ascend.utils import get_device_properties\n"
             "torch._inductor.exc.InductorError: ModuleNotFoundError: No module named 'triton.backends.ascend.utils'\n")
    diag = diagnose_text(bundled_kb, trace)
    assert diag.top is not None and diag.top.entry.id == "TNPU-020"


def test_a_missing_triton_submodule_without_a_torch_npu_frame_is_not_tnpu_020(bundled_kb):
    trace = ('  File "/work/kernels/add.py", line 2, in <module>\n'
             "ModuleNotFoundError: No module named 'triton.language.extra.cuda'\n")
    assert "TNPU-020" not in ids(diagnose_text(bundled_kb, trace))


def test_driver_host_register_failure_is_drv_012_but_the_wrapper_line_alone_is_evidence_only(bundled_kb):
    diag = diagnose_text(bundled_kb, "Unable to halHostRegister: 65534\nRuntimeError: register ptr failed\n")
    assert diag.top is not None and diag.top.entry.id == "DRV-012" and diag.top.captures.get("code") == "65534"
    # the Python wrapper's message also prints when a registration exceeds the driver's limits
    assert "DRV-012" not in ids(diagnose_text(bundled_kb, "RuntimeError: register ptr failed\n"))


def test_the_cpp_init_npu_link_error_is_tnpu_041(bundled_kb):
    trace = "/usr/bin/ld: main.o: in function `main':\nmain.cpp:(.text+0x2c): undefined reference to `torch_npu::init_npu(std::string const&)'\n"
    diag = diagnose_text(bundled_kb, trace)
    assert diag.top is not None and diag.top.entry.id == "TNPU-041"
