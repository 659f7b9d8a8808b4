"""A member used on an imported class that moved: the import's finding covers the member's site, unless the
name at its new home no longer has the member (vllm 0.11.0 made `PoolerOutput` a `Union` alias in
vllm.v1.outputs: `output.get_data_nbytes()` breaks on its own). Synthetic two-lane plugin (`myplug` on upkg
1.0 -> 2.0), no network."""

from __future__ import annotations

import pytest

from porter.upgrade.models import Severity
from tests.upgrade.upgrade_fixtures import analyze_two_lane

OLD = {
    "upkg/__init__.py": '__version__ = "1.0"\n',
    "upkg/sequence.py": """
        class PoolerOutput:
            def get_data_nbytes(self):
                return 0


        class Batch:
            def size(self):
                return 1
    """,
}
NEW = {
    "upkg/__init__.py": '__version__ = "2.0"\n',
    "upkg/sequence.py": "X = 1\n",
    "upkg/outputs.py": """
        from typing import Union

        PoolerOutput = Union[int, list[int]]


        class Batch:
            def size(self):
                return 1
    """,
}
PLUGIN = {
    "myplug/__init__.py": "",
    "myplug/runner.py": """
        from upkg.sequence import Batch, PoolerOutput


        def nbytes(output: PoolerOutput) -> int:
            return output.get_data_nbytes()


        def size(batch: Batch) -> int:
            return batch.size()
    """,
}


@pytest.fixture
def report(project, tmp_path):
    return analyze_two_lane(tmp_path, OLD, NEW, PLUGIN)


def _lines(report, member):
    return sorted((r.severity, s.line) for r in report.records if r.symbol.endswith(member) for s in r.sites)


def test_a_member_the_alias_at_the_new_home_lacks_breaks_at_its_own_site(report):
    assert _lines(report, "PoolerOutput.get_data_nbytes") == [(Severity.BREAKING, 5)]


def test_a_member_the_moved_class_still_has_joins_the_import(report):
    assert _lines(report, "Batch.size") == []
    assert any(r.symbol == "upkg.sequence.Batch" for r in report.records)
