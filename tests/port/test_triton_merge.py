"""Merging an upstream tag into a fork: recorded resolutions, conflicts left to a human, bad input."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.port.helpers import git, snapshot
from porter.errors import UsageError
from porter.port.fork_merge import (MergeConflicts, MergeRequest, apply_recorded, conflict_hunks, conflict_key,
                                      load_resolutions, run_merge)

def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


@pytest.fixture
def repos(tmp_path):
    """Upstream `tri` with tags v1, v2; a fork cloned at v1 with NPU changes that conflict with v2."""
    up = tmp_path / "tri"
    up.mkdir()
    git(up, "init", "-q")
    write(up, {"cmake/llvm-hash.txt": "aaaa\n", "third_party/nvidia/backend.py": "NV = 1\n",
               "python/triton/runtime/interpreter.py": "def run():\n    return 'v1'\n",
               "include/TritonAttrDefs.td": "def A : I32EnumAttrCase<\"A\", 0>;\n", "python/triton/lang.py": "X = 1\n"})
    git(up, "add", "-A")
    git(up, "commit", "-qm", "v1")
    git(up, "tag", "v1")
    fork = tmp_path / "fork"
    git(tmp_path, "clone", "-q", str(up), str(fork))
    write(fork, {"cmake/llvm-hash.txt": "npu-pin\n", "third_party/nvidia/backend.py": "NV = 1  # touched by the fork\n",
                 "python/triton/runtime/interpreter.py": "def run():\n    return 'npu'\n",
                 "include/TritonAttrDefs.td": "def A : I32EnumAttrCase<\"A\", 0>;\ndef NPU : I32EnumAttrCase<\"NPU\", 1>;\n",
                 "third_party/ascend/backend.py": "ASCEND = True\n"})
    git(fork, "add", "-A")
    git(fork, "commit", "-qm", "ascend work")
    write(up, {"cmake/llvm-hash.txt": "bbbb\n", "third_party/nvidia/backend.py": "NV = 2\n",
               "python/triton/runtime/interpreter.py": "def run():\n    return 'v2'\n",
               "include/TritonAttrDefs.td": "def A : I32EnumAttrCase<\"A\", 0>;\ndef B : I32EnumAttrCase<\"B\", 1>;\n",
               "python/triton/lang.py": "X = 2\n"})
    git(up, "commit", "-qam", "v2")
    git(up, "tag", "v2")
    return {"up": up, "fork": fork, "tmp": tmp_path}


def request(repos, resolutions: Path, **overrides) -> MergeRequest:
    fields = dict(fork="triton-ascend", fork_path=repos["fork"], upstream="triton", target="v2", target_ref="refs/tags/v2",
                  fetch_from=str(repos["up"]), fetch_ref="refs/tags/v2", resolutions_dir=resolutions,
                  work_dir=repos["tmp"] / "wt", runs_dir=repos["tmp"] / "runs")
    fields.update(overrides)
    if fields["fetch_ref"]:
        fields["target_ref"] = git(repos["up"], "rev-parse", "v2^{commit}").strip()
    return MergeRequest(**fields)


def test_bundled_resolutions_load():
    rules = load_resolutions(Path(__file__).resolve().parents[2] / "knowledge" / "merge-resolutions", "triton-ascend")
    assert {r.id for r in rules} >= {"TA-MERGE-001", "TA-MERGE-003"}
    assert next(r for r in rules if r.id == "TA-MERGE-001").matches("cmake/llvm-hash.txt", "v3.6.0")


def test_unresolved_conflicts_go_to_a_human_and_change_nothing(repos):
    bundled = Path(__file__).resolve().parents[2] / "knowledge" / "merge-resolutions"
    before = snapshot(repos["fork"])
    with pytest.raises(MergeConflicts) as info:
        run_merge(request(repos, bundled))
    assert info.value.exit_code == 1
    open_paths = {c["path"] for c in info.value.details["conflicts"]}
    assert open_paths == {"include/TritonAttrDefs.td", "python/triton/runtime/interpreter.py"}
    recipes = {c["path"]: c["recipe"] for c in info.value.details["conflicts"]}
    assert "renumber the NPU case" in recipes["include/TritonAttrDefs.td"]
    assert snapshot(repos["fork"]) == before  # objects were fetched, but no ref, file or index changed
    assert git(repos["fork"], "worktree", "list").count("\n") == 1
    report = next((repos["tmp"] / "runs" / "upgrade").iterdir()) / "PR_MATERIAL.md"
    assert "**a human**" in report.read_text()
    # The human gets the key a `recorded` entry needs, and the error says where the list is.
    key = conflict_key("    return 'npu'\n", "    return 'v2'\n")
    interp = next(c for c in info.value.details["conflicts"] if c["path"].endswith("interpreter.py"))
    assert interp["unresolved_keys"] == [key] and interp["hunks"] == 1
    assert f"`{key}`" in report.read_text()
    assert str(report) in info.value.hint


def test_recorded_resolutions_complete_the_merge(repos, tmp_path):
    rules_dir = tmp_path / "rules"
    rules_dir.mkdir()
    key_interp = conflict_key("    return 'npu'\n", "    return 'v2'\n")  # git keeps the common first line
    td_ours = "def NPU : I32EnumAttrCase<\"NPU\", 1>;\n"
    td_theirs = "def B : I32EnumAttrCase<\"B\", 1>;\n"
    rules = {"fork": "triton-ascend", "resolutions": [
        {"id": "T-1", "paths": ["cmake/llvm-hash.txt"], "strategy": "ours"},
        {"id": "T-2", "paths": ["third_party/nvidia/*"], "strategy": "theirs"},
        {"id": "T-3", "paths": ["python/triton/runtime/interpreter.py"], "strategy": "recorded",
         "hunks": [{"conflict": key_interp, "resolution": "    return 'v2+npu'\n"}]},
        {"id": "T-4", "paths": ["*TritonAttrDefs.td"], "strategy": "recorded",
         "hunks": [{"conflict": conflict_key(td_ours, td_theirs),
                    "resolution": td_theirs + "def NPU : I32EnumAttrCase<\"NPU\", 2>;\n"}]},
    ]}
    (rules_dir / "tri.yaml").write_text(yaml.safe_dump(rules))
    before = snapshot(repos["fork"])
    result = run_merge(request(repos, rules_dir))
    assert result.branch_moved and result.exit_code == 0
    assert {c.resolved_by for c in result.conflicts} == {"T-1", "T-2", "T-3", "T-4"}
    branch = "ascend-port/triton-v2"
    parents = git(repos["fork"], "rev-list", "--parents", "-n", "1", f"{branch}~1").split()
    assert len(parents) == 3  # a real merge commit (--no-ff), never a rebase
    assert git(repos["fork"], "show", f"{branch}:cmake/llvm-hash.txt") == "npu-pin\n"
    assert git(repos["fork"], "show", f"{branch}:third_party/nvidia/backend.py") == "NV = 2\n"
    assert "v2+npu" in git(repos["fork"], "show", f"{branch}:python/triton/runtime/interpreter.py")
    assert git(repos["fork"], "show", f"{branch}:python/triton/lang.py") == "X = 2\n"
    assert git(repos["fork"], "show", f"{branch}:third_party/ascend/backend.py") == "ASCEND = True\n"
    pr = git(repos["fork"], "show", f"{branch}:PR_MATERIAL.md")
    assert "## Outcome" in pr and "## Reproducer" in pr and "## Validation" in pr and "T-3" in pr
    after = snapshot(repos["fork"])
    assert {k for k in after if after[k] != before.get(k)} == {f".git/refs/heads/{branch}", f".git/logs/refs/heads/{branch}"}


def test_already_merged_target_is_refused(repos, tmp_path):
    with pytest.raises(UsageError, match="already merged"):
        run_merge(MergeRequest(fork="triton-ascend", fork_path=repos["fork"], upstream="triton", target="v1",
                               target_ref="v1", work_dir=tmp_path / "wt"))


def test_conflict_hunk_parsing():
    text = "a\n<<<<<<< HEAD\nx\n=======\ny\n>>>>>>> v2\nb\n"
    (hunk,) = conflict_hunks(text)
    assert (hunk.ours, hunk.theirs) == ("x\n", "y\n") and hunk.key == conflict_key("x\n", "y\n")


def test_cli_upgrade_of_a_fork_merges(repos, monkeypatch):
    """`porter upgrade triton-ascend --to v2` on a project whose registry marks the plugin as a fork."""
    import json

    from typer.testing import CliRunner

    from porter.cli import app

    project = repos["tmp"] / "project"
    (project / "forks").mkdir(parents=True)
    (project / "knowledge" / "merge-resolutions").mkdir(parents=True)
    (project / "porter.yaml").write_text("upstreams_file: upstreams.yaml\nforks_file: forks/forks.yaml\n"
                                         "knowledge_dir: knowledge\nruns_dir: runs\n")
    (project / "upstreams.yaml").write_text(yaml.safe_dump({"schema": 1, "upstreams": {"triton": {
        "git": str(repos["up"]), "packages": ["triton"], "tag": "v{version}", "ownership": {"report": ["**"]}}},
        "plugins": {"triton-ascend": {"kind": "fork", "upstreams": ["triton"], "packages": ["triton"],
                                      "ownership": {"patch": ["**"]}}}}))
    (project / "forks" / "forks.yaml").write_text(yaml.safe_dump({"schema": 1, "forks": {"triton-ascend": {
        "plugin": "triton-ascend", "path": str(repos["fork"]), "baseline": {"triton": "v1"}}}}))
    (project / "knowledge" / "merge-resolutions" / "t.yaml").write_text(yaml.safe_dump({"fork": "triton-ascend",
        "resolutions": [{"id": "T-1", "paths": ["cmake/*"], "strategy": "ours"}]}))
    monkeypatch.chdir(project)
    monkeypatch.setenv("PORTER_CACHE_DIR", str(repos["tmp"] / "cache"))
    before = snapshot(repos["fork"])
    result = CliRunner().invoke(app, ["upgrade", "triton-ascend", "--to", "v2", "--json"])
    assert result.exit_code == 1, result.output
    error = json.loads(result.stdout)["error"]
    assert error["kind"] == "merge_conflicts" and "cmake" not in error["message"]
    assert snapshot(repos["fork"]) == before


def test_conflict_key_tells_conflicts_apart():
    """A recorded resolution belongs to one conflict text: a stale one must not resolve a new conflict."""
    import hashlib

    keys = {conflict_key("x\n", "y\n"), conflict_key("y\n", "x\n"), conflict_key("x\n", "z\n"),
            conflict_key("x\ny\n", ""), conflict_key("x\n", "y\n\n")}
    assert len(keys) == 5  # sides, content and the split point all count
    assert conflict_key("x\r\n", "y\r\n") == conflict_key("x\n", "y\n")  # line endings do not
    # The documented format (resolution files record it): sha256(ours NUL theirs), 16 hex digits.
    assert conflict_key("a\n", "b\n") == hashlib.sha256(b"a\n\0b\n").hexdigest()[:16]


def test_stale_recorded_resolution_is_not_applied():
    text = "head\n<<<<<<< HEAD\nnew ours\n=======\nnew theirs\n>>>>>>> v3\ntail\n"
    stale = {conflict_key("old ours\n", "old theirs\n"): "resolved for v2\n"}
    out, missing = apply_recorded(text, stale)
    assert out == text and missing == [conflict_key("new ours\n", "new theirs\n")]
    fresh = {conflict_key("new ours\n", "new theirs\n"): "both\n"}
    assert apply_recorded(text, fresh) == ("head\nboth\ntail\n", [])


def test_stale_recorded_resolution_leaves_the_merge_to_a_human(repos, tmp_path):
    rules_dir = tmp_path / "stale"
    rules_dir.mkdir()
    (rules_dir / "tri.yaml").write_text(yaml.safe_dump({"fork": "triton-ascend", "resolutions": [
        {"id": "T-1", "paths": ["cmake/*"], "strategy": "ours"},
        {"id": "T-2", "paths": ["third_party/nvidia/*"], "strategy": "theirs"},
        {"id": "T-OLD", "paths": ["python/triton/runtime/interpreter.py", "*TritonAttrDefs.td"], "strategy": "recorded",
         "hunks": [{"conflict": conflict_key("    return 'npu'\n", "    return 'v1.5'\n"), "resolution": "stale\n"}]}]}))
    with pytest.raises(MergeConflicts) as info:
        run_merge(request(repos, rules_dir))
    assert {c["path"] for c in info.value.details["conflicts"]} == {"include/TritonAttrDefs.td",
                                                                    "python/triton/runtime/interpreter.py"}
