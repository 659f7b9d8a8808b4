"""Framework-layer families added for issue 13 (session 7): the shared form of upstream vllm API drift (an
import/attribute/signature error next to evidence that the other side is vllm), graph-params KeyErrors, Megatron
signature drift; each fires on a sibling the entry was not written from and stays quiet on the look-alikes."""

from __future__ import annotations

from pathlib import Path

import pytest

from porter.kb.matcher import diagnose_text
from tests.kb.conftest import top_match

ROOT = Path(__file__).resolve().parents[2]
PATTERNS = ROOT / "knowledge" / "patterns"

pytestmark = pytest.mark.skipif(not any(PATTERNS.rglob("*.yaml")), reason="no knowledge-base entries in this checkout")


@pytest.fixture
def kb(bundled_kb):
    return bundled_kb


DRIFT = {"VLLM-011", "VLLM-012", "VLLM-013", "VLLM-026"}


@pytest.mark.parametrize("trace", [
    # wrapped PR prose: the upstream PR link is the vllm evidence
    "- Fix `AttributeError: 'KVCacheCoordinator' object has no attribute 'block_pool'` caused by\n"
    "https://github.com/vllm-project/vllm/pull/41234\n",
    # the import wrapped over two lines, the vllm module on the second
    "ImportError: cannot import name 'get_open_port'\nfrom 'vllm.utils.network_utils' (/opt/vllm/vllm/utils/network_utils.py)\n",
    # an object that vllm's change made non-iterable, said in prose
    "CI broken by vllm's scheduler change: TypeError: 'ScheduledBatch' object is not iterable\n",
])
def test_drift_family_covers_siblings_without_named_symbols(kb, trace):
    diag = diagnose_text(kb, trace)
    assert diag.top is not None and diag.top.entry.id in DRIFT, diag.top and diag.top.entry.id
    assert "VLLM-026" in {m.entry.id for m in diag.matches}  # the shared form fires whether or not a named one does


def test_drift_family_captures_the_symbol_for_the_text(kb):
    top = top_match(kb, "Fix `AttributeError: 'KVCacheCoordinator' object has no attribute 'block_pool'` after\n"
                        "https://github.com/vllm-project/vllm/pull/41234\n")
    assert top is not None and top.captures.get("api") == "KVCacheCoordinator"
    assert top.captures.get("attribute") == "block_pool"


@pytest.mark.parametrize("trace", [
    # a shadowing `vllm` directory: no module path, '(unknown location)'
    "  File \"/srv/app/vllm_ascend/x.py\", line 3, in <module>\n    from vllm import LLM\n"
    "ImportError: cannot import name 'LLM' from 'vllm' (unknown location)\n",
    # transformers drift seen inside vllm code is not vllm's API
    "  File \"/x/site-packages/vllm/transformers_utils/config.py\", line 3, in <module>\n"
    "ImportError: cannot import name 'Foo' from 'transformers' (/x/transformers/__init__.py)\n",
    # a model's Hugging Face config missing a field, read by plugin code
    "  File \"/x/site-packages/vllm_ascend/utils.py\", line 9, in update_aclgraph_sizes\n"
    "AttributeError: 'Qwen2AudioConfig' object has no attribute 'num_hidden_layers'\n",
    # the plugin's own module without its entry point (a broken install, not drift)
    "  File \"/x/site-packages/vllm/plugins/__init__.py\", line 46, in load_plugins_by_group\n"
    "AttributeError: module 'vllm_ascend' has no attribute 'register'\n",
    # None and builtins are the caller's own bug
    "  File \"/x/site-packages/vllm_ascend/worker/worker.py\", line 9, in f\n"
    "AttributeError: 'NoneType' object has no attribute 'shape'\n",
    # 'latest vllm-ascend' is not a statement about vllm
    "Fixes `AttributeError: 'function' object has no attribute 'x'`. Use latest vllm-ascend.\n",
])
def test_drift_family_stays_quiet_on_look_alikes(kb, trace):
    top = top_match(kb, trace)
    assert top is None or top.entry.id not in DRIFT, top.entry.id


@pytest.mark.parametrize("size", ["6", "132", "2048"])
def test_graph_params_keyerror_family_any_size(kb, size):
    trace = ('  File "/w/vllm_ascend/attention/attention_v1.py", line 575, in full_graph_fia\n'
             "    graph_params.handles[num_tokens].append(handle)\n"
             f"KeyError: {size}\n")
    top = top_match(kb, trace)
    assert top is not None and top.entry.id == "VASC-054" and top.captures["number"] == size


def test_keyerror_without_graph_params_is_not_the_graph_entry(kb):
    top = top_match(kb, '  File "/w/vllm_ascend/worker/model_runner_v1.py", line 9, in f\n    self.requests[req_id]\nKeyError: 17\n')
    assert top is None or top.entry.id != "VASC-054"


def test_megatron_signature_drift_needs_a_megatron_frame(kb):
    frames = ('  File "/opt/Megatron-LM/megatron/core/transformer/moe/router.py", line 700, in forward\n'
              "    scores, routing_map = self.routing(logits, token_mask=mask)\n")
    top = top_match(kb, frames + "TypeError: patched_topk_routing() got an unexpected keyword argument 'token_mask'\n")
    assert top is not None and top.entry.id == "MSPEED-011" and top.captures["api"] == "patched_topk_routing"
    alone = top_match(kb, "TypeError: patched_topk_routing() got an unexpected keyword argument 'token_mask'\n")
    assert alone is None or alone.entry.id != "MSPEED-011"


def test_fsdp2_offload_storage_family_names_the_device(kb):
    top = top_match(kb, 'RuntimeError: Attempted to set the storage of a tensor on device "cpu" to a storage on '
                        'different device "cuda:3".\n')
    assert top is not None and top.entry.id == "RL-020" and top.captures["device"] == "cuda:3"


def test_drift_that_kept_the_plugin_from_loading_ranks_before_failed_to_infer_device(kb):
    trace = ("ERROR 11-02 10:00:01 [__init__.py:44] Failed to load plugin ascend\n"
             "Traceback (most recent call last):\n"
             '  File "/x/site-packages/vllm_ascend/__init__.py", line 21, in register\n'
             "    from vllm_ascend.platform import NPUPlatform\n"
             '  File "/x/site-packages/vllm_ascend/platform.py", line 40, in <module>\n'
             "    for name in vllm_config.compilation_config.static_forward_context:\n"
             "TypeError: 'ForwardContextView' object is not iterable\n"
             "RuntimeError: Failed to infer device type\n")
    diag = diagnose_text(kb, trace)
    ids = [m.entry.id for m in diag.matches]
    assert diag.top is not None and diag.top.entry.id in DRIFT, ids
    assert "VASC-008" not in ids or ids.index("VASC-008") > ids.index(diag.top.entry.id)
