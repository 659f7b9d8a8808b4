"""Schema validation and `porter kb lint` on small fixture knowledge bases."""

from __future__ import annotations

import json
from pathlib import Path

from tests.kb.conftest import DCMI_TRACE, LORA_TRACE, entry

from porter.kb.lint import lint
from porter.kb.regexsafety import check_regex, nested_quantifier
from porter.kb.schema import parse_entry


def _problems(report, field_part: str = "") -> list[str]:
    return [str(p) for p in report.errors if field_part in p.field]


def test_clean_fixture_kb_lints_clean(small_kb):
    report = lint(small_kb.patterns)
    assert report.ok, [str(p) for p in report.problems]
    assert report.entries == 2 and report.examples_checked == 2 and report.regexes_checked == 2


def test_bad_regex_is_reported_with_file_field_and_fix(small_kb):
    small_kb.add(entry("VLLM-002", "vllm", [{"regex": "cannot import name '(unclosed", "weight": 0.9}]), "cannot import name '(unclosed\n")
    report = lint(small_kb.patterns)
    msgs = _problems(report, "signatures.items[0].regex")
    assert msgs and "VLLM-002.yaml" in msgs[0] and "does not compile" in msgs[0] and "fix:" in msgs[0]


def test_catastrophic_regexes_are_rejected(small_kb):
    small_kb.add(entry("VLLM-003", "vllm", [{"regex": r"(a+)+b", "weight": 0.9}]), "aab\n")
    small_kb.add(entry("VLLM-004", "vllm", [{"regex": r"^(\d|\d\d)+$", "weight": 0.9}]), "1234\n")
    small_kb.add(entry("VLLM-005", "vllm", [{"regex": r"No module named .*lora_thing", "weight": 0.9}]), "No module named x lora_thing\n")
    report = lint(small_kb.patterns)
    text = "\n".join(str(p) for p in report.errors)
    assert "VLLM-003.yaml: signatures.items[0].regex" in text and "nested quantifier" in text
    assert "VLLM-004.yaml: signatures.items[0].regex" in text
    assert "VLLM-005.yaml: signatures.items[0].regex" in text and "bounded" in text


def test_regex_safety_unit():
    assert nested_quantifier(r"(\w+\s?)*$")
    assert nested_quantifier(r"(.*)*x")
    assert nested_quantifier(r"cannot import name '(\w+)' from 'vllm'") is None
    assert check_regex(r"retCode=0x[0-9a-fA-F]+").ok
    assert check_regex(r"foo.{0,200}bar").ok
    slow = check_regex(r"^(a|aa)+$")
    assert not slow.ok and "backtracking" in slow.problem


def test_duplicate_id_names_both_files(small_kb):
    small_kb.add(entry("VLLM-001", "vllm", [{"literal": "something else entirely", "weight": 0.9}]), name="VLLM-001-copy")
    report = lint(small_kb.patterns)
    dup = [str(p) for p in report.errors if "duplicate id" in p.problem]
    assert len(dup) == 2
    assert any("VLLM-001-copy.yaml" in d for d in dup)


def test_bad_version_range(small_kb):
    small_kb.add(
        entry("VLLM-006", "vllm", [{"literal": "a very specific vllm failure", "weight": 0.9}],
              applies_to=[{"package": "vllm", "versions": ">=0.13 <<0.15"}]),
        "a very specific vllm failure\n",
    )
    msgs = _problems(lint(small_kb.patterns), "applies_to[0].versions")
    assert msgs and "PEP 440" in msgs[0]


def test_example_that_does_not_match_its_entry(small_kb):
    # the example prints the DRV-001 text, so its top-1 is the other entry
    small_kb.add(entry("VLLM-007", "vllm", [{"literal": "some vllm text never printed", "weight": 0.9}]), DCMI_TRACE)
    msgs = _problems(lint(small_kb.patterns), "examples[0]")
    assert msgs and "top-1 is DRV-001" in msgs[0] and "none of this entry's signatures matched" in msgs[0]


def test_missing_example_file_and_unknown_related(small_kb):
    small_kb.add(entry("VLLM-008", "vllm", [{"literal": "another specific failure", "weight": 0.9}], related=["VLLM-999"]))
    report = lint(small_kb.patterns)
    assert any("file not found" in p.problem for p in report.errors if p.file.endswith("VLLM-008.yaml"))
    assert any(p.field == "related[0]" and "VLLM-999" in p.problem for p in report.errors)


def test_layer_prefix_directory_and_filename_rules(small_kb):
    wrong = entry("VLLM-009", "vllm-ascend", [{"literal": "plugin failure text here", "weight": 0.9}])
    path = small_kb.patterns / "vllm" / "VLLM-009.yaml"
    import yaml

    path.write_text(yaml.safe_dump(wrong))
    (small_kb.patterns / "vllm" / "OTHER.yaml").write_text(yaml.safe_dump(entry("VLLM-010", "vllm", [{"literal": "x failure text", "weight": 0.9}])))
    report = lint(small_kb.patterns)
    text = "\n".join(str(p) for p in report.errors)
    assert "prefix 'VLLM' does not match layer 'vllm-ascend'" in text
    assert "is 'vllm-ascend' but the file is in directory 'vllm'" in text
    assert "does not match id 'VLLM-010'" in text


