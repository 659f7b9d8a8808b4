"""Text pre-checks of the cold path skip work only where the skipped work finds nothing: each check
answers like the full walk / search on sources with and without a match, and the work is skipped."""

from __future__ import annotations

import ast

import pytest

from porter.upgrade import values as values_mod
from porter.upgrade.predicates import find_predicates
from porter.upgrade.values import may_call_helper, value_calls

SOURCES = {
    "plain": 'x = vllm_version_is("0.10.0")\n',
    "kwarg": 'run(legacy=vllm_version_is("0.10.0"))\n',
    "attribute": 'import utils\nflag = [utils.vllm_version_is("0.9.2")]\n',
    "renamed": 'from vllm_ascend.utils import vllm_version_is as is_old\nf(is_old("0.10.0"))\n',
    "renamed-word": 'from vllm_ascend.utils import vllm_version_is as chk\nf(xchk(1), chk  # why\n  ("0.10.0"))\n',
    "comment-gap": 'f((vllm_version_is  # a comment ####\n    ("0.10.0")))\n',
    "cr-lines": 'f((vllm_version_is  # a comment\r    ("0.10.0")))\r',
    "continuation": 'f(get_VERSION \\\n ("1"))\n',
    "mention-only": '__version__ = "1.0"\n# the version of vllm\nx = {"version": 1}\ny = version\n',
    "guarded": 'if vllm_version_is("0.10.0"):\n    pass\n',
    "no-literal": 'x = vllm_version_is(v)\n',
    "non-ascii": '# café\nx = vllm_version_is("0.10.0")\n',
}


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_value_calls_with_the_source_equal_the_full_walk(name):
    text = SOURCES[name]
    tree = ast.parse(text)
    predicates = find_predicates(tree)
    full = [(c.lineno, c.col_offset) for c in value_calls(tree, predicates)]
    checked = [(c.lineno, c.col_offset) for c in value_calls(tree, predicates, text.encode())]
    assert checked == full
    if full:
        assert may_call_helper(text.encode(), predicates.renames)


def test_source_without_a_helper_call_is_not_walked(monkeypatch):
    text = SOURCES["mention-only"]
    tree = ast.parse(text)
    predicates = find_predicates(tree)

    def no_walk(node):
        raise AssertionError("walked a tree whose text holds no helper call")

    monkeypatch.setattr(values_mod, "walk", no_walk)
    assert value_calls(tree, predicates, text.encode()) == []
    with pytest.raises(AssertionError):
        value_calls(tree, predicates)  # without the text the walk runs


def test_helper_call_text_check():
    assert may_call_helper(b'f(vllm_version_is("1"))', {})
    assert may_call_helper(b'f(is_old("1"))', {"is_old": "vllm_version_is"})
    assert not may_call_helper(b'f(is_old("1"))', {})
    assert not may_call_helper(b'f(my_is_old("1"))', {"is_old": "vllm_version_is"})
    assert not may_call_helper(b'__version__ = "1"\nprint(x)\n', {})
    assert may_call_helper('# versión\nx = 1\n'.encode(), {})  # non-ASCII: never skipped
    # a comment line of many '#' after a version name answers at once (no backtracking blow-up)
    assert not may_call_helper(b"version  " + b"#" * 20000 + b"\n" + b"# x" * 5000, {})


INIT = '''
from pkg.engines import Engine, Cache
import pkg.other as other


class Holder:
    def __init__(self, engine: Engine, cache: "Cache | None" = None, n: int = 0):
        self.engine = engine
        if n:
            self.made = other.Engine()
        else:
            self.made = Cache()
        try:
            self.late: Cache = make()
        except ImportError:
            with open("x") as fh:
                for _ in fh:
                    self.looped = other.Runner()

        def helper():
            self.inner = Engine()

        match n:
            case 1:
                self.matched = other.Matched()
        self.cache = cache
        self.engine = Cache()  # the first store of a name wins
        self.lam = (lambda: Engine())()
'''


def test_attribute_types_read_statements_only_with_the_walk_answer(monkeypatch):
    from porter.upgrade import index as index_mod

    info = index_mod.parse_module("pkg.holder", "pkg/holder.py", INIT.encode())
    init = next(n for n in ast.walk(ast.parse(INIT)) if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    with monkeypatch.context() as former:  # the former way: every node of the walk, assignments picked out
        former.setattr(index_mod, "statements", index_mod.walk)
        expected = index_mod._attribute_types(info, init)
    assert expected["engine"] == "pkg.engines.Engine" and expected["inner"] == "pkg.engines.Engine"
    assert {"made", "late", "looped", "matched", "cache"} <= set(expected)

    def no_walk(node):
        raise AssertionError("walked every node of __init__ for its assignments")

    monkeypatch.setattr(index_mod, "walk", no_walk)
    got = index_mod._attribute_types(info, init)
    assert got == expected and list(got) == list(expected)  # the same stores, first-wins in the walk's order


def test_one_files_uses_under_one_condition_chain_are_combined_once(tmp_path, monkeypatch):
    """drift works out the Guard of a file's condition chain once, however many uses it guards;
    the guards (live or dead) are those of combining each use on its own."""
    from porter.upgrade import drift as drift_mod
    from porter.upgrade.guards import GuardConventions, TargetVersions
    from porter.upgrade.index import TreeIndex
    from porter.upgrade.usage import scan_plugin
    from tests.upgrade.upgrade_fixtures import write_tree

    conv = GuardConventions({"vllm_version_is": "pkg"}, {}, {"pkg": "pkg"})
    tree = {"pkg/__init__.py": "", "pkg/mod.py": "def a():\n    pass\ndef b():\n    pass\ndef c():\n    pass\n"}
    plugin = {"plug/x.py": (
        "import pkg.mod as m\nfrom plug.utils import vllm_version_is\n"
        "if vllm_version_is('0.1.0'):\n    m.a()\n    m.b()\n    m.c()\n    m.gone()\n"
        "else:\n    m.a()\n    m.b()\n")}
    b, t, p = write_tree(tmp_path / "b", tree), write_tree(tmp_path / "t", tree), write_tree(tmp_path / "p", plugin)
    files = scan_plugin(p, ["pkg"])
    calls = []
    real = drift_mod.combine

    def counting(conditions, *args, **kwargs):
        calls.append(conditions)
        return real(conditions, *args, **kwargs)

    monkeypatch.setattr(drift_mod, "combine", counting)
    result = drift_mod.compute_drift(files, TreeIndex(t, ["pkg"]), TreeIndex(b, ["pkg"]), conv,
                                     TargetVersions({"pkg": "0.2.0"}))
    chains = [u.conditions for f in files for u in f.uses]
    assert len(chains) > len(set(chains))  # several uses share a chain
    assert len(calls) == len(calls and set(calls))  # each chain combined once
    assert set(chains) <= set(calls)
    gone = [r for r in result.records + result.notes if r.symbol == "pkg.mod.gone"]
    assert all(not r.guard.live for r in gone)  # the use under the dead branch keeps its dead guard
