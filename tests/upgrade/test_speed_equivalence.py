"""The cold path's shortcuts give the answers of the slow way, on synthetic trees:
  * class facts read while a module is parsed (ModuleInfo.class_facts) equal those of parsing the
    module's source again and reading each class statement (the index's former way);
  * the caller search run in a worker pool equals the one run in-process, and one batch of several
    searches equals each search on its own."""

from __future__ import annotations

import ast
from concurrent.futures import ProcessPoolExecutor

from porter.upgrade import index as index_mod
from porter.upgrade.callers import call_shapes, call_shapes_many
from porter.upgrade.index import ClassFacts, TreeIndex, statements
from tests.upgrade.upgrade_fixtures import write_tree

CLASSES = '''
from dataclasses import dataclass, field
from pkg.other import Engine, Cache
import pkg.other as other


class Plain:
    def __init__(self, engine: Engine, cache: "Cache | None" = None):
        self.engine = engine
        self.cache = cache
        self.made = other.Engine()
        self.count = 0

    def run(self):
        return self.engine, self.missing


class Versioned:
    if True:
        def __init__(self, e: Engine):
            self.e = e
    else:
        def __init__(self, c: Cache):
            self.c = c
    try:
        def __init__(self):
            self.late: Cache = make()
    except ImportError:
        pass


@dataclass
class Fields:
    a: int
    b: str = "x"
    c: list = field(default_factory=list)


@dataclass(kw_only=True)
class KwFields(Fields):
    d: int = 0


@dataclass(init=False)
class NoInit:
    a: int


def factory():
    class Inner:
        def __init__(self, engine: Engine):
            self.engine = engine
    return Inner


class Plain:  # a second statement of the same name: its own line
    def __init__(self):
        self.other = Cache()
'''


