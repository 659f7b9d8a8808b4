"""`--format sarif|junit|github`: SARIF validates against the published 2.1.0 schema, JUnit XML
loads in a JUnit parser, GitHub annotations carry file and line; other commands refuse them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from porter.cli import app
from tests.smoke.smoke_helpers import fake_python, write_config

SCHEMA = Path(__file__).resolve().parent.parent / "data" / "schemas" / "sarif-schema-2.1.0.json"
runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def upgrade_args(trees) -> list[str]:
    return ["upgrade", "myplug", "--to", "2.0", "--from", "1.0", "--dry-run", "--plugin-path", str(trees["plugin"]),
            "--upstream-path", f"1.0={trees['v1']}", "--upstream-path", f"2.0={trees['v2']}"]


def test_upgrade_sarif_validates_against_the_published_schema(upgrade_project, trees):
    jsonschema = pytest.importorskip("jsonschema")
    result = invoke(*upgrade_args(trees), "--format", "sarif")
    assert result.exit_code == 1, result.output  # breaking findings keep their exit code
    log = json.loads(result.stdout)
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    jsonschema.Draft4Validator.check_schema(schema)
    errors = sorted(jsonschema.Draft4Validator(schema, format_checker=jsonschema.FormatChecker()).iter_errors(log),
                    key=str)
    assert not errors, [e.message for e in errors[:5]]
    run = log["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    rule_ids = [r["id"] for r in rules]
    assert len(rule_ids) == len(set(rule_ids))  # one rule per drift family
    assert {"F1", "F2", "F2r", "F3", "F7", "F8", "F10", "F11"} <= set(rule_ids)
    assert all(r["help"]["text"] and r["shortDescription"]["text"] for r in rules)
    json_doc = json.loads(invoke(*upgrade_args(trees), "--json").stdout)["analysis"]
    assert len(run["results"]) == len(json_doc["records"]) + len(json_doc["notes"])
    moved = next(r for r in run["results"] if r["ruleId"] == "F2")
    assert rules[moved["ruleIndex"]]["id"] == "F2"
    location = moved["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uriBaseId"] == "PLUGIN_ROOT"
    site = next(s for rec in json_doc["records"] if rec["family"] == "F2" and rec["symbol"] == moved["properties"]["symbol"]
                for s in rec["sites"][:1])
    assert location["artifactLocation"]["uri"] == site["path"] and location["region"]["startLine"] == site["line"]
    assert (trees["plugin"] / site["path"]).is_file()
    assert run["originalUriBaseIds"]["PLUGIN_ROOT"]["uri"].startswith("file://")
    levels = {r["level"] for r in run["results"]}
    assert "error" in levels and levels <= {"error", "warning", "note"}


def test_upgrade_github_annotations_point_at_plugin_lines(upgrade_project, trees, monkeypatch):
    monkeypatch.chdir(trees["plugin"].parent)  # the checkout holding the plugin
    result = invoke("--config", str(upgrade_project / "porter.yaml"), *upgrade_args(trees), "--format", "github")
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    errors = [l for l in lines if l.startswith("::error ")]
    assert errors and all("file=myplug/" in l and ",line=" in l for l in errors)
    assert lines[-1].startswith("::notice title=porter upgrade::myplug on upkg 2.0: outcome C_PATCH")


def test_format_and_quiet_after_the_subcommand_and_json_alias(upgrade_project, trees):
    before = invoke("--format", "sarif", *upgrade_args(trees))
    after = invoke(*upgrade_args(trees), "-q", "--format=sarif")
    assert json.loads(before.stdout)["runs"][0]["results"] == json.loads(after.stdout)["runs"][0]["results"]
    alias = invoke(*upgrade_args(trees), "--json")
    explicit = invoke(*upgrade_args(trees), "--format", "json")
    assert json.loads(alias.stdout)["analysis"]["records"] == json.loads(explicit.stdout)["analysis"]["records"]


def test_ci_formats_are_usage_errors_where_meaningless(upgrade_project):
    for args, fmt in ((["config"], "sarif"), (["hosts", "list"], "junit"), (["kb", "list"], "github"),
                      (["upgrade", "x", "--to", "1"], "junit"), (["config"], "junit")):
        result = invoke(*args, "--format", fmt)
        assert result.exit_code == 2, (args, result.output)
        assert f"--format {fmt} has no meaning" in result.output and "--format json" in result.output
    result = invoke("config", "--format", "yaml")
    assert result.exit_code == 2
    result = invoke("config", "--json", "--format", "sarif")
    assert result.exit_code == 2 and "two different outputs" in result.output


REPORT = {"schema": "vime.smoke/1", "level": "L3", "duration_s": 3.5, "results": [
    {"gate": "L0.python", "name": "python", "level": "L0", "verdict": "pass", "values": {"version": "3.11"},
     "duration_s": 0.01},
    {"gate": "G1", "name": "logprob alignment", "level": "L3", "verdict": "fail",
     "values": {"max_abs_diff": 0.31, "tokens": 64}, "thresholds": {"max_abs_diff": 0.05}, "duration_s": 2.5,
     "reason": "max_abs_diff 0.31 > 0.05"},
    {"gate": "G4", "name": "weight sync", "level": "L3", "verdict": "error", "duration_s": 0.4,
     "reason": "RuntimeError: sync broke", "traceback": "Traceback (most recent call last):\nRuntimeError: sync broke\n"},
    {"gate": "G8", "name": "mxfp8", "level": "L3", "verdict": "skip", "reason": "needs npu-a5", "duration_s": 0.0},
]}


def _smoke_host(smoke_project, tmp_path, body: str) -> None:
    python = fake_python(tmp_path / "report-python", body)
    write_config(smoke_project, {"box": {"transport": "local", "python": str(python), "workdir": str(tmp_path / "remote")}})


def test_smoke_junit_loads_in_a_junit_parser(smoke_project, tmp_path):
    junitparser = pytest.importorskip("junitparser")
    _smoke_host(smoke_project, tmp_path, f"echo '{json.dumps(REPORT)}'\nexit 1\n")
    result = invoke("smoke", "--host", "box", "--format", "junit")
    assert result.exit_code == 1
    out = tmp_path / "smoke.xml"
    out.write_text(result.stdout, encoding="utf-8")
    xml = junitparser.JUnitXml.fromfile(str(out))
    suites = list(xml) if isinstance(xml, junitparser.JUnitXml) else [xml]
    suite = suites[0]
    assert (suite.tests, suite.failures, suite.errors, suite.skipped) == (4, 1, 1, 1)
    cases = {case.name: case for case in suite}
    assert set(cases) == {"L0.python python", "G1 logprob alignment", "G4 weight sync", "G8 mxfp8"}
    g1 = cases["G1 logprob alignment"]
    assert g1.classname == "vime.smoke.L3"
    (failure,) = g1.result
    assert isinstance(failure, junitparser.Failure) and failure.message == "max_abs_diff 0.31 > 0.05"
    assert isinstance(cases["G4 weight sync"].result[0], junitparser.Error)
    assert isinstance(cases["G8 mxfp8"].result[0], junitparser.Skipped)
    assert cases["L0.python python"].is_passed
    import xml.etree.ElementTree as ET

    root = ET.fromstring(result.stdout.encode())
    props = {p.get("name"): p.get("value") for p in root.find(".//testcase[@name='G1 logprob alignment']/properties")}
    assert props["value.max_abs_diff"] == "0.31" and props["threshold.max_abs_diff"] == "0.05"
    assert props["value.tokens"] == "64"
    suite_props = {p.get("name"): p.get("value") for p in root.find("testsuite/properties")}
    assert suite_props["host"] == "box" and suite_props["run_id"]


def test_smoke_junit_of_a_broken_run_has_an_error_case(smoke_project, tmp_path):
    pytest.importorskip("junitparser")
    import xml.etree.ElementTree as ET

    _smoke_host(smoke_project, tmp_path, 'echo "vime.smoke: L0.python pass (0.01 s)" >&2\nkill -9 $$\n')
    result = invoke("smoke", "--host", "box", "--level", "L0", "--format", "junit")
    assert result.exit_code == 3
    root = ET.fromstring(result.stdout.encode())
    run_case = root.find(".//testcase[@name='run']")
    assert run_case is not None and "SIGKILL" in run_case.find("error").get("message")
    assert root.find(".//testcase[@name='L0.python']") is not None  # the check that finished survives


def test_smoke_github_annotations(smoke_project, tmp_path):
    _smoke_host(smoke_project, tmp_path, f"echo '{json.dumps(REPORT)}'\nexit 1\n")
    result = invoke("smoke", "--host", "box", "--format", "github")
    assert result.exit_code == 1
    lines = result.stdout.splitlines()
    assert "::error title=smoke box G1 fail::max_abs_diff 0.31 > 0.05; max_abs_diff=0.31, tokens=64" in lines
    assert any(l.startswith("::error title=smoke box G4 error::RuntimeError") for l in lines)
    assert lines[-1].startswith("::notice title=porter smoke::smoke L3 on box: FAILED")


def test_github_escaping():
    from porter.formats.github import command

    assert command("error", "a%b\nc", title="x:y,z") == "::error title=x%3Ay%2Cz::a%25b%0Ac"


def test_smoke_junit_needs_a_run(smoke_project):
    result = invoke("smoke", "--compare", "nothing", "--format", "junit")
    assert result.exit_code == 2


def test_a_killed_run_keeps_its_finished_checks_for_compare(smoke_project, tmp_path):
    """A timed-out or killed run stores the checks that finished; --compare calls the rest
    `not reached`, never `gone`."""
    ok = {"schema": "vime.smoke/1", "level": "L0", "results": [
        {"gate": "L0.python", "name": "python", "level": "L0", "verdict": "pass"},
        {"gate": "L0.torch", "name": "torch", "level": "L0", "verdict": "pass"},
        {"gate": "L0.devices", "name": "devices", "level": "L0", "verdict": "pass"}]}
    _smoke_host(smoke_project, tmp_path, f"echo '{json.dumps(ok)}'\nexit 0\n")
    assert invoke("smoke", "--host", "box", "--level", "L0").exit_code == 0
    _smoke_host(smoke_project, tmp_path,
                'echo "vime.smoke: L0.python pass (0.01 s)" >&2\n'
                'echo "vime.smoke: L0.torch fail (0.20 s) - torch 2.1 installed, stack pins 2.13.0" >&2\n'
                'kill -9 $$\n')
    result = invoke("smoke", "--host", "box", "--level", "L0", "--compare", "box", "--json")
    assert result.exit_code == 3
    doc = json.loads(result.stdout)
    assert doc["run"]["report_partial"] is True
    stored = json.loads(Path(doc["run"]["run_dir"], "result.json").read_text())
    verdicts = {r["gate"]: (r["verdict"], r["reason"]) for r in stored["report"]["results"]}
    assert verdicts == {"L0.python": ("pass", ""), "L0.torch": ("fail", "torch 2.1 installed, stack pins 2.13.0")}
    comparison = doc["comparison"]
    assert comparison["removed"] == [] and comparison["not_reached"] == ["L0.devices"]
    assert comparison["new_failures"] == ["L0.torch"]


def test_verbose_prints_every_subprocess_redacted(smoke_project, tmp_path):
    _smoke_host(smoke_project, tmp_path, f"echo '{json.dumps(REPORT)}'\nexit 1\n")
    quiet = runner.invoke(app, ["smoke", "--host", "box", "--json"])
    assert "porter: $ " not in quiet.stderr
    result = runner.invoke(app, ["smoke", "--host", "box", "--json", "-v"])  # -v after the subcommand
    assert result.exit_code == 1
    traced = [l for l in result.stderr.splitlines() if l.startswith("porter: $ ")]
    assert any("tar" in l for l in traced) and any("bash" in l for l in traced), result.stderr
    json.loads(result.stdout)  # stdout stays one JSON document


def test_trace_lines_are_redacted_and_whole(capsys):
    from porter.output import Reporter
    from porter.proc import run, tracing

    reporter = Reporter()
    long_arg = "a." * 80 + "Symbol"
    with tracing(reporter.trace):
        run([sys.executable, "-c", "pass", "--token", "ghp_abcdefghijklmnopqrstuvwxyz0123456789", long_arg])
    run([sys.executable, "-c", "pass"])  # outside the block: not traced
    err = capsys.readouterr().err
    lines = [l for l in err.splitlines() if l.startswith("porter: $ ")]
    assert len(lines) == 1
    assert "ghp_abcdefghijklmnopqrstuvwxyz0123456789" not in lines[0] and long_arg in lines[0]


def test_quiet_and_json_anywhere_keep_option_values(smoke_project):
    from porter.cli import PorterGroup  # noqa: F401 - the root group hoists
    from porter.cliargs import hoist_global_options
    import typer.main

    root = typer.main.get_command(app)
    assert hoist_global_options(root, ["upgrade", "x", "--to", "-v", "-q"]) == ["-q", "upgrade", "x", "--to", "-v"]
    # every command has its own --format (same state): it stays; -v moves
    assert hoist_global_options(root, ["smoke", "--host", "a", "--format", "junit", "-v"]) == \
        ["-v", "smoke", "--host", "a", "--format", "junit"]
    assert "--format" in runner.invoke(app, ["smoke", "--help"], terminal_width=200).stdout
    assert "--format" in runner.invoke(app, ["hosts", "list", "--help"], terminal_width=200).stdout
    assert hoist_global_options(root, ["diagnose", "--", "-q"]) == ["diagnose", "--", "-q"]
    assert hoist_global_options(root, ["config", "--json"]) == ["config", "--json"]  # its own --json


def test_report_into_a_missing_directory_is_a_usage_error(upgrade_project, trees, tmp_path):
    missing = tmp_path / "nonexistent" / "dir" / "x.html"
    result = invoke(*upgrade_args(trees), "--html", str(missing))
    assert result.exit_code == 2 and "does not exist" in result.output
    assert not missing.parent.parent.exists()


def test_smoke_report_into_a_missing_directory_is_a_usage_error(smoke_project, tmp_path):
    missing = tmp_path / "nonexistent" / "x.html"
    result = invoke("smoke", "--report", str(missing))
    assert result.exit_code == 2 and "does not exist" in result.output
    assert not missing.parent.exists()


def test_piped_upgrade_tables_never_fold_or_cut_identifiers(upgrade_project, trees, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    text = invoke(*upgrade_args(trees)).stdout
    doc = json.loads(invoke(*upgrade_args(trees), "--json").stdout)["analysis"]
    import re

    assert not re.search(r"\S…\s*[│┃]", text)  # no cell cut with an ellipsis (messages may hold one)
    for record in doc["records"] + doc["notes"]:
        assert record["symbol"] in text, record["symbol"]  # whole, on one line
        if record["new_location"]:
            assert record["new_location"]["dotted"] in text
        for site in record["sites"][:3]:
            assert f"{site['path']}:{site['line']}" in text
    # breaking first: no risky row is printed before the last breaking row's table ends
    rows = [l for l in text.splitlines() if " breaking " in l or " risky " in l]
    severities = ["breaking" if " breaking " in l else "risky" for l in rows]
    assert severities == sorted(severities)  # 'breaking' < 'risky'


def test_upgrade_summary(upgrade_project, trees, monkeypatch):
    import re

    monkeypatch.setenv("COLUMNS", "80")
    full = invoke(*upgrade_args(trees))
    result = invoke(*upgrade_args(trees), "--summary")
    assert result.exit_code == 1
    text = result.stdout
    doc = json.loads(invoke(*upgrade_args(trees), "--json").stdout)["analysis"]
    assert "outcome C_PATCH" in text and f"{doc['summary']['breaking']} breaking" in text
    for family, count in doc["summary"]["by_family"].items():
        assert any(line.split()[:1] == [family] for line in text.splitlines() if "│" not in line) or family in text
    assert "top findings (10 of" in text and not re.search(r"\S…\s*[│┃]", text)
    assert len(text.splitlines()) < len(full.stdout.splitlines()) / 2
    from porter.formats.summary import family_counts, top_findings

    top = top_findings(doc)
    assert [r["severity"] for r in top] == sorted(r["severity"] for r in top)
    assert all(r["symbol"] in text for r in top)
    counts = {f: (b, r, n) for f, _, b, r, n in family_counts(doc)}
    assert sum(b for b, _, _ in counts.values()) == doc["summary"]["breaking"]
    assert sum(n for _, _, n in counts.values()) == doc["summary"]["notes"]

