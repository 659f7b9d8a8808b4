"""The shipped knowledge base: lint clean, examples top-1, seed-corpus accuracy, negatives unknown."""

from __future__ import annotations

from pathlib import Path

import pytest

from porter.kb.evaluate import evaluate
from porter.kb.lint import lint
from porter.kb.loader import load_entries

ROOT = Path(__file__).resolve().parents[2]
PATTERNS = ROOT / "knowledge" / "patterns"
SEEDS = ROOT / "tests" / "data" / "seed-traces"

pytestmark = pytest.mark.skipif(not any(PATTERNS.rglob("*.yaml")), reason="no knowledge-base entries in this checkout")


@pytest.fixture(scope="module")
def seed_report():
    return evaluate(load_entries(PATTERNS).compiled(), SEEDS)


def test_kb_lint_is_clean_and_every_example_is_top1():
    report = lint(PATTERNS, root=ROOT)
    assert report.entries >= 120, f"only {report.entries} entries"
    assert report.examples_checked >= report.entries
    assert report.ok, "\n".join(str(p) for p in report.errors)
    assert not report.warnings, "\n".join(str(p) for p in report.warnings)


def test_seed_corpus_accuracy(seed_report):
    misses = [f"{c.file}: expected {c.expected}, got {c.got}" for c in seed_report.misses]
    assert seed_report.top1 >= 0.90, "\n".join(misses)
    assert seed_report.top3 >= 0.97, "\n".join(misses)


def test_seed_negatives_and_unknowns_give_unknown(seed_report):
    wrong = [f"{c.file} ({c.kind}) matched {c.got}" for c in seed_report.false_positives]
    assert not wrong, "\n".join(wrong)
    assert sum(1 for c in seed_report.cases if c.kind != "positive") >= 10


REGRESSION = ROOT / "tests" / "data" / "heldout"


@pytest.mark.skipif(not (REGRESSION / "index.yaml").is_file(), reason="no regression corpus")
def test_regression_corpus_stays_diagnosed():
    """Real traces from public issue threads (tests/data/heldout/README.md). Many of these threads
    are cited by entries, so this is a regression guard, not a generalisation measure (that is
    the test split of tests/data/corpus)."""
    report = evaluate(load_entries(PATTERNS).compiled(), REGRESSION)
    positives = [c for c in report.cases if c.kind == "positive"]
    assert len(positives) >= 20
    assert report.top1 >= 0.85, "\n".join(f"{c.file}: expected {c.expected}, got {c.got}" for c in report.misses)
    assert not report.false_positives, [c.file for c in report.false_positives]


LOOKALIKES = ROOT / "tests" / "data" / "traces" / "negatives"


def test_healthy_lookalike_logs_give_unknown():
    """Healthy logs written to look like trouble (vllm-ascend serving, torch_npu training warnings,
    HCCL init, pip installs, npu-smi, Ray, verl steps, container binds, MindSpeed), plus failures
    with no known cause that pass through frames a known cause also shows (an ordinary exception
    in a vllm-ascend custom op is not the forward_oot segfault): they mention model paths, device
    binds, memory figures, warnings and frames that generic signatures would mistake for a known
    failure, so each must stay `unknown`."""
    from porter.kb.matcher import diagnose_stream

    kb = load_entries(PATTERNS).compiled()
    files = sorted(LOOKALIKES.glob("*.txt"))
    assert len(files) >= 8
    wrong = []
    for path in files:
        with path.open("rb") as stream:
            diag = diagnose_stream(kb, stream)
        if diag.status != "unknown":
            wrong.append(f"{path.name}: {[(m.entry.id, m.confidence) for m in diag.matches]}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(
    "entry_id, frame",
    [
        ("SGL-002", '  File "/sgl/python/sgl_kernel_npu/norm/fused_split_qk_norm.py", line 88, in fused_split_qk_norm'),
        ("SGL-003", '  File "/sgl/python/sglang/srt/layers/moe/fused_moe_triton/layer.py", line 512, in _load_w13'),
        ("SGL-007", '  File "/sgl/python/sglang/srt/mem_cache/deepseek_v4_memory_pool.py", line 233, in get_key_buffer'),
        ("VASC-004", '  File "/x/site-packages/vllm_ascend/ops/layernorm.py", line 74, in forward_oot'),
        ("VASC-014", '  File "/x/site-packages/vllm_ascend/platform.py", line 140, in pre_register_and_update'),
    ],
)
def test_a_traceback_frame_alone_is_not_a_diagnosis(entry_id, frame):
    """Entries that name a function of a traceback frame: any exception raised in that function
    shows the frame, so an unrelated error through it must not be diagnosed as the entry."""
    from porter.kb.matcher import diagnose_text

    kb = load_entries(PATTERNS).compiled()
    trace = f"Traceback (most recent call last):\n{frame}\n    out = op(x)\nRuntimeError: The size of tensor a (4096) must match the size of tensor b (3584) at non-singleton dimension 1\n"
    diag = diagnose_text(kb, trace)
    assert entry_id not in [m.entry.id for m in diag.matches], [(m.entry.id, m.confidence) for m in diag.matches]


CORPUS = ROOT / "tests" / "data" / "corpus"


@pytest.mark.skipif(not (CORPUS / "test").is_dir(), reason="no labelled corpus")
def test_no_entry_cites_a_test_split_thread():
    """Entries are written from dev threads only: a cited test thread would make the test figure
    measure memory, not generalisation (kb eval would also refuse to count it)."""
    from porter.kb.corpus import effective_split, load_corpus
    from porter.kb.evaluate import cited_threads

    cited = cited_threads(load_entries(PATTERNS).compiled(calibrated=False))
    test_threads = {c.thread for c in load_corpus(CORPUS) if effective_split(c) == "test" and c.thread}
    assert not {t: cited[t] for t in test_threads if t in cited}
