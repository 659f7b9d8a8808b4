"""A full port run on the bundled example: branch, commits with trailers, PR material, validation,
ledger, re-runs, and the user's checkout left untouched."""

from __future__ import annotations

import os
import subprocess

import yaml

from tests.port.helpers import git, snapshot
from porter.port.shim_port import run_port
from porter.upgrade.models import Outcome


def test_full_run_branch_commits_pr_material(example, request_for, tmp_path):
    forks_file = tmp_path / "forks" / "forks.yaml"
    forks_file.parent.mkdir()
    forks_file.write_text(yaml.safe_dump({"schema": 1, "forks": {"example-plugin": {
        "plugin": "example-plugin", "path": str(example["plugin"]), "baseline": {"hostlib": "v1"}}}}))
    before = snapshot(example["plugin"])
    result = run_port(request_for(plugin_tests=("tests/test_plugin.py",), forks_file=forks_file), example["analyze"])

    assert result.branch == "ascend-port/hostlib-v2" and result.branch_moved
    assert result.outcome.outcome is Outcome.C_PATCH
    assert result.needs_human == ("F1:hostlib.layers.moe.legacy_router",)
    assert len(result.bridged) == 7 and result.total == 8
    verdicts = {c["name"]: c["verdict"] for c in result.validation["checks"]}
    assert verdicts == {"byte-compile": "pass", "residual drift": "pass", "imports at the target": "pass",
                        "generated shim tests": "pass", "plugin tests vs hostlib v1": "pass",
                        "plugin tests vs hostlib v2": "pass"}
    # Every touched plugin module was imported against the hostlib v2 tree, not against a stub.
    smoke = result.imports_at_target
    assert smoke["verdict"] == "yes" and smoke["mode"] == "hostlib v2 source tree"
    assert {"tiny_npu.spec", "tiny_npu.moe"} <= set(smoke["modules"])
    # Only the new branch ref (and its reflog) appeared in the user's repository.
    after = snapshot(example["plugin"])
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    assert changed == {".git/refs/heads/ascend-port/hostlib-v2", ".git/logs/refs/heads/ascend-port/hostlib-v2"}
    assert "porter-" not in git(example["plugin"], "worktree", "list")

    log = git(example["plugin"], "log", "--format=%s%x1f%(trailers:only,unfold)%x1e", "main..ascend-port/hostlib-v2")
    entries = [e.strip() for e in log.split("\x1e") if e.strip()]
    assert len(entries) == len(result.commits) + 1
    for entry in entries:
        subject, trailers = entry.split("\x1f")
        for key in ("Porter-Drift-Family:", "Porter-Symbol:", "Upstream-Ref: hostlib v2", f"Porter-Run: {result.run_id}"):
            assert key in trailers, (subject, key)
    pr = git(example["plugin"], "show", "ascend-port/hostlib-v2:PR_MATERIAL.md")
    for heading in ("## Summary", "## Outcome", "## Per-fix rationale", "## Needs a human", "## Diff stat", "## Reproducer",
                    "## Validation", "## Known limitations", "## Notes for the maintainer"):
        assert f"\n{heading}\n" in pr, heading
    assert "**C_PATCH**" in pr and "legacy_router" in pr
    import re

    assert re.search(r"- Outcome \*\*C_PATCH\*\*: \d+ of \d+ finding\(s\) bridged, \d+ need a human", pr)
    diff_stat = pr.split("\n## Diff stat\n")[1].split("\n## ")[0]
    assert re.search(r"\d+ file\(s\) changed, \+\d+/-\d+\. Plugin files that existed before .*`tiny_npu/\w+\.py` \(\+\d+/-\d+\)",
                     diff_stat)
    # Each finding once: a bridged one in its commit's section (with its size and upstream link), a
    # handed-off one under "Needs a human"; no table repeating all of them.
    needs_human = pr.split("\n## Needs a human\n")[1].split("\n## ")[0]
    assert "`F1:hostlib.layers.moe.legacy_router` (" in needs_human and needs_human.count("\n- ") == 1
    assert "## Drift summary" not in pr and "## Commit sequence" not in pr
    # A stub commit names what it leaves to a human, but its reason is given once, under Needs a
    # human; the commit message keeps the whole story.
    per_fix = pr.split("\n## Per-fix rationale\n")[1].split("\n## ")[0]
    stub = "keeps the plugin importable with a stub"
    assert "leaves `legacy_router` to a human" in per_fix and stub not in per_fix
    assert stub in needs_human and pr.count(stub) == 1
    open(os.environ["PORTER_DUMP_PR"], "w").write(pr) if os.environ.get("PORTER_DUMP_PR") else None
    stub_commit = next(c for c in result.commits if "hostlib.layers.moe.legacy_router" in c.symbols)
    assert "TODO for a human: `hostlib.layers.moe.legacy_router`: removed" in git(
        example["plugin"], "log", "-1", "--format=%B", stub_commit.sha)
    # The Outcome section gives the analysis' reasons, not the counts the summary already has.
    outcome = pr.split("\n## Outcome\n")[1].split("\n## ")[0]
    assert "bridged" not in outcome and "need a human" not in outcome
    first = result.commits[0]
    # The commit's line carries its size and the upstream code it follows (no separate "Upstream:" line).
    assert re.search(rf"\n1\. \*\*.+\*\* \(`{first.sha[:12]}`, \+\d+/-\d+ in \d+ file\(s\); upstream `hostlib/", pr)
    assert "- Upstream:" not in pr
    # The analysis re-ran on the new branch and found nothing left at the target (the one hand-off
    # is a removal porter stubbed, which no longer breaks the import).
    residual = next(c for c in result.validation["checks"] if c["name"] == "residual drift")
    assert residual["detail"] == "no breakage left at the target" and result.validation["residual"] == []
    # Ledger beside the (temporary) forks.yaml.
    from porter.registry import load_forks

    ledger = load_forks(forks_file)["example-plugin"].ledger
    assert ledger[-1].run_id == result.run_id and ledger[-1].outcome == "C_PATCH"
    assert (tmp_path / "runs" / "upgrade" / result.run_id / "run.json").is_file()


