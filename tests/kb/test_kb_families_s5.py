"""Issue 13, session 5 (system layers): warning-class entries stay advice on a working run, and
the family entries written from vendor documentation fire on sibling wordings with captures."""

from __future__ import annotations

from pathlib import Path

import pytest

from porter.kb.matcher import ADVICE_NOTE, diagnose_text
from tests.kb.conftest import entry, top_match

ROOT = Path(__file__).resolve().parents[2]
PATTERNS = ROOT / "knowledge" / "patterns"

CAUTION = ("[W compiler_depend.ts:51] Warning: CAUTION: The operator 'aten::isin' is not currently supported on the NPU "
           "backend and will fall back to run on the CPU. This may have performance implications.\n")


@pytest.fixture
def advice_kb(fixture_kb):
    fixture_kb.add(entry("TNPU-001", "torch-npu", [{"literal": "is not currently supported on the NPU backend", "weight": 0.8}],
                         severity="warning"))
    fixture_kb.add(entry("PKG-001", "packaging", [{"literal": "pip install --no-deps triton-ascend", "weight": 0.8}],
                         severity="warning"))
    return fixture_kb.compiled()


def test_a_fallback_warning_on_a_working_run_is_advice_not_a_diagnosis(advice_kb):
    text = "step 1/2 start\n" + CAUTION + "step 1/2 done, loss 2.31\n"
    diag = diagnose_text(advice_kb, text)
    assert diag.status == "unknown"
    near = diag.near_misses[0]
    assert near.entry.id == "TNPU-001" and near.explain["advice"] == ADVICE_NOTE


def test_the_warning_entry_is_a_diagnosis_when_the_log_also_fails(advice_kb):
    for failure in ("Traceback (most recent call last):\n  File \"t.py\", line 4, in <module>\nRuntimeError: boom\n",
                    "[ERROR] 2024-11-28-11:37:15 (PID:6547, Device:0) ERR01007 OPS feature not supported\n",
                    "worker exited: segmentation fault (core dumped)\n"):
        diag = diagnose_text(advice_kb, CAUTION + failure)
        assert diag.status == "match" and "TNPU-001" in [m.entry.id for m in diag.matches], failure


def test_a_failed_check_in_another_warning_line_does_not_turn_advice_into_a_diagnosis(advice_kb):
    # session 8: a working detection run also prints torch_npu's warning about a failed storage-offset check
    offset = ("[W OpCommand.cpp:88] Warning: [Check][offset] Check input storage_offset[%ld] = 0 failed, "
              "result is untrustworthy1 (function operator())\n")
    diag = diagnose_text(advice_kb, "predict start\n" + offset + CAUTION + "predict done\n")
    assert diag.status == "unknown" and diag.near_misses[0].explain["advice"] == ADVICE_NOTE
    # the same failed check printed as an error line is still a failure
    failing = offset.replace("[W OpCommand.cpp:88] Warning: ", "[E OpCommand.cpp:88] ")
    assert diagnose_text(advice_kb, "predict start\n" + failing + CAUTION).status == "match"


def test_a_warning_entry_that_matches_a_non_warning_line_stays_a_diagnosis(advice_kb):
    # a hang or a bad setting prints no failure by nature: the gate only covers warning-labelled lines
    diag = diagnose_text(advice_kb, "RUN pip install --no-deps triton-ascend==3.2.0\n")
    assert diag.top is not None and diag.top.entry.id == "PKG-001"


def test_an_error_entry_that_matched_only_a_warning_line_of_a_working_run_is_advice_too(fixture_kb):
    # torch_npu prints this when the installed CANN lacks a newer entry point and it falls back: fine on a working run
    fixture_kb.add(entry("CANN-001", "cann", [{"regex": r"Failed to find function acl\w+", "weight": 0.9}]))
    kb = fixture_kb.compiled()
    warning = "[W compiler_depend.ts:190] Warning: 0Failed to find function aclrtCreateEventExWithFlag (function operator())\n"
    diag = diagnose_text(kb, warning)
    assert diag.status == "unknown" and diag.near_misses[0].explain["advice"] == ADVICE_NOTE
    failing = warning + "RuntimeError: call aclnnFoo failed, error code 561000\n"
    assert diagnose_text(kb, failing).top.entry.id == "CANN-001"


# -- the bundled KB: vendor error-code reference wordings -------------------------------------------------------
@pytest.fixture
def kb(bundled_kb):
    return bundled_kb