def test_schema_problems_are_values_not_exceptions():
    _, problems = parse_entry({"id": "bad id", "layer": "nope", "signatures": {"items": [{"literal": "x", "regex": "y"}]}}, "f.yaml")
    fields = {p.field for p in problems}
    assert {"id", "layer", "kind", "root_cause", "fix", "verify", "examples", "signatures.items[0]"} <= fields
    entry_, problems = parse_entry(["not", "a", "mapping"], "g.yaml")
    assert entry_ is None and problems[0].file == "g.yaml"


def test_yaml_syntax_error_names_the_line(small_kb):
    small_kb.add({"id": "VLLM-011", "layer": "vllm"}, raw="id: VLLM-011\ntitle: [unclosed\n")
    report = lint(small_kb.patterns)
    err = [str(p) for p in report.errors if p.file.endswith("VLLM-011.yaml")]
    assert err and "line" in err[0]


def test_lint_cli_exit_codes_and_json(small_kb, cli):
    code, out = cli(["kb", "lint", "--kb", str(small_kb.root / "knowledge"), "--json"])
    assert code == 0, out
    doc = json.loads(out)
    assert doc["schema"] == "porter.kb.lint/1" and doc["lint"]["ok"] is True
    small_kb.add(entry("VLLM-012", "vllm", [{"regex": "(x+)+", "weight": 0.9}]), "xx\n")
    code, out = cli(["kb", "lint", "--kb", str(small_kb.patterns)])
    assert code == 1 and "VLLM-012.yaml" in out


def test_lint_corpus_mode(small_kb, cli, tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.txt").write_text(LORA_TRACE)
    (corpus / "b.txt").write_text(DCMI_TRACE)
    (corpus / "neg.txt").write_text("INFO all good\nstep 1 loss 0.5\n")
    (corpus / "miss.txt").write_text("RuntimeError: something nobody knows about\n")
    (corpus / "index.yaml").write_text(
        "cases:\n"
        "  - {file: a.txt, kind: positive, expected: [NPU-CP-002]}\n"
        "  - {file: b.txt, kind: positive, expected: [DRV-001]}\n"
        "  - {file: miss.txt, kind: positive, expected: [X-1]}\n"
        "  - {file: neg.txt, kind: negative, expected: []}\n"
    )
    code, out = cli(["kb", "eval", str(corpus), "--kb", str(small_kb.patterns), "--json"])
    doc = json.loads(out)["splits"]["corpus"]  # an index.yaml corpus is one split named after its directory
    assert code == 1  # one miss
    assert doc["top1_correct"] == 2 and doc["positives"] == 3 and not doc["false_positives"]
    assert [m["id"] for m in doc["misses"]] == ["miss.txt"]
    code, out = cli(["kb", "lint", "--kb", str(small_kb.patterns), "--corpus", str(corpus)])
    assert code == 1 and "miss.txt" in out


def test_verify_commands_whose_exit_status_cannot_fail_are_flagged(small_kb):
    cases = {
        "VLLM-010": "npu-smi info | grep ray || echo 'nothing holds the chip'",
        "VLLM-011": "python step.py 2>&1 | grep -c 'fall back to CPU'  # expect 0",
        "VLLM-012": "dmesg | grep -ic heartbeat",
    }
    for entry_id, verify in cases.items():
        small_kb.add(entry(entry_id, "vllm", [{"literal": f"unique failure {entry_id}", "weight": 0.9}], verify=verify), f"unique failure {entry_id}\n")
    small_kb.add(entry("VLLM-013", "vllm", [{"literal": "unique failure VLLM-013", "weight": 0.9}],
                       verify="! python step.py 2>&1 | grep -q 'fall back'  # grep -c would be wrong || echo"), "unique failure VLLM-013\n")
    report = lint(small_kb.patterns)
    flagged = {Path(w.file).stem for w in report.warnings if w.field == "verify"}
    assert flagged == {"VLLM-010", "VLLM-011", "VLLM-012"}, [str(w) for w in report.warnings]


def test_regex_safety_verdict_does_not_depend_on_the_clock(monkeypatch):
    """The verdict is structural: a busy machine (every search slow, yet under the hard limit)
    refuses nothing safe, and an idle one (every search instant) still refuses the unsafe."""
    import porter.kb.regexsafety as rs

    safe = [r"retCode=0x[0-9a-fA-F]+", r"foo.{0,200}bar", r"Process id\s*:\s*\d+", r"^\s*from \.+utils\.device import ",
            r"cannot import name '(\w+)' from 'vllm'", r"Available KV cache memory: -\d+(\.\d+)? GiB"]
    unsafe = {r"No module named .*lora_thing": "quadratic", r"\d+x": "quadratic", r"^(a|aa)+$": "backtracking",
              r"(a|ab)*c": "backtracking", r"a.{0,500}b.{0,500}c": "paths", r"(\w+\s?)*$": "nested"}
    monkeypatch.setattr(rs, "_timed_search", lambda rx, line: 900.0)
    assert all(rs.check_regex(p).ok for p in safe)
    monkeypatch.setattr(rs, "_timed_search", lambda rx, line: 0.0)
    for pattern, word in unsafe.items():
        verdict = rs.check_regex(pattern)
        assert not verdict.ok and word in verdict.problem, (pattern, verdict.problem)


def test_bundled_regexes_pass_the_structural_rules():
    from porter.config import bundled_root
    from porter.kb.loader import load_entries
    from porter.kb.regexsafety import structural_problem

    loaded = load_entries(bundled_root() / "knowledge" / "patterns")
    bad = [(e.id, s.pattern, structural_problem(s.pattern)) for e in loaded.entries for s in e.signatures
           if s.kind == "regex" and structural_problem(s.pattern)]
    assert not bad