def test_rerun_updates_branch_and_says_what_changed(example, request_for):
    first = run_port(request_for(), example["analyze"])
    # Maintainers fix the moved import themselves on main; the next run no longer needs that shim.
    spec = example["plugin"] / "tiny_npu" / "spec.py"
    spec.write_text(spec.read_text().replace(
        "from hostlib.spec.eagle import Proposer",
        "try:\n    from hostlib.spec.base_proposer import Proposer\nexcept ImportError:\n    from hostlib.spec.eagle import Proposer"))
    git(example["plugin"], "commit", "-qam", "adapt Proposer by hand")
    second = run_port(request_for(), example["analyze"])
    assert second.previous_sha == first.tip and second.branch_moved
    assert second.changes["dropped"] == ["hostlib.spec.eagle.Proposer"]
    assert "hostlib.utils.make_buffer" in second.changes["kept"]
    assert git(example["plugin"], "rev-parse", "ascend-port/hostlib-v2").strip() == second.tip
    pr = git(example["plugin"], "show", "ascend-port/hostlib-v2:PR_MATERIAL.md")
    assert "## Changes since the previous run" in pr and "No longer needed: `hostlib.spec.eagle.Proposer`" in pr
    # Same inputs again: same files, so the tree diff against the previous tip is empty.
    third = run_port(request_for(), example["analyze"])
    assert third.changes["added"] == [] and third.changes["dropped"] == []
    assert third.changes["tree_stat"] == ""


def test_nothing_to_port_makes_no_branch(example, request_for):
    from porter.port.plan import PortAnalysis

    result = run_port(request_for(), lambda path: PortAnalysis(records=()))
    assert not result.branch_moved and result.exit_code == 0
    assert "nothing to port" in result.message
    assert git(example["plugin"], "branch", "--list", "ascend-port/*").strip() == ""


def test_version_gates_are_counted_for_the_pr_material(tmp_path):
    from porter.port.pr_material import version_gates

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text('if vllm_version_is("0.11.0"):\n    pass\nx = vllm_version_is(\'0.9.1\')\n'
                                           'if vllm_version_is("0.11.0") and y:\n    pass\n')
    gates = version_gates(tmp_path, "pkg.utils.vllm_version_is", "pkg")
    assert gates == [{"version": "0.11.0", "count": 2, "sites": ["pkg/a.py:1", "pkg/a.py:4"]},
                     {"version": "0.9.1", "count": 1, "sites": ["pkg/a.py:3"]}]
    assert version_gates(tmp_path, None, "pkg") == []


