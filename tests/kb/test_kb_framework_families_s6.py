"""Framework-layer families added for issue 13 (session 6): each fires on a sibling wording of its class (not the
trace it was written from), captures the variable part for the fix text, and stays quiet on the look-alike lines;
the triage of an unknown trace does not read torch_npu's catch-all ERR99999 as a CANN fault."""

from __future__ import annotations

from pathlib import Path

import pytest

from porter.kb.causal import triage
from porter.kb.families import capture_names, fill
from porter.kb.matcher import diagnose_text
from tests.kb.conftest import top_match

ROOT = Path(__file__).resolve().parents[2]
PATTERNS = ROOT / "knowledge" / "patterns"

pytestmark = pytest.mark.skipif(not any(PATTERNS.rglob("*.yaml")), reason="no knowledge-base entries in this checkout")


@pytest.fixture
def kb(bundled_kb):
    return bundled_kb


def _filled(match, text: str) -> str:
    return fill(text, match.captures, capture_names(match.entry.signatures))


def test_hccl_buffsize_family_covers_the_dispatch_ffn_combine_wording(kb):
    # vllm-ascend's dispatch_ffn_combine tiling check words it differently from MoeDistributeDispatchV2
    line = ("EZ9999: Inner Error! HCCL_BUFFSIZE is too SMALL, m = 64, k = 7168, topK = 8 expected HCCL_BUFFSIZE is "
            "((m * k * topK * sizeof(int8_t)) * 3 + 3MB)= 421MB, HCCL_BUFFSIZE=200MB.")
    top = top_match(kb, line)
    assert top is not None and top.entry.id == "VASC-053"
    assert top.captures["needed"] == "421" and top.captures["current"] == "200"
    assert "421 MB" in _filled(top, top.entry.fix[0])


def test_hccl_buffsize_out_of_range_is_not_the_moe_buffer_entry(kb):
    line = "EI0001: Environment variable [HCCL_BUFFSIZE] is invalid. Value: 0. Expected: [1, 4294967295]."
    top = top_match(kb, line)
    assert top is None or top.entry.id != "VASC-053"


@pytest.mark.parametrize("level", ["2", "3"])
def test_task_queue_level_refused_by_graph_capture(kb, level):
    line = (f"RuntimeError: NPUModelRunner init failed, error is Do not support TASK_QUEUE_ENABLE = {level} during "
            "NPU graph capture, please export TASK_QUEUE_ENABLE=1/0.")
    top = top_match(kb, line)
    assert top is not None and top.entry.id == "VASC-052"
    assert top.captures["number"] == level


def test_task_queue_setting_alone_is_not_a_failure(kb):
    top = top_match(kb, "export TASK_QUEUE_ENABLE=2")
    assert top is None or top.entry.id != "VASC-052"


def test_sampling_params_rejects_any_unknown_field(kb):
    text = ('  File "/work/infer.py", line 9, in <module>\n'
            "    params = SamplingParams(temperature=0.7, max_new_tokens=128)\n"
            "TypeError: Unexpected keyword argument 'max_new_tokens'\n")
    top = top_match(kb, text)
    assert top is not None and top.entry.id == "VLLM-024"
    assert top.captures["name"] == "max_new_tokens"


def test_unexpected_keyword_of_another_struct_is_not_sampling_params(kb):
    top = top_match(kb, "TypeError: Unexpected keyword argument 'foo'\n")
    assert top is None or top.entry.id != "VLLM-024"


def test_sglang_context_length_wording_joins_the_request_too_long_family(kb):
    line = ("ValueError: Requested token count exceeds the model's maximum context length of 8192 tokens. You requested "
            "a total of 9000 tokens: 7000 tokens from the input messages and 2000 tokens for the completion.")
    top = top_match(kb, line)
    assert top is not None and top.entry.id == "VLLM-021"
    assert top.captures["number"] == "8192"
    assert "prompt-plus-response-exceeds-max-model-len" in top.entry.causes


