"""What is read from a report and a commit message: an exception class written against CJK text (a
Chinese report or PR description) is the trace's exception, and a quoted error for the index."""

from __future__ import annotations

from porter.kb.history.lookup import embedded_exception, fallback_exception, named_exception
from porter.kb.history.mine import error_strings


def test_an_exception_written_against_chinese_text_is_read_from_the_report():
    title = "[Bug]: 当启用v1引擎、设置使用的npu卡为非0~n的连续卡时，会报错显示AssertionError: Invalid device id"
    assert embedded_exception(title) == ("AssertionError", "Invalid device id")
    assert fallback_exception(None, "", title) == ("AssertionError", "Invalid device id")
    assert named_exception("报错ValueError('bad shape')出现") == ("ValueError", "bad shape")
    assert named_exception("出现IndexError报错") == ("IndexError", "")
    # an identifier that only ends in Error is no class of its own: `MyValueErrorX` is not `ValueError`
    assert embedded_exception("see MyValueErrorX: nothing") is None


def test_an_exception_written_against_chinese_text_is_mined_from_a_commit_message():
    message = "修复高并发场景下的问题，预编译报错信息：RuntimeError: Failed to compile launcher.cxx, error: Bus error\n"
    assert "RuntimeError: Failed to compile launcher.cxx, error: Bus error" in error_strings(message)