def test_push_only_when_asked(example, request_for, tmp_path):
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    run_port(request_for(remote=str(remote)), example["analyze"])
    assert git(remote, "branch", "--list").strip() == ""  # not pushed without push=True
    result = run_port(request_for(remote=str(remote), push=True), example["analyze"])
    assert git(remote, "rev-parse", "ascend-port/hostlib-v2").strip() == result.tip


def test_version_guard_pr_material_claims_only_what_was_validated(example, request_for):
    result = run_port(request_for(convention_hint={"shim_style": "version_guard",
                                                   "guard_function": "tiny_npu.utils.hostlib_version_is"}),
                      example["analyze"])
    assert result.branch_moved
    pr = git(example["plugin"], "show", "ascend-port/hostlib-v2:PR_MATERIAL.md")
    assert "anything between" not in pr
    assert "Validated at v1 and v2 only; any other version takes the v2 path" in pr


def test_needs_a_human_is_one_line_per_item():
    """The hand-off list is a tight Markdown list: one line per group, so PR_MATERIAL.md stays in
    proportion to the change (a blank line per item doubled it on real ports)."""
    from porter.shims.render import BUILTIN_DIRS, _environment

    source = next(d / "pr_material.md.j2" for d in BUILTIN_DIRS if (d / "pr_material.md.j2").is_file()).read_text()
    block = source[source.index("{% for item in human_groups %}\n- "):]
    block = block[:block.index("{% endfor %}") + len("{% endfor %}")]
    items = [{"key": f"F{i}:a.b", "weight": "breaking", "sites": f"x.py:{i}", "reason": "moved", "detail": "",
              "link": f"a/b.py:{i}"} for i in range(2)] + \
        [{"key": "F9:a.c", "weight": "risky", "sites": "", "reason": "gone", "detail": "`c`: passes x", "link": ""}]
    text = _environment(None).from_string(block).render(human_groups=items)
    assert text.splitlines() == [
        "- `F0:a.b` (breaking) at x.py:0: moved (`a/b.py:0`)", "- `F1:a.b` (breaking) at x.py:1: moved (`a/b.py:1`)",
        "- `F9:a.c` (risky): gone — `c`: passes x"]


def _item(key, reason="a class member moved or went away", weight="breaking", sites=(), link="", detail=""):
    return {"key": key, "reason": reason, "weight": weight, "sites": list(sites), "link": link, "detail": detail}


def test_hand_offs_of_one_class_for_one_reason_share_a_line_with_sites_folded():
    from porter.port.pr_material import group_hand_offs

    groups = group_hand_offs([
        _item("F1:a.m.Cls.gate", sites=["p/x.py:1", "p/x.py:7", "p/y.py:2"], link="a/m.py@1:3"),
        _item("F1:a.m.Cls.reduce", sites=["p/x.py:1", "p/x.py:9"], link="a/m.py@1:9"),
        _item("F1:a.m.Cls.other", reason="its signature changed"), _item("F1:a.m.Other.gate"), _item("F3:a.m.f")])
    assert [g["key"] for g in groups] == ["F1:a.m.Cls.{gate,reduce}", "F1:a.m.Cls.other", "F1:a.m.Other.gate", "F3:a.m.f"]
    # Sites and links folded per file, each line number once: `file:line, line; file:line`.
    assert groups[0]["sites"] == "p/x.py:1, 7, 9; p/y.py:2" and groups[0]["link"] == "a/m.py@1:3, 9"
    assert groups[0]["count"] == 2 and groups[1]["reason"] == "its signature changed"


def test_hand_off_details_stay_beside_their_member_and_real_breaks_rank_first():
    from porter.port.pr_material import group_hand_offs

    passes = "the override must handle a new parameter"
    groups = group_hand_offs([
        _item("F10:a.base.Base", reason="review the MRO", weight="risky"),
        _item("F3:a.r.Runner.load", reason=passes, detail="dummy=True at a/r.py@2:5"),
        _item("F3:a.r.Runner.init", reason=passes, detail="flag=x at a/r.py@2:9"),
        _item("F1:a.gone.helper", reason="removed, stubbed"),
        _item("F11:a.p.Patched.hook", reason="the monkeypatch target is gone"),
        _item("F2:a.moved.Thing", reason="moved", weight="import fails"),
    ])
    assert [g["key"] for g in groups] == ["F2:a.moved.Thing", "F11:a.p.Patched.hook", "F1:a.gone.helper",
                                          "F3:a.r.Runner.{load,init}", "F10:a.base.Base"]
    runner = groups[3]
    assert runner["reason"] == passes and runner["detail"] == "`load`: dummy=True at a/r.py@2:5; `init`: flag=x at a/r.py@2:9"


