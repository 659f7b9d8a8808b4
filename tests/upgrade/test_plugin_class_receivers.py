"""Receivers typed through a plugin class, across files, on a synthetic two-lane plugin (`myplug` on
upkg 1.0 -> 2.0), no network: `self.batch = Batch(...)` (a plugin class defined in another file) whose
`__init__` sets `self.table = Table(...)` (an upstream class): `self.batch.table.commit()` is checked
on upstream's Table at the target. The plugin class's own methods and its untyped attributes say nothing."""

from __future__ import annotations

import pytest

from porter.upgrade.models import Severity
from tests.upgrade.upgrade_fixtures import analyze_two_lane

TABLE = """
    class Table:
        def __init__(self, size):
            self.size = size

        def {name}(self, n):
            return n

        def clear(self):
            return None
"""
OLD = {"upkg/__init__.py": '__version__ = "1.0"\n', "upkg/table.py": TABLE.format(name="commit")}
NEW = {"upkg/__init__.py": '__version__ = "2.0"\n', "upkg/table.py": TABLE.format(name="commit_table")}
PLUGIN = {
    "myplug/__init__.py": "",
    "myplug/batch.py": """
        from upkg.table import Table


        class Batch:
            def __init__(self, size):
                self.table = Table(size)
                self.plain = make_plain()

            def refresh(self):
                return 1


        def make_plain():
            return object()
    """,
    "myplug/runner.py": """
        from upkg.table import Table

        from myplug.batch import Batch


        class Runner:
            def __init__(self):
                self.batch = Batch(4)

            def step(self, n):
                self.batch.table.commit(n)
                self.batch.table.clear()
                self.batch.refresh()
                self.batch.plain.anything()
                return Table
    """,
}


@pytest.fixture
def report(project, tmp_path):
    return analyze_two_lane(tmp_path, OLD, NEW, PLUGIN)


def test_a_member_gone_from_the_upstream_class_a_plugin_class_gives_an_attribute_breaks(report):
    found = [(r.severity, [(s.path, s.line) for s in r.sites]) for r in report.records if r.symbol == "upkg.table.Table.commit"]
    assert found == [(Severity.BREAKING, [("myplug/runner.py", 11)])]


def test_members_that_exist_own_methods_and_untyped_attributes_say_nothing(report):
    symbols = {r.symbol for r in report.records + report.notes}
    assert "upkg.table.Table.clear" not in symbols
    assert not [s for s in symbols if "refresh" in s or "anything" in s or "plain" in s or s.startswith("@")]
