"""Two import findings that lacked a new home (replay dev gaps 1c954ff264 m1 and a1f142b7ad m29):

* an import written for a release older than both trees (`from upkg.inductor_pass import Pass` under
  `vllm_version_is("0.5")`, missing at 1.0 and 2.0) still names where the name lives at the target;
* an import the target serves only through a module `__getattr__` that warns it is deprecated
  (vllm 0.11.2's `vllm.utils._DEPRECATED_MAPPINGS`, or an `if name == ...` branch that imports it from
  the new module) is a move with that home, reported as a note: the import still works.
Synthetic two-lane plugin (`myplug` on upkg 1.0 -> 2.0), no network."""

from __future__ import annotations

import pytest

from porter.upgrade.deprecations import deprecated_homes
from porter.upgrade.models import Severity
from tests.upgrade.upgrade_fixtures import analyze_two_lane

OLD = {
    "upkg/__init__.py": '__version__ = "1.0"\n',
    "upkg/passes/__init__.py": "",
    "upkg/passes/inductor_pass.py": "class Pass:\n    def run(self):\n        return 1\n",
    "upkg/utils/__init__.py": "def get_open_port():\n    return 1\n\n\ndef get_tokenizer(name):\n    return name\n\n\ndef keep():\n    return 2\n",
}
NEW = {
    "upkg/__init__.py": '__version__ = "2.0"\n',
    "upkg/passes/__init__.py": "",
    "upkg/passes/inductor_pass.py": "class Pass:\n    def run(self):\n        return 1\n",
    "upkg/utils/__init__.py": """
        import warnings

        _DEPRECATED_MAPPINGS = {
            "get_open_port": "network_utils",
        }


        def __getattr__(name):
            if name in _DEPRECATED_MAPPINGS:
                submodule_name = _DEPRECATED_MAPPINGS[name]
                warnings.warn(f"upkg.utils.{name} is deprecated", DeprecationWarning, stacklevel=2)
                module = __import__(f"upkg.utils.{submodule_name}", fromlist=[submodule_name])
                return getattr(module, name)
            if name == "get_tokenizer":
                from upkg.tokenizers import get_tokenizer

                warnings.warn("moved to upkg.tokenizers", DeprecationWarning, stacklevel=2)
                return get_tokenizer
            if name == "keep":
                from upkg.utils.misc import keep

                return keep
            raise AttributeError(name)
    """,
    "upkg/utils/network_utils.py": "def get_open_port():\n    return 1\n",
    "upkg/utils/misc.py": "def keep():\n    return 2\n",
    "upkg/tokenizers.py": "def get_tokenizer(name):\n    return name\n",
}
PLUGIN = {
    "myplug/__init__.py": "",
    "myplug/utils.py": "def vllm_version_is(v):\n    return False\n",
    "myplug/run.py": """
        from myplug.utils import vllm_version_is

        if vllm_version_is("0.5"):
            from upkg.inductor_pass import Pass
        else:
            from upkg.passes.inductor_pass import Pass
        from upkg.utils import get_open_port, get_tokenizer, keep


        def port():
            return get_open_port(), get_tokenizer("x"), keep(), Pass
    """,
}


@pytest.fixture
def report(project, tmp_path):
    return analyze_two_lane(tmp_path, OLD, NEW, PLUGIN)


def _record(report, symbol):
    return next((r for r in report.records + report.notes if r.symbol == symbol), None)


def test_an_import_for_an_older_release_names_its_home_at_the_target(report):
    record = _record(report, "upkg.inductor_pass.Pass")
    assert record is not None and record.new_location is not None
    assert record.new_location.dotted == "upkg.passes.inductor_pass.Pass"


def test_a_deprecation_table_of_a_module_getattr_gives_the_new_home(report):
    record = _record(report, "upkg.utils.get_open_port")
    assert record is not None and record.severity is Severity.NOTE
    assert record.new_location.dotted == "upkg.utils.network_utils.get_open_port"


def test_a_warning_getattr_branch_that_imports_the_name_gives_its_module(report):
    record = _record(report, "upkg.utils.get_tokenizer")
    assert record is not None and record.new_location.dotted == "upkg.tokenizers.get_tokenizer"


def test_a_getattr_branch_without_a_warning_is_no_finding(report):
    assert _record(report, "upkg.utils.keep") is None
    assert all(r.severity is not Severity.BREAKING for r in report.records if "get_" in r.symbol)


def test_relative_imports_in_a_branch_resolve_against_the_package():
    source = "import warnings\n\ndef __getattr__(name):\n    if name == 'f':\n        from .new import f\n" \
             "        warnings.warn('f is deprecated')\n        return f\n    raise AttributeError(name)\n"
    assert deprecated_homes(source, "pkg.sub.mod", "f", is_package=False) == [("pkg.sub.new", "f")]
    assert deprecated_homes(source, "pkg.sub", "f", is_package=True) == [("pkg.sub.new", "f")]
    assert deprecated_homes(source, "pkg.sub", "g", is_package=True) == []
