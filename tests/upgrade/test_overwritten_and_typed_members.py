"""Three checks of session 9 on a synthetic two-lane plugin (`myplug` on upkg 1.0 -> 2.0), no network.

* An attribute the plugin class's `__init__` sets that a base method it does not override starts
  assigning at the target (vllm 0.20.0's `GPUModelRunner.initialize_kv_cache` building
  `self.cudagraph_manager`, vllm-ascend 6ca18cbeb3): `attribute_overwritten`, risky, at the class.
  An attribute that base method assigned at the baseline too, a method the plugin overrides, or a
  store whose new value wraps the attribute's current one (`self.m = Wrapper(self, self.m, ...)`: the
  plugin's object stays inside) is no record.
* `del self.x` before the class's own `self.x = ...`: a use of the base's attribute, so a base
  `__init__` that stops setting it is reported.
* A member read through an annotated upstream field (`cfg.parallel.pcp_size`, `parallel:
  ParallelConfig` on the config class) that the field's class lacks at both trees (vllm-ascend
  aa56a0f4b7's `parallel_config.prefill_context_parallel_size` on vllm 0.11.2): risky, "missing at the
  target and at the baseline". Not when a file of the target names the member (a subclass may have it),
  when a plugin class defines it or the plugin stores it through a typed chain, nor for a receiver
  typed only by the plugin's own annotation of a parameter.
"""

from __future__ import annotations

import pytest

from porter.upgrade.models import Severity
from tests.upgrade.upgrade_fixtures import analyze_two_lane

RUNNER_OLD = """
    class GraphManager:
        pass


    class Runner:
        def __init__(self, config):
            self.config = config
            self.graph_manager = GraphManager()
            self.buffers = []
            self.states = {}

        def initialize_cache(self, spec):
            self.cache = spec
            self.states = {}

        def load_model(self):
            self.model = None
"""
RUNNER_NEW = """
    class GraphManager:
        pass


    class Runner:
        def __init__(self, config):
            self.config = config
            self.graph_manager = None
            self.states = {}
            self.setup()

        def initialize_cache(self, spec):
            self.cache = spec
            self.states = {}
            self.graph_manager = GraphManager()

        def load_model(self):
            self.model = None
            self.buffers = []

        def setup(self):
            self.extras = []

        def get_bufs(self):
            if self.bufs is None:
                self.bufs = []
            return self.bufs

        def swap(self):
            self.worker = self.make_worker()

        def make_worker(self):
            return None

        def wrap_method(self):
            self.method = Wrapped.make(
                self, self.method, None
            )
"""
CONFIG_OLD = """
    from dataclasses import dataclass, field


    @dataclass
    class ParallelConfig:
        tp_size: int = 1
        dcp_size: int = 1


    @dataclass
    class CacheSpec:
        block_size: int = 16


    @dataclass
    class Config:
        parallel: ParallelConfig = field(default_factory=ParallelConfig)
        cache: CacheSpec = field(default_factory=CacheSpec)
        load: ParallelConfig = field(default_factory=ParallelConfig)
"""
CONFIG_NEW = CONFIG_OLD + """

    @dataclass
    class UniformCacheSpecs(CacheSpec):
        specs: dict = field(default_factory=dict)
"""
OLD = {"upkg/__init__.py": '__version__ = "1.0"\n', "upkg/runner.py": RUNNER_OLD, "upkg/config.py": CONFIG_OLD}
NEW = {"upkg/__init__.py": '__version__ = "2.0"\n', "upkg/runner.py": RUNNER_NEW, "upkg/config.py": CONFIG_NEW}
PLUGIN = {
    "myplug/__init__.py": "",
    "myplug/runner.py": """
        from upkg.config import Config, ParallelConfig
        from upkg.runner import Runner


        class NPURunner(Runner):
            def __init__(self, config):
                super().__init__(config)
                del self.buffers
                self.graph_manager = object()
                self.states = {"npu": True}
                self.buffers = [1]
                self.extras = [2]
                self.bufs = [3]
                self.worker = self.make_worker()
                self.method = object()

            def load_model(self):
                self.model = 1

            def make_worker(self):
                return 4


        class Helper:
            def extra_size(self):
                return 3


        def sizes(cfg: Config):
            pcp = cfg.parallel.pcp_size
            tp = cfg.parallel.tp_size
            specs = cfg.cache.specs
            cfg.load.rfork = object()
            rfork = cfg.load.rfork
            extra = cfg.parallel.extra_size
            return pcp, tp, specs, rfork, extra


        def direct(p: ParallelConfig):
            return p.not_there
    """,
}


@pytest.fixture
def report(project, tmp_path):
    return analyze_two_lane(tmp_path, OLD, NEW, PLUGIN)


def test_an_attribute_a_base_method_starts_assigning_is_overwritten(report):
    found = [(r.severity, r.detail.get("attribute") or c.get("attribute"), s.line) for r in report.records
             for c in r.detail.get("changes", [r.detail]) if c.get("change") == "attribute_overwritten" for s in r.sites]
    # graph_manager: initialize_cache assigns it at 2.0 only; states: at both trees; buffers: in
    # load_model, which NPURunner overrides; extras: in setup, which the base __init__ runs; bufs: a
    # lazy `if self.bufs is None`; worker: rebuilt by make_worker, which NPURunner overrides; method:
    # wrap_method wraps the plugin's own object (FusedMoE.maybe_init_modular_kernel), it stays inside
    assert [(sev, line) for sev, _, line in found] == [(Severity.RISKY, 5)]
    assert any("graph_manager" in r.symbol for r in report.records
               if any(c.get("change") == "attribute_overwritten" for c in r.detail.get("changes", [r.detail])))
    assert not [r for r in report.records if r.symbol.rsplit(".", 1)[-1] in ("states", "cache", "extras", "bufs", "worker", "method")
                and "assigns" in r.message]


def test_del_of_an_attribute_the_base_init_no_longer_sets_is_reported(report):
    lines = {s.line for r in report.records if r.symbol.endswith("Runner.buffers") for s in r.sites}
    assert 8 in lines


def test_a_typed_field_member_missing_at_both_trees_is_risky(report):
    hits = {r.symbol.rsplit(".", 1)[-1]: r for r in report.records if "missing at the target and at the baseline" in r.message}
    assert "pcp_size" in hits and hits["pcp_size"].severity is Severity.RISKY
    assert [s.line for s in hits["pcp_size"].sites] == [30]
    # tp_size exists; specs is named by a NEW subclass; rfork is stored by the plugin; extra_size is a
    # member of a plugin class; `p: ParallelConfig` is the plugin's own annotation of a parameter
    assert not {"tp_size", "specs", "rfork", "extra_size", "not_there"} & set(hits)
