"""CLI conventions shared by every command: version, exit codes, JSON errors, config loading."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from porter import __version__
from porter.cli import app
from porter.config import load_config
from porter.errors import InputError
from porter.redact import redact_text
from porter.slug import port_branch, slugify

runner = CliRunner()


def test_version_flag():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"porter {__version__}"


def test_unknown_command_is_usage_error():
    assert runner.invoke(app, ["no-such-command"]).exit_code == 2


def test_config_json_schema(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "porter.yaml").write_text("runs_dir: my-runs\ncache_dir: /tmp/c\n")
    result = runner.invoke(app, ["config", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["schema"] == "porter.config/1"
    assert doc["config"]["runs_dir"] == str(tmp_path.resolve() / "my-runs")
    assert doc["config"]["cache_dir"] == "/tmp/c"


def test_config_unknown_key_is_input_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "porter.yaml").write_text("knowlege_dir: typo\n")
    result = runner.invoke(app, ["config", "--json"])
    assert result.exit_code == 2
    doc = json.loads(result.output)
    assert "knowlege_dir" in doc["error"]["message"]


def test_config_pyproject_section(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.porter]\nruns_dir = "r"\n')
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    cfg = load_config(cwd=sub)
    assert cfg.project_root == tmp_path.resolve()
    assert cfg.runs_dir == tmp_path.resolve() / "r"


def test_config_invalid_yaml_names_line(tmp_path):
    bad = tmp_path / "porter.yaml"
    bad.write_text("hosts:\n  a: [1, 2\n")
    with pytest.raises(InputError, match="line"):
        load_config(cwd=tmp_path)


def test_slug():
    assert slugify("vllm", "main") == "vllm-main"
    assert slugify("torch", "2.12.0rc3") == "torch-2.12.0rc3"
    assert slugify("Transformers", "v5.4.0") == "transformers-v5.4.0"
    assert port_branch(slugify("triton", "v3.6.0")) == "ascend-port/triton-v3.6.0"
    with pytest.raises(ValueError):
        slugify("", "")


@pytest.mark.parametrize(
    "secret",
    [
        "hf_abcdefghijklmnopqrstuvwxyz123456",
        "ghp_abcdefghijklmnopqrstuvwxyz123456",
        "AKIAABCDEFGHIJKLMNOP",
    ],
)
def test_redact_tokens(secret):
    out = redact_text(f"token in log: {secret} end\n")
    assert secret not in out and "[REDACTED]" in out


def test_redact_assignments_urls_and_keys():
    text = (
        "export HF_TOKEN=abc123secret\n"
        "git clone https://bob:hunter2@example.com/x.git\n"
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\n-----END OPENSSH PRIVATE KEY-----\n"
        "keep this line\n"
    )
    out = redact_text(text)
    for secret in ("abc123secret", "hunter2", "b3BlbnNzaC1rZXk"):
        assert secret not in out
    assert "keep this line" in out and "bob:" in out


def test_cli_cold_start_runs_as_module():
    proc = subprocess.run([sys.executable, "-m", "porter", "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and __version__ in proc.stdout


def test_redact_json_keys_but_not_token_counts():
    out = redact_text('{"HF_TOKEN": "abc123secret", "max_tokens": 128, "num_tokens": 7, "tokenizer": "llama"}\n')
    assert "abc123secret" not in out
    assert '"max_tokens": 128' in out and '"num_tokens": 7' in out and '"tokenizer": "llama"' in out


def _porter(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "porter", *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("args", "schema"),
    [
        (["smoke", "--bogus", "--json"], "porter.smoke/1"),
        (["hosts", "show", "--json"], "porter.hosts.show/1"),
        (["diagnose", "x", "--top", "0", "--json"], "porter.diagnose/1"),
        (["--json"], "porter.error/1"),
    ],
)
def test_parse_time_usage_errors_are_json_with_exit_2(args, schema):
    proc = _porter(*args)
    assert proc.returncode == 2, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema"] == schema
    assert doc["error"]["kind"] == "usage_error" and doc["error"]["exit_code"] == 2


def test_parse_time_usage_error_without_json_is_for_people():
    proc = _porter("config", "--bogus")
    assert proc.returncode == 2
    assert proc.stdout == "" and "No such option" in proc.stderr


def test_interrupt_inside_a_command_is_json_with_exit_130(monkeypatch):
    def interrupted(self):
        raise KeyboardInterrupt

    monkeypatch.setattr("porter.cliutil.AppState.config", interrupted)
    result = runner.invoke(app, ["config", "--json"])
    assert result.exit_code == 130
    assert json.loads(result.output)["error"]["kind"] == "interrupted"


def test_redact_leaves_paths_named_like_secrets_alone():
    out = redact_text("/etc/passwd: unknown archive type\nrun --password=hunter2 now\n")
    assert out.startswith("/etc/passwd: unknown archive type")
    assert "hunter2" not in out
