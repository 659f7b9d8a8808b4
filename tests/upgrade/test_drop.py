"""`--drop OLD`: the pure libcst transform (collapse, elif, ternary, retarget, comments, unused
imports) and the branch it writes on a synthetic two-lane fork."""

from __future__ import annotations

import ast
import json

import git
from typer.testing import CliRunner

from porter.cli import app
from porter.upgrade.drop import drop_source
from porter.upgrade.drop_run import guard_versions, selects
from porter.upgrade.lanes import GuardVerdict
from tests.upgrade import two_lane_fixtures as T
from tests.upgrade.upgrade_fixtures import commit_all, write_tree

SOURCE = '''import os
from vllm_ascend.utils import vllm_version_is
from vllm.a import OldThing, Kept  # both

# choose the impl
if vllm_version_is("0.9.1"):
    # old lane
    from vllm.old import old_fn
    X = OldThing()
else:
    # main lane
    from vllm.new import new_fn  # noqa
    X = Kept()


def f(a):
    if vllm_version_is("0.9.1"):
        return old_fn(a)
    elif os.environ.get("Z"):
        return 2
    else:
        return new_fn(a)


def g():
    y = 1 if vllm_version_is("0.9.1") else 2
    if not vllm_version_is("0.9.1"):
        y += 1
    if vllm_version_is("0.9.1"):
        y = 0
    return y


class C:
    if vllm_version_is("0.9.1"):
        def m(self):
            return 1
    else:
        def m(self, extra=None):
            return 2

    def n(self):
        if vllm_version_is("0.10.0"):
            return Kept()
        return 3
'''


def _verdicts(source: str) -> dict[int, GuardVerdict]:
    out = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.If, ast.IfExp)) and "version" in ast.unparse(node.test):
            test = ast.unparse(node.test)
            if "0.10.0" in test:
                out[node.lineno] = GuardVerdict("f.py", node.lineno, node.end_lineno, test, "retarget", "", retarget_to="0.11.0")
            else:
                kept = "body" if test.startswith("not") else "else"
                out[node.lineno] = GuardVerdict("f.py", node.lineno, node.end_lineno, test, "collapse", "", kept=kept)
    return out


def test_drop_transform_keeps_the_live_branch_and_its_comments():
    result = drop_source(SOURCE, "f.py", _verdicts(SOURCE))
    new = result.source
    compile(new, "f.py", "exec")
    assert "0.9.1" not in new and 'vllm_version_is("0.11.0")' in new
    # The kept branch's import joins the header; its code stays, dedented, under the comments.
    assert "from vllm.a import Kept  # both\nfrom vllm.new import new_fn  # noqa\n\n# choose the impl\n# main lane\nX = Kept()" in new
    assert "    if os.environ.get(\"Z\"):\n        return 2\n    else:\n        return new_fn(a)" in new  # elif -> if
    assert "    y = 2\n    y += 1\n    return y" in new  # ternary and `if not` collapsed, dead `if` removed
    assert "def m(self, extra=None)" in new and "def m(self):" not in new
    assert "from vllm.a import Kept  # both" in new and "OldThing" not in new  # only the dead branch used it
    assert "import os" in new and "from vllm_ascend.utils import vllm_version_is" in new  # still used
    actions = [e.action for e in result.edits]
    assert actions.count("collapse") == 6 and actions.count("retarget") == 1 and actions.count("remove_import") == 1


def test_the_version_helper_import_goes_when_no_guard_is_left():
    source = 'from x.utils import vllm_version_is\nif vllm_version_is("1.0"):\n    A = 1\nelse:\n    A = 2\n'
    verdict = GuardVerdict("m.py", 2, 5, 'vllm_version_is("1.0")', "collapse", "", kept="else")
    assert drop_source(source, "m.py", [verdict]).source == "A = 2\n"
    keep = GuardVerdict("m.py", 2, 5, 'vllm_version_is("1.0")', "keep", "")
    assert drop_source(source, "m.py", [keep]).source == source


def test_a_drop_selects_guards_naming_the_dropped_release_or_older():
    guard = lambda test, verdict="collapse": GuardVerdict("m.py", 1, 2, test, verdict, "")  # noqa: E731
    assert guard_versions("vllm_version_is('0.18.0') or v >= (0, 17)") == ["0.18.0", "0.17"]
    assert selects(guard("vllm_version_is('0.18.0')"), "0.18.0") and selects(guard("vllm_version_is('0.9.1')"), "0.18.0")
    assert not selects(guard("vllm_version_is('0.19.0')"), "0.18.0")
    assert not selects(guard("vllm_version_is('0.18.0')", "keep"), "0.18.0")


def test_drop_writes_a_branch_that_compiles(project, tmp_path):
    old = write_tree(tmp_path / "lane-old", T.OLD)
    new = write_tree(tmp_path / "lane-new", T.NEW)
    fork = write_tree(tmp_path / "fork", T.PLUGIN)
    repo = git.Repo.init(fork, initial_branch="main")
    with repo.config_writer() as cw:
        cw.set_value("user", "name", "t")
        cw.set_value("user", "email", "t@example.invalid")
    commit_all(repo, "plugin")
    before = (fork / "myplug" / "lanes.py").read_text()
    args = ["upgrade", "myplug", "--to", "2.0", "--from", "1.0", "--drop", "1.0", "--plugin-path", str(fork),
            "--upstream-path", f"1.0={old}", "--upstream-path", f"2.0={new}", "--json"]
    dry = CliRunner().invoke(app, [*args, "--dry-run"], catch_exceptions=False)
    assert dry.exit_code == 0, dry.output
    plan = json.loads(dry.stdout)["drop"]
    assert plan["files"] == ["myplug/lanes.py", "myplug/typed.py"]
    result = CliRunner().invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    port = json.loads(result.stdout)["port"]
    assert port["branch"] == "ascend-port/upkg-drop-1.0" and port["branch_moved"]
    assert (fork / "myplug" / "lanes.py").read_text() == before and not repo.is_dirty()  # the checkout is untouched
    lanes = repo.git.show(f"{port['branch']}:myplug/lanes.py")
    compile(lanes, "lanes.py", "exec")
    assert 'upkg_version_is("2.0")' in lanes and "old_api" not in lanes and "STALE = 2" in lanes
    assert "from myplug import legacy_path" not in lanes
    assert plan["removed_files"] == ["myplug/legacy_path.py"]  # only the collapsed branch imported it
    assert "myplug/legacy_path.py" not in repo.git.ls_tree("-r", "--name-only", port["branch"]).splitlines()
    pr = repo.git.show(f"{port['branch']}:PR_MATERIAL.md")
    assert "Drop old gates: 4 dead version guard(s) collapsed" in pr and "Bump gates: 1 guard(s) retargeted to 2.0" in pr
    assert "byte-compile" in pr and "Deleted modules only the deleted branches imported: 1." in pr


