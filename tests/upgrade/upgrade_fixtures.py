"""Synthetic upstream (`upkg` 1.0 -> 2.0) and plugin (`myplug`) trees, one construct per drift
family and per guard style, plus a registry that names them. Built in tmp_path; no network."""

from __future__ import annotations

import textwrap
import zipfile
from pathlib import Path

import git

UPKG_V1 = {
    "upkg/__init__.py": '__version__ = "1.0"\nfrom .core import Exported\n',
    "upkg/core.py": """
        from abc import ABC, abstractmethod
        from typing import List, Optional

        class Exported:
            pass

        def gone_fn(x):
            return x

        def gone_guarded(x):
            return x

        gone_type = int
        MAX_BATCH = 8
        INPUT_REGISTRY = {}

        def gone_tuple():
            return 1

        def gone_try():
            return 2

        def gone_fallback():
            return 3

        def gone_attr():
            return 4

        def gone_suppressed():
            return 5

        def patched_fn():
            return 1

        class Mover:
            def __init__(self, size, dtype=None):
                self.size = size
                self.dtype = dtype

            def run(self, batch):
                return batch

        def compute_probs(logits, temperature, top_k=None):
            scaled = logits / temperature
            return scaled

        def make(a, b, flag=False):
            return a

        def build(x):
            return x

        def shape_of(x) -> int:
            return 1

        def maybe(x) -> Optional[List[int]]:
            return None

        class Base:
            def hook(self, a):
                return a

        class Batch:
            def __init__(self):
                self.x = 1

        class Worker(ABC):
            @abstractmethod
            def run(self):
                ...

        class CustomOp:
            pass

        class Rot(CustomOp):
            pass
        """,
    "upkg/star.py": "from ._starsrc import *\n\ndef NotInAll():\n    return 0\n",
    "upkg/_starsrc.py": '__all__ = ["Starred"]\n\nclass Starred:\n    pass\n',
    "upkg/lazy.py": "def plain():\n    return 1\n",
    "upkg/v2only.py": "",
    "upkg/ops/__init__.py": "",
    "upkg/ops/kernels.py": "def add(a, b):\n    return a + b\n",
    "upkg/closed.py": "def cdiv(a, b):\n    return -(a // -b)\n\ndef legacy():\n    return 0\n",
}

UPKG_V2 = {
    "upkg/__init__.py": '__version__ = "2.0"\nfrom .core import Exported\n',
    "upkg/_impl.py": "class Exported:\n    pass\n",
    "upkg/core.py": """
        from abc import ABC, abstractmethod
        from ._impl import Exported

        MAX_BATCH_SIZE = 8
        MODULE_ATTRS = {}

        def compute_probabilities(logits, temperature, top_k=None):
            scaled = logits / temperature
            return scaled

        def make(a, b, *, mode="x"):
            return a

        def build(x, y):
            return x

        def shape_of(x) -> tuple[int, int]:
            return (1, 1)

        def maybe(x) -> "list[int] | None":
            return None

        class Base:
            def hook(self, a, b):
                return a

        class Batch:
            def __init__(self):
                self.x = 1
                self.use_replayssm = False

            def step(self):
                return self.use_replayssm

        class Worker(ABC):
            @abstractmethod
            def run(self):
                ...

            @abstractmethod
            def sample_tokens(self):
                ...

            def optional_hook(self):
                raise NotImplementedError

        class RotBase:
            pass

        class Rot(RotBase):
            pass
        """,
    "upkg/new/__init__.py": "from .place import Mover\n",
    "upkg/new/place.py": """
        class Mover:
            def __init__(self, size, dtype=None):
                self.size = size
                self.dtype = dtype

            def run(self, batch):
                return batch
        """,
    "upkg/star.py": "from ._starsrc import *\n",
    "upkg/_starsrc.py": '__all__ = ["Starred"]\n\nclass Starred:\n    pass\n\ndef NotInAll():\n    return 0\n',
    "upkg/lazy.py": """
        import importlib

        _DEPRECATED = {"old_name": ("upkg.core", "make")}

        def __getattr__(name):
            if name in _DEPRECATED:
                module, attr = _DEPRECATED[name]
                return getattr(importlib.import_module(module), attr)
            return importlib.import_module("upkg.plugins_" + name)
        """,
    "upkg/closed.py": """
        _DEPRECATED_MAPPINGS = {"legacy": "math_utils"}

        def __getattr__(name):
            \"\"\"Deprecated names only; anything else is an AttributeError.\"\"\"
            if name in _DEPRECATED_MAPPINGS:
                return 1
            raise AttributeError(f"module has no attribute {name!r}")
        """,
    "upkg/math_utils.py": "def cdiv(a, b):\n    return -(a // -b)\n\ndef legacy():\n    return 0\n",
    "upkg/v2only.py": "class OnlyInTwo:\n    pass\n",
    "upkg/ops/__init__.py": "",
    "upkg/new/kernels.py": "def add(a, b):\n    return a + b\n",
}

