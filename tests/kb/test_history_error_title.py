"""A fix's title that restates the trace's exception message in its own words (`fix tensor not same device
in X` for `Expected all tensors to be on the same device, ...`) counts when its diff changes a failing
frame's file: no quote of the trace, the same failure where it failed. Without that change, or with
fewer shared words, the title is no evidence."""

from __future__ import annotations

from porter.kb.history.candidates import QuoteMask, rank
from porter.kb.history.models import CommitRecord, FileChange, Frame, TraceFacts

PATH = "plug/models/vision.py"
MESSAGE = "Expected all tensors to be on the same device, but found at least two devices, npu:0 and cpu!"
FRAME = Frame(f"/site/{PATH}", PATH, 84, "forward", "x = self.proj(x)", 0)
FACTS = TraceFacts((FRAME,), "RuntimeError", MESSAGE)
TRACE = f'  File "/site/{PATH}", line 84, in forward\n    x = self.proj(x)\nRuntimeError: {MESSAGE}\n'


def _commit(sha: str, subject: str, path: str = PATH, is_fix: bool = True) -> CommitRecord:
    return CommitRecord(sha * 40, 100, subject, None, is_fix, (), (FileChange(path, path, ("__init__",), " "),), "")


def _others() -> list[CommitRecord]:
    return [_commit(str(i), f"[Feature] support a new {w} option", path=f"plug/{w}.py", is_fix=False)
            for i, w in enumerate(("rollout", "reward", "trainer", "dataset", "tokenizer", "sampler"), 1)]


def test_a_title_restating_the_error_over_the_failing_file_is_proposed():
    fix = _commit("a", "[Bugfix] fix tensor not on the same device in the vision model (#20)")
    found = rank([fix, *_others()], FACTS, {}, None, {}, mask=QuoteMask.of(TRACE))[0]
    assert [c.sha for c in found] == [fix.sha]
    assert any(e.startswith("its title restates the error (device, same, tensor)") for e in found[0].evidence)


def test_the_same_title_elsewhere_or_with_fewer_words_is_no_evidence():
    elsewhere = _commit("b", "[Bugfix] fix tensor not on the same device in the vision model (#20)", path="plug/other.py")
    assert rank([elsewhere, *_others()], FACTS, {}, None, {})[0] == []
    fewer = _commit("c", "[Bugfix] fix device placement in the vision model (#21)")
    found = rank([fewer, *_others()], FACTS, {}, None, {})[0]
    assert not any("restates the error" in e for c in found for e in c.evidence)
