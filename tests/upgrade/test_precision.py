"""False-alarm causes found on the replay benchmark's dev alarms, each on a small synthetic two-lane
plugin (`myplug` on upkg 1.0 -> 2.0), no network: what breaks nothing at the target is a note or
nothing, and the real break next to it stays breaking."""

from __future__ import annotations

import pytest

from porter.config import load_config
from porter.upgrade.analyze import AnalysisRequest, run_analysis
from porter.upgrade.models import Severity
from tests.upgrade.upgrade_fixtures import write_tree

CONTEXT_OLD = """
    class ForwardContext:
        def __init__(self):
            self.attn_metadata = None
            self.virtual_engine = 0


    def get_forward_context() -> "ForwardContext":
        return ForwardContext()
"""
OLD = {
    "upkg/__init__.py": '__version__ = "1.0"\n',
    "upkg/context.py": CONTEXT_OLD,
    "upkg/connectors/__init__.py": "",
    "upkg/connectors/shared.py": "class SharedConnector:\n    def load(self):\n        return None\n",
    "upkg/threads.py": """
        import threading


        class Worker(threading.Thread):
            def __init__(self):
                super().__init__()
                self.size = 1
    """,
    "upkg/layers.py": """
        class Module:
            pass


        class CustomOp(Module):
            def forward(self, *args, **kwargs):
                return self.forward_native(*args, **kwargs)


        class RotaryEmbedding(Module):
            def forward(self, positions, query, key):
                return query


        class Linear(Module):
            def forward(self, x, bias):
                return x


        class Scheduler:
            def __init__(self):
                self.queue = []

            def finish(self, request_id) -> None:
                return None

            def update(self, request) -> bool:
                return True

            def stats(self) -> tuple[int, int]:
                return 0, 0


        class Engine:
            def __init__(self):
                self.queue = []

            def run(self):
                return self.queue
    """,
}
NEW = {
    "upkg/__init__.py": '__version__ = "2.0"\n',
    "upkg/context.py": CONTEXT_OLD.replace("            self.virtual_engine = 0\n", ""),
    "upkg/connectors/__init__.py": "",
    "upkg/connectors/example.py": "class ExampleConnector:\n    def load(self):\n        return None\n",
    "upkg/threads.py": """
        import threading


        class Op(threading.Thread):
            pass


        class Worker(Op):
            def __init__(self):
                super().__init__()
                self.size = 1
    """,
    "upkg/layers.py": """
        class Module:
            pass


        class CustomOp(Module):
            def forward(self, *args, **kwargs):
                return self.forward_native(*args, **kwargs)


        class RotaryEmbedding(CustomOp):
            def forward_native(self, positions, query, key):
                return query


        class Linear(Module):
            def forward(self, x):
                return x


        class Scheduler:
            def __init__(self):
                self.queue = []
                self.finished_ids = set()

            def finish(self, request_id) -> list[str]:
                return []

            def update(self, request) -> None:
                return None

            def stats(self) -> int:
                return 0


        class Engine:
            def __init__(self):
                self.queue = []
                self.waiting = []

            def run(self):
                return self.queue, self.waiting
    """,
}
PLUGIN = {
    "myplug/__init__.py": "",
    "myplug/utils.py": "def upkg_version_is(v):\n    return False\n",
    "myplug/attn.py": """
        from upkg.context import get_forward_context


        def forward(kv_cache):
            ctx = get_forward_context()
            meta = ctx.attn_metadata
            return kv_cache[ctx.virtual_engine], meta
    """,
    "myplug/workers.py": """
        from upkg.threads import Worker


        def describe(worker: Worker):
            return worker.name, worker.size
    """,
    "myplug/patch_connector.py": """
        import upkg.connectors.shared
        from upkg.connectors.shared import SharedConnector


        class AscendConnector(SharedConnector):
            pass


        upkg.connectors.shared.SharedConnector = AscendConnector
    """,
    "myplug/ops.py": """
        from upkg.layers import Engine, Linear, RotaryEmbedding, Scheduler


        class AscendRotary(RotaryEmbedding):
            def forward(self, positions, query, key, offsets=None):
                return query


        class AscendLinear(Linear):
            def forward(self, x, bias):
                return x


        class AscendScheduler(Scheduler):
            def __init__(self):
                self.queue = []

            def step(self, request):
                self.finish(request)
                ok = self.update(request)
                a, b = self.stats()
                return ok, a, b


        class AscendEngine(Engine):
            def __init__(self):
                self.queue = []
    """,
}


