"""How the index loads upstream modules on a cold run: both trees in one batch, files identical in
both parsed once, re-export chains followed in waves (nothing left to parse on demand), and local
archives hashed by the worker that extracts them, once per file."""

from __future__ import annotations

import io
import os
import tarfile
from concurrent.futures import ThreadPoolExecutor

import pytest

from porter.upgrade import index as index_mod
from porter.upgrade import sources as sources_mod
from porter.upgrade.index import TreeIndex, prefetch_many, prefetch_reach
from porter.upgrade.sources import Sources

from tests.upgrade.upgrade_fixtures import write_tree

SAME = "def helper(a, b=1):\n    return a\n"


def _trees(tmp_path):
    old = write_tree(tmp_path / "old", {
        "pkg/__init__.py": "from pkg.api import Public\n",
        "pkg/api.py": "from pkg._impl.core import Public\n",
        "pkg/_impl/__init__.py": "",
        "pkg/_impl/core.py": "from pkg._impl.base import Base\n\nclass Public(Base):\n    def run(self, x):\n        pass\n",
        "pkg/_impl/base.py": "class Base:\n    def setup(self):\n        pass\n",
        "pkg/same.py": SAME,
    })
    new = write_tree(tmp_path / "new", {
        "pkg/__init__.py": "from pkg.api import *\n",
        "pkg/api.py": "__all__ = ['Public']\nfrom pkg._impl.core import Public\n",
        "pkg/_impl/__init__.py": "",
        "pkg/_impl/core.py": "from pkg._impl.base import Base\n\nclass Public(Base):\n    def run(self, x, y=0):\n        pass\n",
        "pkg/_impl/base.py": "class Base:\n    def setup(self, strict=False):\n        pass\n",
        "pkg/same.py": SAME,
    })
    return old, new


def test_identical_files_in_two_trees_are_parsed_once(tmp_path, monkeypatch):
    old_root, new_root = _trees(tmp_path)
    monkeypatch.setattr(index_mod, "_PARALLEL_THRESHOLD", 1)
    old = TreeIndex(old_root, ["pkg"], tmp_path / "cache")
    new = TreeIndex(new_root, ["pkg"], tmp_path / "cache")
    with ThreadPoolExecutor(2) as pool:
        old.pool = new.pool = pool
        prefetch_many([(new, ["pkg.same", "pkg.api"]), (old, ["pkg.same", "pkg.api", "pkg.nowhere"])])
    assert new.stats == {"parsed": 2, "cached": 0}
    assert old.stats == {"parsed": 1, "cached": 1}  # pkg.same: the new tree's parse
    assert old.resolve("pkg.same", "helper").definition.signature.names == ("a", "b")
    assert old.module("pkg.api").imports["Public"].module == "pkg._impl.core"


def test_waves_follow_reexports_and_bases_so_nothing_is_parsed_later(tmp_path):
    old_root, new_root = _trees(tmp_path)
    old = TreeIndex(old_root, ["pkg"], tmp_path / "cache")
    new = TreeIndex(new_root, ["pkg"], tmp_path / "cache")
    assert new.unparsed_reach(["pkg.Public.setup"]) == {"pkg"}  # only what the loaded modules lead to
    prefetch_reach([new, old], ["pkg"], ["pkg.Public.setup"])
    loaded = {"pkg", "pkg.api", "pkg._impl.core", "pkg._impl.base"}
    assert loaded <= set(new._modules) and loaded <= set(old._modules)
    assert "pkg.same" not in new._modules  # not reached: not parsed
    before = (dict(new.stats), dict(old.stats))
    setup = new.resolve_dotted("pkg.Public.setup")
    assert setup.status == "found" and setup.definition.signature.names == ("self", "strict")
    assert old.resolve_dotted("pkg.Public.run").definition.signature.names == ("self", "x")
    assert new.resolve_dotted("pkg.Public.gone").status == "missing"
    assert (new.stats, old.stats) == before  # the waves left nothing to parse on demand