def test_ranktable_family_reads_the_error_code_reference_wording_and_fills_the_fix(kb):
    from porter.kb.families import capture_names, fill

    text = ("EI0004: The ranktable or rank is invalid,Reason:[The ranktable path does not exist]. Please check the "
            "configured ranktable. [RANK_TABLE_FILE]\n")
    top = top_match(kb, text)
    assert top is not None and top.entry.id == "HCCL-011" and top.captures["reason"] == "The ranktable path does not exist"
    filled = [fill(step, top.captures, capture_names(top.entry.signatures)) for step in top.entry.fix]
    assert any("(The ranktable path does not exist)" in step for step in filled)


def test_tls_inconsistency_still_goes_to_the_tls_entry_not_the_ranktable_family(kb):
    text = ('[ERROR] HCCL(94774,all_reduce_test):2025-10-27-11:51:32.570.490 [topoinfo_exchange_agent.cc:831] '
            '[94774][InitGroupStage][RanktableCheck]Some ranks tlsStatus are inconsistent. The tlsStatus of '
            'inconsistent ranks are [Disable].\n')
    assert top_match(kb, text).entry.id == "HCCL-020"


def test_the_link_setup_stage_keyword_of_newer_cann_maps_to_the_socket_timeout_entry(kb):
    link_timeout = ("[ERROR] HCCL(137309,all_reduce_test):2025-12-24-16:19:45.416.014 [hccl_socket_manager.cc:813] "
                    "[137400][InitChannelStage][Timeout] wait socket establish timeout, role[0] rank[0] timeout[120 s]\n")
    assert top_match(kb, link_timeout).entry.id == "HCCL-002"


def test_driver_and_hccl_codes_of_the_error_code_reference_decode_by_name():
    from porter.kb.codes import decode, load_tables

    tables, problems = load_tables(ROOT / "knowledge" / "codes")
    assert not problems
    for code, name in (("EL0009", "Insufficient Stream Resources"), ("EI0019", "Port Binding Failure on the Parameter Plane"),
                       ("EE1002", "Execution_Error_Stream_Synchronize_Timeout")):
        info = decode(tables, code)
        assert info is not None and info.exact and info.name == name


def test_port_bind_failures_of_every_cann_release_reach_the_port_entries(kb):
    assert top_match(kb, "EI0020: Failed to enable listening for the host network adapter socket. Reason: bind failed\n").entry.id == "HCCL-015"
    device_port = ("[ERROR] HCCL(1009464,all_reduce_test):2025-03-15-00:41:48.470.172 [hccl_socket.cc:110] [1009464]"
                   "[InitGroupStage][RanktableDetect] socket type[0], listen on ip[192.168.2.199] and specific port[16666] "
                   "fail. Please check the port status and whether the port is being used by other process.\n")
    assert top_match(kb, device_port).entry.id == "HCCL-015"
    retry = "[OpRetryConnection][RecvAckTag] Recv unmatched ack  [1381978191] expect [64]\ncall trace: hcclRet -> 4\n"
    assert top_match(kb, retry).entry.id == "HCCL-004"


def test_an_unreadable_rank_table_path_is_the_rank_table_entry_with_the_path_in_the_fix(kb):
    from porter.kb.families import capture_names, fill

    text = ("[ERROR] HCCL(1104629,test_one_side):2025-10-28-17:45:13.679.684 [param_check.cc:66] [1104629][InitGroupStage]"
            "[RanktableConfig]errNo[0x0000000005010001] path /data/cluster/rank_table_16.json is not a valid real path\n")
    top = top_match(kb, text)
    assert top is not None and top.entry.id == "HCCL-011"
    filled = [fill(step, top.captures, capture_names(top.entry.signatures)) for step in top.entry.fix]
    assert any("/data/cluster/rank_table_16.json must exist" in step for step in filled)


def test_a_driver_too_old_for_cann_is_recognised_from_the_runtime_reference_wording(kb):
    top = top_match(kb, "EE1015: rtsDeviceGetCapability failed. Reason: The driver version capacity is insufficient. Upgrade the driver.\n")
    assert top is not None and top.entry.id == "CANN-014" and top.captures["call"] == "rtsDeviceGetCapability"
    assert "driver-too-old-for-cann" in top.entry.causes


