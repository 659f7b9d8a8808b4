"""Issue 13, session 16 (diag16a): low-layer entries widened into families from vendor documentation and
the message templates in the sources (CANN ops, torch's MapAllocator, MindSpore's memory pool, torch_npu's
HCCL error wrapper), not from one thread's wording. Synthetic lines only."""

from __future__ import annotations

import pytest

from porter.kb.matcher import diagnose_text


def _ids(kb, text):
    return [m.entry.id for m in diagnose_text(kb, text).matches]


def test_cann_006_reads_the_task_scheduler_timeout_record(bundled_kb):
    text = ("[ERROR] TSCH(-1,null):2024-01-01-00:00:00.000.000 28 (cpuid:0) ai_core_dispatcher.c:1012 "
            "bs_done_exception_proc_timeout: slot_id=1,TS_ctrl=0x4,exception_core_list=0x0,fault_task=3\n")
    ids = _ids(bundled_kb, text)
    # CANN-019 (the same timeout written from a vendor case) may lead; CANN-006 must now read it too
    assert "CANN-006" in ids and ids[0] in ("CANN-006", "CANN-019")


@pytest.mark.parametrize("line", [
    "AclNN_Parameter_Error(EZ1001): The x tensor cannot be larger than 8 dimensions.\n",
    "[ERROR] OP: The input1 tensors[2] shape is invaild, and it cannot be larger than 8 dimensions, but its 9 dims.\n",
])
def test_cann_010_covers_every_max_rank_check(bundled_kb, line):
    assert _ids(bundled_kb, line)[:1] == ["CANN-010"]


def test_cann_010_does_not_read_another_dimension_limit(bundled_kb):
    assert "CANN-010" not in _ids(bundled_kb, "ValueError: shape cannot be larger than 4 dimensions\n")


@pytest.mark.parametrize("line", [
    "RuntimeError: unable to write to file </torch_4242_1920244589_10>: No space left on device (28)\n",
    "RuntimeError: unable to mmap 1048576 bytes from file </torch_4242_77_3>: Cannot allocate memory (12)\n",
    "RuntimeError: unable to allocate shared memory(shm) for file </torch_9_9_9>: Resource temporarily unavailable (11)\n",
    "OSError: [Errno 28] No space left on device: '/dev/shm/psm_1a2b3c'\n",
])
def test_ctr_010_reads_shared_memory_exhaustion_in_any_process(bundled_kb, line):
    assert _ids(bundled_kb, line)[:1] == ["CTR-010"]


def test_ctr_010_leaves_a_full_disk_elsewhere_alone(bundled_kb):
    assert "CTR-010" not in _ids(bundled_kb, "OSError: [Errno 28] No space left on device: '/data/ckpt/model.bin'\n")


@pytest.mark.parametrize("line", [
    "RuntimeError: Out of Memory!!! Request memory size: 33100113920B, Memory Statistic:\n",
    "Please try to reduce 'batch_size' or check whether exists extra large shape. For more details\n",
    "RuntimeError: Device(id:0) memory isn't enough and alloc failed, kernel name: Default/MatMul-op1, alloc size: 4096B.\n",
])
def test_tnpu_033_reads_mindspore_device_memory_pool_exhaustion(bundled_kb, line):
    assert _ids(bundled_kb, line)[:1] == ["TNPU-033"]


@pytest.mark.parametrize("line", [
    "ImportError: /usr/local/lib/python3.10/site-packages/torch_npu/lib/libtorch_npu.so: undefined symbol: aclrtGetMemUceInfo\n",
    "OSError: /x/op_plugin/libop_plugin_atb.so: undefined symbol: aclnnFooBarGetWorkspaceSize\n",
])
def test_tnpu_006_reads_any_cann_c_api_missing_from_the_installed_cann(bundled_kb, line):
    ids = _ids(bundled_kb, line)
    assert ids[:1] == ["TNPU-006"]
    assert diagnose_text(bundled_kb, line).matches[0].captures.get("symbol", "").startswith("acl")


def test_tnpu_006_leaves_mangled_torch_symbols_to_tnpu_010(bundled_kb):
    line = "ImportError: /x/torch_npu/lib/libtorch_npu.so: undefined symbol: _ZN3c104impl3cow11cow_deleterEPv\n"
    ids = _ids(bundled_kb, line)
    assert "TNPU-006" not in ids and ids[:1] == ["TNPU-010"]


def test_hccl_002_reads_a_communicator_init_timeout_from_torch_npu(bundled_kb):
    line = ("RuntimeError: create_config:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:148 HCCL function error: "
            "hcclCommInitRootInfoConfig(numRanks, &rootInfo, rank, config, &(comm->hcclComm_)), error code is 9\n")
    assert _ids(bundled_kb, line)[:1] == ["HCCL-002"]