@pytest.mark.parametrize("line", [
    "OSError: /data/models/Llama-2-13b-chat does not appear to have a file named config.json. Checkout "
    "'https://huggingface.co//data/models/Llama-2-13b-chat/main' for available files.",
    "OSError: Can't load the configuration of '/mnt/qwen3-8b'. If you were trying to load it from "
    "'https://huggingface.co/models', make sure you don't have a local directory with the same name.",
])
def test_model_path_without_config_family(kb, line):
    top = top_match(kb, line)
    assert top is not None and top.entry.id == "HF-014"


def test_unreachable_hub_outranks_the_missing_config_it_causes(kb):
    text = ("requests.exceptions.ConnectionError: HTTPSConnectionPool(host='huggingface.co', port=443): Max retries "
            "exceeded with url: /Qwen/Qwen3-8B/resolve/main/config.json (Caused by NewConnectionError: "
            "Failed to establish a new connection: [Errno 101] Network is unreachable)\n"
            "OSError: Can't load the configuration of 'Qwen/Qwen3-8B'. If you were trying to load it from "
            "'https://huggingface.co/models', make sure you don't have a local directory with the same name.\n")
    ids = [m.entry.id for m in diagnose_text(kb, text).matches]
    assert ids and ids[0] == "HOST-001"


def test_catch_all_err99999_is_not_read_as_a_cann_fault(kb):
    text = ('Traceback (most recent call last):\n'
            '  File "/work/run.py", line 3, in <module>\n'
            "    main(cfg)\n"
            "KeyError: 'model_name'\n"
            "[ERROR] 2026-03-17-09:57:40 (PID:276, Device:-1, RankID:-1) ERR99999 UNKNOWN applicaiton exception\n")
    diag = diagnose_text(kb, text)
    assert "cann" not in diag.signals.layer_hints
    t = triage(diag.signals)
    assert t.layer != "cann" and "porter hosts check" not in t.next_commands


def test_trust_remote_code_family_covers_the_older_wording(kb):
    line = ("ValueError: Loading /models/internlm2-chat-7b requires you to execute the configuration file in that repo on "
            "your local machine. Make sure you have read the code there to avoid malicious use, then set the option "
            "`trust_remote_code=True` to remove this error.")
    top = top_match(kb, line)
    assert top is not None and top.entry.id == "HF-015"


def test_remote_code_pickling_is_not_the_vllm_patched_class_entry(kb):
    line = ("_pickle.PicklingError: Can't pickle <class 'transformers_modules.chatglm3-6b.configuration_chatglm."
            "ChatGLMConfig'>: it's not the same object as transformers_modules.chatglm3-6b.configuration_chatglm.ChatGLMConfig")
    top = top_match(kb, line)
    assert top is not None and top.entry.id == "HF-016"
    generic = "_pickle.PicklingError: Can't pickle <class 'mypkg.Foo'>: it's not the same object as mypkg.Foo"
    top = top_match(kb, generic)
    assert top is None or top.entry.id not in ("VASC-035", "HF-016")


def test_missing_parquet_names_the_path_and_other_missing_files_do_not_match(kb):
    top = top_match(kb, "FileNotFoundError: Unable to find '/home/u/data/math/test.parquet'")
    assert top is not None and top.entry.id == "RL-018"
    assert top.captures["path"] == "/home/u/data/math/test.parquet"
    other = top_match(kb, "FileNotFoundError: Unable to find '/home/u/data/train.json'")
    assert other is None or other.entry.id != "RL-018"


def test_ray_hand_off_of_a_device_tensor_outranks_the_checkpoint_entry(kb):
    text = ("    output = ray.get(output)\n"
            "ray.exceptions.RaySystemError: System error: Attempting to deserialize object on a CUDA device but "
            "torch.cuda.is_available() is False. If you are running on a CPU-only machine, please use torch.load with "
            "map_location=torch.device('cpu') to map your storages to the CPU.\n")
    ids = [m.entry.id for m in diagnose_text(kb, text).matches]
    assert ids and ids[0] == "RAY-013"
    plain = "RuntimeError: Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is False."
    top = top_match(kb, plain)
    assert top is not None and top.entry.id != "RAY-013"


