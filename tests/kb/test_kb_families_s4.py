"""Family entries added for issue 13 (session 4): they fire on sibling wordings, capture the
variable part for the fix text, and stay quiet on the generic lines several causes print."""

from __future__ import annotations

from pathlib import Path

import pytest

from porter.kb.families import capture_names, fill
from tests.kb.conftest import top_match

ROOT = Path(__file__).resolve().parents[2]
PATTERNS = ROOT / "knowledge" / "patterns"
TRACES = ROOT / "tests" / "data" / "traces"

pytestmark = pytest.mark.skipif(not any(PATTERNS.rglob("*.yaml")), reason="no knowledge-base entries in this checkout")


@pytest.fixture
def kb(bundled_kb):
    return bundled_kb


def test_hccl_env_var_family_captures_the_variable_for_the_fix(kb):
    text = (TRACES / "hccl" / "HCCL-017-hiascend-hcclug-ei0001.txt").read_text()
    top = top_match(kb, text)
    assert top is not None and top.entry.id == "HCCL-017"
    assert top.captures["env"] == "HCCL_EXEC_TIMEOUT"
    assert "HCCL_EXEC_TIMEOUT" in fill(top.entry.fix[0], top.captures, capture_names(top.entry.signatures))
    # another variable, same family
    sibling = text.replace("HCCL_EXEC_TIMEOUT", "HCCL_CONNECT_TIMEOUT")
    assert top_match(kb, sibling).captures["env"] == "HCCL_CONNECT_TIMEOUT"


def test_torch_npu_not_imported_family_covers_both_wordings(kb):
    text = (TRACES / "torch-npu" / "TNPU-036-mineru-2665.txt").read_text()
    assert top_match(kb, text).entry.id == "TNPU-036"
    assert top_match(kb, "AttributeError: module 'torch' has no attribute 'npu'").entry.id == "TNPU-036"
    # torch_npu present and working: an ordinary device line is not a diagnosis
    assert top_match(kb, "INFO: using device npu:0 (torch_npu 2.5.1)") is None


def test_op_compiler_missing_python_module_is_named(kb):
    text = (TRACES / "cann" / "CANN-005-hiascend-forum-02105165565698118094.txt").read_text()
    top = top_match(kb, text)
    assert top is not None and top.entry.id == "CANN-005"
    assert top.captures["module"] == "sympy"
    assert "pip install sympy" in fill(top.entry.fix[0], top.captures, capture_names(top.entry.signatures))


def test_generic_acl_compile_option_failure_alone_is_not_a_diagnosis(kb):
    """AclSetCompileopt ... 500001 is printed for several causes (missing op-compiler modules, an
    unsupported SoC platform file, ...): without the line that names the cause it stays unknown."""
    text = (TRACES / "cann" / "CANN-005-hiascend-forum-02105165565698118094.txt").read_text()
    head = "\n".join(text.splitlines()[:4])
    assert "500001" in head and "No module named" not in head
    assert top_match(kb, head) is None


def test_master_port_family_needs_the_failure_not_one_bind_warning(kb):
    text = (TRACES / "hccl" / "HCCL-018-mochi-xdit-22.txt").read_text()
    top = top_match(kb, text)
    assert top.entry.id == "HCCL-018" and top.captures["port"] == "29500"
    # torch warns once per address family before it gives up: one [W] line is not yet a failure
    warning = "[W socket.cpp:426] [c10d] The server socket has failed to bind to [::]:29511 (errno: 98 - Address already in use)."
    assert top_match(kb, warning) is None
    failed = warning + "\n[E socket.cpp:462] [c10d] The server socket has failed to listen on any local network address."
    top = top_match(kb, failed)
    assert top is not None and top.entry.id == "HCCL-018" and top.captures["port"] == "29511"


def test_hccl_missing_collective_names_the_op(kb):
    text = (TRACES / "hccl" / "HCCL-019-transformers-27120.txt").read_text()
    top = top_match(kb, text)
    assert top.entry.id == "HCCL-019" and top.captures["op"] == "gather"
    assert top_match(kb, "RuntimeError: ProcessGroupHCCL does not support scatter").captures["op"] == "scatter"


def test_driver_installer_family_captures_the_missing_tools(kb):
    text = (TRACES / "driver" / "DRV-010-hiascend-instg-800-0069-1.txt").read_text()
    top = top_match(kb, text)
    assert top.entry.id == "DRV-010" and top.captures["tools"] == "lspci,ifconfig"
    assert top_match(kb, "[ERROR]The list of missing tools: dkms").captures["tools"] == "dkms"


def test_bitsandbytes_import_warning_alone_is_not_a_diagnosis(kb):
    """Every CUDA-less bitsandbytes build warns on import, also on runs that never quantize."""
    warning = ("UserWarning: The installed version of bitsandbytes was compiled without GPU support. 8-bit optimizers, "
               "8-bit multiplication, and GPU quantization are unavailable.")
    assert top_match(kb, warning) is None
    text = (TRACES / "packaging" / "PKG-019-llamafactory-3271.txt").read_text()
    assert top_match(kb, text).entry.id == "PKG-019"