PREDICATE = '''from vllm_ascend.utils import vllm_version_is
from vllm.x import Y


def f(output):
    if output is None:
        return None

    is_legacy = vllm_version_is("0.10.0")

    if is_legacy:
        a = output.finished_sending
    else:
        kv = output.kv_connector_output
        a = kv.finished_sending
    new = Y()
    if not is_legacy:
        new.kv = kv
    return new


def g(x):
    old = vllm_version_is("0.10.0")
    if old:
        x = 1
    return x, old
'''


def _predicate_verdicts(source: str, broken=frozenset()):
    from packaging.version import Version

    from porter.upgrade.guards import GuardConventions
    from porter.upgrade.lanes import Lanes, guard_verdicts
    from porter.upgrade.usage import scan_source

    usage = scan_source("m.py", source.encode(), ["vllm"], ["vllm_ascend"])
    lanes = Lanes.for_move("vllm", Version("0.10.1"), "0.10.1", Version("0.10.0"))
    verdicts = guard_verdicts(usage.guard_blocks, set(broken), GuardConventions({"vllm_version_is": "vllm"}), lanes)
    return usage, {v.line: v for v in verdicts}


def test_a_version_predicate_is_a_guard_and_goes_with_the_branches_that_read_it():
    usage, verdicts = _predicate_verdicts(PREDICATE)
    # `if is_legacy:` reads as the version test it names; uses under it are dead at the target.
    assert verdicts[11].guard == "vllm_version_is('0.10.0')" and verdicts[11].verdict == "collapse"
    assert verdicts[17].verdict == "collapse" and verdicts[17].kept == "body"
    assert verdicts[9].kind == "assign" and verdicts[9].verdict == "collapse"
    # `old` is also returned: it stays, holding its answer at the target (test_drop_values.py)
    assert verdicts[23].kind == "assign" and (verdicts[23].verdict, verdicts[23].kept) == ("collapse", "value")
    new = drop_source(PREDICATE, "m.py", verdicts.values()).source
    compile(new, "m.py", "exec")
    assert "is_legacy" not in new and "finished_sending = " not in new.replace("kv.finished_sending", "")
    assert "        return None\n\n    kv = output.kv_connector_output\n" in new  # one blank line, as written
    assert '    old = False\n    return x, old' in new  # kept predicate, its guard collapsed
    assert "vllm_version_is" not in new


def test_a_retargeted_guard_on_a_predicate_retargets_the_predicate():
    # The main-lane branch (line 13's else) breaks at the target; the OLD branch resolves there.
    _, verdicts = _predicate_verdicts(PREDICATE, {("m.py", 11, True)})
    assert verdicts[11].verdict == "retarget" and verdicts[9].verdict == "retarget"
    assert verdicts[17].verdict == "retarget"  # it reads the same predicate: collapsing it would run `kv` unbound
    result = drop_source(PREDICATE, "m.py", verdicts.values())
    assert 'is_legacy = vllm_version_is("0.10.1")' in result.source and "    if is_legacy:\n" in result.source
    assert "    if not is_legacy:\n        new.kv = kv" in result.source
    assert [(e.line, e.action) for e in result.edits if e.action == "retarget"] == [(9, "retarget")]


FOLLOW = '''from vllm_ascend.utils import vllm_version_is
from vllm.moe import FusedMoE

if not vllm_version_is("0.15.0"):
    from vllm.moe.runner import DefaultMoERunner

if not vllm_version_is("0.15.0"):
    class AscendMoERunner(DefaultMoERunner):
        pass


class AscendFusedMoE(FusedMoE):
    def __init__(self, x):
        self.x = x
        if not vllm_version_is("0.15.0"):
            self.runner = self._init_runner()
        if not vllm_version_is("0.15.0"):
            self.transform = x

    if not vllm_version_is("0.15.0"):
        def _init_runner(self):
            return AscendMoERunner()

    if not vllm_version_is("0.15.0"):
        def forward(self, h):
            return self.runner.forward(h)
'''


def test_guards_that_read_what_a_retargeted_branch_binds_are_retargeted_with_it():
    from packaging.version import Version

    from porter.upgrade.guards import GuardConventions
    from porter.upgrade.lanes import Lanes, guard_verdicts
    from porter.upgrade.usage import scan_source

    usage = scan_source("moe.py", FOLLOW.encode(), ["vllm"], ["vllm_ascend"])
    lanes = Lanes.for_move("vllm", Version("0.16.0"), "0.16.0", Version("0.15.0"))
    # The main-lane import (line 4's body) does not resolve at 0.16.0; nothing else is known to break.
    verdicts = {v.line: v for v in guard_verdicts(usage.guard_blocks, {("moe.py", 4, False)},
                                                  GuardConventions({"vllm_version_is": "vllm"}), lanes)}
    assert verdicts[4].verdict == "retarget"
    for line in (7, 15, 20, 24):  # class on the import, the runner's factory, its call, its reader
        assert verdicts[line].verdict == "retarget", (line, verdicts[line].reason)
    assert "DefaultMoERunner" in verdicts[7].reason
    assert verdicts[17].verdict == "collapse"  # reads nothing the retargeted branches bind


def test_a_module_the_drop_deletes_gets_no_guard_edits(tmp_path):
    from porter.upgrade.drop_run import plan_drop

    write_tree(tmp_path, {
        "pkg/__init__.py": 'from pkg.utils import vllm_version_is\nif vllm_version_is("1.0"):\n    from pkg import old_patch  # noqa\n',
        "pkg/utils.py": "def vllm_version_is(v):\n    return False\n",
        "pkg/old_patch.py": 'from pkg.utils import vllm_version_is\nif vllm_version_is("1.0"):\n    X = 1\nelse:\n    X = 2\n',
    })
    guards = [GuardVerdict("pkg/__init__.py", 2, 3, 'vllm_version_is("1.0")', "collapse", "", kept="else"),
              GuardVerdict("pkg/old_patch.py", 2, 5, 'vllm_version_is("1.0")', "collapse", "", kept="else")]
    plan = plan_drop(guards, tmp_path, "1.0", "2.0", ["vllm_version_is"])
    assert plan.removed == ("pkg/old_patch.py",) and [r.path for r in plan.results] == ["pkg/__init__.py"]