@pytest.fixture
def report(project, tmp_path):
    old = write_tree(tmp_path / "prec-old", OLD)
    new = write_tree(tmp_path / "prec-new", NEW)
    plugin = write_tree(tmp_path / "prec-plugin", PLUGIN)
    request = AnalysisRequest(plugin="myplug", target="2.0", baseline="1.0", plugin_path=plugin,
                              upstream_paths={"1.0": old, "2.0": new}, config=load_config())
    return run_analysis(request)


def _records(report, family, symbol):
    return [r for r in report.records if r.family.value == family and r.symbol == symbol]


def _notes(report, family, symbol):
    return [r for r in report.notes if r.family.value == family and r.symbol == symbol]


def test_a_changed_base_list_is_a_note_not_an_alarm(report):
    assert not _records(report, "F10", "upkg.layers.RotaryEmbedding")
    note = _notes(report, "F10", "upkg.layers.RotaryEmbedding")
    assert len(note) == 1 and note[0].severity is Severity.NOTE and "fails by itself" in note[0].message


def test_an_override_of_a_dispatcher_that_takes_star_args_is_not_flagged(report):
    assert not [r for r in report.records + report.notes if r.symbol == "upkg.layers.RotaryEmbedding.forward"]
    dropped = _records(report, "F3", "upkg.layers.Linear.forward")  # a real signature drop next to it still breaks
    assert len(dropped) == 1 and dropped[0].severity is Severity.BREAKING and "bias" in dropped[0].message


def test_attributes_the_base_init_sets_but_never_reads_are_a_note(report):
    assert not _records(report, "F7", "upkg.layers.Scheduler")
    note = _notes(report, "F7", "upkg.layers.Scheduler")
    assert len(note) == 1 and "finished_ids" in note[0].message


def test_attributes_the_base_reads_stay_breaking(report):
    # `waiting` is read by Engine.run: a subclass whose __init__ skips super() breaks there
    rec = _records(report, "F7", "upkg.layers.Engine")
    assert len(rec) == 1 and rec[0].severity is Severity.BREAKING and "waiting" in rec[0].message


def test_a_changed_return_type_breaks_only_a_site_whose_unpacking_no_longer_fits(report):
    returns = {r.symbol: r for r in report.records if r.detail.get("change") == "return_annotation"}
    notes = {r.symbol: r for r in report.notes if r.detail.get("change") == "return_annotation"}
    assert set(returns) == {"upkg.layers.Scheduler.stats"}  # a, b = stats(), which now returns one int
    assert returns["upkg.layers.Scheduler.stats"].severity is Severity.BREAKING
    assert "unpacks 2 values" in returns["upkg.layers.Scheduler.stats"].message
    assert set(notes) == {"upkg.layers.Scheduler.update"}  # ok = update(): bool -> None is a hint, a note
    # finish(request) is a statement: the value is dropped, nothing to say


def test_a_member_read_from_what_an_upstream_factory_returns_is_checked(report):
    gone = _records(report, "F1", "upkg.context.ForwardContext.virtual_engine")
    assert len(gone) == 1 and gone[0].severity is Severity.BREAKING
    assert [(x.path, x.line) for x in gone[0].sites] == [("myplug/attn.py", 7)]
    assert not [r for r in report.records if "attn_metadata" in r.symbol]  # still set at the target


def test_a_member_an_ancestor_outside_the_tree_provides_is_not_reported_gone(report):
    # Worker(threading.Thread) became Worker(Op), Op(threading.Thread): `name` still comes from Thread
    assert not [r for r in report.records + report.notes if r.symbol.startswith("upkg.threads.")]


def test_a_patch_installed_into_a_module_that_is_gone_is_a_site_of_its_own(report):
    patch = [r for r in report.records if r.family.value == "F11" and r.symbol == "upkg.connectors.shared.SharedConnector"]
    assert len(patch) == 1 and patch[0].severity is Severity.BREAKING
    assert [(x.path, x.line) for x in patch[0].sites] == [("myplug/patch_connector.py", 9)]
    assert [r for r in report.records if r.symbol == "upkg.connectors.shared"]  # the module import still reports the module
