"""Two typed-use mechanisms on a synthetic two-lane plugin (`myplug` on upkg 1.0 -> 2.0), no network:
  * `self.<attr>.<member>` in a plugin subclass, where the upstream base's `__init__` (or an ancestor's)
    gives `<attr>` its class (`self.cache = Cache(...)`, `self.cfg: Config = ...`, `self.pool = pool`
    with `pool: Pool`): the member is checked on that class at the target;
  * a call of an upstream dataclass (no `__init__` of its own): its keywords and positionals are
    checked against the fields, those of dataclass ancestors included, at the target;
  * `factory().field.member`: what an upstream function's return annotation names, followed through
    the annotated fields of that class."""

from __future__ import annotations

import pytest

from porter.config import load_config
from porter.upgrade.analyze import AnalysisRequest, run_analysis
from porter.upgrade.index import TreeIndex
from porter.upgrade.models import Severity
from tests.upgrade.upgrade_fixtures import write_tree

SCHED_OLD = """
    from dataclasses import dataclass, field

    from upkg.cache import Cache, Pool
    from upkg.config import Config


    class Scheduler:
        def __init__(self, config: Config, pool: Pool):
            self.cache = Cache(4)
            self.cfg: Config = config
            self.pool = pool
            self.plain = 3


    @dataclass
    class BaseOutput:
        req_ids: list
        num_tokens: int = 0


    @dataclass
    class Output(BaseOutput):
        finished: set = field(default_factory=set)
        free_ids: list = field(default_factory=list)
        step: int = field(default=0, init=False)
"""
OLD = {
    "upkg/__init__.py": '__version__ = "1.0"\n',
    "upkg/config.py": "class Config:\n    def max_len(self):\n        return 1\n\n    def block_size(self):\n        return 16\n",
    "upkg/cache.py": """
        class Cache:
            def __init__(self, size):
                self.size = size

            def get_freed(self):
                return []

            def allocate(self, n):
                return n


        class Pool:
            def acquire(self):
                return 1

            def release(self):
                return 1
    """,
    "upkg/sched.py": SCHED_OLD,
    "upkg/context.py": """
        from dataclasses import dataclass
        from typing import Optional


        class Meta:
            def __init__(self):
                self.cu_tokens = []
                self.max_tokens = 0


        @dataclass
        class Ctx:
            meta: Optional[Meta] = None


        def get_ctx() -> Ctx:
            return Ctx()
    """,
}
NEW = {
    "upkg/__init__.py": '__version__ = "2.0"\n',
    "upkg/config.py": "class Config:\n    def max_len(self):\n        return 1\n",
    "upkg/cache.py": """
        class Cache:
            def __init__(self, size):
                self.size = size

            def allocate(self, n):
                return n


        class Pool:
            def acquire(self):
                return 1
    """,
    "upkg/sched.py": SCHED_OLD.replace("        free_ids: list = field(default_factory=list)\n",
                                       "        free_hashes: list = field(default_factory=list)\n")
                              .replace("        req_ids: list\n", "        req_ids: list\n        budget: int\n"),
    "upkg/context.py": """
        from dataclasses import dataclass
        from typing import Optional


        class Meta:
            def __init__(self):
                self.max_tokens = 0


        @dataclass
        class Ctx:
            meta: Optional[Meta] = None


        def get_ctx() -> Ctx:
            return Ctx()
    """,
}
PLUGIN = {
    "myplug/__init__.py": "",
    "myplug/utils.py": "def upkg_version_is(v):\n    return False\n",
    "myplug/ctx.py": """
        from upkg.context import get_ctx


        def tokens():
            return get_ctx().meta.cu_tokens, get_ctx().meta.max_tokens
    """,
    "myplug/sched.py": """
        from upkg.sched import Output, Scheduler
        from myplug.utils import upkg_version_is


        class AscendScheduler(Scheduler):
            def step(self):
                freed = self.cache.get_freed()
                self.cache.allocate(2)
                self.cfg.block_size()
                self.pool.release()
                self.plain.bit_length()
                return freed

            def output(self):
                if upkg_version_is("1.0"):
                    out = Output(["r"], 1, finished=set(), free_ids=[])
                else:
                    out = Output(["r"], 2, 1, finished=set(), free_hashes=[])
                return out

            def partial(self):
                return Output(req_ids=["r"], num_tokens=1, free_ids=[])
    """,
}


