"""Issue 13, session 9: families written from the s9 dev threads discriminate on structure, not on one message.

- RAY-014 vs CTR-006: the same runtime line, told apart by whether the requested device equals the single id left in
  the visible list (a list narrowed to the chip itself) or names a chip that does not exist there.
- VASC-058: vllm-ascend's device-type check in both spellings, and the build-info form only with an A3 host in the log.
- RL-020: a CPU tensor meeting device storage is FSDP2 offload; two accelerators disagreeing is not.
"""

from __future__ import annotations

import pytest

from porter.kb.matcher import diagnose_text

LINE = "EE1001: The argument is invalid.Reason: Set visible device failed, invalid device={dev}, input visible devices:{vis}\n"


def _top(kb, text):
    diag = diagnose_text(kb, text)
    return diag.top.entry.id if diag.top is not None else None


@pytest.mark.parametrize("dev, vis, want", [
    ("1", "1", "RAY-014"),      # narrowed to the chip, opened by its global index
    ("6", "6", "RAY-014"),
    ("0", "4", "CTR-006"),      # host ids in a container that numbers its chips 0..N-1
    ("1", "10", "CTR-006"),     # a longer id is not the same chip
    ("1", "1,2", "CTR-006"),    # a list, not a single narrowed chip
])
def test_visible_device_line_is_told_apart_by_its_structure(bundled_kb, dev, vis, want):
    assert _top(bundled_kb, LINE.format(dev=dev, vis=vis)) == want


def test_ray_014_fills_the_device_into_its_text(bundled_kb):
    diag = diagnose_text(bundled_kb, LINE.format(dev="3", vis="3"))
    assert diag.top.entry.id == "RAY-014"
    assert diag.top.captures.get("device") == "3"


@pytest.mark.parametrize("current, installed", [
    ("AscendDeviceType._910_93", "AscendDeviceType._910B"),   # AssertionError form (#4359)
    ("A3", "A2"),                                              # RuntimeError form (#13672)
])
def test_vasc_058_reads_the_device_type_check(bundled_kb, current, installed):
    text = (f"RuntimeError: Current device type: {current} does not match the installed version's device type: "
            f"{installed}, please check your installation package.\n")
    assert _top(bundled_kb, text) == "VASC-058"


def test_vasc_058_build_info_needs_an_a3_host_in_the_log(bundled_kb):
    build_info = "# Auto-generated file\n__device_type__ = 'A2'\n"
    assert _top(bundled_kb, build_info) is None
    assert _top(bundled_kb, "NPU : Atlas 800T A3 (Ascend910_9382)\n" + build_info) == "VASC-058"


def test_rl_020_needs_the_cpu_side_of_the_storage_check(bundled_kb):
    npu_npu = ('RuntimeError: Attempted to set the storage of a tensor on device "npu:4" to a storage on different '
               'device "npu:0". This is no longer allowed; the devices must match.\n')
    cpu_npu = ('RuntimeError: Attempted to set the storage of a tensor on device "cpu"\n'
               '              to a storage on different device "npu:0".\n')
    assert _top(bundled_kb, npu_npu) != "RL-020"
    assert _top(bundled_kb, cpu_npu) == "RL-020"