def test_failed_to_infer_device_type_alone_is_not_a_confident_cause(kb):
    # every cause that keeps the ascend platform plugin from activating ends in this line: one fact, counted once
    top = top_match(kb, "RuntimeError: Failed to infer device type")
    assert top is not None and top.entry.id == "VASC-008"
    assert top.confidence < 0.7


def test_triage_of_an_operator_call_failure_points_at_the_op_not_the_host(kb):
    text = ("RuntimeError: call aclnnMegaMoe failed, detail:[PID: 1] 2026-08-20-22:15:59.473.813 "
            "Execution_Error(EZ1008): Failed to execute operator MegaMoe_6081. Reason: Failed to execute tiling function.\n"
            "        weight1[0] must be 2-dimension, but got 3 dim.[FUNC:CheckWeight1Input][FILE:mega_moe_tiling.cpp][LINE:648]\n")
    diag = diagnose_text(kb, text)
    ez = {"code": "EZ1008", "family": "cann", "line": 1, "table": "cann-ez", "layer": "cann", "meaning": "operator error"}
    t = triage(diag.signals, [ez])
    assert "aclnnMegaMoe" in t.reason and "porter hosts check" not in t.next_commands
    # a runtime (device) code still sends the user to the host first
    rt = {"code": "507015", "family": "acl", "line": 1, "table": "acl-runtime", "layer": "driver", "meaning": "device error"}
    assert "porter hosts check" in triage(diag.signals, [ez, rt]).next_commands


def test_operator_call_whose_reason_is_a_missing_kernel_binary_still_points_at_the_install(kb):
    text = ("RuntimeError: call aclnnArange failed, detail:EZ9999: Inner Error!\n"
            "EZ9999: [PID: 775] 2025-02-16-12:18:25.258.321 Cannot find bin of op Range, integral key 0/1/|int64/ND/.\n"
            "        TraceBack (most recent call last):\n"
            "       Cannot find binary for op Range.\n")
    diag = diagnose_text(kb, text)
    ez = {"code": "EZ9999", "family": "cann", "line": 1, "table": "cann-ez", "layer": "cann", "meaning": "inner error"}
    assert "porter hosts check" in triage(diag.signals, [ez]).next_commands


def test_ray_entry_needs_rays_wrapper_even_when_the_checkpoint_entry_is_absent(kb):
    # leave-source-out drops TNPU-037 for its own case: RAY-013 must not take the bare torch.load line then
    from porter.kb.index import CompiledKB
    others = CompiledKB.build([e for e in kb.entries if e.id != "TNPU-037"])
    line = "RuntimeError: Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is False."
    top = top_match(others, line)
    assert top is None or top.entry.id != "RAY-013"


def test_unknown_executor_backend_names_the_value(kb):
    line = ("ValueError: Unrecognized distributed executor backend deepspeed. Supported values are 'ray', 'mp' 'uni', "
            "'external_launcher' or custom ExecutorBase subclass.")
    top = top_match(kb, line)
    assert top is not None and top.entry.id == "VLLM-025" and top.captures["name"] == "deepspeed"


def test_optional_multimodal_helper_family_and_its_neighbours(kb):
    top = top_match(kb, "ModuleNotFoundError: No module named 'decord'")
    assert top is not None and top.entry.id == "PKG-021" and top.captures["module"] == "decord"
    assert top_match(kb, "ModuleNotFoundError: No module named 'avocado'") is None
    cuda_only = top_match(kb, "ModuleNotFoundError: No module named 'flash_attn'")
    assert cuda_only is not None and cuda_only.entry.id == "RL-001"


def test_weight_loader_attribute_error_alone_is_not_the_quantized_qwen25vl_bug(kb):
    top = top_match(kb, "AttributeError: 'Parameter' object has no attribute 'weight_loader'")
    assert top is None or top.entry.id != "VASC-031"