def test_later_waves_ask_only_unsettled_names_and_plan_what_asking_all_plans(tmp_path, monkeypatch):
    """After a wave, only the names whose planning met an unloaded module (directly or through a memo
    entry that did) are planned again; the waves request the modules that re-planning every name requests."""
    chain = {"pkg/__init__.py": "from pkg.a import X\nfrom pkg.k import K\n", "pkg/a.py": "from pkg.b import X\n",
             "pkg/b.py": "from pkg.c import X\n", "pkg/c.py": "from pkg.d import Base\n\nclass X(Base):\n    pass\n",
             "pkg/d.py": "from pkg.e import Root\n\nclass Base(Root):\n    pass\n", "pkg/e.py": "class Root:\n    def r(self):\n        pass\n",
             "pkg/k.py": "K = 1\n", "pkg/unused.py": "Z = 1\n"}
    root = write_tree(tmp_path / "tree", chain)
    symbols = ["pkg.X", "pkg.a.X", "pkg.X.r", "pkg.K", "pkg.k.K", "pkg.nowhere"]

    def waves(planner):
        requested = []
        real = index_mod.prefetch_many
        monkeypatch.setattr(index_mod, "prefetch_many", lambda batch, *a, **k: requested.append(
            [sorted(n) for _, n in batch]) or real(batch, *a, **k))
        planner()
        monkeypatch.setattr(index_mod, "prefetch_many", real)
        return requested

    settled = TreeIndex(root, ["pkg"])
    got = waves(lambda: prefetch_reach([settled], ["pkg"], symbols))

    def every_name():  # the former waves: every name planned again after each wave
        index = TreeIndex(root, ["pkg"])
        index_mod.prefetch_many([(index, ["pkg"])], persist=False)
        for _ in range(4):
            planned = sorted(index.unparsed_reach(symbols))
            if not planned:
                break
            index_mod.prefetch_many([(index, planned)], persist=False)

    assert got == waves(every_name) == [[["pkg"]], [["pkg.a", "pkg.k"]], [["pkg.b"]], [["pkg.c"]], [["pkg.d"]]]
    index = TreeIndex(root, ["pkg"])
    index.module("pkg")
    planned, unsettled = index.plan_reach(["pkg.X", "pkg.a.X", "pkg.nowhere", "other.x"])
    assert planned == {"pkg.a"} and unsettled == ["pkg.X", "pkg.a.X"]  # pkg.a.X met pkg.a through the memo


def test_planning_keeps_no_conclusion(tmp_path):
    _, new_root = _trees(tmp_path)
    new = TreeIndex(new_root, ["pkg"])
    new.module("pkg")
    new.unparsed_reach(["pkg.Public"])  # pkg.api unparsed: this resolution would say "missing"
    assert new.resolve("pkg", "Public").status == "found"


def test_memoized_dotted_answers_and_ancestry_equal_a_fresh_index_and_planning_keeps_none(tmp_path):
    """resolve_dotted() and mro() keep their answers outside planning: each equals the answer of a
    fresh index asked once, and an answer given while unparsed_reach() plans is not kept."""
    _, new_root = _trees(tmp_path)
    names = ["pkg.Public", "pkg.Public.setup", "pkg.Public.run", "pkg.Public.gone", "pkg.api.Public", "pkg.same.helper",
             "pkg.nowhere.X", "pkg._impl.base.Base.setup", "other.thing"]
    planned = TreeIndex(new_root, ["pkg"])
    planned.module("pkg")
    planned.unparsed_reach(names)  # pkg.api unparsed: planning resolves pkg.Public as missing
    asked = TreeIndex(new_root, ["pkg"])
    for _ in range(2):  # the second round is answered from the memo
        for name in names:
            assert planned.resolve_dotted(name) == asked.resolve_dotted(name) == TreeIndex(new_root, ["pkg"]).resolve_dotted(name)
    assert planned.resolve_dotted("pkg.Public.setup").status == "found"
    cls, where = asked.class_of("pkg.Public")
    first = asked.mro(cls, where)
    first.append(("mutated", "by a caller"))  # a caller's list is its own
    fresh = TreeIndex(new_root, ["pkg"])
    assert [(k.name, m) for k, m in asked.mro(cls, where)] == [(k.name, m) for k, m in fresh.mro(*fresh.class_of("pkg.Public"))] \
        == [("Public", "pkg._impl.core"), ("Base", "pkg._impl.base")]