def test_modules_only_a_deleted_branch_imported_are_orphaned():
    from porter.upgrade.orphans import orphaned

    before = {
        "pkg/__init__.py": "",
        "pkg/patch/__init__.py": ('from pkg.utils import vllm_version_is\nif vllm_version_is("1.0"):\n'
                                  '    from pkg.patch import patch_1_0  # noqa\nfrom pkg.patch import common  # noqa\n'),
        "pkg/patch/patch_1_0/__init__.py": "from . import patch_sampler  # noqa\n",
        "pkg/patch/patch_1_0/patch_sampler.py": "X = 1\n",
        "pkg/patch/common.py": "from pkg.patch.patch_1_0 import patch_sampler as _s  # noqa\n",
        "pkg/patch/other.py": "import importlib\nimportlib.import_module('pkg.patch.loaded_by_name')\n",
        "pkg/patch/loaded_by_name.py": "",
        "pkg/utils.py": "def vllm_version_is(v):\n    return False\n",
        "tests/test_old.py": "",
    }
    after = dict(before)
    after["pkg/patch/__init__.py"] = "from pkg.patch import common  # noqa\n"  # the helper import went as unused
    deleted = {"pkg/patch/__init__.py": [(2, 3)]}
    # common.py still imports patch_1_0.patch_sampler (and with it the package): nothing is orphaned.
    assert orphaned(before, after, deleted) == []
    after["pkg/patch/common.py"] = ""
    gone = ["pkg/patch/patch_1_0/__init__.py", "pkg/patch/patch_1_0/patch_sampler.py"]
    assert orphaned(before, after, deleted) == gone  # pkg/utils.py stays: its import was outside the guard
    # A test that imports the patch keeps it; so does a file that cannot be parsed.
    assert orphaned({**before, "tests/test_old.py": "import pkg.patch.patch_1_0\n"},
                    {**after, "tests/test_old.py": "import pkg.patch.patch_1_0\n"}, deleted) == []
    assert orphaned(before, {**after, "pkg/utils.py": "def (:"}, deleted) == []
    # A plugin scanned from its package directory names its modules with the package's name.
    inner = {k[4:]: v for k, v in before.items() if k.startswith("pkg/")}
    inner_after = {k[4:]: v for k, v in after.items() if k.startswith("pkg/")}
    assert orphaned(inner, inner_after, {"patch/__init__.py": [(2, 3)]}, prefix="pkg") == [g[4:] for g in gone]


HEADER = '''"""doc."""
import torch
from vllm.forward_context import ForwardContext
from vllm.v1.core.sched.output import SchedulerOutput

from vllm_ascend.utils import vllm_version_is, weak_ref_tensors

# isort: off
if vllm_version_is("0.13.0"):
    from vllm.attention.backends.abstract import AttentionBackend  # type: ignore
else:
    from vllm.v1.attention.backend import (  # type: ignore
        AttentionBackend,
    )
    from vllm_ascend.ops import thing
# isort: on


def f():
    if vllm_version_is("0.13.0"):
        from vllm.old import g
    else:
        from vllm.new import g
    return g, AttentionBackend, thing, torch, ForwardContext, SchedulerOutput, weak_ref_tensors
'''


def test_imports_a_module_level_collapse_leaves_join_the_import_header():
    verdicts = [GuardVerdict("a.py", 9, 15, 'vllm_version_is("0.13.0")', "collapse", "", kept="else"),
                GuardVerdict("a.py", 20, 23, 'vllm_version_is("0.13.0")', "collapse", "", kept="else")]
    new = drop_source(HEADER, "a.py", verdicts).source
    compile(new, "a.py", "exec")
    assert new.startswith('"""doc."""\nimport torch\nfrom vllm.forward_context import ForwardContext\n'
                          "from vllm.v1.attention.backend import (  # type: ignore\n    AttentionBackend,\n)\n"
                          "from vllm.v1.core.sched.output import SchedulerOutput\n\n"
                          "from vllm_ascend.ops import thing\nfrom vllm_ascend.utils import weak_ref_tensors\n\n\ndef f():\n")
    assert "isort" not in new  # the fence had nothing left to fence
    assert "    from vllm.new import g\n    return g" in new  # a function's imports stay where they were


PATCH = '''from vllm_ascend.utils import vllm_version_is
from vllm.x import Y

if vllm_version_is("0.17.0"):
    KWARGS = {}
else:
    KWARGS = {"inherited_fds": []}

if not vllm_version_is("0.15.0"):
    STALE = Y


def f(x):
    return x.run(**KWARGS) if vllm_version_is("v0.17.0") else x.run()
'''


def _patch_verdicts(patch_release: bool, broken=frozenset()):
    from packaging.version import Version

    from porter.upgrade.guards import GuardConventions
    from porter.upgrade.lanes import Lanes, guard_verdicts
    from porter.upgrade.usage import scan_source

    usage = scan_source("m.py", PATCH.encode(), ["vllm"], ["vllm_ascend"])
    lanes = Lanes.for_move("vllm", Version("0.17.1"), "0.17.1", Version("0.17.0"))
    lanes = lanes.as_patch_release() if patch_release else lanes
    verdicts = guard_verdicts(usage.guard_blocks, set(broken), GuardConventions({"vllm_version_is": "vllm"}), lanes)
    return {v.line: v for v in verdicts}


def test_a_patch_release_keeps_the_old_release_branch_behind_a_retargeted_guard():
    feature = _patch_verdicts(False)
    assert [feature[n].verdict for n in (4, 9, 14)] == ["collapse", "collapse", "collapse"]
    patch = _patch_verdicts(True)
    assert patch[4].verdict == "retarget" and "patch release" in patch[4].reason
    assert patch[14].verdict == "retarget"  # a ternary naming the release as v0.17.0
    assert patch[9].verdict == "collapse"  # an older release's guard: dead whatever the target
    # The old-release branch itself breaks at the patch release: the target took main's change.
    assert _patch_verdicts(True, {("m.py", 4, False)})[4].verdict == "collapse"
    result = drop_source(PATCH, "m.py", patch.values())
    compile(result.source, "m.py", "exec")
    assert 'if vllm_version_is("0.17.1"):\n    KWARGS = {}' in result.source
    assert 'if vllm_version_is("0.17.1") else x.run()' in result.source and "\nSTALE = Y\n" in result.source


def test_a_patch_release_is_told_from_a_feature_release_by_the_modules_it_changes():
    from porter.upgrade.lanes import is_patch_release

    old = {f"vllm.m{i}": 100 + i for i in range(200)} | {"vllm._version": 10}
    patch = dict(old, **{"vllm.m1": 5, "vllm.m2": 6, "vllm._version": 11})
    assert is_patch_release(old, patch)
    assert is_patch_release(old, dict(patch, **{f"vllm.generated{i}": 1 for i in range(300)}))  # wheel-only modules
    assert not is_patch_release(old, {m: s + 1 for m, s in old.items()})
    assert not is_patch_release(old, {f"other.m{i}": 1 for i in range(200)})


