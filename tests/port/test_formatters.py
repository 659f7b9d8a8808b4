"""The plugin's own formatter settings on the files porter changed, never on files the plugin itself
does not keep formatted."""

from __future__ import annotations

import shutil

import pytest

from porter.port.shims import plugin_formatters, run_formatters

pytestmark = pytest.mark.skipif(not shutil.which("isort") and not __import__("importlib").util.find_spec("isort"),
                                reason="isort is not installed (the formatter step is optional)")


def test_isort_settings_of_the_plugin_are_applied_to_changed_files_only_when_clean_at_baseline(tmp_path):
    (tmp_path / "setup.cfg").write_text("[isort]\nprofile = black\nknown_first_party = pk\n")
    (tmp_path / "pk").mkdir()
    clean = "import os\nimport sys\n\nimport pk\n"
    messy = "import sys\nimport os\n"
    (tmp_path / "pk" / "a.py").write_text("from pk.compat.x import Y\nimport os\n")  # porter's edit: out of order
    (tmp_path / "pk" / "b.py").write_text("import sys\nimport os\nfrom pk.compat.x import Y\n")
    formatters = plugin_formatters(tmp_path)
    assert [name for name, _ in formatters] == ["isort"]
    done = run_formatters(tmp_path, formatters, ["pk/a.py", "pk/b.py"],
                          baseline={"pk/a.py": clean, "pk/b.py": messy}.get)
    assert done == ["pk/a.py"]
    assert (tmp_path / "pk" / "a.py").read_text() == "import os\n\nfrom pk.compat.x import Y\n"
    # b.py was not isort-clean in the plugin itself: left as porter wrote it (no unrelated churn).
    assert (tmp_path / "pk" / "b.py").read_text() == "import sys\nimport os\nfrom pk.compat.x import Y\n"


def test_no_configuration_means_no_formatter(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    assert plugin_formatters(tmp_path) == []