def test_cache_key_names_the_file(tmp_path):
    """A module `pkg/a.py` and a package `pkg/a/__init__.py` with the same text are different records."""
    first = write_tree(tmp_path / "one", {"pkg/__init__.py": "", "pkg/a.py": "from .b import c\n"})
    second = write_tree(tmp_path / "two", {"pkg/__init__.py": "", "pkg/a/__init__.py": "from .b import c\n"})
    assert TreeIndex(first, ["pkg"], tmp_path / "cache").module("pkg.a").imports["c"].module == "pkg.b"
    again = TreeIndex(second, ["pkg"], tmp_path / "cache")
    assert again.module("pkg.a").imports["c"].module == "pkg.a.b" and again.stats["parsed"] == 1


def _sdist(path, files):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"pkg-1.0/{name}")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    path.write_bytes(buf.getvalue())
    return path


def test_archives_are_hashed_by_the_extracting_worker_and_once_per_file(tmp_path, monkeypatch):
    archive = _sdist(tmp_path / "pkg-1.0.tar.gz", {"pkg/__init__.py": "x = 1\n"})
    hashed = []
    real = sources_mod.archive_digest
    monkeypatch.setattr(sources_mod, "archive_digest", lambda data: hashed.append(len(data)) or real(data))
    with ThreadPoolExecutor(1) as pool:
        sources = Sources(tmp_path / "cache")
        sources.prepare_archives([archive], pool, min_bytes=0)
        tree = sources.archive_tree(archive, "1.0")
    assert not tree.from_cache and len(hashed) == 1 and (tree.root / "pkg" / "__init__.py").is_file()
    warm = Sources(tmp_path / "cache")  # a later run: the digest is remembered for this file
    with ThreadPoolExecutor(1) as pool:
        warm.prepare_archives([archive], pool, min_bytes=0)
        again = warm.archive_tree(archive, "1.0")
    assert again.from_cache and again.root == tree.root and len(hashed) == 1
    mtime = archive.stat().st_mtime_ns
    _sdist(archive, {"pkg/__init__.py": "x = 2\n"})  # rewritten: a new mtime, hashed again
    os.utime(archive, ns=(mtime + 10**9, mtime + 10**9))
    changed = Sources(tmp_path / "cache").archive_tree(archive, "1.0")
    assert changed.root != tree.root and (changed.root / "pkg" / "__init__.py").read_text() == "x = 2\n"
    assert len(hashed) == 2


def test_a_corrupt_archive_in_the_pool_is_reported_where_it_is_resolved(tmp_path):
    archive = _sdist(tmp_path / "pkg-1.0.tar.gz", {"pkg/__init__.py": "x = 1\n"})
    broken = tmp_path / "broken-1.0.tar.gz"
    broken.write_bytes(archive.read_bytes()[:-20])
    sources = Sources(tmp_path / "cache")
    with ThreadPoolExecutor(1) as pool:
        sources.prepare_archives([broken], pool, min_bytes=0)
        with pytest.raises(Exception, match="not a readable tar archive"):
            sources.archive_tree(broken, "1.0")


def test_new_home_search_in_a_pool_finds_what_the_serial_search_finds(tmp_path, monkeypatch):
    files = {"pkg/__init__.py": ""}
    files.update({f"pkg/m{i}.py": f"class Needle{i % 3}:\n    pass\nasync def other{i % 5}():\n    pass\nvalue{i} = 1\n"
                  for i in range(40)})
    root = write_tree(tmp_path / "tree", files)
    names = ["Needle1", "other2", "value7", "absent"]
    serial = TreeIndex(root, ["pkg"]).find_definitions(names, limit=50)
    monkeypatch.setattr(index_mod, "_PARALLEL_THRESHOLD", 2)
    with ThreadPoolExecutor(2) as pool:
        pooled = TreeIndex(root, ["pkg"], pool=pool).find_definitions(names, limit=50)
    assert {n: [m for m, _ in v] for n, v in pooled.items()} == {n: [m for m, _ in v] for n, v in serial.items()}
    assert len(serial["Needle1"]) == 13 and [m for m, _ in serial["value7"]] == ["pkg.m7"] and serial["absent"] == []