ALIASED = '''from vllm_ascend.utils import vllm_version_is as is_vllm
from vllm.x import Y

if is_vllm("0.10.0"):
    A = 1
else:
    A = Y


def f():
    return 1 if not is_vllm("0.10.0") else 2
'''


def test_a_version_helper_imported_under_another_name_is_a_guard():
    from packaging.version import Version

    from porter.upgrade.guards import GuardConventions
    from porter.upgrade.lanes import Lanes, guard_verdicts
    from porter.upgrade.usage import scan_source

    usage = scan_source("m.py", ALIASED.encode(), ["vllm"], ["vllm_ascend"])
    lanes = Lanes.for_move("vllm", Version("0.10.1"), "0.10.1", Version("0.10.0"))
    conventions = GuardConventions({"vllm_version_is": "vllm"})
    verdicts = {v.line: v for v in guard_verdicts(usage.guard_blocks, set(), conventions, lanes)}
    assert verdicts[4].verdict == "collapse" and verdicts[11].verdict == "collapse"
    result = drop_source(ALIASED, "m.py", verdicts.values())
    assert result.source == "from vllm.x import Y\n\nA = Y\n\n\ndef f():\n    return 1\n"
    # The main-lane branch breaks at the target: the guard is retargeted under its local name.
    verdicts = {v.line: v for v in guard_verdicts(usage.guard_blocks, {("m.py", 4, True)}, conventions, lanes)}
    assert verdicts[4].verdict == "retarget"
    assert 'if is_vllm("0.10.1"):' in drop_source(ALIASED, "m.py", verdicts.values()).source


RELEASE_PATCH_UPSTREAM = {
    "upkg/__init__.py": '__version__ = "{v}"\n',
    "upkg/sched.py": """
        class Scheduler:
            def schedule(self):
                budget = self.budget()
                out = []
                for i in range(budget):
                    if i % 2:
                        out.append(i * {body})
                    else:
                        out.append(i)
                return out

            def budget(self):
                return 4
        """,
    "upkg/engine.py": "{engine}",
}
RELEASE_PATCH_PLUGIN = {
    "myplug/__init__.py": "from myplug import patches\n",
    "myplug/utils.py": "def upkg_version_is(v):\n    return False\n",
    "myplug/patches.py": """
        import os
        from myplug.utils import upkg_version_is

        if os.getenv("BALANCE") and upkg_version_is("1.0"):
            import myplug.patch_balance  # noqa: F401

        if upkg_version_is("1.0"):
            import myplug.patch_engine  # noqa: F401
        """,
    "myplug/patch_balance.py": """
        import upkg.sched
        from upkg.sched import Scheduler


        class BalanceScheduler(Scheduler):
            def schedule(self):
                budget = self.budget()
                out = []
                for i in range(budget):
                    if i % 2:
                        out.append(i * 2)
                    else:
                        out.append(i)
                return out


        upkg.sched.Scheduler = BalanceScheduler
        """,
    "myplug/patch_engine.py": "import upkg.engine\nfrom upkg.engine import step\n\nupkg.engine.step = lambda: step() + 1\n",
}


def test_a_release_only_patch_nothing_upstream_broke_is_retargeted_and_one_that_broke_collapses(project, tmp_path):
    from porter.config import load_config
    from porter.upgrade.analyze import AnalysisRequest, run_analysis

    def upstream(version: str, body: str, engine: str) -> dict[str, str]:
        return {p: t.format(v=version, body=body, engine=engine) for p, t in RELEASE_PATCH_UPSTREAM.items()}

    old = write_tree(tmp_path / "rp-old", upstream("1.0", "2", "def step():\n    return 1\n"))
    # 2.0: the scheduler body moved on (a copied-body sync hint only); the engine's `step` is gone.
    new = write_tree(tmp_path / "rp-new", upstream("2.0", "3", "def run():\n    return 1\n"))
    plugin = write_tree(tmp_path / "rp-plugin", RELEASE_PATCH_PLUGIN)
    report = run_analysis(AnalysisRequest(plugin="myplug", target="2.0", baseline="1.0", plugin_path=plugin,
                                          upstream_paths={"1.0": old, "2.0": new}, config=load_config()))
    verdicts = {g.line: g for g in report.dead_guards if g.path == "myplug/patches.py"}
    assert verdicts[4].verdict == "retarget" and "myplug.patch_balance" in verdicts[4].reason
    assert any(c.detail.get("change") == "copied_body_changed" for c in report.copies)
    assert verdicts[7].verdict == "collapse"  # its patch reads a name 2.0 removed: the release took the change


def test_a_retargeted_guard_naming_two_releases_names_the_new_one_once():
    source = 'from m import vllm_version_is\n\nif vllm_version_is("0.10.1.1") or vllm_version_is("0.10.1"):\n    A = 1\nelse:\n    A = 2\n'
    verdict = GuardVerdict("m.py", 3, 6, "", "retarget", "", retarget_to="0.10.2", kept="else")
    result = drop_source(source, "m.py", [verdict])
    assert 'if vllm_version_is("0.10.2"):\n    A = 1\nelse:\n    A = 2\n' in result.source


def test_a_patch_release_target_is_recognised_from_the_trees(project, tmp_path):
    from porter.config import load_config
    from porter.upgrade.analyze import AnalysisRequest, run_analysis

    filler = {f"upkg/m{i}.py": f"def f{i}():\n    return {i}\n" for i in range(30)}
    files = {p: t.format(v="{v}", body="2", engine="def step():\n    return 1\n") for p, t in RELEASE_PATCH_UPSTREAM.items()}
    old = write_tree(tmp_path / "pp-old", {**filler, **{p: t.replace("{v}", "1.0") for p, t in files.items()}})
    patch = write_tree(tmp_path / "pp-patch", {**filler, **{p: t.replace("{v}", "1.0.1") for p, t in files.items()}})
    plugin = write_tree(tmp_path / "pp-plugin", RELEASE_PATCH_PLUGIN)
    report = run_analysis(AnalysisRequest(plugin="myplug", target="1.0.1", baseline="1.0", plugin_path=plugin,
                                          upstream_paths={"1.0": old, "1.0.1": patch}, config=load_config()))
    verdicts = {g.line: g for g in report.dead_guards if g.path == "myplug/patches.py"}
    assert verdicts[7].verdict == "retarget" and "patch release" in verdicts[7].reason
    assert verdicts[7].retarget_to == "1.0.1"


