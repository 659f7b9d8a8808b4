"""`porter diagnose --history`: candidate fix commits from a small git history built here
(a bug, unrelated commits, the fix, tags), through the library and the CLI."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from porter import proc
from porter.port.worktree import PORTER_IDENTITY
from porter.kb.history import mine
from porter.kb.history.frames import PathMapper, segments, strip_log_prefix, trace_facts, versions_in_text
from porter.kb.history.lookup import HistorySource, analyse, availability_problem, embedded_exception, resolve_sources

BUGGY = textwrap.dedent(
    """\
    def load(config):
        return config["block_size"] * 2


    def other():
        return 1
    """
)
FIXED = textwrap.dedent(
    """\
    def load(config):
        return config.get("block_size", 128) * 2


    def other():
        return 1
    """
)
TRACE = textwrap.dedent(
    """\
    (EngineCore_DP0 pid=1) ERROR 01-01 00:00:00 [core.py:1] Traceback (most recent call last):
    (EngineCore_DP0 pid=1) ERROR 01-01 00:00:00 [core.py:1]   File "/usr/lib/python3.11/site-packages/vllm/engine.py", line 10, in start
    (EngineCore_DP0 pid=1) ERROR 01-01 00:00:00 [core.py:1]     self.worker.init()
    (EngineCore_DP0 pid=1) ERROR 01-01 00:00:00 [core.py:1]   File "/usr/lib/python3.11/site-packages/plug/worker.py", line 2, in load
    (EngineCore_DP0 pid=1) ERROR 01-01 00:00:00 [core.py:1]     return config["block_size"] * 2
    (EngineCore_DP0 pid=1) ERROR 01-01 00:00:00 [core.py:1] KeyError: 'block_size'
    """
)
ENV_TRACE = textwrap.dedent(
    """\
    Traceback (most recent call last):
      File "/usr/lib/python3.11/site-packages/torch_npu/npu/utils.py", line 60, in set_device
        torch_npu._C._npu_setDevice(device_id)
    RuntimeError: Initialize:build/CMakeFiles/torch_npu.dir/compiler_depend.ts:217 NPU function error: call aclInit failed, error code is 507033
    """
)


class History:
    """A plugin repository `plug` with dated commits and release tags."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.n = 0
        root.mkdir(parents=True)
        self.git("init", "-q", "-b", "main")

    def git(self, *args: str) -> str:
        name, email = PORTER_IDENTITY
        self.n += 1
        date = f"2025-01-01T00:{self.n // 60:02d}:{self.n % 60:02d}Z"
        env = {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email, "GIT_COMMITTER_NAME": name,
               "GIT_COMMITTER_EMAIL": email, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
        return proc.run(["git", "-c", "commit.gpgSign=false", "-c", "core.hooksPath=/dev/null", *args],
                        cwd=self.root, extra_env=env, check=True, timeout=60).stdout.strip()

    def commit(self, message: str, files: dict[str, str]) -> str:
        for rel, text in files.items():
            path = self.root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        self.git("add", "-A")
        self.git("commit", "-q", "-m", message)
        return self.git("rev-parse", "HEAD")

    def tag(self, name: str) -> None:
        self.git("tag", name)


@pytest.fixture
def history(tmp_path) -> dict:
    h = History(tmp_path / "plug-repo")
    shas = {"init": h.commit("[Core] initial worker", {"plug/__init__.py": "", "plug/worker.py": BUGGY, "README": "x"})}
    h.tag("v0.1.0")
    shas["docs"] = h.commit("[Doc] describe the worker", {"README": "more words"})
    shas["feat"] = h.commit("[Feature] add a helper (#5)", {"plug/helper.py": "def helper():\n    return 2\n"})
    shas["fix"] = h.commit(
        "[BugFix] Fix KeyError when block_size is not configured (#7)\n\n"
        "Loading a config without block_size raised `KeyError: 'block_size'` in load().\n",
        {"plug/worker.py": FIXED},
    )
    h.tag("v0.2.0")
    shas["later"] = h.commit("[Refactor] tidy other() (#9)", {"plug/worker.py": FIXED.replace("return 1", "return 1  # one")})
    return {"repo": h.root, "shas": shas, "h": h}


def _blocks(text: str) -> list[list[str]]:
    return [text.splitlines()]


def test_frames_map_site_packages_paths_and_skip_other_packages(history):
    files = mine.repo_files(history["repo"], "HEAD")
    facts = trace_facts(_blocks(TRACE), PathMapper(files))
    assert [(f.repo_path, f.line, f.function, f.source) for f in facts.frames] == [
        ("plug/worker.py", 2, "load", 'return config["block_size"] * 2')]
    assert (facts.exception_type, facts.exception_message) == ("KeyError", "'block_size'")
    assert PathMapper(files)("/x/site-packages/vllm/engine.py") is None
    assert PathMapper(["setup.py"])("/tmp/build/setup.py") is None  # a bare file name proves nothing


def test_causal_segment_is_the_root_cause_of_a_chain():
    chained = textwrap.dedent(
        """\
        Traceback (most recent call last):
          File "/a/plug/worker.py", line 2, in load
            x = y
        NameError: name 'y' is not defined

        The above exception was the direct cause of the following exception:

        Traceback (most recent call last):
          File "/a/plug/engine.py", line 9, in start
            raise RuntimeError("engine failed")
        RuntimeError: engine failed
        """
    )
    segs = segments(chained.splitlines())
    assert [s.exception_type for s in segs] == ["NameError", "RuntimeError"]
    facts = trace_facts([chained.splitlines()], PathMapper(["plug/worker.py", "plug/engine.py"]))
    assert facts.frames[0].repo_path == "plug/worker.py" and facts.exception_type == "NameError"


def test_log_prefix_and_version_banners():
    assert strip_log_prefix('(VllmWorker rank=1 pid=7) ERROR 07-31 11:41:04 [x.py:5]   File "a.py", line 1, in f') == '  File "a.py", line 1, in f'
    assert strip_log_prefix('[rank0]:   File "a.py", line 1') == '  File "a.py", line 1'
    text = "vllm_ascend-0.9.1rc1.dist-info\nvllm-ascend==0.9.1rc1\nimage quay.io/ascend/vllm-ascend:v0.9.2rc1\n"
    assert versions_in_text(text, ["vllm-ascend"]) == "0.9.1rc1"
    assert versions_in_text("nothing here", ["vllm-ascend"]) is None
    # an issue's environment list (`- verl: 0.7.0`), a development build
    assert versions_in_text("### System Info\n- verl: 0.7.0\n- python: 3.11\n", ["verl"]) == "0.7.0"
    assert versions_in_text("verl : 0.8.0.dev\n", ["verl"]) == "0.8.0.dev"
    assert versions_in_text("- verl: commit `e1ff774f`\n", ["verl"]) is None


def test_live_history_finds_the_fix_after_the_version_the_frames_match(history, tmp_path):
    rep = analyse(HistorySource("plug", history["repo"]), _blocks(TRACE), TRACE, {}, tmp_path / "cache")
    assert rep.status == "candidates" and not rep.index_used
    assert (rep.installed.ref, rep.installed.source) == ("v0.1.0", "frames")
    top = rep.candidates[0]
    assert top.sha == history["shas"]["fix"] and top.first_tag == "v0.2.0" and top.pr == 7
    assert top.headline.startswith(f"possibly fixed upstream by {history['shas']['fix'][:12]} [BugFix] Fix KeyError")
    assert top.headline.endswith("(#7), first in v0.2.0")
    assert any(e.startswith("rewrites the failing line plug/worker.py:2") for e in top.evidence)
    assert any(e.startswith("message quotes the error") for e in top.evidence)
    assert history["shas"]["docs"] not in {c.sha for c in rep.candidates}  # touched no frame, quotes nothing


def test_index_gives_the_same_answer_and_is_cached_by_commit_id(history, tmp_path):
    cache = tmp_path / "cache"
    index, path, built = mine.build_index(history["repo"], cache)
    assert built and path.name == f"{history['shas']['later']}.json"
    by_sha = {c.sha: c for c in index.commits}
    fix = by_sha[history["shas"]["fix"]]
    assert fix.is_fix and not by_sha[history["shas"]["feat"]].is_fix
    assert "KeyError: 'block_size'" in fix.error_strings
    assert [ch.functions for ch in fix.changes] == [("load",)]
    assert index.first_tag[history["shas"]["fix"]] == "v0.2.0" and index.first_tag[history["shas"]["init"]] == "v0.1.0"
    assert history["shas"]["later"] not in index.first_tag  # in no tag yet
    assert by_sha[history["shas"]["docs"]].changes == ()  # message-only: no .py file changed
    assert mine.build_index(history["repo"], cache)[2] is False  # cached
    rep = analyse(HistorySource("plug", history["repo"]), _blocks(TRACE), TRACE, {}, cache)
    assert rep.index_used and rep.candidates[0].sha == history["shas"]["fix"]

    newer = history["h"].commit("[Misc] another (#11)", {"plug/helper.py": "def helper():\n    return 3\n"})
    index2, path2, built2 = mine.build_index(history["repo"], cache)
    assert built2 and index2.head == newer and len(index2.commits) == len(index.commits) + 1  # extended, not re-mined


def test_installed_version_that_contains_the_fix_says_so(history, tmp_path):
    rep = analyse(HistorySource("plug", history["repo"], packages=("plug",)), _blocks(TRACE), TRACE, {"plug": "0.2.0"}, tmp_path / "c")
    assert (rep.installed.version, rep.installed.ref, rep.installed.source) == ("0.2.0", "v0.2.0", "env")
    assert history["shas"]["fix"] not in {c.sha for c in rep.candidates}
    assert [c.sha for c in rep.contained] == [history["shas"]["fix"]]
    assert rep.contained[0].headline.startswith("your version already contains this fix")


def test_environment_fault_gets_no_candidate_and_missing_history_says_what_it_needs(history, tmp_path):
    rep = analyse(HistorySource("plug", history["repo"]), _blocks(ENV_TRACE), ENV_TRACE, {}, tmp_path / "c")
    assert rep.candidates == [] and rep.status in ("none", "no-frames")
    missing = HistorySource("plug", tmp_path / "nowhere", remote="https://example.invalid/plug.git")
    rep = analyse(missing, _blocks(TRACE), TRACE, {}, tmp_path / "c")
    assert rep.status == "unavailable" and "git clone https://example.invalid/plug.git" in rep.note
    plain = tmp_path / "plain"
    plain.mkdir()
    assert "not a git repository" in availability_problem(HistorySource("plug", plain))


def test_history_setting_in_forks_yaml_defaults_to_the_clone(tmp_path):
    forks = tmp_path / "forks" / "forks.yaml"
    forks.parent.mkdir()
    forks.write_text(textwrap.dedent(
        """\
        schema: 1
        forks:
          plug:
            plugin: plug-npu
            path: forks/plug
            upstream_remote: https://example.invalid/plug.git
          other:
            path: forks/other
            history: mirrors/other.git
        """
    ))
    plug, other = resolve_sources(["plug-npu", "other"], forks)
    assert plug.repo == (tmp_path / "forks" / "plug").resolve() and plug.packages == ("plug-npu", "plug")
    assert plug.remote == "https://example.invalid/plug.git"
    assert other.repo == (tmp_path / "mirrors" / "other.git").resolve()
    from porter.errors import InputError

    with pytest.raises(InputError):
        resolve_sources(["nope"], forks)


def test_cli_diagnose_history_json_and_text(history, cli, tmp_path):
    trace = tmp_path / "trace.txt"
    trace.write_text(TRACE)
    code, out = cli(["diagnose", str(trace), "--history", str(history["repo"]), "--json"])
    assert code == 1, out  # the KB knows nothing of it: unknown, but history has a candidate
    doc = json.loads(out)
    (hist,) = doc["history"]
    assert hist["schema"] == 1 and hist["status"] == "candidates"
    assert set(hist) >= {"repo", "installed", "frames", "candidates", "contained", "note", "index_used", "elapsed_s"}
    cand = hist["candidates"][0]
    assert cand["sha"] == history["shas"]["fix"] and cand["first_tag"] == "v0.2.0" and cand["evidence"]
    code, out = cli(["diagnose", str(trace), "--history", str(history["repo"])])
    assert "possibly fixed upstream by" in out and "first in v0.2.0" in out
    code, out = cli(["diagnose", str(trace), "--history", str(tmp_path / "absent")])
    assert out.count("history for") == 1 and "not available" in out


def test_cli_mine_history(history, cli):
    code, out = cli(["kb", "mine-history", str(history["repo"]), "--json"])
    assert code == 0, out
    doc = json.loads(out)
    assert doc["commits"] == 5 and doc["fixes"] == 1 and doc["tags"] == 2 and doc["built"] is True
    code, out = cli(["kb", "mine-history", str(history["repo"]), "--json"])
    assert json.loads(out)["built"] is False
    code, out = cli(["kb", "mine-history", str(history["repo"] / "nope"), "--json"])
    assert code == 3


def test_version_without_its_own_tag_uses_the_newest_tag_before_it():
    from porter.kb.history.version import tag_for_version

    tags = ["v0.1.0", "v0.2.0rc1", "v0.2.0", "v0.3.0"]
    assert tag_for_version(tags, "0.2.0") == "v0.2.0"
    assert tag_for_version(tags, "0.2.1.dev3") == "v0.2.0"
    assert tag_for_version(tags, "0.0.9") is None and tag_for_version(tags, "not-a-version") is None


def test_live_history_maps_a_file_the_tip_no_longer_has(history, tmp_path):
    h = history["h"]
    h.git("mv", "plug/worker.py", "plug/loader.py")
    h.git("commit", "-q", "-m", "[Refactor] rename worker to loader (#13)")
    rep = analyse(HistorySource("plug", history["repo"]), _blocks(TRACE), TRACE, {}, tmp_path / "c")
    assert [f.repo_path for f in rep.frames] == ["plug/worker.py"]
    assert rep.candidates and rep.candidates[0].sha == history["shas"]["fix"]


def test_index_of_all_branches_finds_a_fix_only_on_a_release_branch(history, tmp_path, cli):
    h = history["h"]
    h.git("checkout", "-q", "-b", "releases/v0.1", "v0.1.0")
    backport = h.commit("[v0.1][BugFix] Fix KeyError when block_size is not configured (#8)\n\n"
                        "Backport: `KeyError: 'block_size'` in load().\n", {"plug/worker.py": FIXED})
    h.tag("v0.1.1")
    h.git("checkout", "-q", "main")
    cache = tmp_path / "cache"
    only_main, _, _ = mine.build_index(history["repo"], cache)
    assert backport not in {c.sha for c in only_main.commits}
    every, path, built = mine.build_index(history["repo"], cache, mine.ALL_BRANCHES)
    assert built and path.name.startswith("branches-") and every.first_tag[backport] == "v0.1.1"
    rep = analyse(HistorySource("plug", history["repo"], packages=("plug",)), _blocks(TRACE), TRACE, {"plug": "0.1.0"}, cache)
    # the backport is the same change: one candidate that names both copies (candidates.merge_backports)
    assert rep.index_used and {history["shas"]["fix"], backport} <= {s for c in rep.candidates for s in (c.sha, *(a for a, _ in c.also))}
    code, out = cli(["kb", "mine-history", str(history["repo"]), "--all-branches", "--json"])
    assert code == 0 and json.loads(out)["commits"] == len(every.commits)


def test_head_tail_reader_passes_the_stream_through_and_keeps_only_its_ends():
    import io

    from porter.kb.history.sample import HeadTailReader

    body = b"vllm-ascend==0.9.1 banner\n" + b"x" * 50_000 + b"\nKeyError: 'block_size'\n"
    reader = HeadTailReader(io.BytesIO(body), head=100, tail=200)
    passed = b"".join(iter(lambda: reader.read(777), b""))
    assert passed == body  # the scan sees every byte
    assert len(reader.head) == 100 and len(reader.tail) <= 400  # memory bounded, not the input's size
    text = reader.text()
    assert text.startswith("vllm-ascend==0.9.1") and text.endswith("KeyError: 'block_size'\n")
    assert "middle of the input not kept" in text and len(text) < 400
    small = HeadTailReader(io.BytesIO(b"short trace\n"), head=100, tail=200)
    while small.read(5):
        pass
    assert small.text() == "short trace\n" and not small.truncated


RAISER = textwrap.dedent(
    """\
    def check(layers, caches):
        if set(layers) != set(caches):
            raise AssertionError(f"Some layers are not correctly initialized: {sorted(layers)}")


    def patch_runner(runner):
        return runner
    """
)
RAISER_FIXED = RAISER.replace("set(layers) != set(caches)", "not set(caches) >= set(layers)").replace(
    "Some layers are not correctly initialized", "Some layers are not correctly initialized (attn.attn)")


@pytest.fixture
def code_history(tmp_path) -> dict:
    """A history whose fix messages quote nothing: only its code says what it fixed."""
    h = History(tmp_path / "plug-code")
    shas = {"init": h.commit("[Core] initial", {"plug/__init__.py": "", "plug/kv.py": RAISER,
                                                   "plug/runner.py": "def _dummy_run(n):\n    return n\n"})}
    h.tag("v0.1.0")
    shas["noise"] = h.commit("[Misc] rename a local (#3)", {"plug/other.py": "def helper(rope_dim):\n    return rope_dim\n"})
    shas["literal"] = h.commit("[BugFix] accept layers named attn.attn (#4)", {"plug/kv.py": RAISER_FIXED})
    shas["override"] = h.commit("[BugFix] pad inputs in the warm-up run (#5)",
                                {"plug/runner.py": "def _dummy_run(n):\n    input_ids = list(range(max(n, 1)))\n    return input_ids\n"})
    shas["name"] = h.commit("[BugFix] read num_hidden_layers from the text config (#6)",
                            {"plug/cfg.py": "def layers(cfg):\n    return cfg.text_config.num_hidden_layers\n"})
    return {"repo": h.root, "shas": shas}


def _rank_without_message(code_history, tmp_path, trace: str):
    rep = analyse(HistorySource("plug", code_history["repo"]), _blocks(trace), trace, {}, tmp_path / "c",
                  index=mine.build_index(code_history["repo"], tmp_path / "c")[0], use_message=False,
                  fallback_exception=embedded_exception(trace))
    return rep.candidates


def test_diff_evidence_finds_fixes_whose_message_quotes_nothing(code_history, tmp_path):
    shas = code_history["shas"]
    # the error's fixed text is a string literal the fix changed (the trace has no frame in the plugin)
    top = _rank_without_message(code_history, tmp_path, "AssertionError: Some layers are not correctly initialized: ['model.attn.attn']\n")
    assert top and top[0].sha == shas["literal"]
    assert any(e.startswith("its diff changes the string that makes this error") for e in top[0].evidence)
    # a code name of the error message is on a line the fix added
    top = _rank_without_message(code_history, tmp_path, "AttributeError: 'OmniConfig' object has no attribute 'num_hidden_layers'\n")
    assert top and top[0].sha == shas["name"] and any("`num_hidden_layers`" in e for e in top[0].evidence)
    # the framework function that failed is one the plugin overrides, and the fix changed the override
    # (with a name of the failing line: one weak signal alone proposes nothing)
    framework = textwrap.dedent(
        """\
        Traceback (most recent call last):
          File "/site-packages/vllm/v1/worker/gpu_model_runner.py", line 10, in _dummy_run
            hidden = self.model(input_ids)
        IndexError: index 0 is out of bounds for dimension 0 with size 0
        """
    )
    top = _rank_without_message(code_history, tmp_path, framework)
    assert top and top[0].sha == shas["override"] and "_dummy_run" in top[0].evidence[0]
    assert shas["noise"] not in {c.sha for c in top}


def test_quote_mask_leaves_out_only_the_lines_that_quote_the_trace(history, tmp_path):
    from porter.kb.history.candidates import QuoteMask, message_text
    from porter.kb.history.models import CommitRecord

    mask = QuoteMask.of(TRACE)
    quoting = CommitRecord("a" * 40, 0, "[BugFix] Fix load (#7)", 7, True, (), (),
                           body='The trace was:\n    return config["block_size"] * 2\nnow it reads a default.')
    text = message_text(quoting, mask)
    assert 'return config["block_size"] * 2' not in text and "now it reads a default." in text
    assert "[BugFix] Fix load (#7)" in text  # a title that quotes nothing stays
    cache = tmp_path / "cache"
    index = mine.build_index(history["repo"], cache)[0]
    plain = analyse(HistorySource("plug", history["repo"]), _blocks(TRACE), TRACE, {}, cache, index=index)
    masked = analyse(HistorySource("plug", history["repo"]), _blocks(TRACE), TRACE, {}, cache, index=index, mask_quotes=True)
    assert plain.candidates[0].sha == masked.candidates[0].sha == history["shas"]["fix"]  # the code evidence still finds it
    assert masked.candidates[0].score <= plain.candidates[0].score


def test_wrapped_prose_is_joined_before_errors_are_read():
    from porter.kb.history.lookup import fallback_exception

    assert mine.error_strings("leading to the error `AssertionError: Some layers are\nnot correctly initialized`\n") == (
        "AssertionError: Some layers are not correctly initialized",)
    prose = "it will trigger a RuntimeError: The\nexpanded size of the tensor (128) must match the existing size (64)\n"
    assert fallback_exception(("RuntimeError", "The"), "", prose) == (
        "RuntimeError", "The expanded size of the tensor (128) must match the existing size (64)")
    assert mine.message_fragments("Shape: 2304 out of considered ranges: [(1, 2048)]") == ["out of considered ranges"]
    assert mine.literal_keys('raise AssertionError(f"Shape: {n} out of considered ranges: {r}")') == [
        mine.fragment_key("out of considered ranges")]
