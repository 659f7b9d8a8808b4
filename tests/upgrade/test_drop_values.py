"""Version tests used as values (a keyword argument, a comprehension filter, a method's return, a
predicate also read as a value): each gets a verdict, and the drop writes the answer in its place."""

from __future__ import annotations

from packaging.version import Version

from porter.upgrade.drop import drop_source
from porter.upgrade.drop_run import plan_drop
from porter.upgrade.guards import GuardConventions
from porter.upgrade.lanes import Lanes, guard_verdicts
from porter.upgrade.usage import scan_source
from tests.upgrade.upgrade_fixtures import write_tree

CONVENTIONS = GuardConventions({"vllm_version_is": "vllm"})

VALUES = '''from vllm_ascend.utils import vllm_version_is
from vllm.layers import Runner

LEGACY = vllm_version_is("0.10.0")


def build(items, layer):
    kept = [i for i in items if not vllm_version_is("0.10.0")]
    runner = Runner(layer, legacy=vllm_version_is("0.10.0"), newer=vllm_version_is("0.11.0"))
    if LEGACY:
        runner.patch()
    return kept, runner, LEGACY


class Helper:
    def legacy(self):
        return vllm_version_is("0.10.0")
'''


def _verdicts(source: str, lanes: Lanes, path: str = "vllm_ascend/m.py"):
    usage = scan_source(path, source.encode(), ["vllm"], ["vllm_ascend"])
    return guard_verdicts(usage.guard_blocks, set(), CONVENTIONS, lanes)


def _feature_lanes() -> Lanes:
    return Lanes.for_move("vllm", Version("0.10.1"), "0.10.1", Version("0.10.0"))


def test_a_version_test_used_as_a_value_gets_a_verdict():
    verdicts = {(v.line, v.guard): v for v in _verdicts(VALUES, _feature_lanes())}
    wanted = {(4, "assign"), (8, "value"), (9, "value"), (17, "value")}
    assert wanted <= {(line, v.kind) for (line, _), v in verdicts.items()}
    for (line, guard), v in verdicts.items():
        if v.kind in ("value", "assign"):
            # dead at 0.10.1 and at main alike: the answer (False) is known for both lanes
            assert (v.verdict, v.kept, v.value_at_target) == ("collapse", "value", False), (line, guard, v)
    # The version predicate is also read as a value (returned): its guard collapses, it gets its answer.
    assert verdicts[(10, "vllm_version_is('0.10.0')")].verdict == "collapse"


def test_the_drop_writes_the_answer_in_place_of_each_value_test():
    new = drop_source(VALUES, "vllm_ascend/m.py", _verdicts(VALUES, _feature_lanes())).source
    compile(new, "m.py", "exec")
    assert "LEGACY = False\n" in new
    assert "kept = [i for i in items]\n" in new  # `if not False` filters nothing: the filter goes
    assert "Runner(layer, legacy=False, newer=False)" in new  # two tests on one line, each answered
    assert "runner.patch()" not in new and "        return False\n" in new
    assert "vllm_version_is" not in new  # no test left: the helper import goes


def test_only_value_tests_naming_the_dropped_release_are_answered_by_a_drop(tmp_path):
    path = "vllm_ascend/m.py"
    root = write_tree(tmp_path / "plugin", {"vllm_ascend/__init__.py": "", path: VALUES})
    plan = plan_drop(_verdicts(VALUES, _feature_lanes()), root, "0.10.0", "0.10.1", ["vllm_version_is"])
    (result,) = plan.results
    assert "Runner(layer, legacy=False, newer=vllm_version_is(\"0.11.0\"))" in result.source
    assert "from vllm_ascend.utils import vllm_version_is" in result.source  # still read
    assert sorted(e.line for e in result.edits if e.kept == "value") == [4, 8, 9, 17]


def test_a_patch_release_retargets_a_value_test_naming_the_release_it_replaces():
    lanes = Lanes.for_move("vllm", Version("0.10.0.post1"), "0.10.0.post1", Version("0.10.0")).as_patch_release()
    source = 'from vllm_ascend.utils import vllm_version_is\n\n\ndef f(g):\n    return g(legacy=vllm_version_is("0.10.0"))\n'
    (verdict,) = _verdicts(source, lanes)
    assert (verdict.kind, verdict.verdict, verdict.retarget_to) == ("value", "retarget", "0.10.0.post1")
    new = drop_source(source, "vllm_ascend/m.py", [verdict]).source
    assert 'return g(legacy=vllm_version_is("0.10.0.post1"))' in new


def test_a_value_test_that_still_tells_the_lanes_apart_is_kept():
    # At 0.10.1 the release lane answers True and main False: the value still differs between lanes.
    source = 'from vllm_ascend.utils import vllm_version_is\n\nFLAGS = [vllm_version_is("0.10.1")]\n'
    (verdict,) = _verdicts(source, _feature_lanes())
    assert (verdict.kind, verdict.verdict) == ("value", "keep")
    assert drop_source(source, "vllm_ascend/m.py", [verdict]).source == source


DEAD_DEFINITION_IMPORTS = '''from vllm.model import Net

from vllm_ascend.utils import vllm_version_is


def _patched_init(self, *args, **kwargs) -> None:
    from vllm_ascend.legacy_init import setup

    setup(self)


if vllm_version_is("0.10.0"):
    Net.__init__ = _patched_init
'''


def test_a_module_only_a_removed_dead_definition_imported_is_orphaned(tmp_path):
    path = "vllm_ascend/patch_net.py"
    files = {"vllm_ascend/__init__.py": "import vllm_ascend.patch_net  # noqa\n", path: DEAD_DEFINITION_IMPORTS,
             "vllm_ascend/legacy_init.py": "def setup(obj):\n    return obj\n"}
    root = write_tree(tmp_path / "plugin", files)
    plan = plan_drop(_verdicts(DEAD_DEFINITION_IMPORTS, _feature_lanes(), path), root, "0.10.0", "0.10.1",
                     ["vllm_version_is"])
    (result,) = plan.results
    assert "_patched_init" not in result.source
    dead = next(e for e in result.edits if e.action == "remove_dead")
    assert (dead.line, dead.end_line) == (6, 9)  # its lines before the drop
    assert plan.removed == ("vllm_ascend/legacy_init.py",)
    # Another module imports it too: it stays.
    (root / "vllm_ascend/other.py").write_text("from vllm_ascend.legacy_init import setup\n")
    assert plan_drop(_verdicts(DEAD_DEFINITION_IMPORTS, _feature_lanes(), path), root, "0.10.0", "0.10.1",
                     ["vllm_version_is"]).removed == ()
