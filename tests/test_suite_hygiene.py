"""The test suite's own setup: a failed install stops scripts/setup, Hypothesis writes outside the repo."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from hypothesis import settings
from hypothesis.configuration import storage_directory

ROOT = Path(__file__).resolve().parent.parent


def _fake_project(tmp_path: Path, failing: str) -> Path:
    """A copy of scripts/setup beside a fake .venv whose pip fails for one package."""
    project = tmp_path / "project"
    (project / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "setup", project / "scripts" / "setup")
    (project / "pyproject.toml").write_text("[project]\nname='x'\n")
    venv_bin = project / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    fake = venv_bin / "python"
    fake.write_text(
        "#!/usr/bin/env bash\n"
        f'if [ "$1 $2" = "-m pip" ] && [[ "$*" == *"{failing}"* ]]; then\n'
        "  echo 'ERROR: Could not find a version that satisfies the requirement' >&2; exit 1\n"
        "fi\n"
        "exit 0\n")
    fake.chmod(0o755)
    return project


def test_setup_stops_on_a_failed_install_and_names_the_package(tmp_path):
    project = _fake_project(tmp_path, failing="torch==")
    done = subprocess.run(["bash", "scripts/setup"], cwd=project, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PORTER_TORCH_VERSION": "2.13.0"})
    assert done.returncode != 0
    assert "installing torch==2.13.0 failed" in done.stderr
    assert "Could not find a version" in done.stderr  # pip's own reason is shown
    assert not (project / ".venv" / ".porter-setup").exists()  # the next run tries again


def test_setup_stops_when_an_extra_fails(tmp_path):
    project = _fake_project(tmp_path, failing="-e")
    done = subprocess.run(["bash", "scripts/setup"], cwd=project, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "ascend-porter[vime,dev,parity]" in done.stderr


def test_setup_succeeds_when_every_install_does(tmp_path):
    project = _fake_project(tmp_path, failing="no-such-argument")
    done = subprocess.run(["bash", "scripts/setup"], cwd=project, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert (project / ".venv" / ".porter-setup").exists()


def _outside_checkout(path: Path) -> bool:
    path = path.resolve()
    return path != ROOT and ROOT not in path.parents


def test_hypothesis_database_lies_outside_the_checkout():
    db = settings().database
    assert hasattr(db, "path"), "expected a directory-based example database"
    assert _outside_checkout(Path(db.path))


def test_hypothesis_side_files_lie_outside_the_checkout():
    # constants and unicode caches go to the home directory, not to the example database
    assert _outside_checkout(storage_directory("constants", intent_to_write=False).path)