@pytest.fixture
def report(project, tmp_path):
    old = write_tree(tmp_path / "bi-old", OLD)
    new = write_tree(tmp_path / "bi-new", NEW)
    plugin = write_tree(tmp_path / "bi-plugin", PLUGIN)
    request = AnalysisRequest(plugin="myplug", target="2.0", baseline="1.0", plugin_path=plugin,
                              upstream_paths={"1.0": old, "2.0": new}, config=load_config())
    return run_analysis(request)


def _sites(report, symbol):
    return [(r.severity, [(s.path, s.line) for s in r.sites]) for r in report.records if r.symbol == symbol]


@pytest.mark.parametrize("symbol,line", [
    ("upkg.cache.Cache.get_freed", 7),  # self.cache = Cache(4)
    ("upkg.config.Config.block_size", 9),  # self.cfg: Config = config
    ("upkg.cache.Pool.release", 10),  # self.pool = pool, pool: Pool
])
def test_a_member_gone_from_the_class_a_base_init_gives_an_attribute_breaks(report, symbol, line):
    assert _sites(report, symbol) == [(Severity.BREAKING, [("myplug/sched.py", line)])]


def test_members_that_still_exist_and_untyped_attributes_say_nothing(report):
    symbols = {r.symbol for r in report.records + report.notes}
    assert "upkg.cache.Cache.allocate" not in symbols
    assert not [s for s in symbols if "plain" in s or "bit_length" in s]


def _output(report, change):
    """(severity, parameter, sites) of each Output record with that change (a record merges a site's changes)."""
    return sorted((r.severity.value, c["parameter"], tuple((s.path, s.line) for s in r.sites)) for r in report.records + report.notes
                  if r.symbol == "upkg.sched.Output" for c in r.detail.get("changes", [r.detail]) if c.get("change") == change)


def test_a_keyword_a_dataclass_no_longer_has_breaks_a_live_call(report):
    assert _output(report, "keyword_removed") == [
        ("breaking", "free_ids", (("myplug/sched.py", 22),)),
        ("note", "free_ids", (("myplug/sched.py", 16),)),  # the release lane, dead at the target
    ]


def test_a_new_required_field_of_a_dataclass_ancestor_is_a_required_parameter(report):
    assert _output(report, "new_required_parameter") == [("breaking", "budget", (("myplug/sched.py", 22),))]


def test_a_main_lane_call_is_checked_against_the_target_alone(report):
    # Output(["r"], 2, 1, ...) fits the target; against the baseline its positionals would look shifted
    assert not [f for f in report.records + report.notes if any(s.line == 18 for s in f.sites)]


def test_the_generated_init_orders_fields_as_dataclasses_does(tmp_path):
    index = TreeIndex(write_tree(tmp_path / "bi-new", NEW), ["upkg"])
    sig = index.dataclass_init(*index.class_of("upkg.sched.Output"))
    assert sig.render() == "(req_ids, budget, num_tokens=…, finished=…, free_hashes=…)"  # `step` has init=False
    assert index.dataclass_init(*index.class_of("upkg.cache.Cache")) is None  # not a dataclass
    assert index.attribute_class(*index.class_of("upkg.sched.Scheduler"), "pool")[0].name == "Pool"
    assert index.attribute_class(*index.class_of("upkg.sched.Scheduler"), "plain") is None



def test_a_field_chain_off_what_a_factory_returns_is_checked(report):
    assert _sites(report, "upkg.context.Meta.cu_tokens") == [(Severity.BREAKING, [("myplug/ctx.py", 5)])]
    assert not [r for r in report.records + report.notes if "max_tokens" in r.symbol]
