"""transformers NPU integration between two versions: byte/AST comparison, registry keys, consumer uses."""

from __future__ import annotations

from pathlib import Path

import pytest

from porter.port.transformers_compare import compare, to_markdown
from porter.upgrade.models import Outcome

NPU = '''"""NPU flash attention."""
from ..utils import is_torch_npu_available

if is_torch_npu_available():
    from torch_npu import npu_fusion_attention


def npu_flash_attn_func(q, k, v, dropout_p=0.0):
    return npu_fusion_attention(q, k, v)


def npu_flash_attn_varlen_func(q, k, v, cu_seqlens_q=None):
    return npu_fusion_attention(q, k, v)
'''
REGISTRY = '''class AttentionInterface:
    _global_mapping = {"flash_attention_2": None, "sdpa": None, "flex_attention": None}


ALL_ATTENTION_FUNCTIONS = AttentionInterface()
'''
CONSUMER = '''from transformers.integrations.npu_flash_attention import npu_flash_attn_func
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS


def load(cls):
    return cls.from_pretrained("x", attn_implementation="sdpa")
'''


def tree(root: Path, npu: str = NPU, registry: str = REGISTRY) -> Path:
    pkg = root / "transformers"
    (pkg / "integrations").mkdir(parents=True)
    (pkg / "utils").mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "utils" / "__init__.py").write_text("def is_torch_npu_available():\n    return False\n")
    (pkg / "integrations" / "__init__.py").write_text("")
    (pkg / "integrations" / "npu_flash_attention.py").write_text(npu)
    (pkg / "modeling_utils.py").write_text(registry)
    return root


@pytest.fixture
def consumer(tmp_path):
    (tmp_path / "consumer").mkdir()
    (tmp_path / "consumer" / "model.py").write_text(CONSUMER)
    return tmp_path / "consumer"


def test_identical_is_outcome_a(tmp_path, consumer):
    result = compare(tree(tmp_path / "a"), tree(tmp_path / "b"), consumer, "v5.3.0", "v5.4.0")
    assert result.outcome.outcome is Outcome.A
    assert [f.status for f in result.files] == ["identical"]
    assert all(u.ok for u in result.uses) and {u.kind for u in result.uses} == {"import", "attention_key"}


def test_comment_only_change_and_additions_are_a_with_note(tmp_path, consumer):
    newer = NPU.replace('"""NPU flash attention."""', '"""NPU flash attention (v5.4)."""') + '''

def npu_flash_attn_with_kvcache(*args, **kwargs):
    raise NotImplementedError("not supported on NPU yet")
'''
    registry = REGISTRY.replace('"flex_attention": None', '"flex_attention": None, "flash_attention_4": None')
    result = compare(tree(tmp_path / "a"), tree(tmp_path / "b", newer, registry), consumer, "v5.3.0", "v5.4.0")
    assert result.outcome.outcome is Outcome.A_WITH_NOTE
    (npu_file,) = result.files
    assert npu_file.status == "changed" and npu_file.placeholders == ("npu_flash_attn_with_kvcache",)
    assert result.keys_added == ("flash_attention_4",)
    reasons = " ".join(result.outcome.reasons)
    assert "NotImplementedError" in reasons and "flash_attention_4" in reasons
    assert "## Outcome" in to_markdown(result)


def test_docstring_only_change_is_ast_identical(tmp_path, consumer):
    result = compare(tree(tmp_path / "a"), tree(tmp_path / "b", NPU.replace("NPU flash", "Ascend flash")), consumer)
    assert result.files[0].status == "ast-identical"
    assert result.outcome.outcome is Outcome.A_WITH_NOTE


def test_consumer_used_npu_helper_removed_is_c_patch(tmp_path, consumer):
    broken = NPU.replace("def npu_flash_attn_func(q, k, v, dropout_p=0.0):\n    return npu_fusion_attention(q, k, v)\n", "")
    result = compare(tree(tmp_path / "a"), tree(tmp_path / "b", broken), consumer)
    assert result.outcome.outcome is Outcome.C_PATCH
    assert result.files[0].removed == ("npu_flash_attn_func",)
    assert result.exit_code == 1


def test_consumer_used_core_key_removed_is_c_report(tmp_path, consumer):
    registry = REGISTRY.replace('"sdpa": None, ', "")
    result = compare(tree(tmp_path / "a"), tree(tmp_path / "b", registry=registry), consumer)
    assert result.outcome.outcome is Outcome.C_REPORT
    assert result.keys_removed == ("sdpa",)


def test_attribute_chains_on_the_module_are_checked(tmp_path):
    consumer = tmp_path / "consumer"
    consumer.mkdir()
    (consumer / "m.py").write_text("import transformers\n\nA = transformers.modeling_utils.ALL_ATTENTION_FUNCTIONS\n"
                                   "B = transformers.integrations.npu_flash_attention.npu_flash_attn_func\n")
    broken = NPU.replace("def npu_flash_attn_func(q, k, v, dropout_p=0.0):\n    return npu_fusion_attention(q, k, v)\n", "")
    result = compare(tree(tmp_path / "a"), tree(tmp_path / "b", broken), consumer)
    verdicts = {u.name: u.ok for u in result.uses}
    assert verdicts == {"transformers.modeling_utils.ALL_ATTENTION_FUNCTIONS": True,
                        "transformers.integrations.npu_flash_attention.npu_flash_attn_func": False}
    assert result.outcome.outcome is Outcome.C_PATCH


def test_cli_upgrade_of_a_transformers_consumer_reports_the_npu_check(tmp_path, monkeypatch):
    """`porter upgrade consumer --upstream transformers --to B` with nothing breaking: the NPU fast path decides."""
    import json

    import yaml
    from typer.testing import CliRunner

    from porter.cli import app

    project = tmp_path / "project"
    (project / "consumer").mkdir(parents=True)
    (project / "consumer" / "__init__.py").write_text("")
    (project / "consumer" / "model.py").write_text(CONSUMER)
    (project / "porter.yaml").write_text("upstreams_file: upstreams.yaml\nforks_file: forks.yaml\nruns_dir: runs\n")
    (project / "upstreams.yaml").write_text(yaml.safe_dump({"schema": 1, "upstreams": {"transformers": {
        "packages": ["transformers"], "ownership": {"report": ["**"]}}},
        "plugins": {"consumer": {"upstreams": ["transformers"], "packages": ["consumer"], "path": "consumer",
                                 "ownership": {"patch": ["**"]}}}}))
    newer = NPU + "\n\ndef npu_flash_attn_with_kvcache(*args, **kwargs):\n    raise NotImplementedError\n"
    old, new = tree(tmp_path / "a"), tree(tmp_path / "b", newer)
    monkeypatch.chdir(project)
    monkeypatch.setenv("PORTER_CACHE_DIR", str(tmp_path / "cache"))
    result = CliRunner().invoke(app, ["upgrade", "consumer", "--to", "5.4.0", "--from", "5.3.0", "--plugin-path",
                                      str(project), "--upstream-path", f"5.3.0={old}", "--upstream-path", f"5.4.0={new}",
                                      "--json"])
    assert result.exit_code == 0, result.output
    port = json.loads(result.stdout)["port"]
    assert port["outcome"]["outcome"] == "A_WITH_NOTE"
    assert port["npu_files"][0]["placeholders"] == ["npu_flash_attn_with_kvcache"]
    assert list((project / "runs" / "upgrade").glob("*-transformers/NPU_INTEGRATION.md"))
