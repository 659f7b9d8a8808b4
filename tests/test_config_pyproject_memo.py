"""[tool.porter] in pyproject.toml: read through a content-keyed memo, and tomllib is skipped
for files that cannot define the table."""

from __future__ import annotations

import tomllib

import pytest

from porter.config import load_config, may_define_tool_porter
from porter.errors import InputError


def test_memo_follows_the_content(tmp_path, monkeypatch):
    monkeypatch.setenv("PORTER_CACHE_DIR", str(tmp_path / "cache"))
    project = tmp_path / "p"
    project.mkdir()
    (project / "pyproject.toml").write_text('[tool.porter]\nruns_dir = "r"\n')
    first = load_config(cwd=project)
    assert list((tmp_path / "cache" / "config").glob("pyproject-*.marshal"))
    assert load_config(cwd=project).runs_dir == first.runs_dir == project.resolve() / "r"  # from the memo
    (project / "pyproject.toml").write_text('[tool.porter]\nruns_dir = "s"\n')
    assert load_config(cwd=project).runs_dir == project.resolve() / "s"
    (project / "pyproject.toml").write_text('[tool.porter]\nruns_dir = "s"\nx = [\n')
    with pytest.raises(InputError, match="invalid TOML"):
        load_config(cwd=project)


@pytest.mark.parametrize("text", [
    '[tool.porter]\nx = 1', '[ tool . porter ]', '[tool]\nporter = {}', 'tool.porter.x = 1', 'tool = {porter = {}}',
    '["tool"."porter"]', "['tool'.porter.sub]", '  tool.porter = {}', '"\\u0074ool".porter = {}',
])
def test_every_way_to_write_the_table_is_parsed(text):
    assert "porter" in tomllib.loads(text).get("tool", {}) or "\\u" in text
    assert may_define_tool_porter(text)


@pytest.mark.parametrize("text", ['[tool.hatch]\nx = 1', '[project.scripts]\nporter = "porter.cli:main"', '[tool.porterx]\n'])
def test_files_without_the_table_are_not_parsed(text):
    assert "porter" not in tomllib.loads(text).get("tool", {})
    assert not may_define_tool_porter(text)