def _name_specific_search(root, names):
    """find_definitions' former pass: one pattern naming every wanted name (the reference)."""
    import re

    alternation = "|".join(re.escape(n) for n in names)
    pattern = re.compile(rf"^(?:(?:async\s+)?def|class)\s+({alternation})\b|^({alternation})\s*[:=]".encode(), re.MULTILINE)
    return {m: found for m, _, found in TreeIndex(root, ["pkg"]).matches(pattern)}


def test_the_general_definition_pass_finds_what_the_name_specific_pattern_finds(tmp_path, monkeypatch):
    tricky = ("class Needle(Base):\n    pass\nNeedle_x = 1\nNeedleX: int = 2\nasync  def other(): pass\n"
              "def\tother2(): pass\nvalue7 : int\nvalue7=3\n  zeta = 1\nclass\nvalue9 = 1\n"
              "def Needleé(): pass\n_private = 1\nif x:\n    other = 1\nvalue10 == 1\n")
    files = {"pkg/__init__.py": "", "pkg/tricky.py": tricky}
    files.update({f"pkg/m{i}.py": f"class Needle{i % 3}:\n    pass\nvalue{i} = 1\n" for i in range(60)})
    root = write_tree(tmp_path / "tree", files)
    names = ["Needle", "Needle1", "other", "other2", "value7", "zeta", "value9", "value10", "_private", "absent"]
    reference = _name_specific_search(root, names)
    serial = TreeIndex(root, ["pkg"]).find_definitions(names, limit=100)
    monkeypatch.setattr(index_mod, "_PARALLEL_THRESHOLD", 2)
    with ThreadPoolExecutor(2) as pool:
        index = TreeIndex(root, ["pkg"], pool=pool)
        index.start_definition_search()  # started early, answered by the same pass later
        pooled = index.find_definitions(names, limit=100)
        hits = dict(index.hit_counts)
    for found in (serial, pooled):
        assert {n: sorted(m for m, _ in v) for n, v in found.items()} == \
            {n: sorted(m for m, f in reference.items() if n in f and n in TreeIndex(root, ["pkg"]).module(m).defs)
             for n in names}
    assert hits == {n: sum(1 for f in reference.values() if n in f) for n in names}
    assert hits["Needle"] == 1 and hits["other"] == 1 and hits["other2"] == 1 and hits["zeta"] == 0 and hits["value7"] == 2


def test_the_newline_anchored_definition_pattern_matches_the_multiline_one(tmp_path):
    """_DEFINITION_LINES opens with a newline (a literal the regex engine can jump to) instead of
    `^` under re.MULTILINE: the same names, file by file, the first line and CRLF text included."""
    import re

    reference = re.compile(rb"^(?:(?:async\s+)?def|class)\s+([A-Za-z_]\w*)|^([A-Za-z_]\w*)\s*[:=]", re.MULTILINE)
    texts = ["first = 1\n", "class C:\n    x = 1\n", "def\nf(): pass\nname\n= 2\nafter = 3\n", "a\r\nb = 1\r\nclass D: pass\r\n",
             "", "\n\n", "  indented = 1\nasync   def g(): pass\nx:int\ny == 1\nz=1", "v = 1\rw = 2\n", "q\n\n: int\n"]
    paths = []
    for i, text in enumerate(texts):
        path = tmp_path / f"m{i}.py"
        path.write_bytes(text.encode())
        paths.append(str(path))
    found = index_mod._names_matching_each([index_mod._DEFINITION_LINES], paths + [str(tmp_path / "gone.py")])[0]
    expected = [{m.group(m.lastindex or 0).decode() for m in reference.finditer(t.encode())} for t in texts] + [set()]
    assert found == expected
    assert found[0] == {"first"} and found[3] == {"b", "D"} and found[2] == {"f", "name", "after"}


