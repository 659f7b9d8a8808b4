"""Causal ranking (earliest failure, downstream_of) and triage of unknown traces."""

from __future__ import annotations

from porter.kb.causal import triage
from porter.kb.matcher import diagnose_text
from porter.kb.render import diagnose_payload

from .conftest import entry

DRIFT_TRACE = """\
INFO 05-01 12:00:00 [__init__.py:38] - ascend -> vllm_ascend:register
Traceback (most recent call last):
  File "/usr/lib/python3.11/site-packages/vllm/plugins/__init__.py", line 10, in load_plugins
    func()
  File "/usr/lib/python3.11/site-packages/vllm_ascend/platform.py", line 30, in <module>
    from vllm.config.compilation import CUDAGraphMode
ImportError: cannot import name 'CUDAGraphMode' from 'vllm.config.compilation' (/x/compilation.py)
""" + "INFO filler line\n" * 20 + """\
WARNING 05-01 12:00:01 [__init__.py:40] Failed to load plugin ascend
RuntimeError: Failed to infer device type
"""


def _kb(fixture_kb, downstream: bool):
    fixture_kb.add(entry("VASC-001", "vllm-ascend", [{"literal": "Failed to infer device type", "weight": 0.95}],
                         downstream_of=["VLLM-001"] if downstream else []), "RuntimeError: Failed to infer device type\n")
    fixture_kb.add(entry("VLLM-001", "vllm",
                         [{"exception": "ImportError", "template": "cannot import name '{symbol}' from '{module}'",
                           "captures": {"module": r"vllm[\w.]{0,200}"}, "weight": 0.7}],
                         fix=["porter upgrade vllm-ascend --dry-run: {symbol} moved in {module}"]),
                   "ImportError: cannot import name 'X' from 'vllm.y'\n")
    return fixture_kb.compiled()


def test_downstream_entry_ranks_after_its_cause(fixture_kb):
    diag = diagnose_text(_kb(fixture_kb, downstream=True), DRIFT_TRACE)
    assert [m.entry.id for m in diag.matches] == ["VLLM-001", "VASC-001"]
    payload = diagnose_payload(diag, "-", {})
    assert payload["causal_line"]["line"] == 7 and "CUDAGraphMode" in payload["causal_line"]["text"]
    assert payload["matches"][0]["fix"] == ["porter upgrade vllm-ascend --dry-run: CUDAGraphMode moved in vllm.config.compilation"]


def test_earlier_failure_of_similar_strength_leads(fixture_kb):
    # no downstream_of: the earlier error (line 7), within the margin, leads the later one ...
    kb = _kb(fixture_kb, downstream=False)
    assert diagnose_text(kb, DRIFT_TRACE.replace("/x/compilation.py", "/x/c.py")).matches[0].entry.id == "VASC-001"  # 0.95 vs 0.72: too far
    fixture_kb.add(entry("VASC-001", "vllm-ascend", [{"literal": "Failed to infer device type", "weight": 0.85}]), "RuntimeError: Failed to infer device type\n")
    diag = diagnose_text(fixture_kb.compiled(), DRIFT_TRACE)
    assert [m.entry.id for m in diag.matches] == ["VLLM-001", "VASC-001"], [(m.entry.id, m.confidence) for m in diag.matches]


def test_same_block_keeps_the_specific_reason(fixture_kb):
    fixture_kb.add(entry("CANN-001", "cann", [{"literal": "error code is 507033", "weight": 0.8}]), "error code is 507033\n")
    fixture_kb.add(entry("CANN-002", "cann", [{"literal": "Failed to verify the OPP", "weight": 0.95}]), "Failed to verify the OPP\n")
    diag = diagnose_text(fixture_kb.compiled(), "NPU function error: SetDevice, error code is 507033\n[Error]: x\nE30006: Failed to verify the OPP\n")
    assert diag.matches[0].entry.id == "CANN-002"


def test_triage_names_api_drift_and_the_upgrade_command(small_kb):
    diag = diagnose_text(small_kb.compiled(), DRIFT_TRACE)
    assert diag.status == "unknown"
    t = triage(diag.signals)
    assert t.causal_line == 7 and "CUDAGraphMode" in t.causal_text
    assert t.failing_package == "vllm_ascend"
    assert t.next_commands[0] == "porter upgrade vllm-ascend --dry-run"
    assert "API drift" in t.reason


