"""Porting a plugin's fork to a new upstream version: one package, modules in pipeline order.

    plan        records shared by every stage (PortRequest, PortAnalysis, PortResult) and the
                checks made before anything is written (versions, fork checkout, slug)
    worktree    the detached git worktree porter works in; commits with a fallback identity;
                stale worktrees of killed runs pruned
    shims       apply the planned shim groups (porter.shims) and commit them, plugin formatter on
    validate    byte-compile, residual drift, import smoke at the target tree, generated tests
    pr_material PR_MATERIAL.md: one-screen summary first, then per-commit sections
    publish     branch move + run record + ledger as one step; `-failed` branch; push

One module per kind of plugin run, each composing the stages above:

    shim_port            a plugin that follows its upstream through shims (vllm-ascend, torch-npu)
    fork_merge           a fork that merges its parent (triton-ascend)
    transformers_compare a consumer of transformers: the NPU integration check
    edit_port            any other list of file edits (guard cleanup for `porter upgrade --drop`)

`dispatch` turns a `porter upgrade` analysis report into the right kind of run; `console` renders
a result. Templates live in porter/port/templates. No module imports one later in the list above
it, except the kind modules, which sit on top.

Entry point for other commands that want a validated, published branch from their own edits:

    from porter.port.edit_port import EditCommit, EditRequest, FileEdit, publish_edits

    result = publish_edits(EditRequest(
        fork="vllm-ascend", fork_path=Path("forks/vllm-ascend"), upstream="vllm",
        baseline="0.11.0", target="0.13.0", slug="vllm-drop-0.11.0",
        title="drop the vllm 0.11.0 lane",
        commits=(EditCommit("vllm_ascend: drop vllm_version_is('0.11.0') gates",
                            rationale=("...",), edits=(FileEdit("vllm_ascend/x.py", new_text),)),),
        target_tree=tree_0_13, work_dir=cache / "worktrees", runs_dir=runs, forks_file=forks_yaml,
    ))

It commits the edits on `ascend-port/<slug>` in a porter worktree at the fork's committed
baseline, runs the plugin's formatter on the changed files, validates (byte-compile; every
changed module and entry point imports at `target_tree`), writes PR_MATERIAL.md, and moves the
branch with its ledger entry and run record as one step; a failed validation raises PortFailed
with the result kept on `ascend-port/<slug>-failed`.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "PortRequest": "plan", "PortAnalysis": "plan", "PortResult": "plan", "PortFailed": "plan", "CommitInfo": "plan",
    "run_port": "shim_port", "run_merge": "fork_merge", "MergeRequest": "fork_merge", "compare": "transformers_compare",
    "publish_edits": "edit_port", "EditRequest": "edit_port", "EditCommit": "edit_port", "FileEdit": "edit_port",
    "port_after_analysis": "dispatch",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Lazy re-exports: importing porter.port imports no stage, so the stages import each other freely."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'porter.port' has no attribute {name!r}")
    return getattr(importlib.import_module(f"porter.port.{_EXPORTS[name]}"), name)
