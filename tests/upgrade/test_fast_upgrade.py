"""`porter upgrade ... --dry-run`'s start-up fast path (porter.fastcli.fast_upgrade) against the
typer command it stands in for: same output and exit code, and every other line left to typer."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from porter.fastcli import fast_upgrade, parse_upgrade


def _argv(trees, *tail: str) -> list[str]:
    return ["upgrade", "myplug", "--from", "1.0", "--to", "2.0", "--plugin-path", str(trees["plugin"]),
            "--upstream-path", f"1.0={trees['v1']}", "--upstream-path", f"2.0={trees['v2']}", *tail]


def _typer(argv: list[str]) -> tuple[int, str]:
    from porter.cli import app

    result = CliRunner().invoke(app, argv)
    return result.exit_code, result.stdout


def _without_timings(out: str) -> dict:
    doc = json.loads(out)
    doc["analysis"].pop("timings", None)
    doc["analysis"].pop("index", None)
    return doc


@pytest.mark.parametrize("tail", [["--dry-run", "--json"], ["--json", "--dry-run", "--offline"]])
def test_fast_path_prints_the_typer_commands_json(project, trees, capsys, tail):
    argv = _argv(trees, *tail)
    slow_code, slow_out = _typer(argv)
    code = fast_upgrade(argv)
    assert code is not None, "the fast path declined a plain dry run"
    fast_out = capsys.readouterr().out
    assert code == slow_code == 1  # the fixture's plugin breaks at 2.0
    assert _without_timings(fast_out) == _without_timings(slow_out)


def test_fast_path_summary_text_matches(project, trees, capsys):
    argv = _argv(trees, "--dry-run", "--summary", "-q")
    _typer(argv)  # warm the result cache so both texts come from the same entry
    slow_code, slow_out = _typer(argv)
    code = fast_upgrade(argv)
    assert (code, capsys.readouterr().out) == (slow_code, slow_out)


def test_bad_upstream_path_is_the_same_usage_error(project, trees, capsys):
    argv = ["--json", "upgrade", "myplug", "--to", "2.0", "--upstream-path", "no-equals-sign", "--dry-run"]
    slow_code, slow_out = _typer(argv)
    code = fast_upgrade(argv)
    fast_doc = json.loads(capsys.readouterr().out)
    assert code == slow_code == 2
    assert fast_doc == json.loads(slow_out)
    assert "VERSION=DIR" in fast_doc["error"]["message"]


@pytest.mark.parametrize("argv", [
    ["upgrade", "myplug", "--to", "2.0"],  # not a dry run: the port path
    ["upgrade", "myplug", "--dry-run"],  # no --to: typer's own usage error
    ["upgrade", "myplug", "--to", "2.0", "--dry-run", "--drop", "1.0"],
    ["upgrade", "myplug", "--to", "2.0", "--dry-run", "--html", "r.html"],
    ["upgrade", "myplug", "--to", "2.0", "--to", "3.0", "--dry-run"],
    ["upgrade", "myplug", "--to", "--dry-run"],
    ["upgrade", "myplug", "--to=", "--dry-run"],
    ["upgrade", "--to", "2.0", "--dry-run"],
    ["upgrade", "myplug", "--to", "2.0", "--dry-run", "--help"],
    ["-v", "upgrade", "myplug", "--to", "2.0", "--dry-run"],
    ["--config", "p.yaml", "upgrade", "myplug", "--to", "2.0", "--dry-run"],
    ["--format", "sarif", "upgrade", "myplug", "--to", "2.0", "--dry-run"],
    ["kb", "search", "upgrade"],
    ["status"],
])
def test_other_lines_go_to_typer(argv):
    assert parse_upgrade(argv) is None


def test_plain_line_is_parsed():
    args = parse_upgrade(["-q", "upgrade", "vllm-ascend", "--to=main", "--from", "0.18.0", "--upstream-path",
                          "0.18.0=/a", "--upstream-path=main=/b", "--dry-run", "--json"])
    assert args is not None
    assert (args.name, args.to, args.from_, args.upstream_paths, args.json_mode, args.quiet) == (
        "vllm-ascend", "main", "0.18.0", ["0.18.0=/a", "main=/b"], True, True)


def test_a_missing_local_tree_fails_before_any_upstream_is_fetched(project, trees, monkeypatch, tmp_path):
    """Bad input is reported before porter downloads or clones an upstream it would not use."""
    from porter.config import load_config
    from porter.errors import InputError
    from porter.upgrade import analyze

    def no_fetch(*args, **kwargs):
        raise AssertionError("an upstream was resolved before the missing plugin path was reported")

    monkeypatch.setattr(analyze, "resolve_upstream_tree", no_fetch)
    missing = tmp_path / "no-such-plugin"
    request = analyze.AnalysisRequest(plugin="myplug", target="2.0", baseline="1.0", plugin_path=missing,
                                      upstream_paths={}, config=load_config())
    with pytest.raises(InputError, match="no-such-plugin: no such directory") as err:
        analyze.run_analysis(request)
    assert "--plugin-path" in err.value.hint


_EXIT_PROBE = """\
import atexit, gc, sys
atexit.register(lambda: sys.stderr.write(f"FROZEN {gc.get_freeze_count()} ENABLED {gc.isenabled()}"))
sys.argv = ["porter"] + sys.argv[1:]
from porter.cli import main
main()
"""


def test_the_cli_freezes_what_an_upgrade_dry_run_leaves_before_it_exits(project, trees, tmp_path):
    """The interpreter's collection at exit would traverse every survivor of the analysis to free
    nothing: the upgrade fast path freezes them (the collector stays on)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PORTER_CACHE_DIR": str(tmp_path / "cli-cache"), "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    done = subprocess.run([sys.executable, "-c", _EXIT_PROBE, *_argv(trees, "--dry-run", "--json")], capture_output=True,
                          text=True, env=env, timeout=120, cwd=project)
    assert done.returncode == 1 and json.loads(done.stdout)["analysis"]["records"], done.stderr[-2000:]
    frozen, enabled = done.stderr.rsplit("FROZEN ", 1)[1].split(" ENABLED ")
    assert int(frozen) > 10_000 and enabled == "True"
