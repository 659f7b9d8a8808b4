"""Unit tests of the pieces: API index, guard evaluation, registry, archive extraction."""

from __future__ import annotations

import ast
import io
import tarfile
import textwrap
from pathlib import Path

import pytest
from packaging.version import Version

from porter.errors import InputError
from porter.registry import LedgerEntry, Ownership, append_ledger, load_forks, load_registry
from porter.upgrade import index as index_mod
from porter.upgrade.guards import Condition, GuardConventions, TargetVersions, combine, evaluate_condition
from porter.upgrade.index import TreeIndex, parse_module
from porter.upgrade.models import GuardKind
from porter.upgrade.sources import check_ref_syntax, extract_archive, parse_release

from tests.upgrade.upgrade_fixtures import write_tree


def module(source: str, name: str = "pkg.mod", path: str = "pkg/mod.py"):
    return parse_module(name, path, textwrap.dedent(source).encode())


def test_index_records_members_signatures_and_conditions():
    info = module("""
        import typing
        from abc import ABC, abstractmethod
        from .base import Base as B
        if typing.TYPE_CHECKING:
            from .types import T
        try:
            from fast import speedy
        except ImportError:
            def speedy(x, /, y, *args, z, w=1, **kw) -> int:
                return x
        __all__ = ["Thing", "speedy"]
        __all__ += ["extra"]

        class Thing(B, ABC):
            limit: int = 3

            def __init__(self, a, b=2):
                self.a = a
                self.cache: dict = {}

            @abstractmethod
            def step(self): ...

            def todo(self):
                \"\"\"Subclasses implement this.\"\"\"
                raise NotImplementedError

            @property
            def size(self):
                return 1
        """)
    thing = info.defs["Thing"]
    assert thing.bases == ("pkg.base.Base", "abc.ABC")
    assert set(thing.instance_attrs) == {"a", "cache"}
    assert set(thing.abstract) == {"step", "todo"}
    assert thing.member("size").kind == "property"
    assert thing.member("limit").kind == "variable"
    assert thing.signature.render() == "(a, b=…)"  # the constructor, self bound
    speedy = info.defs["speedy"]
    assert speedy.conditional == "try"
    assert speedy.signature.render() == "(x, y, *args, z, w=…, **kw) -> int"
    assert speedy.signature.accepts_keyword("anything") and speedy.signature.required_names() == ("x", "y", "z")
    assert info.imports["T"].conditional == "type_checking"
    assert info.all_names == ("Thing", "speedy", "extra")


def test_lazy_module_names_and_unknowns():
    info = module("""
        MODULE_ATTRS = {"LLM": ".entrypoints:LLM", "SamplingParams": ".sampling:SamplingParams"}
        def __getattr__(name):
            if name in MODULE_ATTRS:
                return 1
            if name == "legacy":
                return 2
            raise AttributeError(name)
        """)
    assert info.lazy and {"LLM", "SamplingParams", "legacy"} <= set(info.lazy_names)
    assert info.lazy_closed  # every other name raises AttributeError
    open_info = module("""
        import importlib
        def __getattr__(name):
            return importlib.import_module("pkg." + name)
        """)
    assert open_info.lazy and not open_info.lazy_closed
    else_info = module("""
        import typing
        MODULE_ATTRS = {"LLM": ".llm:LLM"}
        if typing.TYPE_CHECKING:
            from .llm import LLM
        else:
            def __getattr__(name: str) -> typing.Any:
                from importlib import import_module
                if name in MODULE_ATTRS:
                    return import_module(MODULE_ATTRS[name])
                else:
                    raise AttributeError(name)
        """)
    assert else_info.lazy_closed and "LLM" in else_info.lazy_names


def test_syntax_error_is_unknown_not_missing(tmp_path):
    write_tree(tmp_path, {"pkg/__init__.py": "", "pkg/broken.py": "def f(:\n"})
    idx = TreeIndex(tmp_path, ["pkg"])
    res = idx.resolve("pkg.broken", "f")
    assert res.status == "unknown" and "SyntaxError" in res.reason
    assert idx.resolve("pkg", "nothing").status == "missing"
    assert idx.resolve("os.path", "join").status == "external"