@pytest.mark.parametrize("code", ["1", "7", "15"])
def test_hccl_002_does_not_read_other_init_codes(bundled_kb, code):
    line = ("RuntimeError: create_config:x.cpp:148 HCCL function error: hcclCommInitRootInfoConfig(numRanks, &rootInfo, "
            f"rank, config, &(comm->hcclComm_)), error code is {code}\n")
    assert "HCCL-002" not in _ids(bundled_kb, line)


@pytest.mark.parametrize("backend", ["NPU", "PrivateUse1"])
def test_tnpu_042_reads_any_aten_op_without_an_npu_kernel(bundled_kb, backend):
    line = (f"NotImplementedError: Could not run 'aten::_scaled_dot_product_flash_attention' with arguments from the "
            f"'{backend}' backend. This could be because the operator doesn't exist for this backend\n")
    diag = diagnose_text(bundled_kb, line)
    assert [m.entry.id for m in diag.matches][:1] == ["TNPU-042"]
    assert diag.matches[0].captures["op"] == "_scaled_dot_product_flash_attention"


def test_tnpu_042_leaves_npu_ops_on_cpu_tensors_to_tnpu_013(bundled_kb):
    line = "NotImplementedError: Could not run 'npu::npu_rms_norm' with arguments from the 'CPU' backend.\n"
    ids = _ids(bundled_kb, line)
    assert "TNPU-042" not in ids and ids[:1] == ["TNPU-013"]


def test_tnpu_042_does_not_read_a_cpu_backend_aten_failure(bundled_kb):
    line = "NotImplementedError: Could not run 'aten::empty_strided' with arguments from the 'CPU' backend.\n"
    assert "TNPU-042" not in _ids(bundled_kb, line)


def test_drv_003_reads_507901_under_another_wording(bundled_kb):
    line = "[ERROR] RUNTIME(1,python): rtStreamSynchronize:[EXEC][DEFAULT]ErrCode=507901, desc=[socket close]\n"
    assert _ids(bundled_kb, line)[:1] == ["DRV-003"]


def test_hccl_009_reads_ei0005_under_another_wording(bundled_kb):
    line = "EI0005: [PID: 7] 2025-01-01: The tag and parameters of the collective differ between ranks.\n"
    assert _ids(bundled_kb, line)[:1] == ["HCCL-009"]


@pytest.mark.parametrize("line", [
    "/x/csrc/op.cpp:3:10: fatal error: aclnnop/aclnn_add.h: No such file or directory\n",
    "/x/kernel/add_custom.cpp:1:10: fatal error: 'kernel_operator.h' file not found\n",
    "/usr/bin/ld: cannot find -lascendcl: No such file or directory\n",
    "/usr/bin/ld: cannot find -lhccl\n",
])
def test_build_004_reads_any_cann_header_or_library_missing_at_build_time(bundled_kb, line):
    assert _ids(bundled_kb, line)[:1] == ["BUILD-004"]


@pytest.mark.parametrize("line", [
    "/x/op.cpp:1:10: fatal error: Python.h: No such file or directory\n",
    "/usr/bin/ld: cannot find -lstdc++fs\n",
    "/usr/bin/ld: cannot find -lz\n",
])
def test_build_004_leaves_other_headers_and_libraries_alone(bundled_kb, line):
    assert "BUILD-004" not in _ids(bundled_kb, line)


def test_hccl_024_reads_a_tcpstore_rendezvous_that_not_every_rank_joined(bundled_kb):
    line = "torch.distributed.DistStoreError: Timed out after 601 seconds waiting for clients. 1/4 clients joined.\n"
    diag = diagnose_text(bundled_kb, line)
    assert [m.entry.id for m in diag.matches][:1] == ["HCCL-024"]
    assert diag.matches[0].captures == {"number": "601", "joined": "1", "world": "4"}


def test_hccl_003_reads_the_process_group_watchdog_timeout(bundled_kb):
    line = ("[Rank 3] Watchdog caught collective operation timeout: WorkHCCL(SeqNum=12, OpType=ALLREDUCE, NumelIn=1, "
            "NumelOut=1, Timeout(ms)=1800000) ran for 1800102 milliseconds before timing out.\n")
    assert _ids(bundled_kb, line)[:1] == ["HCCL-003"]


@pytest.mark.parametrize("line", [
    "rtStreamSynchronize:[EXEC][DEFAULT]ErrCode=507017, desc=[aicpu timeout], InnerCode=0x715002a\n",
    "NPU function error: AclrtSynchronizeDevice, error code is 507017\n",
])
def test_cann_033_reads_an_ai_cpu_timeout(bundled_kb, line):
    assert _ids(bundled_kb, line)[:1] == ["CANN-033"]


def test_cann_033_leaves_an_ai_cpu_exception_to_cann_012(bundled_kb):
    line = "PreCheckTaskErr:Kernel task happen error, retCode=0x2a, [aicpu exception].\n"
    assert "CANN-033" not in _ids(bundled_kb, line)
