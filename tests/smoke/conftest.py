"""Fixtures for the smoke tests: an isolated porter project (runs, cache, user config in tmp)."""

from __future__ import annotations

import pytest

from tests.smoke.smoke_helpers import write_config


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A porter project in tmp_path: runs under ./runs, nothing written outside tmp_path."""
    root = tmp_path / "proj"
    root.mkdir()
    for var, sub in (("XDG_CONFIG_HOME", "xdg-config"), ("XDG_CACHE_HOME", "xdg-cache"), ("XDG_DATA_HOME", "xdg-data"),
                     ("PORTER_CACHE_DIR", "cache")):
        monkeypatch.setenv(var, str(tmp_path / sub))
    monkeypatch.chdir(root)
    # These tests write the project file themselves; the trust boundary for project hosts has its
    # own tests (tests/hosts/test_project_trust.py).
    monkeypatch.setenv("PORTER_TRUST_PROJECT", "1")
    write_config(root, {})
    return root


@pytest.fixture
def local_tmp(tmp_path, monkeypatch):
    """Route the bundled `local` host's workdir (under the temp dir) into tmp_path."""
    import tempfile

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    return tmp
