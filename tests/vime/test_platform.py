"""vime.platform: detection order, backend facts, lazy vendor imports (fake torch_npu)."""

from __future__ import annotations

import importlib.machinery
import os
import subprocess
import sys
import textwrap
import types

import pytest
import torch

from vime import platform as plat


@pytest.fixture(autouse=True)
def _clear_env(monkeypatch):
    for key in plat.ENV_KEYS:
        monkeypatch.delenv(key, raising=False)


class _FakeNpu:
    def __init__(self, available=True):
        self.available = available
        self.seeded = None

    def is_available(self):
        return self.available

    def manual_seed_all(self, seed):
        self.seeded = seed

    def get_rng_state_all(self):
        return [torch.tensor([1, 2, 3], dtype=torch.uint8)]


def _install_fake_npu(monkeypatch, available=True, mx=True):
    mod = types.ModuleType("torch_npu")
    mod.__spec__ = importlib.machinery.ModuleSpec("torch_npu", None)
    if mx:
        mod.npu_dynamic_mx_quant = lambda *a, **k: None
    monkeypatch.setitem(sys.modules, "torch_npu", mod)
    fake = _FakeNpu(available)
    monkeypatch.setattr(torch, "npu", fake, raising=False)
    return fake


def test_env_override_wins_and_is_validated(monkeypatch):
    monkeypatch.setenv("VIME_TEST_DEVICE", "npu")
    assert plat.detect() == "npu"
    monkeypatch.setenv("VIME_ACCELERATOR", "cpu")  # first key wins
    assert plat.detect() == "cpu"
    monkeypatch.setenv("VIME_ACCELERATOR", "tpu")
    with pytest.raises(plat.PlatformError, match="VIME_ACCELERATOR='tpu'"):
        plat.detect()


def test_fake_torch_npu_is_detected_with_hccl_and_ascend_env(monkeypatch):
    fake = _install_fake_npu(monkeypatch)
    assert plat.detect() == "npu"
    p = plat.get_platform()
    assert (p.kind, p.comm_backend, p.visible_devices_env) == ("npu", "hccl", "ASCEND_RT_VISIBLE_DEVICES")
    p.manual_seed_all(5)
    assert fake.seeded == 5
    assert p.get_rng_state()[0].tolist() == [1, 2, 3]
    caps = p.capabilities()
    assert caps["native_mx_quant"] is True and "float8_e4m3fn" in caps["float8_dtypes"]


def test_npu_present_but_unavailable_falls_through(monkeypatch):
    _install_fake_npu(monkeypatch, available=False)
    assert plat.detect() == ("cuda" if torch.cuda.is_available() else "cpu")


def test_cpu_facts():
    p = plat.get_platform("cpu")
    assert (p.comm_backend, p.visible_devices_env, p.get_rng_state()) == ("gloo", "", [])
    assert p.is_available() and str(p.device()) == "cpu"
    p.synchronize()  # no-ops on CPU
    with pytest.raises(plat.PlatformError, match="unknown device"):
        plat.get_platform("xpu")


def test_import_vime_never_imports_torch_npu(tmp_path):
    # A torch_npu on the path that explodes when imported: importing vime must not touch it, and
    # detect() with an explicit env choice must not either.
    pkg = tmp_path / "torch_npu"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise RuntimeError('torch_npu was imported')\n")
    code = textwrap.dedent("""
        import sys
        import vime, vime.platform, vime.gates, vime.results
        assert 'torch_npu' not in sys.modules
        assert 'torch' not in sys.modules  # porter reads gate records on machines without torch
        assert vime.platform.detect() == 'cpu'
        assert 'torch_npu' not in sys.modules
        print('ok')
    """)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "VIME_ACCELERATOR": "cpu"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_broken_torch_npu_does_not_break_detection(tmp_path):
    pkg = tmp_path / "torch_npu"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("raise OSError('libascendcl.so: cannot open shared object file')\n")
    code = "import vime.platform as p; print(p.detect())"
    env = {k: v for k, v in os.environ.items() if k not in plat.ENV_KEYS}
    env["PYTHONPATH"] = str(tmp_path)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() in ("cpu", "cuda")
