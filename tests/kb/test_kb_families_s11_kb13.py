"""Issue 13, session 11 (kb13): three entries written from new dev threads, each told apart from its
look-alikes by structure (co-occurring lines), not by the thread's wording.

- VASC-059: an MTE out-of-range AI Core fault next to the MoE dispatch/combine operator is an undersized
  HCCL window; the same fault in another operator stays CANN-003 (declared downstream of VASC-059 only).
- HCCL-023: EI0014 with a ranktable file named next to it is a ranktable of another chip generation; the TLS
  form of EI0014 stays HCCL-020 and a bare EI0014 is not this entry.
- CTR-023: 'OCI runtime create failed ... namespace path not found' is a pause/sandbox container that is not
  running; another OCI failure is not.
"""

from __future__ import annotations

import pytest

from porter.kb.matcher import diagnose_text

MTE = ("[rank0]:        The extend info: errcode:(0x800000, 0, 0) errorStr: The DDR address of the MTE instruction "
       "is out of range. fixp_error0 info: 0x3000078, fsmId:1, tslot:2, subErrType:4.\n")


def _ids(kb, text):
    return [m.entry.id for m in diagnose_text(kb, text).matches]


@pytest.mark.parametrize("op_line", [
    '  File "/vllm-workspace/vllm-ascend/vllm_ascend/ops/moe/token_dispatcher.py", line 120, in token_dispatch\n'
    "    output = torch_npu.npu_moe_distribute_dispatch_v2(\n",
    "MoeDistributeCombineV2 launch failed\n",
    "dispatch_ffn_combine kernel exception\n",
])
def test_vasc_059_reads_mte_out_of_range_in_moe_dispatch_as_the_hccl_window(bundled_kb, op_line):
    assert _ids(bundled_kb, op_line + MTE)[:1] == ["VASC-059"]


def test_vasc_059_leaves_the_same_fault_in_another_operator_to_cann_003(bundled_kb):
    text = ('  File "/x/vllm_ascend/attention/attention_v1.py", line 300, in forward\n'
            "    torch_npu.npu_scatter_nd_update_(key_cache, indices, key)\n" + MTE)
    ids = _ids(bundled_kb, text)
    assert "VASC-059" not in ids and ids[:1] == ["CANN-003"]


def test_vasc_059_needs_the_operator_within_the_window(bundled_kb):
    text = "npu_moe_distribute_dispatch_v2 ok\n" + "INFO step\n" * 60 + MTE
    assert "VASC-059" not in _ids(bundled_kb, text)


def test_vasc_053_still_owns_the_checked_message(bundled_kb):
    text = ("EZ9999[PID: 1] (EZ9999):  HCCL_BUFFSIZE is too SMALL, maxBs = 512, h = 2048, NEEDED_HCCL_BUFFSIZE(...) "
            "= 609MB, HCCL_BUFFSIZE=200MB.[FUNC:MoeDistributeDispatchA3TilingFuncImpl]\n")
    assert _ids(bundled_kb, text)[:1] == ["VASC-053"]


def test_hccl_023_reads_ei0014_next_to_a_ranktable_file(bundled_kb):
    text = ("[ERROR] HCCL(1,python): [topoinfo_exchange_agent.cc:831] [InitGroupStage][RanktableCheck] "
            "Config_Error_Ranktable(EI0014): ranktable check failed\n"
            "the mounted /etc/hccl_rootinfo.json is a 1.0 ranktable, this chip needs 2.0\n")
    assert _ids(bundled_kb, text)[:1] == ["HCCL-023"]


@pytest.mark.parametrize("text", [
    "[ERROR] HCCL(1,python): [RanktableCheck]Some ranks tlsStatus are inconsistent. The tlsStatus of inconsistent "
    "ranks are [Disable].Inconsistent serverId/rankId: [127.10.0.1/0]; EI0014\n",
])
def test_hccl_023_leaves_the_tls_form_of_ei0014_to_hccl_020(bundled_kb, text):
    assert _ids(bundled_kb, text)[:1] == ["HCCL-020"]


def test_hccl_023_does_not_claim_a_bare_ei0014(bundled_kb):
    assert "HCCL-023" not in _ids(bundled_kb, "EI0014: [PID: 1] The value of the config is invalid.\n")


def test_ctr_023_reads_namespace_path_not_found(bundled_kb):
    text = ('docker.errors.APIError: 500 Server Error: Internal Server Error ("OCI runtime create failed: runc create '
            'failed: unable to start container process: error during container init: namespace path: lstat '
            '/proc/4242/ns/ipc: no such file or directory: unknown")\n')
    assert _ids(bundled_kb, text)[:1] == ["CTR-023"]


def test_ctr_023_leaves_other_oci_failures_alone(bundled_kb):
    text = ("Error response from daemon: failed to create task for container: OCI runtime create failed: runc create "
            "failed: unable to start container process: exec: \"vllm\": executable file not found in $PATH: unknown\n")
    assert "CTR-023" not in _ids(bundled_kb, text)
