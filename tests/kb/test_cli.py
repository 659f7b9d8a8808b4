"""`porter diagnose` and `porter kb` through the CLI: exit codes, JSON schema, redaction, cache."""

from __future__ import annotations

import json
import os
import time

from tests.kb.conftest import DCMI_TRACE, LORA_TRACE, entry

from porter.kb.loader import load_kb

MATCH_KEYS = {
    "rank", "id", "title", "layer", "kind", "severity", "confidence", "method", "aliases", "matched_lines",
    "root_cause", "fix", "verify", "discriminators", "related", "references", "version_notes", "captures",
}


def diagnose(cli, kb, *args, input=None):
    return cli(["diagnose", "--kb", str(kb.patterns), *args], input=input)


def test_match_exit_0_and_stable_json_schema(small_kb, cli, tmp_path):
    trace = tmp_path / "t.txt"
    trace.write_text(LORA_TRACE)
    code, out = diagnose(cli, small_kb, str(trace), "--json")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["schema"] == "porter.diagnose/1"
    assert set(doc) >= {"input", "status", "matches", "close", "near_misses", "signals", "kb"}
    assert doc["status"] == "match" and doc["input"]["lines"] == 5
    m = doc["matches"][0]
    assert set(m) == MATCH_KEYS
    assert m["id"] == "VLLM-001" and m["matched_lines"][0]["line"] == 5 and m["aliases"] == ["NPU-CP-002"]
    assert set(doc["signals"]) >= {"exceptions", "codes", "packages", "layer_hints", "blocks"}


def test_unknown_exit_1_shows_signals(small_kb, cli):
    text = "Traceback (most recent call last):\n  File \"/x/site-packages/torch_npu/a.py\", line 1, in f\nRuntimeError: EZ9999 strange thing\n"
    code, out = diagnose(cli, small_kb, "-", "--json", input=text)
    assert code == 1
    doc = json.loads(out)
    assert doc["status"] == "unknown" and doc["matches"] == []
    assert doc["signals"]["exceptions"][0]["type"] == "RuntimeError"
    assert doc["signals"]["codes"][0]["code"] == "EZ9999"
    assert doc["signals"]["packages"][0]["package"] == "torch_npu"
    code, out = diagnose(cli, small_kb, "-", input=text)
    assert code == 1 and "unknown" in out and "exception chain" in out and "EZ9999" in out


def test_stdin_without_dash(small_kb, cli):
    code, out = diagnose(cli, small_kb, input=DCMI_TRACE.encode())
    assert code == 0 and "DRV-001" in out


