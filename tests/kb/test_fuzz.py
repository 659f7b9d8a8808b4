"""Random, binary, huge and deeply nested inputs: the pipeline never crashes and stays fast."""

from __future__ import annotations

import io
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.kb.conftest import LORA_TRACE

from porter.kb.matcher import diagnose_stream, diagnose_text

TRACE_PIECES = [
    "Traceback (most recent call last):\n",
    '  File "/usr/lib/python3/site-packages/vllm_ascend/x.py", line 3, in f\n',
    "During handling of the above exception, another exception occurred:\n",
    "RuntimeError: EZ9999 retCode=0x31 error code 507899\n",
    "(RayWorker pid=1) [rank0]: ",
    "\x1b[31m", "\r", "\r\n", "\x00", "\xff", "    ", "ModuleNotFoundError: No module named 'vllm.lora.models'\n",
]

_kb_cache = {}


@pytest.fixture
def kb(small_kb):
    return small_kb.compiled()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=4096))
def test_random_bytes_never_crash(kb, data):
    diag = diagnose_stream(kb, io.BytesIO(data))
    assert diag.status in ("match", "unknown")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(st.sampled_from(TRACE_PIECES), st.text(max_size=80)), max_size=200))
def test_random_trace_like_text_never_crashes(kb, pieces):
    text = "".join(pieces)
    diag = diagnose_stream(kb, io.BytesIO(text.encode("utf-8", "surrogatepass")))
    assert diag.status in ("match", "unknown")
    assert len(diag.signals.blocks) <= 32


def test_huge_line_and_deep_nesting_are_bounded(kb):
    start = time.perf_counter()
    huge = b"x" * 5_000_000 + b"\n" + LORA_TRACE.encode()
    diag = diagnose_stream(kb, io.BytesIO(huge))
    assert diag.top.entry.id == "VLLM-001"
    nested = "Traceback (most recent call last):\n" + "".join(
        f'  File "/a/site-packages/pkg{i}/m.py", line {i}, in f\n    f()\n' for i in range(20_000)
    ) + "RecursionError: maximum recursion depth exceeded\n" + "(" * 100_000 + "\n" + "[" * 50_000 + "]" * 50_000 + "\n"
    diag = diagnose_text(kb, nested)
    assert diag.status == "unknown" and diag.signals.exceptions[0].type == "RecursionError"
    assert time.perf_counter() - start < 15


class _GeneratedLog:
    """A stream that makes its bytes on demand, so the test itself holds no big buffer."""

    def __init__(self, total: int) -> None:
        self.left = total
        noise = b"INFO 05-01 12:00:00 [engine.py:12] step 1234 throughput 56 tokens/s\n" * 99
        self.block = noise + b"RuntimeError: failure with code EZ9999 at step 12345\n"

    def read(self, n: int = -1) -> bytes:
        if self.left <= 0:
            return b""
        k = min(self.left, 1 << 20)
        self.left -= k
        return (self.block * (k // len(self.block) + 1))[:k]


def test_big_log_streams_in_bounded_memory(kb):
    import tracemalloc

    size = 12 << 20
    tracemalloc.start()
    try:
        diag = diagnose_stream(kb, _GeneratedLog(size))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert diag.status == "unknown" and diag.signals.lines > 150_000
    assert diag.signals.exceptions[0].type == "RuntimeError" and len(diag.signals.blocks) <= 32
    assert peak < 10_000_000 < size  # a few read chunks plus bounded state, never the whole input


def test_error_dense_input_is_fine(kb):
    line = b"RuntimeError: failure with code EZ9999 at step 12345 and a long tail of text\n"
    diag = diagnose_stream(kb, io.BytesIO(line * 5000))
    assert diag.status == "unknown" and len(diag.signals.codes) == 1 and len(diag.signals.blocks) == 1


_PIECES = st.sampled_from(["a", "Error: x", "\r", "\n", "\r\n", "\x00", "\x1b[31m", "\x1b[0m", "\x1b]0;t\x07", "é", "中", "\t", " "])


@settings(max_examples=80, deadline=None)
@given(st.lists(st.one_of(_PIECES, st.text(max_size=5)), max_size=60), st.integers(min_value=1, max_value=9))
def test_streaming_lines_equal_whole_text_lines(pieces, chunk):
    """However the bytes are chunked (multi-byte characters and CRLF split across reads),
    the streamed lines equal the lines of the whole text."""
    import re

    import porter.kb.normalize as norm

    data = "".join(pieces).encode("utf-8", "surrogatepass")
    text = data.decode("utf-8", "replace").replace("\x00", "")
    expected = re.split(r"\r\n|\r|\n", text)
    if expected and expected[-1] == "":
        expected.pop()
    expected = [norm.clean_line(line) for line in expected]
    saved = norm.CHUNK_SIZE
    norm.CHUNK_SIZE = chunk
    try:
        got = [norm.clean_line(line) for line in norm.iter_lines(io.BytesIO(data))]
    finally:
        norm.CHUNK_SIZE = saved
    assert got == expected
