"""Error codes are decoded from knowledge/codes even when no entry matches."""

from __future__ import annotations

import json
from pathlib import Path

from porter.kb.codes import decode, load_tables, parse_table
from porter.kb.matcher import diagnose_text

ROOT = Path(__file__).resolve().parents[2]
TABLES = load_tables(ROOT / "knowledge" / "codes")


def test_bundled_tables_load_clean():
    tables, problems = TABLES
    assert not problems, [str(p) for p in problems]
    assert {t.family for t in tables} >= {"acl-runtime", "aclnn", "cann-inner", "hccl", "dcmi", "torch-npu"}


def test_exact_row_then_narrowest_range():
    tables, _ = TABLES
    assert decode(tables, "507033").name == "ACL_ERROR_RT_DEV_SETUP_ERROR"
    by_range = decode(tables, "161977")
    assert by_range is not None and not by_range.exact and "parameter" in by_range.meaning
    assert decode(tables, "507777").meaning.startswith("runtime internal")  # 507xxx beats 5xxxxx
    assert decode(tables, "EI0099").table == "cann-inner"
    assert decode(tables, "-8020").name == "DCMI_ERR_CODE_RESOURCE_OCCUPIED"
    assert decode(tables, "ERR01234").meaning.startswith("torch_npu operator")
    assert decode(tables, "XYZ") is None


def test_table_problems_are_reported():
    table, problems = parse_table({"family": "x", "codes": [{"code": "1"}], "ranges": [{"range": "9-1", "meaning": "m"}]}, "x.yaml")
    assert table is not None and len(problems) == 3  # code without meaning, empty range, no source


def test_cli_decodes_codes_with_no_entry(cli, fixture_kb, tmp_path):
    fixture_kb.add({"id": "VLLM-001", "title": "t", "layer": "vllm", "kind": "bug",
                    "signatures": {"match": "any", "items": [{"literal": "something unrelated entirely", "weight": 0.9}]},
                    "root_cause": "r", "fix": ["f"], "verify": "true", "examples": ["traces/VLLM-001.txt"]},
                   "something unrelated entirely\n")
    trace = tmp_path / "t.txt"
    trace.write_text("HCCL function error: HcclCommInitRootInfoConfig(x), error code is 7\n"
                     "EZ3003: [PID: 2] Op_Not_Supported The binary_info_config.json does not support opType [Foo].\n"
                     "RuntimeError: call aclnnFoo failed, error code is 561003\n")
    code, out = cli(["diagnose", str(trace), "--kb", str(fixture_kb.patterns), "--json"])
    doc = json.loads(out)
    assert code == 1 and doc["status"] == "unknown"
    got = {c["code"]: c for c in doc["codes"]}
    assert got["HCCL:7"]["name"] == "HCCL_E_UNAVAIL"
    assert "not supported" in got["EZ3003"]["meaning"]
    assert got["561003"]["name"] == "ACLNN_ERR_INNER_FIND_KERNEL_ERROR"
    code, out = cli(["diagnose", str(trace), "--kb", str(fixture_kb.patterns)])
    assert "HCCL_E_UNAVAIL" in out and "ACLNN_ERR_INNER_FIND_KERNEL_ERROR" in out


def test_extractor_sees_codes_on_lines_without_error_words(small_kb):
    diag = diagnose_text(small_kb.compiled(), "EZ1001: The param dtype not implemented for DT_BFLOAT16\n")
    assert ("EZ1001", "cann") in [(c, f) for c, f, _ in diag.signals.codes]