def test_a_collapsed_ternary_drops_parentheses_an_atom_does_not_need():
    source = ('from m import vllm_version_is\n\n\n@(cache if vllm_version_is("0.10.0") else deco)\ndef f():\n'
              '    return g(**({"a": 1} if vllm_version_is("0.10.0") else {"b": 2}))\n\n\n'
              'X = ("a"\n     "b" if vllm_version_is("0.10.0") else "c"\n     "d")\n'
              'Y = (a + b if vllm_version_is("0.10.0") else a - b) * 2\n')
    lines = [4, 6, 9, 12]
    verdicts = [GuardVerdict("m.py", n, n, "", "collapse", "", kind="ifexp", kept="else") for n in lines]
    result = drop_source(source, "m.py", verdicts)
    compile(result.source, "m.py", "exec")
    assert "@deco\ndef f():\n    return g(**{\"b\": 2})\n" in result.source
    assert 'X = ("c"\n     "d")\n' in result.source and "Y = (a - b) * 2\n" in result.source


def test_an_import_left_short_by_the_drop_is_joined_on_one_line(tmp_path):
    from porter.upgrade.drop_run import formatter_line_length

    source = ('from vllm_ascend.utils import (ACL_FORMAT_FRACTAL_ND, is_enable_nz,\n'
              '                               vllm_version_is)\n'
              'from vllm.a import (b,  # why b\n                   c)\n\n'
              'if vllm_version_is("0.11.0"):\n    X = 1\nelse:\n    X = ACL_FORMAT_FRACTAL_ND + is_enable_nz + b\n')
    verdict = GuardVerdict("m.py", 6, 9, "", "collapse", "", kept="else")
    new = drop_source(source, "m.py", [verdict]).source
    assert new.startswith("from vllm_ascend.utils import ACL_FORMAT_FRACTAL_ND, is_enable_nz\n"
                          "from vllm.a import (b,  # why b\n                   c)\n")  # untouched
    assert "from vllm_ascend.utils import (ACL" in drop_source(source, "m.py", [verdict], line_length=40).source
    (tmp_path / "pyproject.toml").write_text("[tool.ruff]\nline-length = 120\n", encoding="utf-8")
    assert formatter_line_length(tmp_path) == 120 and formatter_line_length(tmp_path / "none") == 79
    # Folders ruff does not format yet keep the old formatter's limit.
    (tmp_path / "pyproject.toml").write_text('[tool.ruff]\nline-length = 120\nexclude = ["tests/**", "pkg/ops"]\n'
                                             '[tool.isort]\nline_length = 80\n', encoding="utf-8")
    assert formatter_line_length(tmp_path, "pkg/ops/rope.py") == 80 and formatter_line_length(tmp_path, "tests/t.py") == 80
    assert formatter_line_length(tmp_path, "pkg/worker.py") == 120 and formatter_line_length(tmp_path, "pkg/opsx.py") == 120


def test_code_a_collapse_moves_left_takes_its_docstrings_and_blank_lines_with_it():
    source = '''from m import vllm_version_is


class A:
    x = 1

    if not vllm_version_is("0.16.0"):

        class Runner:
            """
            Runs things.

              Indented example.
            """

            def go(self):
                """One line."""
                s = """
                data
                """
                return s


def f():
    return 1
'''
    verdict = GuardVerdict("m.py", 7, 22, "", "collapse", "", kept="body")
    new = drop_source(source, "m.py", [verdict]).source
    compile(new, "m.py", "exec")
    assert '    x = 1\n\n    class Runner:\n        """\n        Runs things.\n\n          Indented example.\n        """\n' in new
    assert '            s = """\n                data\n                """\n' in new  # not a docstring: its text stays


def test_a_collapse_whose_kept_branch_returns_removes_the_statements_after_it():
    source = '''from vllm_ascend.utils import vllm_version_is
from vllm.a import New, Old


def f(x):
    for i in x:
        if not vllm_version_is("0.9.1"):
            continue
        print(i)
    if not vllm_version_is("0.9.1"):
        # the new way
        return New(x)
    y = Old(x)
    # the old way
    return y
'''
    verdicts = [GuardVerdict("m.py", 7, 8, "", "collapse", "", kept="body"),
                GuardVerdict("m.py", 10, 12, "", "collapse", "", kept="body")]
    result = drop_source(source, "m.py", verdicts)
    compile(result.source, "m.py", "exec")
    assert result.source == ('from vllm.a import New\n\n\ndef f(x):\n    for i in x:\n        continue\n'
                             '    # the new way\n    return New(x)\n')
    unreachable = [(e.line, e.end_line) for e in result.edits if e.action == "remove_unreachable"]
    assert unreachable == [(9, 9), (13, 15)]
    # The other branch kept: nothing after the `if` is unreachable.
    other = drop_source(source, "m.py", [GuardVerdict("m.py", 10, 12, "", "collapse", "", kept="else")]).source
    assert other.endswith("    y = Old(x)\n    # the old way\n    return y\n") and "New(x)" not in other


def test_removing_the_last_name_of_a_wrapped_import_keeps_the_comment_on_its_comma():
    source = ('from vllm_ascend.utils import vllm_version_is\n'
              'from vllm.a import (Kept,  # noqa: F401\n                    Old)\n'
              'from vllm.b import (\n    K2,  # keep me\n    O2,\n)\n'
              'from vllm.c import (Long_name_kept_one, Another_long_name_kept,  # why\n                    O3)\n\n'
              'if vllm_version_is("0.9.1"):\n    X = Old + O2 + O3\nelse:\n    X = Kept + K2 + Long_name_kept_one + Another_long_name_kept\n')
    verdict = GuardVerdict("m.py", 11, 14, "", "collapse", "", kept="else")
    new = drop_source(source, "m.py", [verdict], line_length=60).source
    compile(new, "m.py", "exec")
    assert new.startswith('from vllm.a import Kept  # noqa: F401\n'
                          'from vllm.b import (\n    K2,  # keep me\n)\n'
                          'from vllm.c import (Long_name_kept_one, Another_long_name_kept,  # why\n'
                          '                    )\n')


UTILS_WITH_PREDICATES = '''import functools

from vllm_ascend.compat import vllm_version_is


@functools.cache
def is_vllm_ge_0_10_1():
    """The new KV API."""
    return not vllm_version_is("0.10.0")


IS_LEGACY = vllm_version_is("0.10.0")


def is_310p():
    return False
'''

READER = '''from vllm_ascend.utils import IS_LEGACY, is_310p, is_vllm_ge_0_10_1
from . import utils


def f(x):
    if is_vllm_ge_0_10_1():
        y = x.kv
    else:
        y = x.old
    z = 1 if IS_LEGACY else 2
    if is_310p():
        z = 0
    return y, z, utils
'''


