"""A report without a traceback that names the code it blames (`Merger.save_outputs()` in backticks,
a pasted snippet's `def` line): a commit that changed a function of that name changed the code the
report points at. That counts as code evidence next to the title's words, never alone, never as an
anchor behind the environment gate, and not where the trace has frames of its own. A small git
history is built here."""

from __future__ import annotations

import textwrap

from porter.kb.history import mine
from porter.kb.history.candidates import anchored, rank
from porter.kb.history.lookup import HistorySource, analyse
from porter.kb.history.models import CommitRecord, FileChange, Frame, TraceFacts
from porter.kb.history.named import named_functions

from .test_history import History

MERGER = textwrap.dedent(
    """\
    class Merger:
        def save_outputs(self, model, target):
            model.save_pretrained(target)

        def load_shards(self, path):
            return [path]
    """
)
CHECKED = MERGER.replace("model.save_pretrained(target)", "model.save_pretrained(target)\n        check_outputs(target)")
SHARDS = MERGER.replace("return [path]", "return sorted([path])")
REPORT = textwrap.dedent(
    """\
    Merger output has no model check

    `Merger.save_outputs()` calls `model.save_pretrained()` and returns without checking the target
    directory, so a merge that wrote no weights reports success.
    """
)


def test_the_names_a_report_writes_as_code():
    text = ("`Merger.save_outputs()` calls `save_pretrained`; see `verl/model_merger.py` and `__init__`.\n"
            "```python\ndef calculate_debug_metrics(data):\n    full = abs(a - b)\n```\n"
            "an unquoted load_shards_now or `isinstance` or `step`")
    assert named_functions(text) == ("save_outputs", "save_pretrained", "model_merger", "calculate_debug_metrics")


def _history(tmp_path):
    h = History(tmp_path / "plug")
    h.commit("[Core] add the merger", {"plug/__init__.py": "", "plug/merger.py": MERGER})
    h.tag("v0.1.0")
    for i, what in enumerate(("rollout", "reward", "trainer", "dataset", "tokenizer", "scheduler")):
        h.commit(f"[Feature] support a new {what} option", {f"plug/{what}.py": f"def run_{what}():\n    return {i}\n"})
    shards = h.commit("[BugFix] fix model merger shard order", {"plug/merger.py": SHARDS})
    fix = h.commit("[BugFix] validate model merger outputs (#12)", {"plug/merger.py": CHECKED.replace("return [path]", "return sorted([path])")})
    return h, shards, fix


def test_a_commit_that_changed_the_function_the_report_blames_is_proposed(tmp_path):
    h, shards, fix = _history(tmp_path)
    index = mine.build_index(h.root, tmp_path / "cache", "HEAD")[0]
    src = HistorySource("plug", h.root, packages=("plug",))
    report = analyse(src, [], REPORT, {"plug": "0.1.0"}, tmp_path / "cache", index=index, title_line=REPORT.splitlines()[0],
                     error_text=REPORT, named=named_functions(REPORT))
    assert [c.sha for c in report.candidates][:1] == [fix]
    assert any("which the report names" in e for e in report.candidates[0].evidence)
    assert shards not in [c.sha for c in report.candidates]  # a title's words alone stay below the threshold
    plain = analyse(src, [], REPORT, {"plug": "0.1.0"}, tmp_path / "cache", index=index, title_line=REPORT.splitlines()[0], error_text=REPORT)
    assert fix not in [c.sha for c in plain.candidates]


def test_the_named_function_is_no_anchor_and_gives_way_to_frames():
    change = FileChange("plug/merger.py", "plug/merger.py", ("save_outputs",), " ")
    commit = CommitRecord("a" * 40, 100, "[BugFix] validate model merger outputs", None, True, (), (change,), "")
    others = [CommitRecord(f"{i}" * 40, 10 + i, f"[Feature] support a new {w} option", None, False, (), (), "")
              for i, w in enumerate(("rollout", "reward", "trainer", "dataset", "tokenizer"), 1)]
    commits = [commit, *others]
    report, empty = "Merger output has no model check for safetensors weights", TraceFacts((), "", "")
    found = rank(commits, empty, {}, None, {}, report=report, named=("save_outputs",))[0]
    assert [c.sha for c in found] == [commit.sha]
    assert any("which the report names" in e for e in found[0].evidence)
    assert rank(commits, empty, {}, None, {}, report=report)[0] == []  # the title's words alone: below the threshold
    # the report's blame is no failing frame: behind the environment gate it proposes nothing
    assert not anchored(found[0].evidence)
    assert rank(commits, empty, {}, None, {}, report=report, named=("save_outputs",), strict=True)[0] == []
    # with a frame of the plugin's own, the frame says where it failed: the prose's names are not read
    frame = Frame("/x/plug/merger.py", "plug/merger.py", 5, "load_shards", "return [path]", 0)
    with_frame = rank(commits, TraceFacts((frame,), "RuntimeError", "merge failed"), {}, None, {}, named=("save_outputs",))[0]
    assert not any("which the report names" in e for c in with_frame for e in c.evidence)