PLUGIN = {
    "myplug/__init__.py": "",
    "myplug/families.py": """
        import upkg.core
        from upkg.core import gone_fn, Mover, compute_probs, make, build, Base, Batch, Worker, Rot
        from upkg import Exported
        from upkg.star import Starred, NotInAll
        from upkg.lazy import old_name, whatever_lazy
        from upkg.core import MAX_BATCH, INPUT_REGISTRY, shape_of, maybe
        from upkg.ops import kernels
        from upkg.closed import cdiv, legacy


        def use():
            make(1, 2, flag=True)
            build(1)
            width = shape_of(1)  # the value is used: a changed return type matters
            maybe(1)
            upkg.core.patched_fn = lambda: 2


        class NPUBase(Base):
            def hook(self, a):
                return a


        class NPUBatch(Batch):
            def __init__(self):
                self.x = 2


        class NPUWorker(Worker):
            def run(self):
                return 1


        class NPURot(Rot):
            pass
        """,
    "myplug/guards.py": """
        from typing import TYPE_CHECKING
        import upkg.core
        from myplug.utils import upkg_version_is, UPKG_VERSION

        if TYPE_CHECKING:
            from upkg.core import gone_type

        if upkg_version_is("1.0"):
            from upkg.core import gone_guarded
        else:
            from upkg.new.place import Mover

        if UPKG_VERSION >= (2, 0):
            from upkg.v2only import OnlyInTwo
        else:
            from upkg.core import gone_tuple

        try:
            from upkg.core import gone_try
        except ImportError:
            from upkg.new.place import Mover as gone_try

        try:
            from upkg.core import Exported as E2
        except ImportError:
            from upkg.core import gone_fallback

        try:
            from upkg.core import make as make2
            make2(1, 2, flag=False)  # a TypeError at the target: except ImportError does not absorb it
        except ImportError:
            make2 = None

        if hasattr(upkg.core, "gone_attr"):
            upkg.core.gone_attr()

        import contextlib
        with contextlib.suppress(ImportError):
            from upkg.core import gone_suppressed
        """,
    "myplug/utils.py": """
        UPKG_VERSION = (2, 0)

        def upkg_version_is(v):
            return False
        """,
    "tests/test_ignored.py": "from upkg.core import totally_missing\n",
}

REGISTRY = """
schema: 1
upstreams:
  upkg:
    git: {git}
    pypi: upkg-dist
    packages: [upkg]
    default_branch: main
    tag: "v{{version}}"
    ownership:
      report: ["**"]
plugins:
  myplug:
    git: {plugin_git}
    pypi: myplug-dist
    packages: [myplug]
    upstreams: [upkg]
    default_branch: main
    guards:
      version_functions: {{upkg_version_is: upkg}}
      version_names: {{UPKG_VERSION: upkg}}
    ownership:
      patch: ["myplug/*"]
    compatibility:
      - {{plugin: "0.5.0", upkg: "1.0"}}
      - {{plugin: "0.6.0", upkg: "2.0"}}
  foreign:
    packages: [foreign]
    upstreams: [upkg]
    ownership:
      patch: ["ours/*"]
      report: ["**"]
"""


def write_tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return root


def make_wheel(path: Path, files: dict[str, str], name: str = "upkg", version: str = "2.0") -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for rel, text in files.items():
            zf.writestr(rel, textwrap.dedent(text).lstrip("\n"))
        zf.writestr(f"{name}-{version}.dist-info/METADATA", f"Name: {name}\nVersion: {version}\n")
        zf.writestr(f"{name}/_C.abi3.so", b"\x7fELF")
    return path


def commit_all(repo: git.Repo, message: str) -> None:
    repo.git.add("-A")
    repo.git.commit("-q", "-m", message)


def simple_index_page(releases: dict[str, list[dict]], project: str = "upkg") -> tuple[str, bytes]:
    """A PEP 691 JSON project page for {version: [file facts]}: the simple API without the network.
    File names are made parseable (`<project>-<version>...`) unless a fact names an sdist."""
    import json

    files = []
    for version, facts in releases.items():
        for i, fact in enumerate(facts):
            sdist = fact.get("packagetype") == "sdist"
            filename = fact["filename"] if sdist else f"{project}-{version}-{i}-py3-none-any.whl"
            files.append({"filename": filename, "url": fact.get("url", f"../../files/{filename}"),
                          "hashes": {"sha256": (fact.get("digests") or {}).get("sha256")} if fact.get("digests") else {},
                          "yanked": fact.get("yanked", False)})
    return "application/vnd.pypi.simple.v1+json", json.dumps({"meta": {"api-version": "1.1"}, "files": files}).encode()


def fake_index(releases_for):
    """A `Sources._fetch_index` replacement: `releases_for` is {version: [facts]} or url -> {version: [facts]}."""
    def fetch(self, url):
        releases = releases_for(url) if callable(releases_for) else releases_for
        return simple_index_page(releases)
    return fetch


def analyze_two_lane(tmp_path: Path, old: dict[str, str], new: dict[str, str], plugin: dict[str, str]):
    """The dry-run analysis of a synthetic plugin (`myplug`) on upkg 1.0 -> 2.0, from file dicts."""
    from porter.config import load_config
    from porter.upgrade.analyze import AnalysisRequest, run_analysis

    old_root, new_root = write_tree(tmp_path / "old", old), write_tree(tmp_path / "new", new)
    plugin_root = write_tree(tmp_path / "plugin", plugin)
    request = AnalysisRequest(plugin="myplug", target="2.0", baseline="1.0", plugin_path=plugin_root,
                              upstream_paths={"1.0": old_root, "2.0": new_root}, config=load_config())
    return run_analysis(request)
