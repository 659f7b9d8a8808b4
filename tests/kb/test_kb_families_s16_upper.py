"""Issue 13, session 16 (diag16b): upper-layer families written from the tools' own message templates.

Each test states a form the family must answer and a look-alike it must leave alone. The drift check covers the
wordings of upstream vllm API drift inside a plugin: every one must be answered by a drift entry whose fix names
`porter upgrade`.
"""

from __future__ import annotations

import pytest

from porter.kb.matcher import diagnose_text

DRIFT = {"VLLM-011", "VLLM-012", "VLLM-013", "VLLM-015", "VLLM-026", "VLLM-028", "VLLM-029", "VLLM-030"}
FRAME = '  File "/usr/local/lib/python3.11/site-packages/vllm_ascend/worker/model_runner_v1.py", line 40, in <module>\n'


def _ids(kb, text):
    return [m.entry.id for m in diagnose_text(kb, text).matches]


@pytest.mark.parametrize("error", [
    "ImportError: cannot import name 'SamplerOutput' from 'vllm.model_executor.layers.sampler'",
    "ModuleNotFoundError: No module named 'vllm.worker.model_runner_base'",
    "AttributeError: module 'vllm.envs' has no attribute 'VLLM_USE_V1'",
    "AttributeError: 'SchedulerOutput' object has no attribute 'scheduled_new_reqs'",
    "TypeError: AttentionGroup.__init__() missing 1 required positional argument: 'kv_cache_spec'",
    "TypeError: Can't instantiate abstract class NPUModelRunner without an implementation for abstract method 'get_supported_tasks'",
])
def test_vllm_drift_wordings_inside_the_plugin_name_porter_upgrade(bundled_kb, error):
    diag = diagnose_text(bundled_kb, "Traceback (most recent call last):\n" + FRAME + error + "\n")
    assert diag.top is not None and diag.top.entry.id in DRIFT, [m.entry.id for m in diag.matches]
    assert any("porter upgrade" in step for step in diag.top.entry.fix)


def test_wrapped_signature_typeerror_on_a_vllm_name_is_drift(bundled_kb):
    text = ("CI failed with `TypeError: SingleTypeKVCacheManager.__init__()\n"
            "missing 2 required positional arguments: 'dcp_world_size' and 'pcp_world_size'`\n")
    # the matcher reads the two halves joined: the signature-drift family (VLLM-012) or the vllm-name one (VLLM-028)
    assert _ids(bundled_kb, text)[:1] in (["VLLM-012"], ["VLLM-028"])


def test_wrapped_typeerror_on_a_name_vllm_does_not_define_is_left_alone(bundled_kb):
    text = "CI failed with `TypeError: MyOwnThing.__init__()\nmissing 1 required positional argument: 'x'`\n"
    assert "VLLM-028" not in _ids(bundled_kb, text)


def test_fix_list_item_with_quoted_error_and_vllm_pr_link_is_drift(bundled_kb):
    text = ('1.fix "RuntimeError: block_size must be a multiple of the kernel block size":[Unify the\n'
            "kernel block size](https://github.com/vllm-project/vllm/pull/40001)\n")
    assert _ids(bundled_kb, text)[:1] == ["VLLM-029"]


def test_abstract_class_of_an_unrelated_project_is_not_vllm_drift(bundled_kb):
    text = "TypeError: Can't instantiate abstract class MyDataset with abstract method __getitem__\n"
    assert "VLLM-030" not in _ids(bundled_kb, text)


