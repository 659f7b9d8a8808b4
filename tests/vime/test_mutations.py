"""Mutation suite: every planted bug of vime.mutants must fail the gate named for it, and the same
gate with the same knobs must pass on the unmodified runtime (so a kill means the bug was seen).
The kill rate is printed at the end of the module (pytest -s shows it) and asserted >= 95 %."""

from __future__ import annotations

import json

import pytest

from vime import mutants

RESULTS: dict[str, mutants.MutantResult] = {}


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    if RESULTS:
        summary = mutants.kill_rate(list(RESULTS.values()))
        print(f"\nvime mutation kill rate: {summary['killed']}/{summary['planted']} = {summary['rate']:.1%}; "
              f"survivors: {summary['survivors'] or 'none'}")


def test_catalogue_is_large_and_covers_every_gate():
    from vime.gates import GATES

    assert len(mutants.MUTANTS) >= 30
    assert len({m.id for m in mutants.MUTANTS}) == len(mutants.MUTANTS)
    assert {m.gate for m in mutants.MUTANTS} == set(GATES)


@pytest.mark.parametrize("mutant", mutants.MUTANTS, ids=lambda m: m.id)
def test_patch_applies_exactly_once(mutant):
    source = (mutants.PACKAGE_DIR / mutant.file).read_text(encoding="utf-8")
    assert mutants.patch_text(source, mutant) != source


def test_stale_patch_is_refused():
    stale = mutants.Mutant("x", "G1", "model.py", "this text is not in the file", "y", "why")
    with pytest.raises(mutants.MutantError, match="occurs 0 times"):
        mutants.patch_text("abc", stale)


def test_mutated_runtime_is_imported_and_then_restored():
    import vime.model as original

    m = mutants.by_id(["g1.rope_offset_in_decode"])[0]
    with mutants.mutated_runtime(m) as root:
        import vime.model as patched

        assert patched is not original and str(root) in patched.__file__
        assert "max(cache.length - 1, 0)" in open(patched.__file__, encoding="utf-8").read()
    import vime.model as back

    assert back is original


_BASELINES = sorted({(m.gate, json.dumps(m.knobs, sort_keys=True), m.dtype) for m in mutants.MUTANTS})


@pytest.mark.parametrize("gate, knobs, dtype", _BASELINES)
def test_gate_passes_unmutated_with_mutant_knobs(gate, knobs, dtype):
    from vime.gates import run_gate

    r = run_gate(gate, device="cpu", dtype=dtype, **json.loads(knobs, object_hook=_tuples))
    assert r.verdict == "pass", r.reason


def _tuples(obj: dict) -> dict:
    return {k: tuple(v) if isinstance(v, list) else v for k, v in obj.items()}


@pytest.mark.parametrize("mutant", mutants.MUTANTS, ids=lambda m: m.id)
def test_gate_kills_mutant(mutant):
    r = mutants.run_mutant(mutant)
    RESULTS[mutant.id] = r
    assert r.killed, f"{mutant.id} survived {mutant.gate} ({r.verdict}): {mutant.why}"


def test_kill_rate_at_least_95_percent():
    if len(RESULTS) < len(mutants.MUTANTS):
        pytest.skip("run the whole module to measure the kill rate")
    assert mutants.kill_rate(list(RESULTS.values()))["rate"] >= 0.95