def test_unusable_input_exit_2(small_kb, cli, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    for args in ([str(tmp_path / "missing.txt")], [str(tmp_path)], [str(empty)], ["--env", "nonsense", str(empty)]):
        code, out = diagnose(cli, small_kb, *args, "--json")
        assert code == 2, (args, out)
        assert json.loads(out)["error"]["kind"] == "input_error"
    code, _ = diagnose(cli, small_kb, "-", input=b"")
    assert code == 2


def test_env_filter_and_explain(small_kb, cli, tmp_path):
    trace = tmp_path / "t.txt"
    trace.write_text(LORA_TRACE)
    code, out = diagnose(cli, small_kb, str(trace), "--env", "vllm==0.11.0")
    assert code == 1  # out of applies_to: demoted below the threshold
    assert "vllm 0.11.0 is outside >=0.13" in out  # the unknown says why the line that hit was set aside
    code, out = diagnose(cli, small_kb, str(trace), "--env", "vllm==0.11.0", "--json")
    assert json.loads(out)["near_misses"][0]["version_notes"]
    report = tmp_path / "smoke.json"
    report.write_text(json.dumps({"schema": "vime.smoke/1", "environment": {"packages": {"vllm": "0.13.0", "torch": None}}}))
    code, out = diagnose(cli, small_kb, str(trace), "--env", str(report), "--json", "--explain")
    doc = json.loads(out)
    assert code == 0 and doc["env"] == {"vllm": "0.13.0"}
    assert doc["matches"][0]["explain"]["noisy_or"] == 1.0 and doc["matches"][0]["version_notes"]


def test_top_k_and_discriminators_when_close(fixture_kb, cli):
    items = [{"literal": "HCCL timeout waiting for peers", "weight": 0.8}]
    fixture_kb.add(entry("HCCL-001", "hccl", items, discriminators=["check the ranktable"]))
    fixture_kb.add(entry("HCCL-002", "hccl", items, discriminators=["check the network"]))
    code, out = diagnose(cli, fixture_kb, "-", input="RuntimeError: HCCL timeout waiting for peers\n")
    assert code == 0 and "close" in out and "check the ranktable" in out and "check the network" in out
    code, out = diagnose(cli, fixture_kb, "-", "--top", "1", "--json", input="RuntimeError: HCCL timeout waiting for peers\n")
    assert len(json.loads(out)["matches"]) == 1


def test_secrets_in_traces_are_redacted(small_kb, cli):
    secret = "hf_abcdefghijklmnopqrstuvwxyz0123"
    text = f"HF_TOKEN={secret}\nModuleNotFoundError: No module named 'vllm.lora.models' token={secret}\nRuntimeError: password=hunter2secret\n"
    for args in (["--json"], []):
        code, out = diagnose(cli, small_kb, "-", *args, input=text)
        assert code == 0
        assert secret not in out and "hunter2secret" not in out
    code, out = diagnose(cli, small_kb, "-", "--json", input=f"RuntimeError: login failed token={secret}\n")
    assert code == 1 and secret not in out and "[REDACTED]" in out


def test_rich_markup_in_traces_is_not_interpreted(small_kb, cli):
    code, out = diagnose(cli, small_kb, "-", input="RuntimeError: [bold red]not markup[/] and [link=x]y[/link]\n")
    assert code == 1 and "[bold red]not markup[/]" in out


def test_kb_list_show_search(small_kb, cli):
    code, out = cli(["kb", "list", "--kb", str(small_kb.patterns), "--json"])
    assert code == 0 and [e["id"] for e in json.loads(out)["entries"]] == ["DRV-001", "VLLM-001"]
    code, out = cli(["kb", "list", "--layer", "driver", "--kb", str(small_kb.patterns), "--json"])
    assert [e["id"] for e in json.loads(out)["entries"]] == ["DRV-001"]
    assert cli(["kb", "list", "--layer", "nope", "--kb", str(small_kb.patterns)])[0] == 2
    code, out = cli(["kb", "show", "NPU-CP-002", "--kb", str(small_kb.patterns), "--json"])
    assert code == 0 and json.loads(out)["entry"]["id"] == "VLLM-001"
    code, out = cli(["kb", "show", "VLLM-001", "--kb", str(small_kb.patterns)])
    assert code == 0 and "root cause" in out and "verify" in out
    assert cli(["kb", "show", "NOPE-001", "--kb", str(small_kb.patterns)])[0] == 2
    code, out = cli(["kb", "search", "lora models", "--kb", str(small_kb.patterns), "--json"])
    assert code == 0 and json.loads(out)["results"][0]["id"] == "VLLM-001"


def test_kb_search_empty_text_is_usage_error(small_kb, cli):
    for text in ("", "   "):
        code, out = cli(["kb", "search", text, "--kb", str(small_kb.patterns), "--json"])
        assert code == 2, out
        assert json.loads(out)["error"]["exit_code"] == 2


def test_compiled_cache_is_used_rebuilt_on_change_and_survives_corruption(small_kb, tmp_path):
    cache = tmp_path / "kbcache"
    first = load_kb(small_kb.patterns, cache)
    assert not first.from_cache and len(first.entries) == 2
    second = load_kb(small_kb.patterns, cache)
    assert second.from_cache and [e.id for e in second.entries] == [e.id for e in first.entries]
    assert second.entries[0] == first.entries[0]
    # a changed file changes the key
    path = small_kb.patterns / "driver" / "DRV-001.yaml"
    path.write_text(path.read_text().replace("title of DRV-001", "a new title"))
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 5_000_000))
    third = load_kb(small_kb.patterns, cache)
    assert not third.from_cache and any(e.title == "a new title" for e in third.entries)
    # corrupt cache files are ignored and rebuilt
    for f in (cache / "kb").glob("kb-*"):
        f.write_bytes(b"\x80\x04garbage")
    fourth = load_kb(small_kb.patterns, cache)
    assert not fourth.from_cache and len(fourth.entries) == 2
    assert load_kb(small_kb.patterns, cache).from_cache


