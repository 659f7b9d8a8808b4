"""`porter diagnose`'s fast path (porter.fastcli) against the typer command it stands in for."""

from __future__ import annotations

import json
import sys

import pytest
from tests.kb.conftest import DCMI_TRACE, LORA_TRACE

from porter.fastcli import fast_diagnose, parse


def _fast(argv: list[str], capsys) -> tuple[int, str]:
    code = fast_diagnose(argv)
    assert code is not None, f"the fast path declined {argv}"
    return code, capsys.readouterr().out


@pytest.mark.parametrize(
    "tail",
    [
        [],
        ["--json"],
        ["--explain", "-k", "1"],
        ["--top=2", "--format", "JSON"],
        ["--env", "vllm==0.14.0", "--json"],
        ["--env", "not-a-version", "--json"],  # exit 2, same error document
        ["-q"],
    ],
)
def test_fast_path_prints_what_the_typer_command_prints(small_kb, cli, tmp_path, capsys, tail):
    trace = tmp_path / "lora.txt"
    trace.write_text(LORA_TRACE + DCMI_TRACE, encoding="utf-8")
    argv = ["diagnose", str(trace), "--kb", str(small_kb.patterns), *tail]
    cli(argv)  # both runs below then read the compiled-KB cache (`kb.cached` is in the output)
    slow_code, slow_out = cli(argv)
    fast_code, fast_out = _fast(argv, capsys)
    assert (fast_code, fast_out) == (slow_code, slow_out)
    if "--json" in tail:
        assert json.loads(fast_out)["schema"] == "porter.diagnose/1"


def test_fast_path_errors_and_unknowns_keep_their_exit_codes(small_kb, cli, tmp_path, capsys):
    healthy = tmp_path / "healthy.txt"
    healthy.write_text("INFO all good\nINFO still good\n", encoding="utf-8")
    cli(["diagnose", str(healthy), "--kb", str(small_kb.patterns)])  # warm the KB cache
    for argv, code in (
        (["--json", "diagnose", str(healthy), "--kb", str(small_kb.patterns)], 1),
        (["diagnose", str(tmp_path / "missing.txt"), "--json"], 2),
        (["diagnose", str(tmp_path), "--json"], 2),
    ):
        fast_code, fast_out = _fast(argv, capsys)
        slow_code, slow_out = cli(argv)
        assert fast_code == slow_code == code and fast_out == slow_out, argv


@pytest.mark.parametrize(
    "argv",
    [
        ["kb", "list"],
        ["diagnose", "--help"],
        ["diagnose", "a.txt", "b.txt"],
        ["diagnose", "a.txt", "-v"],
        ["diagnose", "a.txt", "--history", "repo"],
        ["diagnose", "a.txt", "--top", "0"],
        ["diagnose", "a.txt", "--top", "x"],
        ["diagnose", "a.txt", "--kb"],
        ["diagnose", "a.txt", "--format", "sarif"],
        ["diagnose", "a.txt", "--config", "p.yaml"],  # a root option: not valid after the command
        ["--explain", "diagnose", "a.txt"],  # a command option before the command
        ["diagnose", "a.txt", "--typo"],
        ["diagnose", "--", "-odd-name"],
        ["--version"],
    ],
)
def test_anything_unusual_goes_to_the_typer_app(argv):
    assert parse(argv) is None


def test_global_options_are_read_before_and_after_the_command():
    args = parse(["-q", "--config", "p.yaml", "--trust-project", "diagnose", "-", "--format=json", "--env", "a==1", "--env=b==2"])
    assert args is not None and args.source == "-" and args.quiet and args.trust_project and args.json_mode
    assert str(args.config) == "p.yaml" and args.env == ["a==1", "b==2"]


def test_the_entry_point_does_not_import_typer_for_a_diagnosis(tmp_path):
    import subprocess

    trace = tmp_path / "t.txt"
    trace.write_text(DCMI_TRACE, encoding="utf-8")
    code = ("import sys; sys.argv = ['porter', 'diagnose', sys.argv[1], '--json']\n"
            "from porter.cli import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "sys.stderr.write('TYPER' if 'typer' in sys.modules or 'click' in sys.modules else 'NO-TYPER')\n")
    import os

    env = {**os.environ, "PORTER_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run([sys.executable, "-c", code, str(trace)], capture_output=True, text=True, env=env, timeout=60)
    assert done.stderr.endswith("NO-TYPER"), done.stderr[-2000:]
    assert json.loads(done.stdout)["schema"] == "porter.diagnose/1"
