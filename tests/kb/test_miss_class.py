"""`kb eval` says why a named positive missed top-1: no signature of a naming entry hit, a weak
hit, a firm match the calibration abstained on, or a firm answer behind another entry."""

from __future__ import annotations

from porter.kb.calibrate import FEATURES, Calibration
from porter.kb.corpus import CorpusCase
from porter.kb.evaluate import EvalReport, run_case

from .conftest import entry


def _case(tmp_path, text: str, cause: str = "the-cause") -> CorpusCase:
    trace = tmp_path / f"case-{abs(hash(text))}.txt"
    trace.write_text(text)
    return CorpusCase("c1", "dev", "positive", trace, cause=cause)


def _kb(fixture_kb):
    fixture_kb.add(entry("HCCL-001", "hccl", [{"literal": "weak generic line here", "weight": 0.3},
                                              {"literal": "the specific cause line", "weight": 0.8}],
                         causes=["the-cause"]))
    fixture_kb.add(entry("HCCL-002", "hccl", [{"literal": "an unrelated strong line", "weight": 0.95}]))
    return fixture_kb.compiled()


def test_miss_classes(fixture_kb, tmp_path):
    kb = _kb(fixture_kb)
    cases = {
        "no_signature": "nothing the entry knows\n",
        "weak": "weak generic line here\n",
        "outranked": "an unrelated strong line\nthe specific cause line\n",
    }
    report = EvalReport("corpus", "dev")
    for want, text in cases.items():
        result, _ = run_case(kb, _case(tmp_path, text))
        assert (result.reach, result.top1, result.miss) == ("named", False, want)
        report.cases.append(result)
    right, _ = run_case(kb, _case(tmp_path, "the specific cause line\n"))
    assert right.top1 and right.miss == ""
    report.cases.append(right)
    assert report.reach()["named_misses"] == {"no_signature": 1, "weak": 1, "abstained": 0, "outranked": 1}
    assert report.to_dict()["cases"][0]["miss"] == "no_signature"


def test_an_abstained_answer_is_its_own_class(fixture_kb, tmp_path):
    kb = _kb(fixture_kb)
    weights = [0.0] * len(FEATURES)
    weights[FEATURES.index("bias")] = -5.0  # every answer calibrates to ~0.007: below the floor
    kb.calibration = Calibration(tuple(weights), samples=500)
    result, diag = run_case(kb, _case(tmp_path, "the specific cause line\n"))
    assert diag.status == "unknown" and result.miss == "abstained"


def test_cases_that_are_not_named_get_no_miss_class(fixture_kb, tmp_path):
    kb = _kb(fixture_kb)
    result, _ = run_case(kb, _case(tmp_path, "weak generic line here\n", cause="another-cause"))
    assert result.reach == "none" and result.miss == ""