def test_hccl_unavailable_at_communicator_init_from_torch_npu_is_the_leftover_job_entry(kb):
    text = ("RuntimeError: create:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:89 HCCL function error: "
            "HcclCommInitRootInfo(numRanks, &rootInfo, rank, &(comm->hcclComm_)), error code is 7\n")
    top = top_match(kb, text)
    assert top is not None and top.entry.id == "HCCL-010" and top.captures["call"] == "HcclCommInitRootInfo"
    other_code = text.replace("error code is 7", "error code is 11")
    assert top_match(kb, other_code) is None or top_match(kb, other_code).entry.id != "HCCL-010"


def test_tensors_split_between_npu_and_cpu_in_the_per_argument_wording_of_newer_torch(kb):
    for text, arg in (("RuntimeError: Expected all tensors to be on the same device, but got index is on cpu, different from "
                       "other tensors on npu:0 (when checking argument in method wrapper__index_select)\n", "index"),
                      ("RuntimeError: Expected all tensors to be on the same device, but got mat2 is on npu:0, different "
                       "from other tensors on cpu (when checking argument in method wrapper__mm)\n", "mat2")):
        top = top_match(kb, text)
        assert top is not None and top.entry.id == "TNPU-012" and top.captures["arg"] == arg
    # two NPUs, no CPU: another placement fault, not this entry's cause
    two_npus = ("RuntimeError: Expected all tensors to be on the same device, but got mat2 is on npu:1, different from "
                "other tensors on npu:0 (when checking argument in method wrapper__mm)\n")
    top = top_match(kb, two_npus)
    assert top is None or top.entry.id != "TNPU-012"


@pytest.mark.parametrize("text, entry_id", [
    ("RuntimeError: Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a driver\n", "TNPU-009"),
    ("RuntimeError: No CUDA GPUs are available\n", "TNPU-009"),
    ("RuntimeError: ProcessGroupNCCL is only supported with GPUs, no GPUs found!\n", "HCCL-001"),
    ("RuntimeError: DataLoader worker (pid 12345) is killed by signal: Bus error. It is possible that dataloader's workers "
     "are out of shared memory. Please try to raise your shared memory limit.\n", "CTR-010"),
])
def test_sibling_wordings_of_cuda_only_calls_and_small_shm_reach_their_class_entries(kb, text, entry_id):
    top = top_match(kb, text)
    assert top is not None and top.entry.id == entry_id


def test_an_undefined_symbol_inside_the_cann_toolkit_is_the_mixed_cann_entry_with_the_library(kb):
    text = ("ImportError: /usr/local/Ascend/ascend-toolkit/latest/lib64/libascendcl.so: undefined symbol: "
            "_ZN2ge9GEFinalizeEv\n")
    top = top_match(kb, text)
    assert top is not None and top.entry.id == "TNPU-007"
    assert top.captures["library"] == "libascendcl.so"
    # torch_npu's own library against another torch is a different entry
    torch_side = ("ImportError: /usr/local/python3.10/lib/python3.10/site-packages/torch_npu/lib/libtorch_npu.so: "
                  "undefined symbol: _ZN3c1010Dispatcher17runRecordFunctionERN2at14RecordFunctionE\n")
    assert top_match(kb, torch_side).entry.id == "TNPU-010"


def test_master_port_in_use_in_the_c10d_wording_without_the_port(kb):
    text = ("RuntimeError: The server socket has failed to listen on any local network address. useIpv6: 0, code: -98, "
            "name: EADDRINUSE, message: address already in use\n")
    assert top_match(kb, text).entry.id == "HCCL-018"


def test_the_advice_note_prints_the_same_with_and_without_rich():
    import io

    from rich.console import Console

    from porter.kb.loader import load_kb
    from porter.kb.render import diagnose_payload, plain_diagnosis, render_diagnosis

    kb = load_kb(PATTERNS).compiled()
    diag = diagnose_text(kb, "step 1/2 start\n" + CAUTION + "step 1/2 done, loss 2.31\n")
    payload = diagnose_payload(diag, "advice.log", {"entries": 1})
    assert payload["status"] == "unknown" and payload["near_misses"][0]["advice"] == ADVICE_NOTE
    for width in (47, 80, 131):
        console = Console(file=io.StringIO(), width=width, soft_wrap=False, highlight=False)
        with console.capture() as captured:
            render_diagnosis(console, payload, False)
        rich = captured.get()
        assert "advice:" in rich
        plain = plain_diagnosis(payload, False, width)
        assert plain is not None and plain == rich
