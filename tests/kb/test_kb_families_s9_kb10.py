"""Issue 13, session 9 (kb10): two class widenings, each told apart from its look-alikes by structure.

- PKG-016: NumPy 2.0's removed aliases seen as a plain AttributeError, only for the names 2.0 removed
  (np.float / np.int went in 1.24 and need another fix).
- DRV-006: the runtime's 'open device N failed, runtime result = 107001' (invalid device id) alone; RAY-014 still
  wins where the narrowed visible-device line says why, and another runtime code is not this fault.
"""

from __future__ import annotations

import pytest

from porter.kb.matcher import diagnose_text


def _ids(kb, text):
    return [m.entry.id for m in diagnose_text(kb, text).matches]


@pytest.mark.parametrize("name", ["float_", "NaN", "string_", "unicode_", "Inf"])
def test_pkg_016_reads_numpy2_removed_aliases_as_attribute_errors(bundled_kb, name):
    text = f"Traceback (most recent call last):\n  File \"x.py\", line 3, in <module>\nAttributeError: module 'numpy' has no attribute '{name}'\n"
    assert _ids(bundled_kb, text)[:1] == ["PKG-016"]


@pytest.mark.parametrize("text", [
    "AttributeError: module 'numpy' has no attribute 'float'.\n",      # removed in 1.24: numpy<2 does not fix it
    "AttributeError: module 'numpy' has no attribute 'int'\n",
    "AttributeError: module 'numpy.typing' has no attribute 'NaN'\n",  # another module
    "AttributeError: module 'numpyro' has no attribute 'float_'\n",
])
def test_pkg_016_leaves_other_attribute_errors_alone(bundled_kb, text):
    assert "PKG-016" not in _ids(bundled_kb, text)


def test_drv_006_answers_the_bare_invalid_device_open_line_and_fills_the_device(bundled_kb):
    text = ("RuntimeError: Initialize:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:146 NPU function error: "
            "c10_npu::SetDevice(device_id_), error code is 107001\n"
            "        open device 3 failed, runtime result = 107001.[FUNC:ReportCallError][FILE:log_inner.cpp][LINE:161]\n")
    diag = diagnose_text(bundled_kb, text)
    assert diag.top is not None and diag.top.entry.id == "DRV-006"
    assert diag.top.captures.get("number") == "3"


def test_drv_006_does_not_claim_other_open_device_codes(bundled_kb):
    text = "        open device 1 failed, runtime result = 507033.[FUNC:ReportCallError][FILE:log_inner.cpp][LINE:148]\n"
    assert "DRV-006" not in _ids(bundled_kb, text)


def test_ray_014_still_outranks_drv_006_when_the_narrowed_visible_line_is_there(bundled_kb):
    text = ("EE1001: The argument is invalid.Reason: Set visible device failed, invalid device=1, input visible devices:1\n"
            "        open device 1 failed, runtime result = 107001.[FUNC:ReportCallError][FILE:log_inner.cpp][LINE:161]\n")
    assert _ids(bundled_kb, text)[:1] == ["RAY-014"]
