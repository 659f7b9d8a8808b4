"""A report without plugin frames that quotes the plugin's own message (`Available memory: 0`): the
function whose string prints it, read at the installed version, is where it failed; a later bug fix that
changed that function is the candidate."""

from __future__ import annotations

import textwrap

from porter.kb.history import mine
from porter.kb.history.candidates import anchored, rank
from porter.kb.history.frames import PathMapper, trace_facts
from porter.kb.history.lookup import HistorySource, analyse
from porter.kb.history.models import CommitRecord, FileChange, RaiseSite, TraceFacts
from porter.kb.history.raise_site import enclosing_function, raise_sites, search_literals, sites_in

WORKER = textwrap.dedent(
    """\
    import logging

    logger = logging.getLogger(__name__)


    class Worker:
        def determine_available_memory(self, total, peak):
            available = int(total * 0.3 - peak)
            if available < 0:
                available = 0
            logger.info(f"Available memory: {available}, total memory: {total}")
            return available

        def load_model(self, path):
            # Available memory is checked later
            return path
    """
)
# the fix rewrites the log line too: at the tip the old message is gone, at the installed tag it is there
FIXED_WORKER = WORKER.replace("int(total * 0.3 - peak)", "int(total * 0.3 - peak - self.other)").replace(
    'f"Available memory: {available}, total memory: {total}"', '"Available KV memory: %d", available')
REPORT = "[Bug]: the second instance fails to start on one card\nplug 0.1.0: the log says `Available memory: 0`\n"


def test_search_literals_keeps_the_fixed_specific_parts():
    lits = search_literals(["报错有`Available memory: 0`, total memory: 65536", "Available KV cache memory: -1.33GB"])
    assert "Available KV cache memory" in lits and "Available memory" in lits
    assert all(not any(c.isdigit() for c in lit) for lit in lits)  # values are cut out
    # Python's own message (and any message of generic words) names no function of the plugin
    assert search_literals(["'Foo' object has no attribute 'bar'", "list index out of range"]) == ()
    assert search_literals(["short words"]) == ()  # too short to be one message's


def test_enclosing_function_is_the_innermost_def_above_a_less_indented_block():
    lines = WORKER.splitlines()
    at = next(i for i, line in enumerate(lines) if "Available memory:" in line)
    assert enclosing_function(lines, at) == "determine_available_memory"
    assert enclosing_function(["x = 'Available memory'"], 0) is None  # module level: no function


def test_sites_in_drops_comments_and_phrases_of_many_functions():
    lines = WORKER.splitlines()
    grep = "\n".join(f"v1:plug/worker.py:{i + 1}:{line}" for i, line in enumerate(lines) if "vailable memory" in line)
    sites = sites_in(grep, {"plug/worker.py": lines}, ["Available memory"])
    assert [(s.function, s.line) for s in sites] == [("determine_available_memory", 11)]  # not the comment in load_model
    many = "\n".join(f"v1:plug/m{i}.py:2:    raise ValueError('bad config value')" for i in range(5))
    files = {f"plug/m{i}.py": [f"def f{i}():", "    raise ValueError('bad config value')"] for i in range(5)}
    assert sites_in(many, files, ["bad config value"]) == []
    tests_only = {"tests/test_w.py": ["def test_x():", "    assert 'Available memory' in log"]}
    assert sites_in("v1:tests/test_w.py:2:    assert 'Available memory' in log", tests_only, ["Available memory"]) == []


def _history(tmp_path):
    from .test_history import History

    h = History(tmp_path / "plug-repo")
    h.commit("[Core] worker (#1)", {"plug/__init__.py": "", "plug/worker.py": WORKER})
    h.tag("v0.1.0")
    feat = h.commit("[Feature] profile the worker's memory (#2)",
                    {"plug/worker.py": WORKER.replace("int(total * 0.3 - peak)", "int(total * 0.3 - peak - 1)")})
    other = h.commit("[BugFix] Fix the model path (#3)", {"plug/worker.py": WORKER.replace(
        "int(total * 0.3 - peak)", "int(total * 0.3 - peak - 1)").replace("return path", "return str(path)")})
    fix = h.commit("[BugFix] Fix multi-instance serving on a single card (#4)", {"plug/worker.py": FIXED_WORKER})
    return h.root, fix, feat, other


def test_the_fix_of_the_function_that_prints_the_message_is_found_at_the_installed_version(tmp_path):
    repo, fix, feat, other = _history(tmp_path)
    cache = tmp_path / "cache"
    mine.build_index(repo, cache)
    src = HistorySource("plug", repo, packages=("plug",))
    rep = analyse(src, [], REPORT, {"plug": "0.1.0"}, cache, error_text=REPORT)
    assert rep.installed.ref == "v0.1.0" and not rep.frames
    assert [c.sha for c in rep.candidates] == [fix]  # the feature (no bug fix) and the other function's fix are not
    top = rep.candidates[0]
    assert any("determine_available_memory() of plug/worker.py, where the plugin prints `Available memory`" in e
               for e in top.evidence)
    assert any("it rewrites that line" in e for e in top.evidence)
    assert not anchored(top.evidence)  # the same words may be printed where nothing failed: not past the gate
    gated = analyse(src, [], REPORT, {"plug": "0.1.0"}, cache, error_text=REPORT, gate="environment fault")
    assert gated.candidates == []
    # at the tip the fix rewrote the message: only the installed version's source holds it
    assert raise_sites(repo, "HEAD", ("Available memory",)) == ()
    assert [s.function for s in raise_sites(repo, "v0.1.0", ("Available memory",))] == ["determine_available_memory"]


def test_raise_sites_count_only_without_plugin_frames():
    site = RaiseSite("plug/worker.py", "determine_available_memory", 11, 'logger.info(f"Available memory: {a}")',
                     "Available memory")
    commit = CommitRecord("f" * 40, 1, "[BugFix] Fix memory (#4)", 4, True, (),
                          (FileChange("plug/worker.py", "plug/worker.py", ("determine_available_memory",), ""),))
    found, _ = rank([commit], TraceFacts((), "", ""), {}, None, {}, sites=[site])
    assert [c.sha for c in found] == [commit.sha]
    trace = ['Traceback (most recent call last):', '  File "/x/plug/other.py", line 3, in run', '    go()',
             'ValueError: no']
    facts = trace_facts([trace], PathMapper({"plug/other.py", "plug/worker.py"}))
    assert facts.frames  # a plugin frame says where it failed better than a string does
    assert rank([commit], facts, {}, None, {}, sites=[site])[0] == []