def test_diagnose_defaults_from_porter_yaml(small_kb, cli, tmp_path, monkeypatch):
    project = tmp_path / "proj"
    project.mkdir()
    (project / "porter.yaml").write_text("diagnose:\n  top: 1\n  env: ['vllm==0.11.0']\n")
    monkeypatch.chdir(project)
    trace = tmp_path / "t.txt"
    trace.write_text(LORA_TRACE)
    code, out = diagnose(cli, small_kb, str(trace), "--json")
    assert code == 1 and json.loads(out)["env"] == {"vllm": "0.11.0"}  # demoted by the configured env
    code, out = diagnose(cli, small_kb, str(trace), "--json", "--env", "vllm==0.13.0")
    assert code == 0  # the command line wins over the file
    (project / "porter.yaml").write_text("diagnose:\n  topp: 1\n")
    code, out = diagnose(cli, small_kb, str(trace), "--json")
    assert code == 2 and "topp" in json.loads(out)["error"]["message"]


def test_env_file_shapes(tmp_path):
    from porter.errors import InputError
    from porter.kb.env import parse_env

    env = {"packages": {"torch_npu": "2.7.1", "vllm": None}, "cann": {"version": "8.5.0"}}
    shapes = {
        "vime.json": {"schema": "vime.smoke/1", "environment": env},
        "run.json": {"schema": "porter.smoke-run/1", "report": {"environment": env}},
        "cli.json": {"schema": "porter.smoke/1", "run": {"report": {"environment": env}}},
        "facts.json": env,
    }
    for name, doc in shapes.items():
        path = tmp_path / name
        path.write_text(json.dumps(doc))
        assert parse_env([str(path)]) == {"torch-npu": "2.7.1", "cann": "8.5.0"}, name
    (tmp_path / "flat.json").write_text(json.dumps({"Torch_NPU": "2.7.1"}))
    assert parse_env([str(tmp_path / "flat.json"), "vllm==0.13.0"]) == {"torch-npu": "2.7.1", "vllm": "0.13.0"}
    (tmp_path / "empty.json").write_text(json.dumps({"schema": "x", "results": []}))
    import pytest

    with pytest.raises(InputError):
        parse_env([str(tmp_path / "empty.json")])


def test_human_output_shows_each_matched_line_once(cli, monkeypatch):
    # Two signatures of VASC-001 hit the same line of this one-line trace; people see it once.
    monkeypatch.setenv("COLUMNS", "400")
    trace = os.path.join(os.path.dirname(__file__), "..", "data", "seed-traces", "010-fractal-nz-rl.txt")
    code, out = cli(["diagnose", trace])
    assert code == 0, out
    assert out.count("line 1: ValueError: FRACTAL_NZ mode is enabled") == 1


def test_text_output_keeps_confidence_on_a_narrow_terminal(fixture_kb, cli, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    long_title = "a very long entry title that says the whole cause in one line " * 3
    fixture_kb.add(entry("VLLM-001", "vllm", [{"literal": "No module named 'vllm.lora.models'", "weight": 0.9}], title=long_title), LORA_TRACE)
    code, out = cli(["diagnose", "--kb", str(fixture_kb.patterns), "-"], input=LORA_TRACE)
    assert code == 0 and "VLLM-001 confidence 0.9" in out, out


def test_private_key_bodies_and_password_flags_are_redacted_in_every_output(small_kb, cli):
    body = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW"
    trace = (
        "Traceback (most recent call last):\n"
        '  File "/x/site-packages/huggingface_hub/a.py", line 3, in f\n'
        "RuntimeError: login --password Sup3rS3cret! failed\n"
        "-----BEGIN OPENSSH PRIVATE KEY-----\n"
        f"{body}\n"
        f"{body[::-1]}\n"
        "-----END OPENSSH PRIVATE KEY-----\n"
        "after the key\n"
    )
    for args in ([], ["--json"], ["--json", "--explain"], ["--explain"]):
        code, out = diagnose(cli, small_kb, "-", *args, input=trace)
        assert code == 1, out
        for secret in ("Sup3rS3cret", body[:20], body[::-1][:20]):
            assert secret not in out, (args, secret)
    doc = json.loads(diagnose(cli, small_kb, "-", "--json", input=trace)[1])
    assert doc["input"]["lines"] == 8  # masked, not dropped: line numbers stay true
