"""`defined_in` captures: a structured signature hits only when the captured name is one an
upstream defines (knowledge/symbols/<upstream>.txt), so one entry covers every vllm class or
function a drift error names without listing them, and the same error on another project's
name stays unknown. The table here is synthetic (a tmp symbols dir)."""

from __future__ import annotations

import pytest

from porter.kb import families
from porter.kb.families import FamilyError, template_regex
from porter.kb.lint import lint
from porter.kb.matcher import diagnose_text

from .conftest import entry

DRIFT = entry(
    "VLLM-050", "vllm",
    [{"template": "'{api}' object has no attribute '{attribute}'", "captures": {"api": r"[A-Za-z_]\w{0,150}"},
      "defined_in": {"api": "vllm"}, "weight": 0.6},
     {"template": "{api}() got an unexpected keyword argument", "captures": {"api": r"[A-Za-z_][\w.]{0,150}"},
      "defined_in": {"api": "vllm"}, "weight": 0.6}],
    title="vllm API drift on {api}", fix=["porter upgrade vllm-ascend --dry-run  # {api}"],
)


@pytest.fixture
def symbols(tmp_path, monkeypatch):
    root = tmp_path / "symbols"
    root.mkdir()
    (root / "vllm.txt").write_text("# synthetic\nSchedulerOutput\nrejection_sample\n", encoding="utf-8")
    monkeypatch.setattr(families, "symbols_dir", lambda: root)
    monkeypatch.setattr(families, "_TABLES", {})
    return root


def test_hits_only_names_the_upstream_defines(fixture_kb, symbols):
    fixture_kb.add(DRIFT, "AttributeError: 'SchedulerOutput' object has no attribute 'x'\n")
    kb = fixture_kb.compiled()
    d = diagnose_text(kb, "AttributeError: 'SchedulerOutput' object has no attribute 'scheduled_new_reqs'\n")
    assert d.top is not None and d.top.entry.id == "VLLM-050"
    assert d.top.captures == {"api": "SchedulerOutput", "attribute": "scheduled_new_reqs"}
    # Class.method() and the bare function both count (any dotted part)
    assert diagnose_text(kb, "TypeError: rejection_sample() got an unexpected keyword argument 'mode'\n").top.entry.id == "VLLM-050"
    # the same errors on names vllm does not define: no diagnosis
    assert diagnose_text(kb, "AttributeError: 'DataCollator' object has no attribute 'pad'\n").status == "unknown"
    assert diagnose_text(kb, "TypeError: Trainer.__init__() got an unexpected keyword argument 'tokenizer'\n").status == "unknown"


def test_a_later_occurrence_on_the_line_can_satisfy_the_table(fixture_kb, symbols):
    fixture_kb.add(DRIFT, "AttributeError: 'SchedulerOutput' object has no attribute 'x'\n")
    kb = fixture_kb.compiled()
    line = "'Foo' object has no attribute 'a'; 'SchedulerOutput' object has no attribute 'b'\n"
    assert diagnose_text(kb, line).top.captures["api"] == "SchedulerOutput"


def test_missing_table_matches_nothing(fixture_kb, symbols):
    data = dict(DRIFT, id="VLLM-051")
    data["signatures"] = {"match": "any", "items": [dict(DRIFT["signatures"]["items"][0], defined_in={"api": "nosuch"})]}
    fixture_kb.add(data, "x\n")
    assert diagnose_text(fixture_kb.compiled(), "'SchedulerOutput' object has no attribute 'b'\n").status == "unknown"


def test_bad_defined_in_is_a_lint_error(fixture_kb, symbols):
    with pytest.raises(FamilyError):
        template_regex("'{api}' object has no attribute", defined_in={"other": "vllm"})
    with pytest.raises(FamilyError):
        template_regex("'{api}' object has no attribute", defined_in={"api": "../etc"})
    bad = dict(DRIFT, id="VLLM-052")
    bad["signatures"] = {"match": "any", "items": [dict(DRIFT["signatures"]["items"][0], defined_in=["vllm"])]}
    fixture_kb.add(bad, "x\n")
    report = lint(fixture_kb.patterns, check_examples=False)
    assert any("defined_in" in p.field for p in report.errors)


TABLE_TEXTS = [
    "# synthetic\nSchedulerOutput\nrejection_sample\n",
    "SchedulerOutput\nrejection_sample",  # no final newline
    "# c\n\nA\n\n#B\nC D\nE\tF\n",  # blank lines, a comment-like name, inner spaces/tabs
    " Indented\nTrailing \nok\n",  # whitespace at a line's ends: stripped by the set rule
    "A\r\nB\rC\x0bD\n",  # other line breaks
    "  #x\nÄrger\nplain\n",  # an indented comment marker is a name; non-ASCII
    "",
    "# a\n# b c\nX\nY\n\nZ",  # header comments, a blank line: plain
    "# a\nX\n#mid\nY\n",  # a comment after the header: not plain
    "X\nY#Z\n",  # "#" inside a name
    "# only a header",
    "#\n#\n",
    "X\n \nY\n",  # a line of one space
    "X\x1f\nY\n",  # other whitespace at a line's end
]
PROBES = ["SchedulerOutput", "rejection_sample", "Scheduler", "Output", "A", "B", "C", "D", "C D", "E\tF", "E", "#B", "#x",
          "# c", "c", "Indented", "Trailing", "ok", "Ärger", "plain", "", "x.SchedulerOutput", "A.B", "\nA", "A\n", " A", "synthetic",
          "# synthetic", "rejection_sample.__init__", "mod.plain.y", "X", "Y", "Z", "Y#Z", "#mid", "mid", "# a", "# only a header"]


@pytest.mark.parametrize("text", TABLE_TEXTS)
def test_defined_is_membership_in_the_stripped_non_comment_lines(tmp_path, monkeypatch, text):
    root = tmp_path / "symbols"
    root.mkdir()
    (root / "t.txt").write_bytes(text.encode("utf-8"))
    monkeypatch.setattr(families, "symbols_dir", lambda: root)
    monkeypatch.setattr(families, "_TABLES", {})
    raw = (root / "t.txt").read_text(encoding="utf-8")
    names = {line.strip() for line in raw.splitlines() if line.strip() and not line.startswith("#")}
    assert families.symbol_table("t") == names
    for probe in PROBES:
        assert families.defined(probe, "t") == any(part in names for part in probe.split(".")), probe


def test_a_plain_table_is_split_not_stripped_line_by_line(symbols, monkeypatch):
    # the bundled tables are plain (comment header, then one name a line): their set is made by one
    # C-level split, not by a Python strip per line (about 3 % of a warm diagnose)
    monkeypatch.setattr(families, "_plain_body", lambda text: None)  # without the fast path ...
    slow = families._names((symbols / "vllm.txt").read_text(encoding="utf-8"))
    monkeypatch.undo()
    text = (symbols / "vllm.txt").read_text(encoding="utf-8")
    assert families._plain_body(text) == "SchedulerOutput\nrejection_sample\n"
    assert families._names(text) == slow == {"SchedulerOutput", "rejection_sample"}


def test_the_bundled_symbol_tables_are_plain():
    paths = sorted(families.symbols_dir().glob("*.txt"))
    assert paths
    for path in paths:
        assert families._plain_body(path.read_text(encoding="utf-8")) is not None, path.name