def _reference_facts(info, source: bytes) -> dict[tuple[str, int], ClassFacts]:
    """The former TreeIndex.class_facts: parse the source again, take each class statement."""
    nodes: dict[tuple[str, int], ast.ClassDef] = {}
    for node in statements(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            nodes.setdefault((node.name, node.lineno), node)
    out = {}
    for key, node in nodes.items():
        types: dict[str, str] = {}
        for stmt in index_mod._class_statements(node.body):
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == "__init__":
                types = index_mod._attribute_types(info, stmt)
        options = index_mod._dataclass_options(node)
        fields = (tuple(index_mod._dataclass_fields(node, options["kw_only"]))
                  if options is not None and options["init"] else None)
        out[key] = ClassFacts(tuple(types.items()), fields)
    return out


def test_class_facts_read_in_the_parse_equal_a_second_parse(tmp_path):
    root = write_tree(tmp_path / "tree", {"pkg/__init__.py": "", "pkg/other.py": "class Engine:\n    pass\nclass Cache:\n    pass\n",
                                          "pkg/mod.py": CLASSES})
    index = TreeIndex(root, ["pkg"])
    info = index.module("pkg.mod")
    reference = _reference_facts(info, (root / "pkg/mod.py").read_bytes())
    assert len(reference) == 7  # Plain twice, Versioned, Fields, KwFields, NoInit, the nested Inner
    for (name, line), facts in reference.items():
        cls = index_mod.Definition(name, "class", line)
        assert index.class_facts(cls, "pkg.mod") == facts, name
    plain = index.resolve("pkg.mod", "Plain").definition
    assert dict(index.class_facts(plain, "pkg.mod").attribute_types) in (
        {"engine": "pkg.other.Engine", "cache": "pkg.other.Cache", "made": "pkg.other.Engine"}, {"other": "pkg.other.Cache"})
    assert index.class_facts(index_mod.Definition("Nowhere", "class", 1), "pkg.mod") == ClassFacts()
    # self reads stay answered from the source, methods other than __init__ only
    first = index_mod.Definition("Plain", "class", min(line for name, line in reference if name == "Plain"))
    assert index.class_reads(first, "pkg.mod") == {"engine", "missing"}


def _caller_tree(tmp_path):
    files = {"pkg/__init__.py": ""}
    for i in range(220):  # enough files for the pool path (4 x the parallel threshold)
        files[f"pkg/m{i:03d}.py"] = (
            f"def user{i}(x, layer):\n"
            f"    layer.forward(x{', scale=2' if i % 3 == 0 else ''})\n"
            f"    return Builder({i}, name='n')\n" if i % 5 == 0 else
            f"class Builder{i}:\n    def forward(self, x):\n        return x\n" if i % 7 == 0 else
            f"value{i} = {i}\n")
    files["pkg/top.py"] = "import pkg\npkg.layer.forward(1, 2)\nBuilder(1)\nobj.forward(*args)\n"
    files["pkg/broken.py"] = "def f(:\n    x.forward(1)\n"
    return write_tree(tmp_path / "tree", files)


def test_pooled_caller_search_equals_the_serial_one_and_a_batch_equals_each_search(tmp_path):
    root = _caller_tree(tmp_path)
    serial = TreeIndex(root, ["pkg"])
    alone = [call_shapes(serial, {"forward"}), call_shapes(serial, {"forward"}, {"Builder"}), call_shapes(serial, set())]
    with ProcessPoolExecutor(max_workers=2) as pool:
        pooled = TreeIndex(root, ["pkg"], pool=pool)
        batch = call_shapes_many([(pooled, {"forward"}, ()), (pooled, {"forward"}, {"Builder"}), (pooled, (), ())])
    assert batch == alone
    assert alone[0].files["forward"] == 45 and {s.keywords for s in alone[0].shapes["forward"]} == {frozenset(), frozenset({"scale"})}
    assert alone[1].files["Builder"] == 45
    assert alone[2].shapes == {} and alone[2].files == {}



def test_call_searches_started_early_are_taken_only_for_the_same_names(tmp_path):
    """DriftAnalyzer starts the caller searches of the passes after the checks while it checks the
    rest (one batch for both trees); a pass takes a started answer only when it asks for exactly the
    names started, and that answer equals the pass's own search."""
    from types import SimpleNamespace

    from porter.upgrade.drift import DriftAnalyzer
    from porter.upgrade.guards import GuardConventions, TargetVersions

    root = _caller_tree(tmp_path)
    serial = TreeIndex(root, ["pkg"])
    optional = call_shapes(serial, {"forward"}, {"Builder"})
    narrow = call_shapes_many([(serial, {"forward"}, ()), (serial, {"forward"}, ())])
    checked = [(None, None, [SimpleNamespace(detail={"optional_only": True, "method": "forward", "added": ["scale"]}),
                             SimpleNamespace(detail={"optional_only": True, "method": "__init__", "callee": "Builder",
                                                     "constructor": True, "added": ["name"]})], False)]
    with ProcessPoolExecutor(max_workers=2) as pool:
        target, baseline = TreeIndex(root, ["pkg"], pool=pool), TreeIndex(root, ["pkg"], pool=pool)
        analyzer = DriftAnalyzer(target, baseline, GuardConventions(), TargetVersions())
        analyzer._narrow_overrides = [(None, "forward", "P", None, None, None)]
        analyzer._start_call_searches(checked)
        assert analyzer._optional_callees(checked) == (frozenset({"forward"}), frozenset({"Builder"}))
        assert analyzer._started_sites("optional", (frozenset({"forward"}), frozenset({"Builder"}))) == [optional]
        assert analyzer._started_sites("narrow", frozenset({"forward"})) == narrow
        assert analyzer._started_sites("narrow", frozenset({"forward", "other"})) is None  # other names: searched anew
        assert analyzer._started_sites("optional", (frozenset({"forward"}), frozenset())) is None
        assert analyzer._started_sites("unreached", frozenset({"forward"})) is None  # nothing started for it
    serial_analyzer = DriftAnalyzer(serial, serial, GuardConventions(), TargetVersions())
    serial_analyzer._narrow_overrides = []
    serial_analyzer._start_call_searches(checked)  # no pool: nothing is started ahead
    assert serial_analyzer._started_sites("optional", (frozenset({"forward"}), frozenset({"Builder"}))) is None


_INIT_SOURCE = '''
import torch
from pkg.cfg import Config as Cfg

class Runner:
    def __init__(self, config: Cfg, device: "torch.device", n):
        self.early = torch.nn.Linear(1, 1)
        if n:
            self.late = Cfg()
            try:
                self.deep: torch.Tensor = make()
            except ValueError:
                self.deep = Cfg()
                self.handler = torch.Generator()
            with ctx():
                self.device = device
        else:
            self.late = torch.Stream()
        match n:
            case 1:
                self.matched = Cfg()
        def inner():
            self.inner = torch.Event()
        self.config = config
        self.early = Cfg()
        x = [self.comp for _ in range(n)]
'''


def test_attribute_types_reads_the_statements_alone_in_the_walks_order():
    """_attribute_types visits statements only (assignments are statements) and keeps ast.walk's
    order among them: the first assignment of an attribute in that order gives its type."""
    import ast

    tree = ast.parse(_INIT_SOURCE)
    info = index_mod._parse_module("pkg.run", "pkg/run.py", _INIT_SOURCE.encode())
    init = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    order = [n for n in ast.walk(init) if isinstance(n, (ast.Assign, ast.AnnAssign))]
    assert [n for n in index_mod.statements(init) if isinstance(n, (ast.Assign, ast.AnnAssign))] == order
    real_walk = index_mod.walk
    try:
        index_mod.walk = lambda node: (_ for _ in ()).throw(AssertionError("walked every node"))
        types = index_mod._attribute_types(info, init)
    finally:
        index_mod.walk = real_walk
    assert types == {"early": "torch.nn.Linear", "config": "pkg.cfg.Config",
                     "late": "pkg.cfg.Config", "deep": "torch.Tensor", "handler": "torch.Generator",
                     "matched": "pkg.cfg.Config", "inner": "torch.Event"}


def test_statements_skips_simple_statements_fields_and_keeps_the_walks_statements():
    """statements() does not look into a statement that holds no statement list (an assignment, an
    expression, an import...), and yields what the full walk yields of statements, in its order."""
    import ast

    tree = ast.parse(_INIT_SOURCE + CLASSES)
    blocks = (ast.stmt, ast.excepthandler, ast.match_case)
    assert list(index_mod.statements(tree)) == [n for n in ast.walk(tree) if isinstance(n, (ast.Module, *blocks))]

    # An expression statement holds no statement list; one forced into it is never looked for.
    odd = ast.Expr(value=[ast.Pass()])
    assert [type(n) for n in index_mod.statements(ast.Module(body=[odd], type_ignores=[]))] == [ast.Module, ast.Expr]


def test_a_module_without_the_class_keyword_is_not_searched_for_classes(monkeypatch):
    calls = []
    real = index_mod._class_facts_of
    monkeypatch.setattr(index_mod, "_class_facts_of", lambda info, tree: calls.append(info.name) or real(info, tree))
    index_mod._parse_module("pkg.util", "pkg/util.py", b"def f(x):\n    return x\n")
    info = index_mod._parse_module("pkg.run", "pkg/run.py", _INIT_SOURCE.encode())
    assert calls == ["pkg.run"] and info.class_facts
