"""Framework-layer families added for issue 13 (session 5): they fire on the sibling wordings of their class,
capture the variable part for the fix text, stay quiet on look-alike lines, and a loader error printed before or
after vLLM's 'Failed to infer device type' outranks that downstream line."""

from __future__ import annotations

from pathlib import Path

import pytest

from porter.kb.families import capture_names, fill
from porter.kb.matcher import diagnose_text
from tests.kb.conftest import top_match

ROOT = Path(__file__).resolve().parents[2]
PATTERNS = ROOT / "knowledge" / "patterns"
TRACES = ROOT / "tests" / "data" / "traces"

pytestmark = pytest.mark.skipif(not any(PATTERNS.rglob("*.yaml")), reason="no knowledge-base entries in this checkout")


@pytest.fixture
def kb(bundled_kb):
    return bundled_kb


@pytest.fixture
def calibrated(bundled_kb_calibrated):
    return bundled_kb_calibrated


@pytest.mark.parametrize("method", ["fp8", "awq", "gptq", "mxfp4", "deepseek_v4_fp8"])
def test_unsupported_quantization_family_names_the_method(kb, method):
    line = f"pydantic_core._pydantic_core.ValidationError: Value error, {method} quantization is currently not supported in npu."
    top = top_match(kb, line)
    assert top is not None and top.entry.id == "VASC-048"
    assert top.captures["method"] == method
    assert method in fill(top.entry.root_cause, top.captures, capture_names(top.entry.signatures))


def test_unsupported_quantization_on_cuda_is_not_the_npu_entry(kb):
    top = top_match(kb, "ValueError: fp8 quantization is currently not supported in rocm.")
    assert top is None or top.entry.id != "VASC-048"


def test_graph_capture_invalidated_and_stream_exhaustion_are_told_apart(kb):
    text = (TRACES / "vllm-ascend" / "VASC-049-model-adapter-troubleshooting.txt").read_text()
    assert top_match(kb, text).entry.id == "VASC-049"
    begin = ("capture_begin:../torch_npu/csrc/core/npu/NPUGraph.cpp:230 NPU function error: "
             "c10_npu::acl::AclmdlRICaptureBegin(capture_stream_, capture_mode), error code is 207008\n"
             "[Error]: Stream resources are insufficient.\n")
    ids = [m.entry.id for m in diagnose_text(kb, begin).matches]
    assert "VASC-011" in ids and "VASC-049" not in ids


def test_dynamo_contiguous_needs_both_lines(kb):
    text = (TRACES / "vllm-ascend" / "VASC-050-model-adapter-troubleshooting.txt").read_text()
    assert top_match(kb, text).entry.id == "VASC-050"
    alone = "RuntimeError: NPU contiguous operator only supported contiguous memory format."
    top = top_match(kb, alone)
    assert top is None or top.entry.id != "VASC-050"


def test_vllm_module_attribute_drift_is_a_family(kb):
    top = top_match(kb, "AttributeError: module 'vllm.envs' has no attribute 'VLLM_TORCH_PROFILER_DIR'")
    assert top is not None and top.entry.id == "VLLM-013"
    assert (top.captures["name"], top.captures["attribute"]) == ("vllm.envs", "VLLM_TORCH_PROFILER_DIR")
    assert "upstream-vllm-api-drift" in top.entry.causes
    # compiled CUDA ops missing on NPU are not API drift
    top = top_match(kb, "AttributeError: module 'vllm._custom_ops' has no attribute 'silu_and_mul'")
    assert top is None or top.entry.id != "VLLM-013"


LOADER_ERRORS = {
    "PYENV-010": ("ImportError: /usr/local/lib/python3.10/site-packages/sklearn/__check_build/../../scikit_learn.libs/"
                  "libgomp-d22c30c5.so.1.0.0: cannot allocate memory in static TLS block"),
    "PYENV-012": ("ImportError: /lib/aarch64-linux-gnu/libc.so.6: version `GLIBC_2.34' not found (required by "
                  "/usr/local/lib/python3.10/site-packages/torch_npu/lib/libtorch_npu.so)"),
}