def test_a_version_predicate_imported_from_another_plugin_module_is_a_guard():
    from packaging.version import Version

    from porter.upgrade.guards import GuardConventions
    from porter.upgrade.lanes import Lanes, guard_verdicts
    from porter.upgrade.usage import resolve_imported_blocks, scan_source

    files = [scan_source("vllm_ascend/utils.py", UTILS_WITH_PREDICATES.encode(), ["vllm"], ["vllm_ascend"]),
             scan_source("vllm_ascend/worker/reader.py", READER.encode(), ["vllm"], ["vllm_ascend"])]
    assert files[0].exports == {"is_vllm_ge_0_10_1()": "not vllm_version_is('0.10.0')", "IS_LEGACY": "vllm_version_is('0.10.0')"}
    blocks = resolve_imported_blocks([b for f in files for b in f.guard_blocks], files)
    reader = {b.line: b for b in blocks if b.path.endswith("reader.py")}
    assert reader[6].source == "not vllm_version_is('0.10.0')" and reader[10].source == "vllm_version_is('0.10.0')"
    assert 11 not in reader  # `is_310p()` returns no version test: not a guard
    lanes = Lanes.for_move("vllm", Version("0.10.1"), "0.10.1", Version("0.10.0"))
    verdicts = {v.line: v for v in guard_verdicts(blocks, set(), GuardConventions({"vllm_version_is": "vllm"}), lanes)
                if v.path.endswith("reader.py")}
    assert verdicts[6].verdict == "collapse" and verdicts[6].kept == "body"
    assert verdicts[10].verdict == "collapse" and verdicts[10].kept == "else"
    new = drop_source(READER, "reader.py", verdicts.values()).source
    compile(new, "reader.py", "exec")
    assert new == ('from vllm_ascend.utils import is_310p\nfrom . import utils\n\n\ndef f(x):\n    y = x.kv\n    z = 2\n'
                   '    if is_310p():\n        z = 0\n    return y, z, utils\n')
    # The same predicate defined in the module that reads it.
    local = UTILS_WITH_PREDICATES + "\n\ndef g(x):\n    if is_vllm_ge_0_10_1():\n        return x.kv\n    return x.old\n"
    own = scan_source("vllm_ascend/utils.py", local.encode(), ["vllm"], ["vllm_ascend"])
    assert any(b.source == "not vllm_version_is('0.10.0')" and b.line == 20 for b in own.guard_blocks)


def test_version_checks_decided_alike_in_both_lanes_are_taken_out_of_an_undecided_test():
    source = '''from vllm_ascend.utils import vllm_version_is
import os


def f(self, x):
    if self.use_mla and not vllm_version_is("0.10.0"):
        x = 1
    if (os.environ.get("A") or vllm_version_is("0.10.0")) and x:
        x = 2
    y = 3 if not(x or vllm_version_is("0.10.0")) else 4
    if x and vllm_version_is("0.10.0"):
        x = 6
    if x or not vllm_version_is("0.10.0"):
        x = 7
    if x and vllm_version_is("0.10.1"):
        x = 8
    return x, y
'''
    usage, verdicts = _predicate_verdicts(source)
    assert verdicts[6].verdict == "collapse" and verdicts[6].kept == "test" and verdicts[6].simplified == "self.use_mla"
    assert verdicts[8].simplified == "os.environ.get('A') and x" and verdicts[10].simplified == "not x"
    assert (verdicts[11].kept, verdicts[13].kept) == ("else", "body")  # decided as a whole
    assert verdicts[15].verdict == "keep"  # the check on the target tells the release lane from main
    new = drop_source(source, "m.py", verdicts.values()).source
    compile(new, "m.py", "exec")
    assert ("    if self.use_mla:\n        x = 1\n    if os.environ.get(\"A\") and x:\n        x = 2\n"
            "    y = 3 if not x else 4\n    x = 7\n    if x and vllm_version_is(\"0.10.1\"):\n") in new


def test_a_guard_deleted_after_the_imports_leaves_the_gap_isort_keeps():
    source = '''from vllm.a import A
from vllm_ascend.utils import vllm_version_is

if vllm_version_is("0.13.0"):
    from vllm.old import B
else:
    from vllm.new import B  # noqa


# a constant
X = A
if vllm_version_is("0.13.0"):
    Y = 1


def f():
    return B
'''
    verdicts = [GuardVerdict("m.py", 4, 7, "", "collapse", "", kept="else"), GuardVerdict("m.py", 12, 13, "", "collapse", "", kept="else")]
    new = drop_source(source, "m.py", verdicts).source
    # The lifted import now ends the header: one blank line before the code below it, as isort and ruff write it.
    assert new == 'from vllm.a import A\nfrom vllm.new import B  # noqa\n\n# a constant\nX = A\n\n\ndef f():\n    return B\n'
    removed = '''from vllm.a import A
from vllm_ascend.utils import vllm_version_is

if vllm_version_is("0.13.0"):
    A.patch()


# a constant
X = A


class C(A):
    pass
'''
    one = drop_source(removed, "m.py", [GuardVerdict("m.py", 4, 5, "", "collapse", "", kept="else")]).source
    assert one == 'from vllm.a import A\n\n# a constant\nX = A\n\n\nclass C(A):\n    pass\n'
    two = drop_source(removed.replace("# a constant\nX = A\n\n\n", ""), "m.py", [GuardVerdict("m.py", 4, 5, "", "collapse", "", kept="else")]).source
    assert two == 'from vllm.a import A\n\n\nclass C(A):\n    pass\n'


def test_a_comment_about_the_version_split_goes_with_the_guard_it_explains():
    source = ('from vllm_ascend.utils import vllm_version_is\n\n# Import specific patches for different versions\n'
              'if vllm_version_is("0.10.0"):\n    from m import patch_0_10_0  # noqa: F401\nelse:\n    from m import patch_main  # noqa: F401\n\n'
              '# the fast path\nif vllm_version_is("0.10.0"):\n    Y = 1\nelse:\n    Y = 2\n')
    verdicts = [GuardVerdict("m.py", 4, 7, "", "collapse", "", kept="else"), GuardVerdict("m.py", 10, 13, "", "collapse", "", kept="else")]
    new = drop_source(source, "m.py", verdicts).source
    assert new == "from m import patch_main  # noqa: F401\n\n# the fast path\nY = 2\n"


def test_comments_that_ask_for_work_once_the_release_is_dropped_are_left_for_a_human():
    from porter.upgrade.drop_run import drop_notes

    source = ('class A:\n    @property\n    def expert_map(self):\n'
              '        # TODO(x): Remove this once we drop vllm v0.12.0 (backward compatibility)\n        return 1\n'
              '    # works on 0.12.0 and newer\n    x = "# remove 0.12.0"\n    # drop after 0.12.01\n')
    assert drop_notes("m.py", source, "0.12.0") == ["m.py:4: TODO(x): Remove this once we drop vllm v0.12.0 (backward compatibility)"]
    assert drop_notes("m.py", source, "0.13.0") == []


