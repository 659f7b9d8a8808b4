"""The `--json` documents of `porter status` and `porter upgrade` are exactly what the docs list:
a field added to the output without documenting it (or documented and gone) fails here."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from porter.cli import app
from porter.upgrade import sources as sources_mod
from tests.upgrade.upgrade_fixtures import fake_index

DOCS = Path(__file__).resolve().parents[2] / "docs"


def documented_keys(doc: str, heading: str) -> set[str]:
    """Backticked names in the first column of the table under `heading` (up to the next heading)."""
    lines = (DOCS / doc).read_text(encoding="utf-8").splitlines()
    start = lines.index(heading)
    keys: set[str] = set()
    for line in lines[start + 1:]:
        if line.startswith("#"):
            break
        if not line.startswith("|") or line.startswith("|---") or line.startswith("| key"):
            continue
        keys.update(re.findall(r"`([^`]+)`", line.split("|")[1]))
    assert keys, f"no key table under {heading!r} in docs/{doc}"
    return keys


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def test_status_json_matches_the_docs(project, monkeypatch):
    monkeypatch.setattr(sources_mod.Sources, "_fetch_index", fake_index({"1.0": [{"f": 1}], "2.0": [{"f": 2}]}))
    doc = json.loads(invoke("status", "myplug", "--json").stdout)
    assert doc["schema"] == "porter.status/1"
    assert set(doc) == documented_keys("upgrade.md", "### `porter.status/1`")
    assert set(doc["rows"][0]) == documented_keys("upgrade.md", "### status row (`rows[]`)")


def test_upgrade_json_matches_the_docs(project, trees):
    result = invoke("upgrade", "myplug", "--to", "2.0", "--from", "1.0", "--plugin-path", str(trees["plugin"]),
                    "--upstream-path", f"1.0={trees['v1']}", "--upstream-path", f"2.0={trees['v2']}", "--dry-run", "--json")
    doc = json.loads(result.stdout)
    assert doc["schema"] == "porter.upgrade/1"
    assert set(doc) | {"port"} == documented_keys("upgrade.md", "### `porter.upgrade/1`")  # `port` only without --dry-run
    assert set(doc["analysis"]) == documented_keys("upgrade.md", "### `analysis`")
    record_keys = documented_keys("upgrade.md", "### record (`records[]`, `notes[]`)")
    assert doc["analysis"]["records"] and all(set(r) == record_keys for r in doc["analysis"]["records"])


def test_port_json_matches_the_docs():
    from porter.port.plan import PortResult
    from porter.port.transformers_compare import TransformersComparison
    from porter.port.fork_merge import MergeResult
    from porter.upgrade.models import Outcome, OutcomeDecision

    decision = OutcomeDecision(Outcome.C_PATCH, ("r",))
    shim = PortResult("run", "fork", "up", "1", "2", "up-2", "ascend-port/up-2", decision)
    merge = MergeResult("run", "fork", "up", "v2", "ascend-port/up-v2", "a" * 40, "b" * 40, ())
    compare = TransformersComparison("1", "2", (), (), (), (), decision)
    assert set(shim.to_dict()) == documented_keys("port.md", "### `port` of a shim run")
    assert set(merge.to_dict()) == documented_keys("port.md", "### `port` of a merge run (a fork of its parent: triton-ascend)")
    assert set(compare.to_dict()) == documented_keys("port.md", "### `port` of a transformers consumer (NPU integration check)")


def test_upgrade_options_in_help_and_docs_agree():
    """Every option of `porter upgrade` is in the docs' synopsis and the other way round."""
    help_text = CliRunner().invoke(app, ["upgrade", "--help"], terminal_width=200).stdout
    options = help_text[help_text.index("Options"):]
    in_help = set(re.findall(r"--[a-z][a-z-]+", options)) - {"--help", "--json"}
    text = (DOCS / "upgrade.md").read_text(encoding="utf-8")
    synopsis = text.split("```", 2)[1]
    upgrade_lines = synopsis[synopsis.index("porter upgrade"):]
    in_docs = set(re.findall(r"--[a-z][a-z-]+", upgrade_lines)) - {"--json"}
    assert in_help == in_docs