@pytest.mark.parametrize("cause", sorted(LOADER_ERRORS))
@pytest.mark.parametrize("downstream", ["RuntimeError: Failed to infer device type", "Failed to import torch_npu."])
@pytest.mark.parametrize("loader_first", [True, False])
def test_loader_error_outranks_the_plugin_symptom(calibrated, cause, downstream, loader_first):
    """With calibrated confidences the plugin symptom can score above the loader error (glibc: 0.47 vs 0.49);
    the loader error is still the diagnosis, whether it is printed before or after the symptom."""
    loader = LOADER_ERRORS[cause]
    text = "\n".join([loader, downstream] if loader_first else [downstream, loader]) + "\n"
    ids = [m.entry.id for m in diagnose_text(calibrated, text).matches]
    assert len(ids) >= 2 and ids[0] == cause, ids


@pytest.mark.parametrize("line, module", [
    ("ImportError: No module named 'flash_attn'", "flash_attn"),
    ("ModuleNotFoundError: No module named 'xformers'", "xformers"),
    ("ImportError: This modeling file requires the following packages that were not found in your environment: "
     "flash_attn. Run `pip install flash_attn`", "flash_attn"),
])
def test_cuda_only_package_family_names_the_package(kb, line, module):
    top = top_match(kb, line)
    assert top is not None and top.entry.id == "RL-001"
    assert top.captures["module"] == module


@pytest.mark.parametrize("line", [
    # vLLM's notice on every NPU start (its CUDA ops are not built there): not a failure
    "WARNING 09-24 17:02:47 [_custom_ops.py:20] Failed to import from vllm._C with ModuleNotFoundError(\"No module named 'vllm._C'\")",
    # an ordinary missing package is not a CUDA-only one
    "ModuleNotFoundError: No module named 'flash_attn_foo'",
])
def test_cuda_only_package_family_stays_quiet_on_look_alikes(kb, line):
    top = top_match(kb, line)
    assert top is None or top.entry.id != "RL-001"


def test_v0_engine_rejection_needs_the_plugin_line(kb):
    text = (TRACES / "vllm-ascend" / "VASC-051-vllm-ascend-1960.txt").read_text()
    assert top_match(kb, text).entry.id == "VASC-051"
    warning = ("WARNING 07-22 07:01:33 [arg_utils.py:1735] ['XLMRobertaForSequenceClassification'] is not supported "
               "by the V1 Engine. Falling back to V0.")
    assert top_match(kb, warning) is None


def test_remote_processor_signature_mismatch_is_not_vllm_drift(kb):
    text = (TRACES / "transformers" / "HF-013-model-adapter-troubleshooting.txt").read_text()
    top = top_match(kb, text)
    assert top is not None and top.entry.id == "HF-013"
    assert top.captures["arg"] == "skip_tensor_conversion"
    # a vLLM hook's signature TypeError stays with the vLLM drift family
    assert top_match(kb, "TypeError: rejection_sample() got an unexpected keyword argument 'synthetic_mode'").entry.id == "VLLM-012"


def test_core_class_drift_covers_request_and_runner_objects(kb):
    top = top_match(kb, "AttributeError: 'EngineCoreRequest' object has no attribute 'num_cached_tokens'")
    assert top is not None and top.entry.id == "VLLM-013"
    assert top.captures["attribute"] == "num_cached_tokens"
    # a class name other stacks use too (a web framework's Request, sglang's ModelConfig) needs a vllm frame
    bare = "AttributeError: 'Request' object has no attribute 'num_cached_tokens'\n"
    top = top_match(kb, bare)
    assert top is None or top.entry.id != "VLLM-013"
    framed = ('Traceback (most recent call last):\n'
              '  File "/usr/lib/python3.11/site-packages/vllm_ascend/core/scheduler.py", line 88, in schedule\n'
              '    n = request.num_cached_tokens\n' + bare)
    top = top_match(kb, framed)
    assert top is not None and top.entry.id == "VLLM-013" and top.captures["name"] == "Request"
    top = top_match(kb, "AttributeError: 'ModelConfig' object has no attribute 'is_hybrid'\n")
    assert top is None or top.entry.id != "VLLM-013"
    # the plugin's own classes are plugin bugs, not upstream drift
    top = top_match(kb, "AttributeError: 'AscendFooMetadataBuilder' object has no attribute 'block_size'")
    assert top is None or top.entry.id != "VLLM-013"


def test_signature_drift_quoted_across_a_line_wrap(kb):
    text = ("This also fix the CI issue about `TypeError: AttentionGroup.__init__()\n"
            "missing 1 required positional argument: 'kv_cache_spec'`\n")
    top = top_match(kb, text)
    assert top is not None and top.entry.id == "VLLM-012"
    assert top.captures["name"] == "AttentionGroup.__init__"
    # either half alone is not a diagnosis
    assert top_match(kb, "missing 1 required positional argument: 'kv_cache_spec'\n") is None
    assert top_match(kb, "TypeError: AttentionGroup.__init__()\n") is None


