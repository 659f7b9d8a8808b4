"""Validation verdicts: a check that ran nothing is not a pass; a file that does not compile fails."""

from __future__ import annotations

from porter.port.validate import byte_compile, run_pytest, validate


def test_byte_compile_failure_names_the_file_and_line(tmp_path):
    (tmp_path / "good.py").write_text("x = 1\n")
    (tmp_path / "bad.py").write_text("def f(:\n    pass\n")
    (tmp_path / "notes.txt").write_text("def (\n")
    check = byte_compile(tmp_path, ["good.py", "bad.py", "notes.txt", "gone.py"])
    assert check.verdict == "fail" and not check.ok
    assert check.detail == "1 of 2 changed file(s) do not compile"
    assert len(check.items) == 1 and check.items[0].startswith("bad.py:1:")
    assert not any(tmp_path.rglob("*.pyc"))  # compiled in memory


def test_a_tree_that_does_not_compile_fails_validation(tmp_path):
    (tmp_path / "bad.py").write_text("class :\n")
    (tmp_path / "test_ok.py").write_text("def test_ok():\n    assert 1 + 1 == 2\n")
    validation = validate(tmp_path, changed=["bad.py"], generated_tests=["test_ok.py"], reanalyze=None, needs_human=())
    assert not validation.ok
    assert [c.name for c in validation.failing] == ["byte-compile"]


def test_generated_tests_that_all_skip_keep_the_branch_from_moving(tmp_path):
    (tmp_path / "test_gen.py").write_text("import pytest\n\ndef test_a():\n    pytest.skip('no layout')\n")
    check = run_pytest(tmp_path, ["test_gen.py"], name="generated shim tests")
    assert check.verdict == "skip" and "no test ran" in check.detail
    validation = validate(tmp_path, changed=[], generated_tests=["test_gen.py"], reanalyze=None, needs_human=())
    assert not validation.ok and [c.name for c in validation.failing] == ["generated shim tests"]


def test_no_generated_tests_at_all_is_not_a_pass(tmp_path):
    validation = validate(tmp_path, changed=[], generated_tests=[], reanalyze=None, needs_human=())
    assert not validation.ok
    assert {c.name: c.verdict for c in validation.checks}["generated shim tests"] == "skip"


def test_passing_generated_tests_validate(tmp_path):
    (tmp_path / "test_gen.py").write_text("import pytest\n\ndef test_a():\n    assert True\n\ndef test_b():\n"
                                          "    pytest.skip('optional')\n")
    validation = validate(tmp_path, changed=["test_gen.py"], generated_tests=["test_gen.py"], reanalyze=None,
                          needs_human=())
    assert validation.ok, validation.to_dict()
    # residual drift could not run: reported as a skip, which an optional check may be
    assert {c.name: c.verdict for c in validation.checks} == {"byte-compile": "pass", "residual drift": "skip",
                                                               "generated shim tests": "pass"}
