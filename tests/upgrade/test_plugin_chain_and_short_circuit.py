"""Two mechanisms on a synthetic two-lane plugin (`myplug` on upkg 1.0 -> 2.0), no network:

* plugin-to-plugin inheritance: `Derived(PlugBackend)` and `Deeper(Derived)`, in other modules (one
  with no upstream import at all), whose chain reaches upstream's `Backend` only through
  `PlugBackend`: their own overrides are checked against `Backend`; a member an intermediate plugin
  class defines satisfies a new abstract method, and one missing along the whole chain is reported
  once, at the class that subclasses `Backend` itself; a class mentioned only under guards dead at
  2.0 (a release lane's variant) is not checked as live;
* short-circuit guards: `upkg_version_is("1.0") and f(...)` (and `not ... or f(...)`) reach f only
  on the lane the guard names, like an `if` body; `guard or f(...)` reaches it on the other one.
"""

from __future__ import annotations

import pytest

from porter.upgrade.models import DriftFamily, Severity
from tests.upgrade.upgrade_fixtures import analyze_two_lane

BACKEND_OLD = """
    class Backend:
        @staticmethod
        def get_shape(num_blocks, block_size):
            raise NotImplementedError


    class Other:
        pass
"""
BACKEND_NEW = """
    from abc import abstractmethod


    class Backend:
        @staticmethod
        def get_shape(num_blocks, block_size, cache_dtype="auto"):
            raise NotImplementedError

        @abstractmethod
        def describe(self):
            ...

        @abstractmethod
        def new_req(self):
            ...


    class Other:
        def describe(self):
            raise NotImplementedError
"""
CALLER = """
    def allocate(backend):
        return backend.get_shape(1, 16, cache_dtype="fp8")
"""
OLD = {"upkg/__init__.py": '__version__ = "1.0"\n', "upkg/backend.py": BACKEND_OLD,
       "upkg/core.py": "def old_fn(m, flag=False):\n    return m\n"}
NEW = {"upkg/__init__.py": '__version__ = "2.0"\n', "upkg/backend.py": BACKEND_NEW, "upkg/runner.py": CALLER,
       "upkg/core.py": "def old_fn(m):\n    return m\n"}
PLUGIN = {
    "myplug/__init__.py": "",
    "myplug/utils.py": "def upkg_version_is(v):\n    return False\n",
    "myplug/base.py": """
        from upkg.backend import Backend


        class PlugBackend(Backend):
            @staticmethod
            def get_shape(num_blocks, block_size):
                return (num_blocks, block_size)

            def describe(self):
                return "plug"

            def helper(self):
                return 1
    """,
    "myplug/sub/__init__.py": "",
    "myplug/sub/derived.py": """
        from myplug.base import PlugBackend


        class Derived(PlugBackend):
            @staticmethod
            def get_shape(num_blocks, block_size):
                return (num_blocks, block_size, 2)

            def helper(self, extra):
                return extra
    """,
    "myplug/sub/deep.py": """
        import upkg.backend
        from myplug.sub.derived import Derived
        from myplug.base import PlugBackend
        from myplug.utils import upkg_version_is


        class Deeper(Derived):
            @staticmethod
            def get_shape(num_blocks, block_size):
                return (num_blocks,)


        class Mixed(PlugBackend, upkg.backend.Other):
            pass


        class Deeper10(Derived):  # the release lane's variant: chosen only where upkg is 1.0
            @staticmethod
            def get_shape(num_blocks, block_size):
                return ()


        class Wrapper10(PlugBackend):  # named by a dotted string, only where upkg is 1.0
            @staticmethod
            def get_shape(num_blocks, block_size):
                return ()


        def pick():
            if upkg_version_is("1.0"):
                return Deeper10, "myplug.sub.deep.Wrapper10"
            return Deeper, "myplug.sub.deep.Deeper"
    """,
    "myplug/short.py": """
        from upkg.core import old_fn
        from myplug.utils import upkg_version_is


        def pick(m):
            if upkg_version_is("1.0") and old_fn(m, flag=True):
                return 1
            also = not upkg_version_is("1.0") or old_fn(m, flag=True)
            ternary = old_fn(m, flag=True) if upkg_version_is("1.0") else 0
            return upkg_version_is("1.0") or old_fn(m, flag=True)
    """,
}


@pytest.fixture
def report(project, tmp_path):
    return analyze_two_lane(tmp_path, OLD, NEW, PLUGIN)


def test_overrides_reaching_upstream_through_plugin_bases_are_checked(report):
    overrides = [r for r in report.records if r.detail.get("change") == "override_mismatch"]
    assert [r.symbol for r in overrides] == ["upkg.backend.Backend.get_shape"]  # one record, a site per class
    assert overrides[0].severity is Severity.BREAKING and overrides[0].detail["added"] == ["cache_dtype"]
    assert {(s.path, s.line) for s in overrides[0].sites} == {
        ("myplug/base.py", 4),  # PlugBackend(Backend)
        ("myplug/sub/derived.py", 4),  # Derived(PlugBackend), in a file with no upstream import
        ("myplug/sub/deep.py", 7),  # Deeper(Derived): two plugin classes above the upstream base
    }  # not Deeper10 / Wrapper10: every mention of them is under a guard dead at 2.0
    dead = [r for r in report.notes if r.detail.get("change") == "override_mismatch"]
    assert {(s.path, s.line) for r in dead for s in r.sites} == {("myplug/sub/deep.py", 17), ("myplug/sub/deep.py", 23)}
    # a method only plugin classes define is no override of upstream
    assert not any(r.detail.get("method") == "helper" for r in report.records + report.notes)


def test_new_abstract_methods_are_reported_once_along_the_chain(report):
    abstract = [(r.detail["plugin_class"], r.detail["methods"]) for r in report.records + report.notes
                if r.family is DriftFamily.NEW_METHOD]
    # describe: PlugBackend defines it (also for Mixed, whose other base Other now raises in it);
    # new_req: missing along the chain, said once at the class that subclasses Backend itself
    assert abstract == [("PlugBackend", ["new_req"])]


def test_short_circuit_operands_are_reached_on_one_lane(report):
    calls = [r for r in report.records if r.symbol == "upkg.core.old_fn"]
    lines = sorted(s.line for r in calls for s in r.sites if s.path == "myplug/short.py")
    # lines 6, 8 and 9 run only where upkg is 1.0 (dead at 2.0); line 10's call runs where it is not
    assert lines == [10]
    assert all(r.severity is Severity.BREAKING for r in calls)
