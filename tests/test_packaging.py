"""porter as an installed tool: the wheel carries the knowledge base, the upstream registry and
the default stack, and works from a fresh venv outside the repository; user state goes to XDG
directories, never into site-packages."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_TRACE = ROOT / "examples" / "traces" / "aclgraph-capture-207005.txt"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    (path,) = out.glob("ascend_porter-*.whl")
    return path


def test_wheel_carries_the_bundled_data(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "porter/_bundled/knowledge/upstreams.yaml" in names
    assert "porter/_bundled/forks.yaml" in names
    assert "vime/stack.yaml" in names
    assert any(n.startswith("porter/_bundled/knowledge/patterns/cann/") for n in names)
    assert "porter/templates/upgrade_report.html.j2" in names
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(wheel).read(meta).decode()
    assert "Name: ascend-porter" in text and "Classifier: Environment :: Console" in text


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> dict:
    """A fresh venv outside the repository with only the wheel (and its light dependencies)."""
    base = tmp_path_factory.mktemp("fresh")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    done = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                           str(wheel)], capture_output=True, text=True, timeout=600)
    if done.returncode != 0 and ("Could not find a version" in done.stderr or "No matching distribution" in done.stderr):
        pytest.skip(f"the package index is not reachable for porter's dependencies: {done.stderr[-300:]}")
    assert done.returncode == 0, done.stderr[-3000:]
    work = base / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PORTER_", "XDG_", "PYTHON"))}
    env.update({"XDG_CONFIG_HOME": str(base / "config"), "XDG_CACHE_HOME": str(base / "cache"),
                "XDG_DATA_HOME": str(base / "data"), "HOME": str(base / "home"), "PORTER_OFFLINE": "1"})
    return {"porter": str(venv / "bin" / "porter"), "cwd": work, "env": env, "base": base, "venv": venv}


def _run(installed: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([installed["porter"], *args], cwd=installed["cwd"], env=installed["env"],
                          capture_output=True, text=True, timeout=120)


def test_installed_porter_diagnoses_from_the_bundled_kb(installed):
    trace = installed["cwd"] / "trace.txt"
    shutil.copy(EXAMPLE_TRACE, trace)
    done = _run(installed, "--json", "diagnose", str(trace))
    doc = json.loads(done.stdout)
    assert done.returncode == 0, done.stderr
    assert doc["status"] == "match" and doc["matches"][0]["id"] == "VASC-011", doc  # the bundled KB, outside the repo


def test_installed_porter_kb_lint_is_clean(installed):
    done = _run(installed, "kb", "lint")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def test_installed_porter_status_offline_explains_itself(installed):
    done = _run(installed, "--json", "status")
    doc = json.loads(done.stdout)
    assert done.returncode in (0, 1, 3), done.stderr
    assert doc["schema"].startswith("porter.status/") or doc.get("error"), doc
    # the user's fork registry was created under the XDG data directory, with a message
    assert (installed["base"] / "data" / "porter" / "forks.yaml").is_file()


def test_installed_porter_keeps_user_state_out_of_site_packages(installed):
    done = _run(installed, "--json", "config")
    cfg = json.loads(done.stdout)["config"]
    assert "site-packages" in cfg["knowledge_dir"]  # read-only bundled data
    assert "site-packages" not in cfg["forks_file"] and "site-packages" not in cfg["runs_dir"]
    site_stack = next(installed["venv"].glob("lib/python*/site-packages/vime/stack.yaml"))
    before = site_stack.read_text()
    done = _run(installed, "--json", "apply", "torch==2.12.0", "--to", "vime")
    assert done.returncode == 0, done.stdout + done.stderr
    user_stack = installed["base"] / "data" / "porter" / "stack.yaml"
    assert "2.12.0" in user_stack.read_text()
    assert site_stack.read_text() == before  # site-packages is never written
