#!/usr/bin/env python3
"""Create the bundled porter example: a tiny upstream (`hostlib`, tags v1 and v2) and a tiny NPU
plugin (`tiny_npu`) that works with v1 and breaks on v2 in every family porter bridges.

    python examples/make_example.py DIR        # creates DIR/hostlib (git, tags v1 v2),
                                               # DIR/hostlib-v1, DIR/hostlib-v2 (plain trees),
                                               # DIR/tiny-npu (git, branch main) and a porter
                                               # project (porter.yaml, upstreams.yaml, forks/)
    cd DIR && porter upgrade example-plugin --to v2            # analysis -> shims -> branch -> PR
    git -C DIR/tiny-npu show ascend-port/hostlib-v2:PR_MATERIAL.md

What changes from v1 to v2 (and what the plugin uses):
- F2 moved:     hostlib.spec.eagle.Proposer -> hostlib.spec.base_proposer.Proposer
- F2r renamed:  hostlib.utils.DefaultRunner -> hostlib.utils.MoERunner
- F3 signature: hostlib.utils.make_buffer(size, pin_memory=False) -> make_buffer(size, pinned=False)
- F1 removed, rebuildable: hostlib.layers.moe.SharedFusedMoE (a thin subclass of FusedMoE)
- F1 removed, not rebuildable: hostlib.layers.moe.legacy_router (a function reading a module global)
- F3 override:  Platform.name(self) -> name(self, short=False), called with short=False by describe()
- F7 new attribute: Platform.__init__ now sets `seed_offset`, read by Platform.describe()
- F8 new abstract method: Platform.manual_seed_all(seed)

Only the standard library and `git` are needed, so the example works on a fresh machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

UPSTREAM_V1 = {
    "hostlib/__init__.py": '"""hostlib: a tiny stand-in for an upstream framework."""\n__version__ = "1.0.0"\n',
    "hostlib/layers/__init__.py": "",
    "hostlib/layers/moe.py": '''class FusedMoE:
    def forward(self, x):
        return x


class SharedFusedMoE(FusedMoE):
    """A fused MoE layer with shared experts."""

    shared = True


_TOP_K = 2


def legacy_router(logits):
    return [i for i, _ in sorted(enumerate(logits), key=lambda p: -p[1])][:_TOP_K]
''',
    "hostlib/spec/__init__.py": "",
    "hostlib/spec/eagle.py": '''class Proposer:
    def propose(self, tokens):
        return tokens[-1:]
''',
    "hostlib/utils.py": '''def cdiv(a, b):
    return -(-a // b)


def make_buffer(size, pin_memory=False):
    return {"size": size, "pinned": pin_memory}


class DefaultRunner:
    def run(self):
        return "ran"
''',
    "hostlib/platform.py": '''class Platform:
    def __init__(self):
        self.device = "cpu"

    def name(self):
        return self.device

    def describe(self):
        return f"{self.name()}"
''',
}

UPSTREAM_V2 = {
    "hostlib/__init__.py": '"""hostlib: a tiny stand-in for an upstream framework."""\n__version__ = "2.0.0"\n',
    "hostlib/layers/__init__.py": "",
    "hostlib/layers/moe.py": '''class FusedMoE:
    def forward(self, x):
        return x
''',
    "hostlib/spec/__init__.py": "",
    "hostlib/spec/eagle.py": '''from hostlib.spec.base_proposer import Proposer as _Base


class EagleProposer(_Base):
    pass
''',
    "hostlib/spec/base_proposer.py": '''class Proposer:
    def propose(self, tokens):
        return tokens[-1:]
''',
    "hostlib/utils.py": '''def cdiv(a, b):
    return -(-a // b)


def make_buffer(size, pinned=False):
    return {"size": size, "pinned": pinned}


class MoERunner:
    def run(self):
        return "ran"
''',
    "hostlib/platform.py": '''from abc import ABC, abstractmethod


class Platform(ABC):
    def __init__(self):
        self.device = "cpu"
        self.seed_offset = 0

    def name(self, short=False):
        return self.device

    def describe(self):
        return f"{self.name(short=False)}+{self.seed_offset}"

    @abstractmethod
    def manual_seed_all(self, seed):
        raise NotImplementedError
''',
}

PLUGIN = {
    "tiny_npu/__init__.py": '"""tiny_npu: a tiny stand-in for an NPU plugin of hostlib."""\n',
    "tiny_npu/utils.py": '''import hostlib


def hostlib_version_is(version: str) -> bool:
    """The plugin's version guard (like vllm_ascend.utils.vllm_version_is)."""
    return hostlib.__version__ == version
''',
    "tiny_npu/moe.py": '''# MoE layers for the NPU.
from hostlib.layers.moe import FusedMoE, SharedFusedMoE  # shared experts
from hostlib.layers.moe import legacy_router


class NPUSharedMoE(SharedFusedMoE):
    def forward(self, x):
        return super().forward(x) * 1


def route(logits):
    # Only the legacy scheduler uses this path.
    return legacy_router(logits)


def is_moe(layer) -> bool:
    return isinstance(layer, FusedMoE)
''',
    "tiny_npu/spec.py": '''from hostlib.spec.eagle import Proposer


class NPUProposer(Proposer):
    pass
''',
    "tiny_npu/ops.py": '''from hostlib.utils import DefaultRunner, cdiv, make_buffer


def alloc(n):
    return make_buffer(cdiv(n, 2) * 2, pin_memory=True)


def runner():
    return DefaultRunner()
''',
    "tiny_npu/platform.py": '''from hostlib.platform import Platform


