"""The index and the plugin scan keep their records in one pack file per tree (porter.upgrade.packs):
the same answers as without a cache, pooled or not, one file per tree, and an edited file missing alone."""

from __future__ import annotations

import pickle
from concurrent.futures import ThreadPoolExecutor

from porter.upgrade import index as index_mod
from porter.upgrade import usage as usage_mod
from porter.upgrade.index import TreeIndex, prefetch_reach
from porter.upgrade.packs import Pack, pack_path

from tests.upgrade.upgrade_fixtures import write_tree


def _module_tree(tmp_path, count=12):
    files = {"pkg/__init__.py": "from pkg.m0 import f0\n"}
    files.update({f"pkg/m{i}.py": f"from pkg.base import Base\n\nclass C{i}(Base):\n    def __init__(self, a, b=1):\n"
                                  f"        self.x{i} = a\n\ndef f{i}(a, *, k=0):\n    return a\n" for i in range(count)})
    files["pkg/base.py"] = "class Base:\n    def setup(self, strict=False):\n        pass\n"
    return write_tree(tmp_path / "tree", files)


def _picture(index: TreeIndex, modules) -> list:
    """What the analysis reads of each module: its pickled record (definitions, imports, class facts)."""
    return [pickle.dumps(index.module(m)) for m in modules]


def test_pack_round_trip_damage_and_keep(tmp_path):
    path = pack_path(tmp_path, tmp_path / "tree")
    pack = Pack(path)
    assert pack.get("a") is None
    pack.put("a", b"1")
    pack.put("b", b"2")
    pack.save()
    again = Pack(path)
    assert again.get("a") == b"1" and again.get("b") == b"2"
    third = Pack(path)
    assert third.get("a") == b"1"
    third.put("c", b"3")
    third.save(keep=10)  # within the bound: b stays though this run did not ask for it
    assert Pack(path).get("b") == b"2"
    fourth = Pack(path)
    fourth.get("c")
    fourth.save()  # only what this run used: a and b go
    assert Pack(path).get("a") is None and Pack(path).get("c") == b"3"
    path.write_bytes(b"not a pickle")
    assert Pack(path).get("c") is None  # a damaged pack is a miss
    assert Pack(None).get("a") is None and pack_path(None, tmp_path) is None
    assert pack_path(tmp_path, tmp_path / "tree") != pack_path(tmp_path, tmp_path / "other")


def test_index_pack_serves_a_later_index_and_an_edit_misses_alone(tmp_path, monkeypatch):
    root = _module_tree(tmp_path)
    modules = ["pkg", "pkg.base", *[f"pkg.m{i}" for i in range(12)]]
    reference = _picture(TreeIndex(root, ["pkg"]), modules)  # no cache at all
    monkeypatch.setattr(index_mod, "_PARALLEL_THRESHOLD", 4)
    with ThreadPoolExecutor(2) as pool:
        cold = TreeIndex(root, ["pkg"], tmp_path / "cache", pool=pool)
        prefetch_reach([cold], ["pkg", *modules[2:]], ["pkg.m3.C3.setup"])
    assert cold.stats == {"parsed": 14, "cached": 0}
    assert _picture(cold, modules) == reference
    packs = list((tmp_path / "cache" / "index").rglob("*.pack"))
    assert len(packs) == 1 and not [p for p in (tmp_path / "cache" / "index").rglob("*.pkl")]  # one file for the tree
    warm = TreeIndex(root, ["pkg"], tmp_path / "cache")
    warm.prefetch(modules)
    assert warm.stats == {"parsed": 0, "cached": 14} and _picture(warm, modules) == reference
    (root / "pkg" / "m3.py").write_text("def g3():\n    pass\n")
    edited = TreeIndex(root, ["pkg"], tmp_path / "cache")
    edited.prefetch(modules)
    assert edited.stats == {"parsed": 1, "cached": 13}
    assert edited.resolve("pkg.m3", "g3").status == "found" and edited.resolve("pkg.m3", "f3").status == "missing"
    again = TreeIndex(root, ["pkg"], tmp_path / "cache")
    assert again.module("pkg.m3").defs.keys() == {"g3"} and again.stats == {"parsed": 0, "cached": 1}  # saved by prefetch


