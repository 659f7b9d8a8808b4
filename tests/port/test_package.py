"""porter.port reads in pipeline order without import circles, and its edit entry point publishes a
validated branch (what `porter upgrade --drop` plugs into)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.port.helpers import git, snapshot

PACKAGE = Path(__file__).resolve().parents[2] / "porter" / "port"
PIPELINE = ["plan", "worktree", "shims", "validate", "pr_material", "publish"]


def _imports(module: str) -> set[str]:
    """porter.port modules `module` imports at module level (function-level imports are lazy by design)."""
    tree = ast.parse((PACKAGE / f"{module}.py").read_text())
    found = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "porter.port":
                found.update(a.name for a in node.names)
            elif node.module.startswith("porter.port."):
                found.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            found.update(a.name.split(".")[2] for a in node.names if a.name.startswith("porter.port."))
    return found & {p.stem for p in PACKAGE.glob("*.py")}


def test_no_import_circles_and_stages_only_look_back():
    graph = {p.stem: _imports(p.stem) for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    state: dict[str, int] = {}

    def visit(node, path):
        assert state.get(node) != 1, f"import circle: {' -> '.join(path + [node])}"
        if state.get(node) == 2:
            return
        state[node] = 1
        for dep in graph.get(node, ()):
            visit(dep, path + [node])
        state[node] = 2

    for node in graph:
        visit(node, [])
    for index, stage in enumerate(PIPELINE):  # a stage imports only stages before it
        assert graph[stage] <= set(PIPELINE[:index]), (stage, graph[stage])


def test_publish_edits_validates_and_publishes_a_branch(example, tmp_path):
    from porter.port.edit_port import EditCommit, EditRequest, FileEdit, publish_edits
    from porter.registry import load_forks

    plugin = example["plugin"]
    utils = (plugin / "tiny_npu" / "utils.py").read_text()
    before = snapshot(plugin)
    request = EditRequest(
        fork="example-plugin", fork_path=plugin, upstream="hostlib", baseline="v1", target="v2",
        slug="hostlib-drop-v1", title="drop the hostlib v1 lane",
        commits=(EditCommit("tiny_npu: note the dropped lane", rationale=("v1 is retired",),
                            edits=(FileEdit("tiny_npu/utils.py", utils + "\nDROPPED_LANE = 'v1'\n"),)),),
        summary=("nothing left for a human",), target_tree=example["upstream_v2"], baseline_tree=example["upstream_v1"],
        upstream_package="hostlib", work_dir=tmp_path / "wt", runs_dir=tmp_path / "runs", forks_file=example["forks_file"],
    )
    result = publish_edits(request)
    assert result.branch == "ascend-port/hostlib-drop-v1" and result.branch_moved
    assert result.imports_at_target["verdict"] == "yes" and result.imports_at_target["modules"] == ["tiny_npu.utils"]
    log = git(plugin, "log", "--format=%s", "main..ascend-port/hostlib-drop-v1").splitlines()
    assert log == ["PR_MATERIAL.md: drop the hostlib v1 lane", "tiny_npu: note the dropped lane"]
    pr = git(plugin, "show", "ascend-port/hostlib-drop-v1:PR_MATERIAL.md")
    assert pr.startswith("**imports at hostlib v2: yes") and "## Validation" in pr
    assert load_forks(example["forks_file"])["example-plugin"].ledger[-1].run_id == result.run_id
    after = snapshot(plugin)
    assert {k for k in set(before) | set(after) if before.get(k) != after.get(k)} == {
        ".git/refs/heads/ascend-port/hostlib-drop-v1", ".git/logs/refs/heads/ascend-port/hostlib-drop-v1"}


def test_publish_edits_that_break_the_import_keep_a_failed_branch(example, tmp_path):
    from porter.port.edit_port import EditCommit, EditRequest, FileEdit, publish_edits
    from porter.port.plan import PortFailed

    request = EditRequest(
        fork="example-plugin", fork_path=example["plugin"], upstream="hostlib", baseline="v1", target="v2",
        slug="hostlib-bad", commits=(EditCommit("break it", edits=(
            FileEdit("tiny_npu/utils.py", "from hostlib.nowhere import thing\n"),)),),
        target_tree=example["upstream_v2"], baseline_tree=example["upstream_v1"], upstream_package="hostlib",
        work_dir=tmp_path / "wt", runs_dir=tmp_path / "runs")
    with pytest.raises(PortFailed) as info:
        publish_edits(request)
    assert info.value.details["failed_branch"] == "ascend-port/hostlib-bad-failed"
    assert [c["name"] for c in info.value.details["checks"]] == ["imports at the target"]
    assert git(example["plugin"], "branch", "--list", "ascend-port/hostlib-bad").strip() == ""
