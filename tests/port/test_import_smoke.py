"""The import smoke: touched plugin modules and entry points imported against a real upstream tree in a
subprocess; stand-ins only for device/compiled modules and declared-but-missing libraries, all reported."""

from __future__ import annotations

from pathlib import Path

from porter.port.validate import declared_dependencies, entry_points_of, import_smoke, touched_modules


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def trees(tmp_path: Path, plugin_init: str, extra: dict[str, str] | None = None):
    v1 = write(tmp_path / "v1", {"hostlib/__init__.py": "__version__ = '1'\n", "hostlib/layers.py": "class Foo: pass\n"})
    v2 = write(tmp_path / "v2", {"hostlib/__init__.py": "__version__ = '2'\n", "hostlib/layers.py": "class Bar: pass\n"})
    plugin = write(tmp_path / "fork", {"plug/__init__.py": "def register():\n    return 'plug.platform.P'\n",
                                       "plug/mod.py": plugin_init, **(extra or {})})
    return v1, v2, plugin


def smoke(plugin, v1, v2, **kw):
    return import_smoke(plugin, modules=["plug.mod"], entry_points=kw.pop("entry_points", ["plug:register"]),
                        upstream="hostlib", plugin="plug", target_tree=v2, target_version="2", target_label="hostlib 2",
                        baseline_tree=v1, baseline_version="1", **kw)


def test_a_name_missing_at_the_target_fails_the_check(tmp_path):
    v1, v2, plugin = trees(tmp_path, "from hostlib.layers import Foo\n")
    check, verdict = smoke(plugin, v1, v2)
    assert check.verdict == "fail" and check.required and not check.ok
    assert verdict["verdict"] == "no" and verdict["line"].startswith("imports at hostlib 2: no - 1 of 2 fail")
    (failed,) = verdict["failed"]
    assert failed["name"] == "plug.mod" and "cannot import name 'Foo'" in failed["error"]
    assert failed["where"] == "plug/mod.py:1"  # relative to the fork, no local path


def test_the_target_tree_is_first_on_the_path(tmp_path):
    v1, v2, plugin = trees(tmp_path, "import hostlib\nassert hostlib.__version__ == '2', hostlib.__file__\n")
    check, verdict = smoke(plugin, v1, v2)
    assert verdict["verdict"] == "yes", verdict
    assert verdict["upstream_file"] == "hostlib@2:hostlib/__init__.py"


def test_device_and_compiled_modules_are_stood_in_and_listed(tmp_path):
    v1, v2, plugin = trees(tmp_path, "import torch_npu\nfrom hostlib import _C\nfrom torch_npu.contrib import fuse\n"
                                     "class Op(torch_npu.npu.Module):\n    pass\nfrom hostlib.layers import Bar\n")
    check, verdict = smoke(plugin, v1, v2)
    assert check.verdict == "pass" and verdict["verdict"] == "yes", verdict
    assert "torch_npu" in verdict["standins"]["device"] and "hostlib._C" in verdict["standins"]["device"]
    assert verdict["standins"]["environment"] == []
    assert "stand-ins: device" in check.detail


def test_only_declared_libraries_are_stood_in(tmp_path):
    v1, v2, plugin = trees(tmp_path, "import fancylib\nfrom hostlib.layers import Bar\n",
                           {"requirements.txt": "fancylib >= 1.0  # a dependency\n"})
    assert "fancylib" in declared_dependencies([plugin])
    check, verdict = smoke(plugin, v1, v2)
    assert verdict["verdict"] == "yes" and verdict["standins"]["environment"] == ["fancylib"]


def test_an_undeclared_missing_library_is_not_provable_not_a_pass(tmp_path):
    v1, v2, plugin = trees(tmp_path, "import not_installed_anywhere\n")
    check, verdict = smoke(plugin, v1, v2)
    assert check.verdict == "pass"  # not the port's doing ...
    assert verdict["verdict"] == "partly" and "1 not provable on this machine" in verdict["line"]  # ... but said


def test_a_failure_on_a_finding_left_to_a_human_is_expected(tmp_path):
    v1, v2, plugin = trees(tmp_path, "from hostlib.layers import Foo\n")
    check, verdict = smoke(plugin, v1, v2, human_symbols=["hostlib.layers.Foo"])
    assert check.verdict == "pass" and verdict["verdict"] == "no" and verdict["expected"]


def test_touched_modules_and_entry_points(tmp_path):
    root = write(tmp_path, {"plug/__init__.py": "", "plug/a/__init__.py": "", "plug/a/b.py": "",
                            "tests/porter_compat/test_x.py": "", "setup.py":
                            "setup(entry_points={'vllm.platform_plugins': ['ascend = plug:register'],\n"
                            "  'console_scripts': ['x = plug.a.b:main']})\n"})
    assert touched_modules(root, ["plug/a/b.py", "plug/a/__init__.py", "tests/porter_compat/test_x.py", "README.md"]) == \
        ["plug.a", "plug.a.b"]
    assert entry_points_of(root) == ["plug:register", "plug.a.b:main"]


def test_a_shim_candidate_that_needs_a_missing_library_is_not_provable(tmp_path):
    """vllm 0.22.1: the compat shim's target candidate imports uvloop, which this machine lacks; the
    shim's ImportError carries it. That is not the port's failure (it imports at the baseline)."""
    v1, v2, plugin = trees(tmp_path, (
        "try:\n    from hostlib.layers import Foo\n"
        "except ImportError as error:\n"
        "    raise ImportError(f\"cannot import 'Foo' from plug.compat: tried hostlib.layers.Foo "
        "({type(error).__name__}: {error})\") from None\n"))
    (v2 / "hostlib" / "layers.py").write_text("import not_installed_anywhere\nclass Foo: pass\n")
    check, verdict = smoke(plugin, v1, v2)
    assert check.verdict == "pass" and verdict["verdict"] == "partly", verdict
    (machine,) = verdict["not_provable"]
    assert "No module named 'not_installed_anywhere'" in machine["error"]


def test_a_shim_candidate_missing_inside_the_upstream_still_fails(tmp_path):
    v1, v2, plugin = trees(tmp_path, (
        "try:\n    from hostlib.layers import Foo\n"
        "except ImportError as error:\n"
        "    raise ImportError(f\"cannot import 'Foo' from plug.compat: tried hostlib.layers.Foo "
        "({type(error).__name__}: {error})\") from None\n"))
    (v2 / "hostlib" / "layers.py").write_text("import hostlib.gone\nclass Foo: pass\n")
    check, verdict = smoke(plugin, v1, v2)
    assert check.verdict == "fail" and verdict["verdict"] == "no", verdict
