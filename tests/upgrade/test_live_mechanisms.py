"""Mechanisms that catch live code breaking at the target, found on the replay benchmark's dev
misses; each on a small synthetic two-lane plugin (`myplug` on upkg 1.0 -> 2.0), no network."""

from __future__ import annotations

import pytest

from porter.config import load_config
from porter.upgrade.analyze import AnalysisRequest, run_analysis
from porter.upgrade.models import Severity
from tests.upgrade.upgrade_fixtures import write_tree

OLD = {
    "upkg/__init__.py": '__version__ = "1.0"\n',
    "upkg/selector.py": """
        def get_backend(head_size, dtype, cache_dtype, block_size, use_mla=False, use_sparse=False):
            return None

        def pick(a, b, c=None):
            return a

        def old_helper():
            return 1

        def renamed(a, b, c=None):
            return a
    """,
    "upkg/compilation.py": """
        class CompilationConfig:
            split_points: list[int] | None = None
            level: int = 0
    """,
    "upkg/sampler.py": "def get_sampler():\n    return None\n",
    "upkg/config.py": """
        from dataclasses import dataclass, field

        from upkg.compilation import CompilationConfig


        @dataclass
        class VllmConfig:
            compilation_config: CompilationConfig = field(default_factory=CompilationConfig)
            dynamic: object = None

            @property
            def comp(self) -> "CompilationConfig | None":
                return self.compilation_config
    """,
}
NEW = {
    "upkg/__init__.py": '__version__ = "2.0"\n',
    "upkg/selector.py": """
        def get_backend(head_size, dtype, cache_dtype, use_mla=False, use_sparse=False):
            return None

        def pick(a, c=None, b=None):
            return a

        def renamed(a, beta, c=None):
            return a
    """,
    "upkg/compilation.py": """
        class CompilationConfig:
            endpoints: list[int] | None = None
            level: int = 0
    """,
    "upkg/config.py": OLD["upkg/config.py"],
}
PLUGIN = {
    "myplug/__init__.py": "",
    "myplug/utils.py": "def upkg_version_is(v):\n    return False\n",
    "myplug/runner.py": """
        from upkg.selector import get_backend, pick, renamed


        def build(dtype, block_size):
            backend = get_backend(0, dtype, None, block_size, use_mla=True)
            other = pick(1, 2)
            same = get_backend(0, dtype, None, use_mla=True) if False else None
            return backend, other, same, renamed(1, 2)
    """,
    "myplug/helpers.py": """
        from upkg.selector import old_helper


        def use_it():
            return old_helper() + 1
    """,
    "myplug/sampling.py": """
        from upkg.sampler import get_sampler


        def make():
            return get_sampler()
    """,
    "myplug/ascend_config.py": """
        from upkg.config import VllmConfig


        class AscendConfig:
            def __init__(self, vllm_config: "VllmConfig"):
                self.vllm_config = vllm_config

            def update(self):
                vllm_config = self.vllm_config
                points = vllm_config.compilation_config.split_points
                level = vllm_config.compilation_config.level
                vllm_config.compilation_config.split_points = sorted(points or [])
                cc = vllm_config.compilation_config
                return vllm_config.comp.split_points, level, vllm_config.dynamic.anything, cc.split_points
    """,
}


@pytest.fixture
def report(project, tmp_path):
    old = write_tree(tmp_path / "live-old", OLD)
    new = write_tree(tmp_path / "live-new", NEW)
    plugin = write_tree(tmp_path / "live-plugin", PLUGIN)
    request = AnalysisRequest(plugin="myplug", target="2.0", baseline="1.0", plugin_path=plugin,
                              upstream_paths={"1.0": old, "2.0": new}, config=load_config())
    return run_analysis(request)


def _shifts(report, symbol):
    return [r for r in report.records if r.symbol == symbol and r.detail.get("change") == "positional_shift"]


def test_a_positional_argument_that_lands_on_a_keyword_the_call_passes_breaks(report):
    shifted = _shifts(report, "upkg.selector.get_backend")
    assert len(shifted) == 1 and shifted[0].severity is Severity.BREAKING
    assert shifted[0].sites[0].line == 5  # the four-positional call, not the three-positional one
    assert "block_size" in shifted[0].message and "use_mla" in shifted[0].message


def test_a_positional_argument_that_binds_another_parameter_is_risky(report):
    shifted = _shifts(report, "upkg.selector.pick")
    assert len(shifted) == 1 and shifted[0].severity is Severity.RISKY
    assert not _shifts(report, "upkg.selector.renamed")  # a renamed parameter in the same slot misbinds nothing


def test_a_field_read_through_a_typed_receiver_and_an_annotated_field_is_checked(report):
    gone = [r for r in report.records if r.symbol == "upkg.compilation.CompilationConfig.split_points"]
    assert len(gone) == 1 and gone[0].severity is Severity.BREAKING
    assert {s.line for s in gone[0].sites} == {10, 12, 14}  # read, write, through the property, through a local
    assert not any("level" in r.symbol or "anything" in r.symbol for r in report.records)  # unchanged; untyped field


def test_the_call_sites_of_a_removed_function_join_its_import_finding(report):
    gone = [r for r in report.records if r.symbol == "upkg.selector.old_helper"]
    assert len(gone) == 1 and gone[0].severity is Severity.BREAKING
    assert {(s.path, s.line) for s in gone[0].sites} == {("myplug/helpers.py", 1), ("myplug/helpers.py", 5)}


def test_the_call_sites_of_a_function_whose_module_is_gone_join_its_import_finding(report):
    gone = [r for r in report.records if r.symbol == "upkg.sampler.get_sampler"]
    assert len(gone) == 1 and {(s.path, s.line) for s in gone[0].sites} == {("myplug/sampling.py", 1), ("myplug/sampling.py", 5)}