def test_mock_patch_on_a_moved_vllm_attribute_is_drift(kb):
    line = "AttributeError: <module 'vllm.v1.spec_decode.eagle' ...> does not have the attribute 'CpuGpuBuffer'"
    top = top_match(kb, line)
    assert top is not None and top.entry.id == "VLLM-013"
    assert top.captures["attribute"] == "CpuGpuBuffer"


def test_signature_drift_needs_a_vllm_symbol_or_vllm_frames(kb):
    # another project's signature TypeError (a PaddleSpeech vocoder) is not vLLM drift ...
    line = "TypeError: __init__() got an unexpected keyword argument 'pad_params'\n"
    top = top_match(kb, line)
    assert top is None or top.entry.id != "VLLM-012"
    # ... unless it is raised through vLLM or plugin frames
    framed = ('Traceback (most recent call last):\n'
              '  File "/usr/lib/python3.11/site-packages/vllm/model_executor/model_loader/utils.py", line 64, in initialize_model\n'
              '    return model_class(vllm_config=vllm_config, prefix=prefix)\n' + line)
    top = top_match(kb, framed)
    assert top is not None and top.entry.id == "VLLM-012"
    # a plugin subclass named NPU*/Ascend* counts as a vLLM symbol on its own
    top = top_match(kb, "TypeError: NPUOffloadingSpec.__init__() takes 2 positional arguments but 3 were given\n")
    assert top is not None and top.entry.id == "VLLM-012" and top.captures["name"] == "NPUOffloadingSpec.__init__"
    # frames alone (an ordinary RuntimeError inside vllm_ascend) are no signature drift
    frames_only = ('Traceback (most recent call last):\n'
                   '  File "/usr/lib/python3.11/site-packages/vllm_ascend/ops/layernorm.py", line 74, in forward_oot\n'
                   '    x, residual = torch_npu.npu_add_rms_norm(x, residual, w, eps)\n'
                   '  File "/usr/lib/python3.11/site-packages/vllm/model_executor/custom_op.py", line 44, in forward\n'
                   '    return self._forward_method(*args, **kwargs)\n'
                   'RuntimeError: The size of tensor a (4096) must match the size of tensor b (3584)\n')
    top = top_match(kb, frames_only)
    assert top is None or top.entry.id != "VLLM-012"


def test_context_already_set_alone_is_not_the_sglang_main_guard(kb):
    # gpustack, Ray and launchers print it whenever a second set_start_method() runs
    top = top_match(kb, "- gpustack.cmd.start - CRITICAL - context has already been set\n")
    assert top is None or top.entry.id != "SGL-001"
    trace = (TRACES / "sglang" / "SGL-001-engine-toplevel-spawn.txt").read_text()
    top = top_match(kb, trace)
    assert top is not None and top.entry.id == "SGL-001"


@pytest.mark.parametrize("line", [
    "narrow length 4096 > dim 2048",
    "ValueError: Your setup doesn't support bf16/gpu. You need torch>=1.10, using Ampere GPU with cuda>=11.0",
    "ImportError: cannot import name 'LLM' from 'vllm'",
    "ImportError: cannot import name 'SamplingParams' from 'vllm'",
    "ERROR: No matching distribution found for cmake",
    "AttributeError: '_OpNamespace' '_C_ascend' object has no attribute 'npu_foo'",
])
def test_lines_several_causes_print_carry_no_high_weight(kb, line):
    # an answer from such a line alone stays below 0.9 before calibration (the discriminators say what decides)
    top = top_match(kb, line + "\n")
    assert top is None or top.confidence < 0.9, (top.entry.id, top.confidence)


def test_vllm_ascend_c_import_reason_decides(kb):
    missing = "ERROR camem: Failed to import vllm_ascend_C:libvllm_ascend_kernels.so: cannot open shared object file\n"
    top = top_match(kb, missing)
    assert top is not None and top.entry.id == "VASC-009"
    abi = "ERROR camem: Failed to import vllm_ascend_C:/x/vllm_ascend_C.so: undefined symbol: _ZN3c104cuda9SetDeviceEi\n"
    top = top_match(kb, abi)
    assert top is None or top.entry.id != "VASC-009"
