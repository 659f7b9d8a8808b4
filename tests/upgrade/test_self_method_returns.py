"""A local typed by the return annotation of the plugin class's own method (`out = self._run(...)` with
`def _run(self) -> Table`, Table upstream), on a synthetic plugin (`myplug` on upkg 1.0 -> 2.0), no
network: `out.commit()` is checked on upstream's Table at the target; an unannotated method says nothing."""

from __future__ import annotations

import pytest

from porter.upgrade.models import Severity
from tests.upgrade.upgrade_fixtures import analyze_two_lane

TABLE = """
    class Table:
        def {name}(self):
            return 0

        def clear(self):
            return None
"""
OLD = {"upkg/__init__.py": '__version__ = "1.0"\n', "upkg/table.py": TABLE.format(name="commit")}
NEW = {"upkg/__init__.py": '__version__ = "2.0"\n', "upkg/table.py": TABLE.format(name="commit_table")}
PLUGIN = {
    "myplug/__init__.py": "",
    "myplug/runner.py": """
        from upkg.table import Table


        class Runner:
            def _run(self, n) -> Table:
                return Table()

            def _plain(self, n):
                return Table()

            def step(self, n):
                out = self._run(n)
                out.commit()
                out.clear()
                other = self._plain(n)
                other.commit()
    """,
}


@pytest.fixture
def report(project, tmp_path):
    return analyze_two_lane(tmp_path, OLD, NEW, PLUGIN)


def test_a_member_gone_from_what_an_own_method_is_annotated_to_return_breaks(report):
    found = [(r.severity, [(s.path, s.line) for s in r.sites]) for r in report.records if r.symbol == "upkg.table.Table.commit"]
    assert found == [(Severity.BREAKING, [("myplug/runner.py", 13)])]
    assert "upkg.table.Table.clear" not in {r.symbol for r in report.records + report.notes}