def test_imports_a_kept_branch_starts_with_join_the_header_from_anywhere_in_the_module():
    source = ('import torch\nfrom vllm.logger import init_logger\nfrom vllm.utils import GiB\n\n'
              'from vllm_ascend.utils import vllm_version_is\n\nlogger = init_logger(__name__)\n\n\n'
              'def create_weights(self):\n    return GiB\n\n\n# install the patch\n'
              'if not vllm_version_is("0.10.2"):\n    from vllm.model_executor.layers.linear import Linear\n'
              '    from vllm_ascend.ops import helper  # noqa: F401\n    Linear.create_weights = create_weights\n')
    new = drop_source(source, "vllm_ascend/patch.py", [GuardVerdict("vllm_ascend/patch.py", 15, 18, "", "collapse", "", kept="body")]).source
    compile(new, "patch.py", "exec")
    assert new == ('import torch\nfrom vllm.logger import init_logger\nfrom vllm.model_executor.layers.linear import Linear\n'
                   'from vllm.utils import GiB\n\nlogger = init_logger(__name__)\n\n\n'
                   'def create_weights(self):\n    return GiB\n\n\n# install the patch\n'
                   'from vllm_ascend.ops import helper  # noqa: F401\nLinear.create_weights = create_weights\n')


def test_a_lifted_import_of_a_module_the_header_imports_joins_that_statement():
    source = ('import torch\nfrom vllm.v1.kv_cache_interface import (AttentionSpec, FullAttentionSpec,\n'
              '                                        KVCacheSpec, MambaSpec)\n'
              'from vllm.v1.outputs import EMPTY_OUTPUT, Output\nfrom vllm.x import Y\n\n'
              'from vllm_ascend.utils import vllm_version_is\n\nA = 1\n\n'
              'if not vllm_version_is("0.10.2"):\n    from vllm.v1.kv_cache_interface import UniformSpecs\n'
              '    from vllm.v1.outputs import PoolerOutput\n    from vllm.x import Z  # noqa: F401\n'
              'else:\n    from vllm.sequence import PoolerOutput\n    UniformSpecs = None\n\n\n'
              'def f():\n    return (UniformSpecs, PoolerOutput, Y, torch, AttentionSpec, FullAttentionSpec, KVCacheSpec,\n'
              '            MambaSpec, EMPTY_OUTPUT, Output)\n')
    new = drop_source(source, "vllm_ascend/m.py", [GuardVerdict("m.py", 11, 17, "", "collapse", "", kept="body")],
                      line_length=80).source
    compile(new, "m.py", "exec")
    assert new.startswith('import torch\nfrom vllm.v1.kv_cache_interface import (AttentionSpec, FullAttentionSpec,\n'
                          '                                        KVCacheSpec, MambaSpec, UniformSpecs)\n'
                          'from vllm.v1.outputs import EMPTY_OUTPUT, Output, PoolerOutput\n'
                          'from vllm.x import Y\nfrom vllm.x import Z  # noqa: F401\n\nA = 1\n\n\ndef f():\n')


def test_a_file_that_starts_with_a_byte_order_mark_is_dropped_and_keeps_the_mark(tmp_path):
    from porter.upgrade.drop_run import plan_drop

    body = ('from pkg.utils import vllm_version_is\n\n\ndef f(x):\n    if vllm_version_is(\'1.0\'):\n        return x\n'
            '    else:\n        return -x\n')
    write_tree(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/utils.py": "def vllm_version_is(v):\n    return False\n",
        "pkg/old_patch.py": "X = 1\n",
        "pkg/patch.py": 'from pkg.utils import vllm_version_is\nif vllm_version_is("1.0"):\n    from pkg import old_patch  # noqa\n',
    })
    (tmp_path / "pkg" / "proposer.py").write_text("\ufeff" + body, encoding="utf-8")  # as vllm-ascend's mtp_proposer.py
    guards = [GuardVerdict("pkg/proposer.py", 5, 8, "vllm_version_is('1.0')", "retarget", "", retarget_to="1.0.1"),
              GuardVerdict("pkg/patch.py", 2, 3, 'vllm_version_is("1.0")', "collapse", "", kept="else")]
    plan = plan_drop(guards, tmp_path, "1.0", "1.0.1", ["vllm_version_is"])
    assert plan.skipped == ()
    written = {r.path: r.source for r in plan.results}
    assert written["pkg/proposer.py"] == "\ufeff" + body.replace("'1.0'", "'1.0.1'")
    compile(written["pkg/proposer.py"].encode("utf-8"), "proposer.py", "exec")
    # A byte-order mark in another file no longer hides every import from the orphan check.
    assert plan.removed == ("pkg/old_patch.py",)


PATCH_PACKAGE = '''import os

import vllm_ascend.patch.platform.patch_distributed  # noqa
import vllm_ascend.patch.platform.patch_mamba_config  # noqa
from vllm_ascend.utils import vllm_version_is

if os.getenv("EPLB") == "true":
    import vllm_ascend.patch.platform.patch_multiproc_executor  # noqa

if vllm_version_is("0.12.0"):
    import vllm_ascend.patch.platform.patch_ec_connector012  # noqa
else:
    import vllm_ascend.patch.platform.patch_ec_connector  # noqa
'''


def test_a_plain_import_a_collapse_leaves_below_only_imports_joins_the_header_in_isort_order():
    guard = GuardVerdict("vllm_ascend/patch/platform/__init__.py", 10, 13, "", "collapse", "", kept="else")
    new = drop_source(PATCH_PACKAGE, guard.path, [guard]).source
    # As the maintainers' "Drop 0.12.0 support" wrote it (isort: `import a` lines first, by module).
    assert new == ('import os\n\nimport vllm_ascend.patch.platform.patch_distributed  # noqa\n'
                   'import vllm_ascend.patch.platform.patch_ec_connector  # noqa\n'
                   'import vllm_ascend.patch.platform.patch_mamba_config  # noqa\n\n'
                   'if os.getenv("EPLB") == "true":\n    import vllm_ascend.patch.platform.patch_multiproc_executor  # noqa\n')
    # Below code the module defines, an import of the plugin's own package stays where the guard was.
    with_code = PATCH_PACKAGE.replace('if os.getenv("EPLB") == "true":\n', 'FLAG = os.getenv("EPLB")\nif FLAG == "true":\n')
    guard = GuardVerdict(guard.path, 11, 14, "", "collapse", "", kept="else")
    kept = drop_source(with_code, guard.path, [guard]).source
    assert kept.endswith('    import vllm_ascend.patch.platform.patch_multiproc_executor  # noqa\n\n'
                         'import vllm_ascend.patch.platform.patch_ec_connector  # noqa\n')
    # A `from` import of another package joins after that package's plain imports.
    source = ('import torch\nimport vllm.envs\nfrom vllm.config import A\n\nfrom m.utils import vllm_version_is\n\n'
              'if not vllm_version_is("1.0"):\n    from vllm.b import B\n    import vllm.a\n\n\ndef f():\n    return A, B, vllm.a, torch\n')
    new = drop_source(source, "m/x.py", [GuardVerdict("m/x.py", 7, 9, "", "collapse", "", kept="body")]).source
    compile(new, "x.py", "exec")
    assert new == ('import torch\nimport vllm.a\nimport vllm.envs\nfrom vllm.b import B\nfrom vllm.config import A\n\n\n'
                   'def f():\n    return A, B, vllm.a, torch\n')