def test_fold_refs_caps_files_and_lines():
    from porter.port.pr_material import fold_refs

    refs = [f"a.py:{n}" for n in range(1, 10)] + ["b.py:1", "c.py:2", "d.py:3", "d.py:4", "e.py"]
    assert fold_refs(refs, files=3, lines=3) == "a.py:1, 2, 3; b.py:1; c.py:2 (+9 more)"
    assert fold_refs(["v/x.py@0.18.0:386", "v/x.py@0.18.0:1481", "v/y.py@0.22.1:5"]) == "v/x.py@0.18.0:386, 1481; v/y.py@0.22.1:5"
    assert fold_refs([]) == ""


def test_diff_stat_comes_from_numstat(tmp_path):
    """The Diff stat paragraph is built from `git diff --numstat` records, not from parsing `--stat` text
    (a path with ` | ` in it, a binary file and a new file all come out right)."""
    from porter.port.pr_material import compact_diff_stat
    from porter.port.worktree import FileChange, diff_numstat

    git(tmp_path, "init", "-q")
    (tmp_path / "a | b.py").write_text("x = 1\ny = 2\n")
    (tmp_path / "blob.bin").write_bytes(b"\0\1")
    git(tmp_path, "add", "-A")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    base = git(tmp_path, "rev-parse", "HEAD").strip()
    (tmp_path / "a | b.py").write_text("x = 1\ny = 3\nz = 4\n")
    (tmp_path / "blob.bin").write_bytes(b"\0\2\3")
    (tmp_path / "new.py").write_text("n = 1\n")
    git(tmp_path, "add", "-A")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "tip")
    changes = diff_numstat(tmp_path, base, "HEAD")
    assert sorted(changes, key=lambda c: c.path) == [FileChange("a | b.py", 2, 1, False), FileChange("blob.bin", 0, 0, False),
                                                     FileChange("new.py", 1, 0, True)]
    edited, total = compact_diff_stat(changes)
    assert total == "3 file(s) changed, +3/-1"
    assert sorted(edited) == ["`a | b.py` (+2/-1)", "`blob.bin` (+0/-0)"]
    assert compact_diff_stat(()) == ([], "")


def test_risky_hand_offs_share_a_line_per_reason_with_their_own_sites():
    """Latent findings (risky) of one family and reason share a line across classes; each class keeps
    its sites beside it, so the line still says where to look."""
    from porter.port.pr_material import group_hand_offs

    mro = "the base class of a plugin subclass changed: review the MRO"
    groups = group_hand_offs([
        _item("F10:a.x.FusedMoE", reason=mro, weight="risky", sites=["p/m.py:114", "p/o.py:287"], link="a/x.py@1:276"),
        _item("F10:a.y.Logits", reason=mro, weight="risky", sites=["p/v.py:241"], link="a/y.py@1:19"),
        _item("F10:a.z.Embedding", reason=mro, weight="breaking", sites=["p/v.py:43"]),
        _item("F4:a.x.f", reason="the return shape changed", weight="risky"),
    ])
    assert [g["key"] for g in groups] == ["F10:a.z.Embedding", "F4:a.x.f", "F10:{a.x.FusedMoE,a.y.Logits}"]
    latent = groups[2]
    assert latent["sites"] == "" and latent["detail"] == "`FusedMoE` at p/m.py:114; p/o.py:287; `Logits` at p/v.py:241"
    assert latent["link"] == "a/x.py@1:276; a/y.py@1:19"


def test_one_finding_left_for_several_members_keeps_every_detail():
    from porter.shims.model import ShimPlan, Unhandled
    from porter.upgrade.models import DriftFamily, DriftRecord, Location

    record = DriftRecord(DriftFamily.NEW_ATTRIBUTE, "up.m.Batch", Location("up.m", "Batch"), ())
    reason = "uses a new required attribute as a value: set it by hand"
    plan = ShimPlan((), (Unhandled(record, reason, "`B.a`, used at x.py@2:1"), Unhandled(record, reason, "`B.b`, used at x.py@2:5")))
    (left,) = plan.hand_offs
    assert left.reason == reason and left.detail == "`B.a`, used at x.py@2:1; `B.b`, used at x.py@2:5"