def test_needles_skip_files_without_them_and_change_no_answer(tmp_path, monkeypatch):
    """matches(pattern, needles): only files holding one of the needles are searched; with needles every
    match contains, the answer is the pattern's own, pooled or not."""
    import re

    files = {"pkg/__init__.py": "", "pkg/far.py": "x = 1\n"}
    files.update({f"pkg/m{i}.py": ("self.runner_type = 1\n" if i % 3 == 0 else "") + ("make_list()\n" if i % 4 == 0 else "")
                  + "other_runner_types = 2\n" for i in range(60)})
    root = write_tree(tmp_path / "tree", files)
    pattern = re.compile(rb"\b(runner_type|make_list)\b")
    plain = {m: found for m, _, found in TreeIndex(root, ["pkg"]).matches(pattern)}
    assert len(plain) == 30 and plain["pkg.m0"] == {"runner_type", "make_list"}
    assert {m: found for m, _, found in TreeIndex(root, ["pkg"]).matches(pattern, needles=["runner_type", "make_list"])} == plain
    monkeypatch.setattr(index_mod, "_PARALLEL_THRESHOLD", 2)
    with ThreadPoolExecutor(2) as pool:
        pooled = TreeIndex(root, ["pkg"], pool=pool).matches(pattern, needles=["make_list", "runner_type"])
        assert {m: found for m, _, found in pooled} == plain
        # the needles decide which files are searched: one no match holds finds nothing
        assert TreeIndex(root, ["pkg"], pool=pool).matches(pattern, needles=["absent"]) == []
    assert TreeIndex(root, ["pkg"]).matches(pattern, needles=["make_list"]) == \
        [(m, p, f) for m, p, f in TreeIndex(root, ["pkg"]).matches(pattern) if "make_list" in f]


def test_a_non_ascii_name_is_searched_with_its_own_pattern(tmp_path):
    root = write_tree(tmp_path / "tree", {"pkg/__init__.py": "", "pkg/a.py": "def naïve():\n    pass\nnaïve_x = 1\n"})
    found = TreeIndex(root, ["pkg"]).find_definitions(["naïve"])
    assert [m for m, _ in found["naïve"]] == ["pkg.a"]


def test_class_facts_parse_each_module_once(tmp_path, monkeypatch):
    root = write_tree(tmp_path / "tree", {
        "pkg/__init__.py": "",
        "pkg/a.py": "class A:\n    def __init__(self, x: 'B'):\n        self.x = x\n    def f(self):\n        return self.y\n"
                    "class B:\n    def g(self):\n        return self.z\n",
    })
    index = TreeIndex(root, ["pkg"])
    parses = []
    real = index_mod.ast.parse
    monkeypatch.setattr(index_mod.ast, "parse", lambda source, *a, **k: parses.append(type(source)) or real(source, *a, **k))
    a = index.resolve("pkg.a", "A").definition
    b = index.resolve("pkg.a", "B").definition
    assert index.class_reads(a, "pkg.a") == {"y"} and index.class_reads(b, "pkg.a") == {"z"}
    assert dict(index.class_facts(a, "pkg.a").attribute_types) == {"x": "pkg.a.B"}
    assert parses.count(bytes) == 2  # the module's index record, then its source once for both classes


def test_an_upstream_archive_unpacks_lean_and_indexes_the_same(tmp_path):
    files = {"pkg/__init__.py": "from pkg.a import A\n", "pkg/a.py": "class A:\n    pass\n",
             "pkg/tests/test_inner.py": "x = 1\n", "tests/test_a.py": "import pkg\n", "docs/conf.py": "x = 1\n",
             "examples/run.py": "x = 1\n", "benchmarks/b.py": "x = 1\n", "setup.py": "x = 1\n"}
    archive = _sdist(tmp_path / "pkg-1.0.tar.gz", files)
    sources = Sources(tmp_path / "cache")
    full = sources.archive_tree(archive, "1.0")
    lean = sources.archive_tree(archive, "1.0", lean=True)
    assert lean.root != full.root and (full.root / "tests" / "test_a.py").is_file()
    kept = sorted(str(p.relative_to(lean.root)) for p in lean.root.rglob("*.py"))
    assert kept == ["pkg/__init__.py", "pkg/a.py", "pkg/tests/test_inner.py", "setup.py"]  # nested tests stay
    assert TreeIndex(lean.root, ["pkg"]).files.keys() == TreeIndex(full.root, ["pkg"]).files.keys()
    with ThreadPoolExecutor(1) as pool:  # prepared in a pool: the same lean tree, from the cache
        again = Sources(tmp_path / "cache")
        again.prepare_archives([archive], pool, min_bytes=0, lean=True)
        assert again.archive_tree(archive, "1.0", lean=True).root == lean.root