def _module_verdicts(path: str, source: str):
    from packaging.version import Version

    from porter.upgrade.guards import GuardConventions
    from porter.upgrade.lanes import Lanes, guard_verdicts
    from porter.upgrade.usage import scan_source

    usage = scan_source(path, source.encode(), ["vllm"], ["vllm_ascend"])
    lanes = Lanes.for_move("vllm", Version("0.10.1"), "0.10.1", Version("0.10.0"))
    return guard_verdicts(usage.guard_blocks, set(), GuardConventions({"vllm_version_is": "vllm"}), lanes)


def test_a_predicate_nothing_reads_after_the_drop_goes_even_when_the_module_reads_no_other_name():
    # The module's only reads were the predicate and the helper: no name is read afterwards, which
    # once counted as "could not tell" and kept the predicate and its import.
    source = 'from vllm_ascend.utils import vllm_version_is\nLEGACY = vllm_version_is("0.10.0")\nA = 1 if LEGACY else 2\n'
    assert drop_source(source, "m.py", _module_verdicts("m.py", source)).source == "A = 2\n"


PREDICATE_FUNCTION = '''from vllm_ascend.utils import vllm_version_is


def is_legacy():
    """The release lane still runs the old loader."""
    return vllm_version_is("0.10.0")


def load():
    if is_legacy():
        return "old"
    return "new"
'''


def test_a_predicate_function_whose_callers_all_collapse_goes_unless_another_module_names_it(tmp_path):
    from porter.upgrade.drop_run import plan_drop

    verdicts = _module_verdicts("vllm_ascend/loader.py", PREDICATE_FUNCTION)
    assert [(v.line, v.verdict) for v in verdicts] == [(10, "collapse")]
    root = tmp_path / "plugin"
    write_tree(root, {"vllm_ascend/__init__.py": "", "vllm_ascend/loader.py": PREDICATE_FUNCTION,
                      "vllm_ascend/other.py": "X = 1\n"})
    plan = plan_drop(verdicts, root, "0.10.0", "0.10.1", ["vllm_version_is"])
    (result,) = plan.results
    assert result.source == 'def load():\n    return "new"\n'
    assert {(e.action, e.kept) for e in result.edits} >= {("collapse", "predicate"), ("remove_import", "")}
    # Another module imports the helper: it stays (and so does the import it needs).
    (root / "vllm_ascend/other.py").write_text("from vllm_ascend.loader import is_legacy\n")
    (result,) = plan_drop(verdicts, root, "0.10.0", "0.10.1", ["vllm_version_is"]).results
    assert "def is_legacy():" in result.source and "from vllm_ascend.utils import vllm_version_is" in result.source
    assert 'return "new"' in result.source and "if is_legacy()" not in result.source


RELEASE_ONLY_INIT_PATCH = '''from vllm.model import Net
from vllm.layers import Linear

from vllm_ascend.utils import vllm_version_is


class AscendNet(Net):
    def forward(self, x):
        return x


_original_init = Net.__init__
_REGISTRY = {}


def _patched_init(self, *args, **kwargs) -> None:
    _original_init(self, *args, **kwargs)
    self.proj = Linear(kwargs.get("size"))


def _still_used():
    return 1


Net.forward = AscendNet.forward
Net.size = _still_used()
_REGISTRY["net"] = AscendNet
if vllm_version_is("0.10.0"):
    Net.__init__ = _patched_init
'''


def test_private_definitions_only_a_collapsed_branch_used_go_with_it(tmp_path):
    from porter.upgrade.drop_run import plan_drop, pr_summary

    path = "vllm_ascend/patch_net.py"
    verdicts = _module_verdicts(path, RELEASE_ONLY_INIT_PATCH)
    assert [(v.line, v.verdict, v.kept) for v in verdicts] == [(28, "collapse", "else")]
    # Another patch module with its own `_original_init` says nothing about this one's.
    root = write_tree(tmp_path / "plugin", {"vllm_ascend/__init__.py": "", path: RELEASE_ONLY_INIT_PATCH,
                                            "vllm_ascend/patch_other.py": "_original_init = object.__init__\n"})
    plan = plan_drop(verdicts, root, "0.10.0", "0.10.1", ["vllm_version_is"])
    (result,) = plan.results
    new = result.source
    compile(new, path, "exec")
    # The guarded install went, then the patched __init__ it installed, then the original it wrapped,
    # then the import only that one read; what other code still reads stays.
    assert "_patched_init" not in new and "_original_init" not in new and "Linear" not in new
    assert "vllm_version_is" not in new
    assert "def _still_used():" in new and "_REGISTRY = {}" in new and "Net.forward = AscendNet.forward" in new
    assert "        return x\n\n\n_REGISTRY = {}\n\n\ndef _still_used" in new
    assert new.endswith('\n\n\ndef _still_used():\n    return 1\n\n\nNet.forward = AscendNet.forward\nNet.size = _still_used()\n'
                        '_REGISTRY["net"] = AscendNet\n')
    assert sorted(e.guard for e in result.edits if e.action == "remove_dead") == [
        "_original_init = Net.__init__", "def _patched_init"]
    assert any("Removed private definitions only the deleted branches used: 2." in line for line in pr_summary(plan, "vllm"))
    # Another module imports the private original: it stays, and so does what it reads.
    (root / "vllm_ascend/other.py").write_text("from vllm_ascend.patch_net import _original_init\n")
    (result,) = plan_drop(verdicts, root, "0.10.0", "0.10.1", ["vllm_version_is"]).results
    assert "_original_init = Net.__init__" in result.source and "def _patched_init" not in result.source