def test_triage_of_a_device_fault_points_at_the_host(small_kb):
    trace = "[ERROR] RuntimeError: npu get board type failed. ret is -9005\ndcmi model initialized failed, ret is -8005\n"
    payload = diagnose_payload(diagnose_text(small_kb.compiled(), trace), "-", {},
                               codes=[{"code": "-8005", "family": "driver", "line": 2, "table": "dcmi", "layer": "driver", "meaning": "m"}])
    assert "porter hosts check" in payload["triage"]["next_commands"] and "npu-smi info" in payload["triage"]["next_commands"]


VLLM_CONFIG_TRACE = """\
Traceback (most recent call last):
  File "/usr/local/lib/python3.10/site-packages/vllm/entrypoints/openai/api_server.py", line 180, in build_async_engine_client_from_engine_args
    vllm_config = engine_args.create_engine_config(usage_context=usage_context)
  File "/usr/local/lib/python3.10/site-packages/vllm/engine/arg_utils.py", line 1286, in create_engine_config
    config = VllmConfig(
  File "/usr/local/lib/python3.10/site-packages/pydantic/_internal/_dataclasses.py", line 123, in __init__
    s.__pydantic_validator__.validate_python(ArgsKwargs(args, kwargs), self_instance=s)
pydantic_core._pydantic_core.ValidationError: 1 validation error for VllmConfig
  Value error, some option is not supported. [type=value_error]
[ERROR] 2025-07-22-07:01:33 (PID:16357, Device:-1, RankID:-1) ERR99999 UNKNOWN applicaiton exception
"""
ERR99999 = {"code": "ERR99999", "family": "cann", "line": 10, "table": "torch-npu", "layer": "torch-npu",
            "meaning": "UNKNOWN: an exception raised outside torch_npu"}


def test_triage_layer_follows_the_innermost_frame_with_a_layer_not_the_trailing_code(small_kb):
    # vllm's config code raised through a pydantic frame; torch_npu's catch-all ERR99999 follows
    diag = diagnose_text(small_kb.compiled(), VLLM_CONFIG_TRACE)
    assert diag.status == "unknown"
    t = triage(diag.signals, [ERR99999])
    assert t.layer == "vllm" and t.failing_package == "pydantic"
    assert "ValidationError" in t.causal_text


def test_triage_layer_of_frames_in_the_ascend_install(small_kb):
    trace = ('Traceback (most recent call last):\n'
             '  File "/usr/local/lib/python3.9/site-packages/mindspore/_extends/compiler.py", line 155, in build_op\n'
             '    x()\n'
             '  File "/usr/local/Ascend/ascend-toolkit/latest/python/site-packages/te_fusion/fusion_manager.py", line 1258, in build_single_op\n'
             '    compile_info = call_op()\n'
             'RuntimeError: compile failed\n')
    assert triage(diagnose_text(small_kb.compiled(), trace).signals).layer == "cann"
    driver = "OSError: /usr/local/Ascend/driver/lib64/driver/libdrvdsmi_host.so: cannot open shared object file\n"
    assert triage(diagnose_text(small_kb.compiled(), driver).signals).layer == "driver"


def test_triage_reads_packages_the_causal_line_names_not_a_directory_name(small_kb):
    kb = small_kb.compiled()
    line = "RuntimeError: getDevice:torch_npu/csrc/aten/common/CopyKernel.cpp:41 NPU error, error code is 107002\n"
    assert triage(diagnose_text(kb, line).signals).layer == "torch-npu"
    # a conda env called torch_npu does not make sklearn's TLS failure a torch_npu one
    tls = ("ImportError: /root/miniconda3/envs/torch_npu/lib/python3.9/site-packages/sklearn/__check_build/../../"
           "scikit_learn.libs/libgomp-d22c30c5.so.1.0.0: cannot allocate memory in static TLS block\n")
    assert triage(diagnose_text(kb, tls).signals).layer != "torch-npu"


def test_triage_code_on_the_causal_line_beats_the_python_callers_frames(small_kb):
    trace = ('Traceback (most recent call last):\n'
             '  File "/home/u/.local/lib/python3.10/site-packages/transformers/generation/utils.py", line 2690, in _sample\n'
             '    model_kwargs["cache_position"] = torch.arange(cur_len, device=input_ids.device)\n'
             'RuntimeError: call aclnnArange failed, detail:EZ9999: Inner Error!\n')
    diag = diagnose_text(small_kb.compiled(), trace)
    ez = {"code": "EZ9999", "family": "cann", "line": 4, "table": "cann-inner", "layer": "cann", "meaning": "inner error"}
    assert triage(diag.signals, [ez]).layer == "cann"
    # the same code far below the causal line (another event) leaves the frames' layer
    assert triage(diag.signals, [dict(ez, line=40)]).layer == "transformers"