class NPUPlatform(Platform):
    def __init__(self):
        # The NPU platform sets its own device and does not call Platform.__init__.
        self.device = "npu"

    def name(self):
        return "npu:" + self.device
''',
    "tests/test_plugin.py": '''"""The plugin's own tests: they run against whichever hostlib is on sys.path."""

from tiny_npu.moe import NPUSharedMoE, is_moe
from tiny_npu.ops import alloc, runner
from tiny_npu.platform import NPUPlatform
from tiny_npu.spec import NPUProposer


def test_moe_layer():
    layer = NPUSharedMoE()
    assert layer.forward(3) == 3
    assert is_moe(layer)


def test_buffers_are_pinned():
    assert alloc(3) == {"size": 4, "pinned": True}


def test_runner():
    assert runner().run() == "ran"


def test_proposer():
    assert NPUProposer().propose([1, 2, 3]) == [3]


def test_platform():
    platform = NPUPlatform()
    assert platform.describe().startswith("npu:npu")
''',
    "README.md": "# tiny-npu\n\nA tiny NPU plugin of hostlib, used by the porter example.\n",
}

_GIT_ENV = {
    "GIT_AUTHOR_NAME": "porter example",
    "GIT_AUTHOR_EMAIL": "example@porter.invalid",
    "GIT_COMMITTER_NAME": "porter example",
    "GIT_COMMITTER_EMAIL": "example@porter.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
}


def _git(cwd: Path, *args: str) -> None:
    env = {**os.environ, **_GIT_ENV}
    subprocess.run(["git", "-c", "init.defaultBranch=main", "-c", "core.hooksPath=/dev/null", *args],
                   cwd=cwd, env=env, check=True, capture_output=True, text=True)


def _write_tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def _replace_tree(root: Path, files: dict[str, str]) -> None:
    for path in sorted(root.rglob("*"), reverse=True):
        if ".git" in path.relative_to(root).parts:
            continue
        if path.is_file():
            path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()
    _write_tree(root, files)


def _registry(target: Path) -> dict[str, str]:
    """A self-contained porter project around the example: its own registry, fork list and runs."""
    upstreams = f"""# The example's registry (examples/make_example.py): one upstream, one plugin.
schema: 1
upstreams:
  hostlib:
    description: tiny stand-in upstream of the porter example
    git: {target / "hostlib"}
    packages: [hostlib]
    default_branch: main
    tag: "v{{version}}"
    ownership:
      report: ["**"]
plugins:
  example-plugin:
    description: tiny NPU plugin of hostlib (the porter example)
    upstreams: [hostlib]
    packages: [tiny_npu]
    guards:
      version_functions: {{hostlib_version_is: hostlib}}
      helper_module: tiny_npu.utils
    shim_dir: tiny_npu/compat
    ownership:
      patch: ["tiny_npu/**", "tests/**"]
    port_tests: [tests/test_plugin.py]
"""
    forks = f"""# The example's fork list; `porter upgrade` appends its runs to the ledger.
schema: 1
forks:
  example-plugin:
    plugin: example-plugin
    remote: ""
    path: {target / "tiny-npu"}
    default_branch: main
    baseline: {{hostlib: v1}}
    branches: []
    ledger: []
"""
    return {
        "porter.yaml": "# porter project of the bundled example\nupstreams_file: upstreams.yaml\n"
                       "forks_file: forks/forks.yaml\nruns_dir: runs\n",
        "upstreams.yaml": upstreams,
        "forks/forks.yaml": forks,
    }


def make_example(target: Path) -> dict[str, Path]:
    """Create the example under `target` (must not exist or be empty). Returns the paths."""
    target = Path(target).resolve()
    if target.exists() and any(target.iterdir()):
        raise FileExistsError(f"{target} exists and is not empty; choose another directory")
    target.mkdir(parents=True, exist_ok=True)

    upstream = target / "hostlib"
    upstream.mkdir()
    _git(upstream, "init", "-q")
    _write_tree(upstream, UPSTREAM_V1)
    _git(upstream, "add", "-A")
    _git(upstream, "commit", "-q", "-m", "hostlib 1.0.0")
    _git(upstream, "tag", "v1")
    _replace_tree(upstream, UPSTREAM_V2)
    _git(upstream, "add", "-A")
    _git(upstream, "commit", "-q", "-m", "hostlib 2.0.0: move Proposer, rename DefaultRunner, drop SharedFusedMoE")
    _git(upstream, "tag", "v2")

    for version, files in (("v1", UPSTREAM_V1), ("v2", UPSTREAM_V2)):
        _write_tree(target / f"hostlib-{version}", files)
    _write_tree(target, _registry(target))

    plugin = target / "tiny-npu"
    plugin.mkdir()
    _git(plugin, "init", "-q")
    _write_tree(plugin, PLUGIN)
    _git(plugin, "add", "-A")
    _git(plugin, "commit", "-q", "-m", "tiny-npu for hostlib v1")
    return {
        "root": target,
        "upstream_repo": upstream,
        "upstream_v1": target / "hostlib-v1",
        "upstream_v2": target / "hostlib-v2",
        "plugin": plugin,
        "config": target / "porter.yaml",
        "forks_file": target / "forks" / "forks.yaml",
    }


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] in {"-h", "--help"}:
        print(__doc__)
        return 0 if argv and argv[0] in {"-h", "--help"} else 2
    if shutil.which("git") is None:
        print("git is required", file=sys.stderr)
        return 3
    try:
        paths = make_example(Path(argv[0]))
    except FileExistsError as exc:
        print(exc, file=sys.stderr)
        return 2
    for key, path in paths.items():
        print(f"{key}: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