def test_cache_by_content_and_parallel_prefetch(tmp_path, monkeypatch):
    files = {"pkg/__init__.py": ""}
    files.update({f"pkg/m{i}.py": f"def f{i}(a, b=1):\n    return a\n" for i in range(12)})
    write_tree(tmp_path / "tree", files)
    monkeypatch.setattr(index_mod, "_PARALLEL_THRESHOLD", 4)
    cold = TreeIndex(tmp_path / "tree", ["pkg"], tmp_path / "cache")
    cold.prefetch([f"pkg.m{i}" for i in range(12)], workers=2)
    assert cold.stats == {"parsed": 12, "cached": 0}
    assert cold.resolve("pkg.m3", "f3").definition.signature.names == ("a", "b")
    warm = TreeIndex(tmp_path / "tree", ["pkg"], tmp_path / "cache")
    warm.prefetch([f"pkg.m{i}" for i in range(12)])
    assert warm.stats == {"parsed": 0, "cached": 12}
    (tmp_path / "tree" / "pkg" / "m3.py").write_text("def g3():\n    pass\n")
    changed = TreeIndex(tmp_path / "tree", ["pkg"], tmp_path / "cache")
    assert changed.resolve("pkg.m3", "f3").status == "missing" and changed.stats["parsed"] == 1


def test_find_definitions_searches_the_whole_tree(tmp_path):
    write_tree(tmp_path, {"pkg/__init__.py": "", "pkg/a.py": "class Needle:\n    pass\n",
                          "pkg/deep/__init__.py": "", "pkg/deep/b.py": "Needle = 1\nasync def other():\n    pass\n"})
    found = TreeIndex(tmp_path, ["pkg"]).find_definitions(["Needle", "other", "absent"])
    assert sorted(m for m, _ in found["Needle"]) == ["pkg.a", "pkg.deep.b"]
    assert [m for m, _ in found["other"]] == ["pkg.deep.b"] and found["absent"] == []


CONV = GuardConventions({"vllm_version_is": "vllm"}, {"CURRENT_VERSION": "torch"}, {"torch": "torch", "vllm": "vllm"})


@pytest.mark.parametrize(
    ("source", "negated", "versions", "expected"),
    [
        ('vllm_version_is("0.11.0")', False, {"vllm": "0.11.0"}, True),
        ('vllm_version_is("0.11.0")', True, {"vllm": "0.11.0"}, False),
        ('utils.vllm_version_is("0.11.0")', False, {"vllm": "0.13.0"}, False),
        ('vllm_version_is("0.11.0")', False, {"vllm": None}, False),  # main: no release matches
        ('not vllm_version_is("0.11.0") and flag', False, {"vllm": "0.11.0"}, False),
        ('vllm_version_is("0.11.0") or flag', False, {"vllm": "0.13.0"}, None),
        ("CURRENT_VERSION >= (2, 11)", False, {"torch": "2.11.0"}, True),
        ("CURRENT_VERSION < (2, 11)", False, {"torch": "2.12.0"}, False),
        ("(2, 14) <= CURRENT_VERSION", False, {"torch": "2.13.0"}, False),
        ('Version(torch.__version__) >= Version("2.1")', False, {"torch": "2.0.1"}, False),
        ("some_runtime_flag()", False, {}, None),
    ],
)
def test_version_guards(source, negated, versions, expected):
    target = TargetVersions({k: Version(v) if v else None for k, v in versions.items()})
    assert evaluate_condition(Condition("if", source, negated), CONV, target) is expected


def test_combined_guard_reports_the_deciding_condition():
    target = TargetVersions({"vllm": Version("0.13.0")})
    conds = (Condition("try", "", False, 1), Condition("if", 'vllm_version_is("0.11.0")', False))
    guard = combine(conds, CONV, target)
    assert guard.live is False and guard.kind == GuardKind.VERSION
    assert combine((Condition("type_checking", "TYPE_CHECKING"),), CONV, target).live is False
    assert combine((Condition("type_checking", "TYPE_CHECKING", True),), CONV, target).live is True
    hasattr_guard = combine((Condition("if", 'hasattr(m, "x")'),), CONV, target, lambda d, a: False, {"m": "vllm.m"})
    assert hasattr_guard.live is False and hasattr_guard.kind == GuardKind.HASATTR


def test_ref_and_version_syntax():
    assert parse_release("v0.13.0") == Version("0.13.0") and parse_release("main") is None
    for good in ("0.13.0", "v0.13.0", "main", "release/3.2.x", "85400f8", "2.10.0.post4"):
        check_ref_syntax(good)
    for bad in ("0.x.1", "1..2", "", "bad ref", "-rf"):
        with pytest.raises(InputError) as info:
            check_ref_syntax(bad)
        assert info.value.hint, f"{bad!r}: the error must say what to give instead"


