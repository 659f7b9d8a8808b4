"""A report without plugin frames that names a function (`calculate_debug_metrics`) and the file it lives in
(`verl/utils/debug/metrics.py`, "Error Location: ...") points at code like a frame in prose: a commit that changed
that function in that file gains more than one that changed a function of the same name elsewhere."""

from __future__ import annotations

from porter.kb.history.candidates import rank
from porter.kb.history.models import CommitRecord, FileChange, TraceFacts
from porter.kb.history.named import named_paths

FILE = "plug/utils/debug/metrics.py"
REPORT = (f"RuntimeError when response_mask is all False in `calculate_debug_metrics`\n"
          f"Error Location: `{FILE}` line 58\n")


def _commit(sha: str, path: str, fix: bool = True) -> CommitRecord:
    return CommitRecord(sha * 40, 100, "[trainer] fix: handle an empty mask (#5)", None, fix, (),
                        (FileChange(path, path, ("calculate_debug_metrics",), " "),), "")


def _others() -> list[CommitRecord]:
    return [CommitRecord(f"{i}" * 40, 10 + i, f"[Feature] support a new {w} option", None, False, (), (), "")
            for i, w in enumerate(("rollout", "reward", "trainer", "dataset", "tokenizer", "sampler"), 1)]


def test_named_paths_reads_relative_absolute_and_linked_paths():
    text = f'at `{FILE}` and https://github.com/o/r/blob/main/plug/a.py#L3 and File "/site/plug/b.py", line 2'
    assert named_paths(text) == (FILE, "github.com/o/r/blob/main/plug/a.py", "site/plug/b.py")


def test_the_named_function_in_the_named_file_is_proposed_and_elsewhere_it_is_not():
    facts = TraceFacts((), "", "")
    here = _commit("a", FILE)
    found = rank([here, *_others()], facts, {}, None, {}, named=("calculate_debug_metrics",), named_files=(FILE,))[0]
    assert [c.sha for c in found] == [here.sha]
    assert any("the file the report names" in e for e in found[0].evidence)
    elsewhere = _commit("b", "plug/other/metrics.py")
    assert rank([elsewhere, *_others()], facts, {}, None, {}, named=("calculate_debug_metrics",), named_files=(FILE,))[0] == []