@pytest.mark.parametrize("text,entry,capture", [
    ("ERROR: mindspeed_llm-1.0.0-cp311-cp311-linux_aarch64.whl is not a supported wheel on this platform.\n",
     "PKG-013", ("wheel", "mindspeed_llm-1.0.0-cp311-cp311-linux_aarch64.whl")),
    ("  x No solution found when resolving dependencies:\n  `-> Because the current Python version (3.8.10) does not "
     "satisfy Python>=3.10 and vllm-ascend==0.9.1 depends on Python>=3.10, we can conclude that vllm-ascend==0.9.1 "
     "cannot be used.\n", "PYENV-013", ("spec", ">=3.10")),
    ("vllm-ascend 0.7.3 requires numpy<2.0.0, but you have numpy 2.1.3 which is incompatible.\n", "PKG-011", None),
    ("RuntimeError: operator torchvision::roi_align does not exist\n", "PKG-015", ("op", "roi_align")),
    ("TypeError: Descriptors cannot be created directly.\nIf this call came from a _pb2.py file, your generated code "
     "is out of date and must be regenerated with protoc >= 3.19.0.\n", "PKG-023", None),
    ("AttributeError: module 'numpy' has no attribute 'float'.\n`np.float` was a deprecated alias for the builtin "
     "`float`. To avoid this error in existing code, use `float` by itself.\n", "PKG-024", ("name", "float")),
    ("error: externally-managed-environment\n\n× This environment is externally managed\n", "PYENV-014", None),
    ("ImportError: cannot import name 'Qwen2_5_VLForConditionalGeneration' from 'transformers' (/x/__init__.py)\n",
     "HF-011", ("name", "Qwen2_5_VLForConditionalGeneration")),
    ("ValueError: Invalid repository ID or local directory specified: '/models/Qwen3-8B'.\n", "HF-014",
     ("path", "/models/Qwen3-8B")),
    ("Please pass the argument `trust_remote_code=True` to allow custom code to be run.\n", "HF-015", None),
    ("ValueError: The decoder prompt (length 9012) is longer than the maximum model length of 8192.\n", "VLLM-021",
     ("number2", "8192")),
    ("ImportError: cannot import name 'MultiprocessingSerializer' from 'sglang.srt.utils' (/x/utils/__init__.py)\n",
     "SGL-019", ("module", "sglang.srt.utils")),
    ("ModuleNotFoundError: No module named 'megatron'\n", "MSPEED-012", ("module", "megatron")),
    ("llamafactory 0.9.2 requires transformers<=4.49.0,>=4.41.2, but you have transformers 4.52.4 which is "
     "incompatible.\n", "LMF-001", ("installed", "4.52.4")),
])
def test_family_answers_the_general_form_and_fills_its_captures(bundled_kb, text, entry, capture):
    diag = diagnose_text(bundled_kb, text)
    assert diag.top is not None and diag.top.entry.id == entry, [m.entry.id for m in diag.matches]
    if capture:
        assert diag.top.captures.get(capture[0]) == capture[1]


@pytest.mark.parametrize("text,entry", [
    # NumPy 2.0 removals are PKG-016's; 1.24's builtin aliases PKG-024's
    ("AttributeError: module 'numpy' has no attribute 'float_'\n", "PKG-024"),
    ("AttributeError: module 'numpy' has no attribute 'float64x'\n", "PKG-024"),
    # a submodule of megatron is Megatron drift (MSPEED-008), not a missing install
    ("ModuleNotFoundError: No module named 'megatron.core.transformer.custom_layers'\n", "MSPEED-012"),
    # the NPU kernel package itself is not sglang's Python API
    ("ModuleNotFoundError: No module named 'sgl_kernel_npu'\n", "SGL-018"),
    ("ModuleNotFoundError: No module named 'sgl_kernel_npu'\n", "SGL-019"),
    # a transformers helper, not a model class: the general import drift answers it
    ("ImportError: cannot import name 'is_flash_attn_greater_or_equal_2_10' from 'transformers.utils'\n", "HF-011"),
    # a serving engine's pin is not a trainer's version check
    ("vllm 0.9.1 requires transformers>=4.51.1, but you have transformers 4.46.0 which is incompatible.\n", "LMF-001"),
])
def test_family_leaves_its_look_alikes_alone(bundled_kb, text, entry):
    assert entry not in _ids(bundled_kb, text)


def test_sgl_kernel_import_on_an_npu_host_outranks_the_generic_cuda_only_import(bundled_kb):
    text = ("Launching sglang on Ascend NPU (device=npu)\nTraceback (most recent call last):\n"
            '  File "/x/site-packages/sglang/srt/layers/quantization/fp8_kernel.py", line 30, in <module>\n'
            "    from sgl_kernel import sgl_per_token_group_quant_fp8\n"
            "ModuleNotFoundError: No module named 'sgl_kernel'\n")
    assert _ids(bundled_kb, text)[:2] == ["SGL-018", "RL-001"]


def test_sgl_kernel_missing_without_any_npu_sign_is_not_the_npu_bug(bundled_kb):
    text = ('  File "/x/site-packages/sglang/srt/layers/quantization/fp8_kernel.py", line 30, in <module>\n'
            "ModuleNotFoundError: No module named 'sgl_kernel'\n")
    assert "SGL-018" not in _ids(bundled_kb, text)


def test_vllm_and_plugin_frames_alone_are_not_the_abstract_method_drift(bundled_kb):
    text = ("Traceback (most recent call last):\n" + FRAME +
            '  File "/usr/local/lib/python3.11/site-packages/vllm/v1/engine/core.py", line 90, in __init__\n'
            "RuntimeError: NPU out of memory. Tried to allocate 2.00 GiB\n")
    assert "VLLM-030" not in _ids(bundled_kb, text)