def test_sdist_extraction_keeps_python_only(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in {"pkg-1.0/pkg/__init__.py": b"x = 1\n", "pkg-1.0/pkg/_ops.so": b"\x7fELF",
                           "pkg-1.0/README.md": b"hi", "pkg-1.0/../evil.py": b"bad"}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    archive = tmp_path / "pkg-1.0.tar.gz"
    archive.write_bytes(buf.getvalue())
    dest = tmp_path / "out"
    assert extract_archive(archive, dest) == 1
    assert (dest / "pkg" / "__init__.py").read_text() == "x = 1\n"
    assert (dest / ".porter-extensions.txt").read_text().split() == ["pkg._ops"]
    assert not (tmp_path / "evil.py").exists() and not (dest / "README.md").exists()
    broken = tmp_path / "broken.tar.gz"
    broken.write_bytes(buf.getvalue()[:50])
    with pytest.raises(InputError):
        extract_archive(broken, tmp_path / "out2")
    assert not (tmp_path / "out2").exists()


def test_registry_of_this_repository_loads():
    root = Path(__file__).resolve().parents[2]
    registry = load_registry(root / "knowledge" / "upstreams.yaml")
    assert {"vllm-ascend", "torch-npu", "triton-ascend", "transformers-npu", "vime"} <= set(registry.plugins)
    va = registry.plugin("vllm-ascend")
    assert va.primary_upstream == "vllm" and va.guards.version_functions == {"vllm_version_is": "vllm"}
    assert [p.plugin for p in va.pairs_for("vllm", "0.11.0")] == ["0.11.0"]
    transformers = registry.upstream("transformers").ownership
    assert transformers.decide("src/transformers/integrations/npu_flash_attention.py") == "patch"
    assert transformers.decide("src/transformers/modeling_utils.py") == "report"
    forks = load_forks(root / "forks" / "forks.yaml")
    assert forks["vime"].path == root and forks["vllm-ascend"].baseline == {"vllm": "0.27.1"}
    # `porter upgrade vime --to X` needs a baseline for vime's primary upstream to compare against
    assert registry.plugin("vime").primary_upstream in forks["vime"].baseline
    with pytest.raises(InputError, match="unknown plugin"):
        registry.plugin("nope")


def test_registry_validation_names_the_key(tmp_path):
    bad = tmp_path / "u.yaml"
    bad.write_text("upstreams: {a: {packages: [a]}}\nplugins: {p: {upstreams: [b]}}\n")
    with pytest.raises(InputError, match=r"plugins\.p\.upstreams names unknown upstream\(s\) b"):
        load_registry(bad)
    bad.write_text("upstreams: {a: {packages: 3}}\n")
    with pytest.raises(InputError, match=r"upstreams\.a\.packages: expected a list"):
        load_registry(bad)


def test_ledger_append_is_atomic_and_keeps_entries(tmp_path):
    forks_file = tmp_path / "forks" / "forks.yaml"
    forks_file.parent.mkdir()
    forks_file.write_text("schema: 1\nforks:\n  f:\n    plugin: p\n    baseline: {up: '1.0'}\n")
    entry = LedgerEntry(slug="up-2.0", branch="ascend-port/up-2.0", upstream="up", target="2.0",
                        outcome="C_PATCH", created="2026-11-29T10:00:00Z", commits=("abc",))
    append_ledger(forks_file, "f", entry)
    append_ledger(forks_file, "f", entry)
    fork = load_forks(forks_file)["f"]
    assert fork.ledger == (entry, entry) and fork.branches == ("ascend-port/up-2.0",)
    assert fork.path == (tmp_path / "forks" / "f").resolve()
    assert not [p for p in forks_file.parent.iterdir() if p.name.endswith(".tmp")]
    with pytest.raises(InputError, match="unknown fork"):
        append_ledger(forks_file, "g", entry)


def test_ownership_patch_globs_win():
    own = Ownership(patch=("src/x/npu_*",), report=("**",))
    assert own.decide("src/x/npu_fa.py") == "patch" and own.decide("src/x/core.py") == "report"
    assert Ownership().decide("a.py") is None


def test_usage_scan_finds_every_kind(tmp_path):
    from porter.upgrade.usage import scan_source

    source = textwrap.dedent("""
        import vllm.envs as envs
        from vllm.layers import FusedMoE as FM
        import vllm
        class MyMoE(FM):
            def __init__(self, *a, **k):
                super().__init__(*a, hidden=1, **k)
                self.extra = 1
            def forward(self, x, *, scale=1.0):
                return super().forward(x, scale=scale)
        def patch():
            vllm.layers.Thing = object
            setattr(envs, "FLAG", True)
            return envs.VLLM_USE_V1, FM.create(size=3)
        """).encode()
    usage = scan_source("p.py", source, ["vllm"])
    kinds = {(u.kind, u.symbol) for u in usage.uses}
    assert ("module", "vllm.envs") in kinds and ("import", "vllm.layers.FusedMoE") in kinds
    assert ("subclass", "vllm.layers.FusedMoE") in kinds
    assert ("monkeypatch", "vllm.layers.Thing") in kinds and ("monkeypatch", "vllm.envs.FLAG") in kinds
    assert ("attribute", "vllm.envs.VLLM_USE_V1") in kinds
    calls = {u.symbol: u.detail for u in usage.uses if u.kind == "call"}
    assert calls["vllm.layers.FusedMoE"]["keywords"] == ["hidden"] and calls["vllm.layers.FusedMoE"]["via_super"]
    assert calls["vllm.layers.FusedMoE.forward"]["keywords"] == ["scale"]
    assert calls["vllm.layers.FusedMoE.create"]["keywords"] == ["size"]
    sub = next(u for u in usage.uses if u.kind == "subclass")
    assert sub.detail["calls_super_init"] and "extra" in sub.detail["attrs"] and "forward" in sub.detail["methods"]
    lines = {(u.kind, u.symbol): u.site.line for u in usage.uses}
    assert lines[("monkeypatch", "vllm.layers.Thing")] == 12 and lines[("monkeypatch", "vllm.envs.FLAG")] == 13
    assert lines[("subclass", "vllm.layers.FusedMoE")] == 5 and usage.uses[0].site.code == "import vllm.envs as envs"


@pytest.mark.parametrize(
    ("a", "b", "equal"),
    [
        ("Optional[List[int]]", "list[int] | None", True),
        ("typing.Union[None, List[int]]", '"list[int] | None"', True),
        ("'Batch' | Tree[_U]", "Union['Batch', Tree[_U]]", True),
        ("Tuple[torch.Tensor, torch.Tensor]", "tuple[Tensor, Tensor]", True),
        ("torch.Tensor", "tuple[torch.Tensor, torch.Tensor]", False),
        ("Iterable[int]", "Generator[int, None, None]", False),
    ],
)
def test_return_annotations_compare_by_meaning(a, b, equal):
    from porter.upgrade.drift import normalize_annotation

    assert (normalize_annotation(a) == normalize_annotation(b)) is equal


def test_parallel_plugin_scan_matches_serial(trees, tmp_path, monkeypatch):
    from porter.upgrade import usage as usage_mod

    import concurrent.futures

    serial = usage_mod.scan_plugin(trees["plugin"], ["upkg"], workers=1)
    assert sum(len(f.uses) for f in serial) > 20  # something to compare
    monkeypatch.setattr(usage_mod, "_PARALLEL_THRESHOLD", 2)
    pools = []
    real_pool = concurrent.futures.ProcessPoolExecutor

    def counting_pool(*args, **kwargs):
        pools.append(kwargs.get("max_workers"))
        return real_pool(*args, **kwargs)

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", counting_pool)
    parallel = usage_mod.scan_plugin(trees["plugin"], ["upkg"], tmp_path / "cache", workers=2)
    assert pools == [2], "the scan must have gone through the process pool"
    assert [f.path for f in parallel] == [f.path for f in serial]
    assert [u.to_dict() for f in parallel for u in f.uses] == [u.to_dict() for f in serial for u in f.uses]

    def no_scan(*args, **kwargs):
        raise AssertionError("a cached file was scanned again")

    monkeypatch.setattr(usage_mod, "scan_source", no_scan)
    cached = usage_mod.scan_plugin(trees["plugin"], ["upkg"], tmp_path / "cache", workers=2)
    assert [u.to_dict() for f in cached for u in f.uses] == [u.to_dict() for f in serial for u in f.uses]


def test_git_errors_keep_the_fatal_line():
    from porter.upgrade.sources import _git_reason

    class Failure:
        stderr = ("\n  stderr: 'Cloning into bare repository '/tmp/x'...\n"
                  "fatal: unable to access 'https://example.invalid/v.git/': Could not resolve host: example.invalid\n'")

    assert _git_reason(Failure()) == "fatal: unable to access 'https://example.invalid/v.git/': Could not resolve host: example.invalid"


def test_new_home_ranking_prefers_generic_paths_and_named_modules(tmp_path):
    from porter.upgrade.drift import compute_drift
    from porter.upgrade.usage import scan_plugin

    base = {"pkg/__init__.py": "", "pkg/layers/__init__.py": "", "pkg/utils.py": "logger = make_logger()\n",
            "pkg/layers/sampler.py": "class Sampler:\n    def __init__(self):\n        self.x = 1\n"}
    target = {"pkg/__init__.py": "", "pkg/utils.py": "", "pkg/logger.py": "logger = make_logger()\n",
              "pkg/v1/__init__.py": "", "pkg/v1/tpu/__init__.py": "", "pkg/v1/sample/__init__.py": "",
              "pkg/v1/tpu/sampler.py": "class Sampler:\n    def __init__(self):\n        self.x = 1\n",
              "pkg/v1/sample/sampler.py": "class Sampler:\n    def __init__(self, mode=None):\n        self.x = 1\n"}
    target.update({f"pkg/m{i}.py": "logger = make_logger()\n" for i in range(8)})
    plugin = {"plug/a.py": "from pkg.layers.sampler import Sampler\nfrom pkg.utils import logger\n"}
    b, t, p = write_tree(tmp_path / "b", base), write_tree(tmp_path / "t", target), write_tree(tmp_path / "p", plugin)
    result = compute_drift(scan_plugin(p, ["pkg"]), TreeIndex(t, ["pkg"]), TreeIndex(b, ["pkg"]), CONV,
                           TargetVersions({}))
    homes = {r.symbol: r.new_location.dotted for r in result.records}
    assert homes["pkg.layers.sampler.Sampler"] == "pkg.v1.sample.sampler.Sampler"  # not the tpu copy
    assert homes["pkg.utils.logger"] == "pkg.logger.logger"  # the module named after it
    logger = next(r for r in result.records if r.symbol == "pkg.utils.logger")
    assert any("modules define this name" in e for e in logger.evidence)


@pytest.mark.parametrize("source", ["FLAGS[0]", "0 < level < 3", "x is None", "'a' + b", "3"])
def test_guards_porter_cannot_decide_are_unknown(source):
    assert evaluate_condition(Condition("if", source), CONV, TargetVersions({"vllm": Version("0.13.0")})) is None


@pytest.mark.parametrize(("cond", "kind"), [
    (Condition("try", "ImportError"), GuardKind.IMPORT_ERROR),
    (Condition("handler", "ImportError"), GuardKind.IMPORT_ERROR),
    (Condition("suppress", "ImportError"), GuardKind.IMPORT_ERROR),
    (Condition("type_checking", "TYPE_CHECKING"), GuardKind.TYPE_CHECKING),
    (Condition("if", 'hasattr(torch, "npu")'), GuardKind.HASATTR),
    (Condition("if", 'vllm_version_is("0.11.0")'), GuardKind.VERSION),
    (Condition("if", "use_fast_path"), GuardKind.NONE),
])
def test_guard_kinds(cond, kind):
    from porter.upgrade.guards import guard_kind

    assert guard_kind(cond, CONV) is kind


@pytest.mark.parametrize(("cond", "text"), [
    (Condition("if", "flag"), "flag"),
    (Condition("if", "flag", True), "not (flag)"),
    (Condition("type_checking", "TYPE_CHECKING"), "if TYPE_CHECKING"),
    (Condition("type_checking", "TYPE_CHECKING", True), "not TYPE_CHECKING"),
    (Condition("try", "ImportError,ModuleNotFoundError"), "try: ... except (ImportError, ModuleNotFoundError)"),
    (Condition("handler", "ImportError"), "except ImportError: (fallback)"),
    (Condition("suppress", ""), "contextlib.suppress(ImportError)"),
])
def test_guard_descriptions(cond, text):
    from porter.upgrade.guards import describe

    assert describe(cond) == text


def test_condition_identity_covers_kind_source_negation_and_try_block():
    base = Condition("try", "ImportError", False, 1)
    variants = [Condition("if", "ImportError", False, 1), Condition("try", "X", False, 1),
                Condition("try", "ImportError", True, 1), Condition("try", "ImportError", False, 2)]
    assert all(v.to_tuple() != base.to_tuple() for v in variants)