def test_index_module_parsed_on_demand_is_packed_by_save(tmp_path):
    root = _module_tree(tmp_path, count=2)
    first = TreeIndex(root, ["pkg"], tmp_path / "cache")
    first.module("pkg.m1")
    assert first.stats == {"parsed": 1, "cached": 0}
    assert TreeIndex(root, ["pkg"], tmp_path / "cache").module("pkg.m1") is not None
    first.save()
    later = TreeIndex(root, ["pkg"], tmp_path / "cache")
    later.module("pkg.m1")
    assert later.stats == {"parsed": 0, "cached": 1}


def test_serial_prefetch_equals_pooled_and_parses_an_identical_file_once(tmp_path, monkeypatch):
    root = _module_tree(tmp_path)
    twin = write_tree(tmp_path / "twin", {p.relative_to(root).as_posix(): p.read_text() for p in root.rglob("*.py")})
    modules = ["pkg", "pkg.base", *[f"pkg.m{i}" for i in range(12)]]
    serial_a, serial_b = TreeIndex(root, ["pkg"], tmp_path / "serial"), TreeIndex(twin, ["pkg"], tmp_path / "serial")
    index_mod.prefetch_many([(serial_a, modules), (serial_b, modules)], workers=1)
    assert serial_a.stats == {"parsed": 14, "cached": 0} and serial_b.stats == {"parsed": 0, "cached": 14}
    monkeypatch.setattr(index_mod, "_PARALLEL_THRESHOLD", 4)
    with ThreadPoolExecutor(2) as pool:
        pooled_a = TreeIndex(root, ["pkg"], tmp_path / "pooled", pool=pool)
        pooled_b = TreeIndex(twin, ["pkg"], tmp_path / "pooled", pool=pool)
        index_mod.prefetch_many([(pooled_a, modules), (pooled_b, modules)])
    assert pooled_a.stats == serial_a.stats and pooled_b.stats == serial_b.stats
    assert _picture(pooled_a, modules) == _picture(serial_a, modules) == _picture(pooled_b, modules)
    assert len(list((tmp_path / "pooled" / "index").rglob("*.pack"))) == 2  # a pack per tree


def _plugin(tmp_path):
    files = {f"plug/f{i}.py": f"from upkg.api import thing{i}\nimport upkg.mod as m\nm.call{i}(1, k=2)\n" for i in range(8)}
    files["plug/__init__.py"] = ""
    return write_tree(tmp_path / "plugin", files)


def test_scan_pack_rescans_only_an_edited_file(tmp_path, monkeypatch):
    root = _plugin(tmp_path)
    reference = [u.to_dict() for f in usage_mod.scan_plugin(root, ["upkg"], workers=1) for u in f.uses]
    monkeypatch.setattr(usage_mod, "_PARALLEL_THRESHOLD", 2)
    with ThreadPoolExecutor(2) as pool:
        cold = usage_mod.scan_plugin(root, ["upkg"], tmp_path / "cache", workers=2, pool=pool)
    assert [u.to_dict() for f in cold for u in f.uses] == reference
    assert len(list((tmp_path / "cache" / "usage").rglob("*"))) == 2  # the version directory and one pack
    scanned = []
    real = usage_mod.scan_source
    monkeypatch.setattr(usage_mod, "scan_source", lambda rel, *a, **k: scanned.append(rel) or real(rel, *a, **k))
    warm = usage_mod.scan_plugin(root, ["upkg"], tmp_path / "cache", workers=1)
    assert scanned == [] and [u.to_dict() for f in warm for u in f.uses] == reference
    (root / "plug" / "f3.py").write_text("from upkg.api import other\n")
    edited = usage_mod.scan_plugin(root, ["upkg"], tmp_path / "cache", workers=1)
    assert scanned == ["plug/f3.py"] and [u.symbol for f in edited if f.path == "plug/f3.py" for u in f.uses] == ["upkg.api.other"]
    pack = next((tmp_path / "cache" / "usage").rglob("*.pack"))
    _, entries = pickle.loads(pack.read_bytes())
    assert len(entries) == 9  # the edited file's old record is gone
