"""Secrets and untrusted input: every redaction form, every output format, the trust boundary for
project files, bounded YAML, control characters in profiles, secrets off the command line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from porter.redact import PEM_MASK, Redactor, is_secret_key, redact_data, redact_text, sanitize_terminal
from tests.smoke.conftest import project  # noqa: F401  (the isolated-project fixture)
from tests.smoke.smoke_helpers import fake_python, invoke, write_config

# (text containing the secret, the secret itself). One row per rule: deleting a rule fails its row.
PLANTED = [
    ("token hf_abcdefghijklmnopqrstuvwxyz123456 end", "hf_abcdefghijklmnopqrstuvwxyz123456"),
    ("git ghp_abcdefghijklmnopqrstuvwxyz123456 end", "ghp_abcdefghijklmnopqrstuvwxyz123456"),
    ("pat github_pat_11ABCDEFG0123456789_abcdefghijklmnop end", "github_pat_11ABCDEFG0123456789_abcdefghijklmnop"),
    ("gitlab glpat-abcdefghij0123456789xyz end", "glpat-abcdefghij0123456789xyz"),
    ("openai sk-proj-abcdefghijklmnopqrstuvwx end", "sk-proj-abcdefghijklmnopqrstuvwx"),
    ("slack xoxb-123456789012-abcdefghijkl end", "xoxb-123456789012-abcdefghijkl"),
    ("aws AKIAIOSFODNN7EXAMPLE end", "AKIAIOSFODNN7EXAMPLE"),
    ("google AIzaSyA1234567890abcdefghijklmnopqrstuv end", "AIzaSyA1234567890abcdefghijklmnopqrstuv"),
    ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N end",
     "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N"),
    ("Authorization: Bearer abcdefgh12345678", "abcdefgh12345678"),
    ("headers={'Authorization': 'Bearer zyxwvuts98765432'}", "zyxwvuts98765432"),
    ("requests.get(url, headers={'X-Auth-Token': 'MIIhuaweiToken123'})", "MIIhuaweiToken123"),
    ("X-Auth-Token: MIIEhwYJKoZIhvcNAQcC", "MIIEhwYJKoZIhvcNAQcC"),
    ("Cookie: sessionid=s3cr3tcookie; theme=dark", "s3cr3tcookie"),
    ("export HF_TOKEN=abc123secret", "abc123secret"),
    ('export HF_TOKEN="quoted secret value"', "quoted secret value"),
    ('{"api_key": "json-secret-1"}', "json-secret-1"),
    ('{\\"api_key\\": \\"escaped-secret-2\\"}', "escaped-secret-2"),
    ("secret_key = py-secret-3", "py-secret-3"),
    ("accessKeySecret=camel-secret-4", "camel-secret-4"),
    ("PGPASSWORD=pg-secret-5 psql", "pg-secret-5"),
    ("HUAWEICLOUD_SDK_SK=hw-secret-6", "hw-secret-6"),
    ("OBS_AK=HWAKEXAMPLE0123456789", "HWAKEXAMPLE0123456789"),
    ("obsutil config -i=ak -k=sk ak=modelarts-ak-7 sk=modelarts-sk-8", "modelarts-sk-8"),
    ("access_key_id=huawei-ak-9", "huawei-ak-9"),
    ("python train.py --api_key flag-secret-10", "flag-secret-10"),
    ("tool --secret-key flag-secret-11", "flag-secret-11"),
    ("ssh-keygen --passphrase flag-secret-12", "flag-secret-12"),
    ("run --password=hunter2 now", "hunter2"),
    ("git clone https://bob:hunter3@example.com/x.git", "hunter3"),
    ("pip install --index-url https://:emptyuserpw@mirror.example/simple x", "emptyuserpw"),
    ("clone https://user:p@ss@word@example.com/r.git", "p@ss@word"),
    ("clone https://x9a8b7c6d5e4f3g2h1i0@github.com/org/repo.git", "x9a8b7c6d5e4f3g2h1i0"),
    ("password=" + "x" * 700 + "TAILSECRET", "TAILSECRET"),
    ("pypi pypi-AgEIcHlwaS5vcmcCJDAwMDAwMDAwLTAwMDAtMDAwMC0wMDAw end", "pypi-AgEIcHlwaS5vcmcCJDAwMDAwMDAwLTAwMDAtMDAwMC0wMDAw"),
]


@pytest.mark.parametrize(("text", "secret"), PLANTED, ids=[str(i) for i in range(len(PLANTED))])
def test_every_planted_form_is_masked(text, secret):
    out = redact_text(text)
    assert secret not in out, out
    assert "[REDACTED" in out


@pytest.mark.parametrize("text", [
    '{"max_tokens": 128, "num_tokens": 7, "tokenizer": "llama"}',
    "PWD=/home/user/work",
    "pad_token=<pad> eos_token=</s>",
    "/etc/passwd: unknown archive type",
    "task=3 mask=1 desk_sk_count",
    "ssh://git@github.com/org/repo.git",
    "--max-tokens 128 --use-token",
])
def test_ordinary_text_stays_readable(text):
    assert redact_text(text) == text


def test_pem_block_is_masked_and_the_rest_of_the_line_kept():
    line = "before ghp_abcdefghijklmnopqrstuvwxyz123 -----BEGIN RSA PRIVATE KEY-----MIIEabc-----END RSA PRIVATE KEY----- after"
    out = redact_text(line)
    assert out == f"before [REDACTED] {PEM_MASK} after"
    r = Redactor()
    assert r.line("key: -----BEGIN OPENSSH PRIVATE KEY-----") == f"key: {PEM_MASK}"
    assert r.line("b3BlbnNzaC1rZXk") is None
    assert r.line("-----END OPENSSH PRIVATE KEY----- trailing text") == f"{PEM_MASK} trailing text"


def test_redact_data_masks_by_key_and_keeps_the_structure():
    doc = {"env": {"HUAWEICLOUD_SDK_SK": "v1", "PATH": "/bin", "count_tokens": 3},
           "lines": ['export HF_TOKEN="v2"', "ok"], "nested": [{"password": 5}]}
    out = redact_data(doc)
    text = json.dumps(out)
    assert "v1" not in text and "v2" not in text and '"password": "[REDACTED]"' in text
    assert out["env"]["PATH"] == "/bin" and out["env"]["count_tokens"] == 3 and out["lines"][1] == "ok"
    assert is_secret_key("accessKeySecret") and is_secret_key("OBS_SK") and not is_secret_key("max_tokens")


def test_terminal_control_sequences_are_neutralised():
    out = sanitize_terminal("evil \x1b]52;c;aGVsbG8=\x07 \x1b[2J\rspoof\r\nnext\n")
    assert "\x1b" not in out and "\x07" not in out and "\r" not in out
    assert "\\x1b]52" in out and out.endswith("next\n")


# --- a standing property test: planted secrets anywhere, in any structure ------------------------
_secret = st.sampled_from([s for _, s in PLANTED if len(s) >= 12])
_noise = st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=40)


@settings(max_examples=150, deadline=None)
@given(prefix=_noise, suffix=_noise, form=st.sampled_from(PLANTED), sep=st.sampled_from([" ", "\n", "\t", "; "]))
def test_property_planted_secret_never_survives_in_text(prefix, suffix, form, sep):
    text, secret = form
    out = redact_text(prefix + sep + text + sep + suffix)
    assert secret not in out


@settings(max_examples=100, deadline=None)
@given(form=st.sampled_from(PLANTED), key=st.sampled_from(["message", "line", "HF_TOKEN", "setup", "detail"]),
       depth=st.integers(0, 3))
def test_property_json_outputs_parse_and_hold_no_secret(form, key, depth):
    text, secret = form
    doc: object = {key: text, "plain": "keep"}
    for _ in range(depth):
        doc = {"wrap": [doc, text]}
    dumped = json.dumps(redact_data(doc))
    assert secret not in dumped
    assert json.loads(dumped)  # the JSON stays valid whatever the secret held (quotes, backslashes)


# --- through the CLI and the stored records ---------------------------------------------------------
def test_diagnose_json_stays_valid_with_quoted_secrets(project, tmp_path):
    trace = tmp_path / "t.txt"
    trace.write_text('export HF_TOKEN="hf_abcdefghijklmnopqrstuvwxyz123456"\n'
                     "RuntimeError: ACL stream synchronize failed, error code is 507035\n"
                     "api_key=\"plain-secret-1\" -----BEGIN EC PRIVATE KEY-----\nMHcCAQEE\n-----END EC PRIVATE KEY-----\n")
    code, doc, out = invoke("--json", "diagnose", str(trace))
    assert doc is not None, out  # parsed
    assert "hf_abcdefghijklmnop" not in out and "plain-secret-1" not in out and "MHcCAQEE" not in out


def _host(tmp_path: Path, **fields) -> dict:
    return {"transport": "local", "python": sys.executable, "workdir": str(tmp_path / "remote"), **fields}


def test_smoke_failure_reasons_and_host_escapes_are_clean_everywhere(project, tmp_path):
    body = ("echo 'HF_TOKEN=\"hf_abcdefghijklmnopqrstuvwxyz123456\"' >&2\n"
            "printf 'clip \\033]52;c;aGVsbG8=\\a done\\n' >&2\n"
            "echo '{\"schema\":\"vime.smoke/1\",\"level\":\"L0\",\"results\":[{\"name\":\"L0.python\",\"level\":\"L0\","
            "\"gate\":\"python\",\"verdict\":\"fail\",\"reason\":\"token ghp_abcdefghijklmnopqrstuvwxyz123456 Authorization: Bearer abcdefgh12345678\"}]}'\n"
            "exit 1\n")
    python = fake_python(tmp_path / "leaky-python", body)
    write_config(project, {"box": _host(tmp_path, python=str(python))})
    code, _, text_out = invoke("smoke", "--host", "box", "--level", "L0")
    code_json, doc, json_out = invoke("--json", "smoke", "--host", "box", "--level", "L0")
    assert doc is not None, json_out
    stored = Path(doc["run"]["run_dir"])
    for out in (text_out, json_out, (stored / "log.txt").read_text(), (stored / "result.json").read_text()):
        for secret in ("hf_abcdefghijklmnop", "ghp_abcdefghijklmnop", "abcdefgh12345678"):
            assert secret not in out
        assert "\x1b]52" not in out
    json.loads((stored / "result.json").read_text())


def test_a_report_of_the_wrong_shape_is_a_host_error_not_a_crash(project, tmp_path):
    python = fake_python(tmp_path / "odd-python", "echo '{\"schema\":\"vime.smoke/1\",\"results\":[{\"x\":1}]}'\nexit 0\n")
    write_config(project, {"box": _host(tmp_path, python=str(python))})
    code, doc, out = invoke("--json", "smoke", "--host", "box", "--level", "L0")
    assert code == 3 and doc is not None, out


def _record_argv(monkeypatch, module, name: str) -> list[list[str]]:
    """Wrap module.name (a process runner) so every argv it is given is kept, then run as usual."""
    seen: list[list[str]] = []
    real = getattr(module, name)

    def recording(argv, *args, **kwargs):
        seen.append(list(argv))
        return real(argv, *args, **kwargs)

    monkeypatch.setattr(module, name, recording)
    return seen


def test_secrets_in_env_and_setup_never_reach_the_command_line(project, tmp_path, monkeypatch):
    import porter.smoke.runner as runner_mod

    seen = _record_argv(monkeypatch, runner_mod, "run_streaming")
    python = fake_python(tmp_path / "ok-python", 'echo "token seen: ${PIP_INDEX_URL:+yes} $SETUP_DONE" >&2\nexit 1\n')
    write_config(project, {"box": _host(
        tmp_path, python=str(python),
        env={"PIP_INDEX_URL": "https://me:idx-pass-1@mirror.example/simple", "HUAWEICLOUD_SDK_SK": "hw-sk-2",
             "PLAIN": "visible"},
        setup=["export SETUP_DONE=1 GH=ghp_abcdefghijklmnopqrstuvwxyz123456"])})
    _, _, output = invoke("smoke", "--host", "box", "--level", "L0")
    assert seen, "the runner ran nothing"
    flat = "\n".join(" ".join(a) for a in seen)
    for secret in ("idx-pass-1", "hw-sk-2", "ghp_abcdefghijklmnop"):
        assert secret not in flat
    assert "token seen: yes 1" in output  # the values still reached the run, through the bundle


def test_hosts_show_masks_values_that_carry_secrets(project, tmp_path):
    write_config(project, {"box": _host(tmp_path, env={"HUAWEICLOUD_SDK_SK": "hw-sk-3",
                                                      "PIP_INDEX_URL": "https://u:idx-pass-4@m.example/simple"},
                                        setup=["huggingface-cli login --token hf_abcdefghijklmnopqrstuvwxyz123456"])})
    for args in (("hosts", "show", "box"), ("--json", "hosts", "show", "box")):
        _, _, out = invoke(*args)
        for secret in ("hw-sk-3", "idx-pass-4", "hf_abcdefghijklmnop"):
            assert secret not in out


# --- trust boundary for project files ----------------------------------------------------------
def test_project_file_cannot_replace_local_or_run_setup_without_trust(project, tmp_path, monkeypatch):
    monkeypatch.delenv("PORTER_TRUST_PROJECT", raising=False)
    marker = tmp_path / "ran"
    write_config(project, {"local": _host(tmp_path, setup=[f"touch {marker}"])})
    code, doc, _ = invoke("--json", "smoke", "--host", "local", "--level", "L0")
    assert code == 2 and "does not trust" in doc["error"]["message"] and "--trust-project" in doc["error"]["hint"]
    assert not marker.exists()
    code, doc, _ = invoke("--json", "hosts", "check", "local")
    assert code == 2 and not marker.exists()
    # trusted once: runs, and is remembered for this content
    invoke("--trust-project", "--json", "hosts", "check", "local")
    assert marker.exists()
    marker.unlink()
    invoke("--json", "hosts", "check", "local")
    assert marker.exists()
    # a changed profile must be trusted again
    write_config(project, {"local": _host(tmp_path, setup=[f"touch {marker}", "echo changed"])})
    marker.unlink()
    code, _, _ = invoke("--json", "hosts", "check", "local")
    assert code == 2 and not marker.exists()


def test_project_host_without_shell_lines_needs_no_trust(project, tmp_path, monkeypatch):
    monkeypatch.delenv("PORTER_TRUST_PROJECT", raising=False)
    write_config(project, {"box": _host(tmp_path)})
    code, doc, _ = invoke("--json", "hosts", "show", "box")
    assert code == 0, doc


# --- bounded parsing -----------------------------------------------------------------------------
def test_yaml_alias_bomb_is_refused_quickly(project):
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(8):
        prev, cur = chr(97 + i), chr(98 + i)
        lines.append(f"{cur}: &{cur} [{','.join(['*' + prev] * 9)}]")
    (project / "porter.yaml").write_text("\n".join(lines) + "\n")
    code, doc, _ = invoke("--json", "config")
    assert code == 2 and "aliases" in doc["error"]["message"]


@pytest.mark.parametrize("field,value", [("address", "host\x00evil"), ("user", "bob\x00"),
                                          ("description", "x\x1b]52;c;Zm9v\x07"), ("workdir", "/srv/run\x00")])
def test_control_characters_in_profiles_are_input_errors(project, tmp_path, field, value):
    fields = {"transport": "ssh", "address": "h.example", field: value}
    write_config(project, {"box": fields})
    code, doc, _ = invoke("--json", "hosts", "show", "box")
    assert code == 2 and "control character" in doc["error"]["message"]


# --- storage failures are the machine's state: exit 3 naming the path, nothing half-written -----
def test_full_disk_while_storing_a_run_is_exit_3_and_leaves_no_record(project, tmp_path, monkeypatch):
    import errno

    import porter.smoke.store as store_mod

    def full(path, text):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(store_mod, "atomic_write_text", full)
    python = fake_python(tmp_path / "py", "exit 1\n")
    write_config(project, {"box": _host(tmp_path, python=str(python))})
    code, doc, out = invoke("--json", "smoke", "--host", "box", "--level", "L0")
    assert code == 3, out
    assert "No space left" in doc["error"]["message"] and "result.json" in doc["error"]["message"]
    assert doc["error"]["details"]["failure"] == "storage"
    runs = project / "runs" / "box"
    assert not runs.exists() or not any(runs.iterdir())


def test_read_only_cache_is_exit_3_naming_the_path(project, monkeypatch):
    import errno

    from porter.cliutil import storage_problem

    problem = storage_problem(OSError(errno.EROFS, "Read-only file system", "/ro/cache/porter/x"))
    assert problem is not None and problem.exit_code == 3 and "/ro/cache/porter/x" in problem.message
    assert storage_problem(OSError(errno.ENOENT, "missing", "/x")) is None  # not a storage state: stays a bug


def test_hosts_check_keeps_secret_setup_lines_off_the_command_line(project, tmp_path, monkeypatch):
    import porter.proc as proc_mod

    seen = _record_argv(monkeypatch, proc_mod, "run")
    marker = tmp_path / "setup-ran"
    write_config(project, {"box": _host(tmp_path, setup=[f"GH=ghp_abcdefghijklmnopqrstuvwxyz123456 touch {marker}"])})
    code, doc, out = invoke("--json", "hosts", "check", "box")
    assert code == 0, out
    assert marker.exists()  # the setup line ran
    assert seen and not any("ghp_abcdefghijklmnop" in " ".join(a) for a in seen)
    assert doc["schema"] == "porter.hosts.check/1"


def test_redact_data_covers_sets_and_tuples():
    out = redact_data({"s": {"token=abc123secret"}, "t": ("password=hunter9",)})
    assert out == {"s": ["token=[REDACTED]"], "t": ["password=[REDACTED]"]}


def test_redactor_counts_each_redacted_line_once():
    r = Redactor()
    for line in ("plain", "HF_TOKEN=abc123secret ghp_abcdefghijklmnopqrstuvwxyz123456", "still plain",
                 "-----BEGIN RSA PRIVATE KEY-----", "body", "-----END RSA PRIVATE KEY-----"):
        r.line(line)
    assert r.redactions == 3  # the token line, the BEGIN line, the END line


def test_invalid_yaml_names_the_line_and_column():
    from porter.errors import InputError
    from porter.yamlio import load_yaml_text

    with pytest.raises(InputError) as info:
        load_yaml_text("a: 1\nb: [1, 2\nc: 3\n", "porter.yaml")
    assert "porter.yaml: invalid YAML at line 3, column 2" in info.value.message
