"""The two-process scan of a big file (porter.kb.split) gives the one-process result exactly:
tracebacks, private keys, CRLF, over-long lines and case-folding oddities across the helper's
first chunk included; the helper is reaped on errors and a failed helper changes nothing."""

from __future__ import annotations

import io
import os
import random
from pathlib import Path

import pytest

import porter.kb.matcher as matcher
import porter.kb.normalize as normalize
import porter.kb.split as split
from porter.kb.matcher import scan

SEEDS = Path(__file__).resolve().parents[2] / "tests" / "data" / "seed-traces"
CHUNK = 4096
SPAN = (
    "Traceback (most recent call last):\n"
    + "".join(f'  File "/usr/lib/python3/site-packages/vllm_ascend/worker/m{i}.py", line {i}, in f{i}\n    x = call_{i}()\n'
              for i in range(40))
    + "RuntimeError: SpanError crosses the split\n"
)


def _log(path: Path, span_at: int) -> None:
    """~300 kB: noise, seed traces, a PEM key, CRLF and CR lines, over-long lines, a length-changing
    case fold ('İ'), and SPAN placed so that it crosses the byte offset `span_at`."""
    rng = random.Random(3)
    traces = [p.read_text(errors="replace") for p in sorted(SEEDS.glob("*.txt"))[:30]]
    parts: list[str] = []
    size = 0
    placed = False
    while size < 300_000:
        r = rng.random()
        if not placed and size + 1500 >= span_at:
            part = SPAN
            placed = True
        elif r < 0.05:
            part = rng.choice(traces)
        elif r < 0.06:
            part = "-----BEGIN RSA PRIVATE KEY-----\n" + "QUJDREVGR0g=\n" * 40 + "-----END RSA PRIVATE KEY-----\n"
        elif r < 0.07:
            part = "error " + "x" * rng.randrange(3000, 9000) + "\n"
        elif r < 0.08:
            part = "İstanbul error ünïcode line\r\nsecond\rthird\n"
        elif r < 0.1:
            part = f"[rank{rng.randrange(8)}]: ERROR step {rng.randrange(10**6)} failed: EZ9999 aclnnFoo\n"
        else:
            part = f"INFO 05-01 12:00:{rng.randrange(60):02d} [engine.py:{rng.randrange(999)}] tokens/s {rng.random():.3f}\n"
        parts.append(part)
        size += len(part.encode())
    path.write_bytes("".join(parts).encode())


@pytest.fixture
def small_chunks(monkeypatch):
    monkeypatch.setattr(normalize, "CHUNK_SIZE", CHUNK)
    monkeypatch.setattr(split, "LEAD_BYTES", 512)
    monkeypatch.setattr(matcher, "SPLIT_MIN_BYTES", 0)
    used = []
    take = split._Records.take

    def counting(self, pos):
        record = take(self, pos)
        used.append(record is not None)
        return record

    monkeypatch.setattr(split._Records, "take", counting)
    return used


def _one_process(kb, path: Path):
    with path.open("rb") as fh:
        return scan(kb, split.Masker().batches(normalize.iter_batches(fh)))


def _two_processes(kb, path: Path):
    with path.open("rb") as fh:
        return split.scan_file(kb, fh, fh.fileno())


def _same(a, b) -> None:
    hits_a, signals_a = a
    hits_b, signals_b = b
    assert [(ei, list(sig.items())) for ei, sig in hits_a.items()] == [(ei, list(sig.items())) for ei, sig in hits_b.items()]
    assert signals_a.to_dict() == signals_b.to_dict()


@pytest.mark.parametrize("share", [0.1, 0.37, 0.5, 0.83])
def test_two_processes_give_the_one_process_result(bundled_kb, tmp_path, small_chunks, monkeypatch, share):
    monkeypatch.setattr(split, "SPLIT_AT", share)
    path = tmp_path / "big.log"
    chunks = -(-300_000 // CHUNK)
    _log(path, max(1, round(chunks * share)) * CHUNK)  # SPAN crosses (about) the helper's first chunk
    k = split.split_chunk(os.open(path, os.O_RDONLY), path.stat().st_size)
    assert k is not None
    expected = _one_process(bundled_kb, path)
    got = _two_processes(bundled_kb, path)
    _same(expected, got)
    assert sum(small_chunks) >= 10  # the helper's batches were used, not re-scanned here
    assert any("SpanError" in e.message for e in got[1].exceptions)


def test_the_text_of_a_crossing_traceback_is_kept(bundled_kb, tmp_path, small_chunks, monkeypatch):
    monkeypatch.setattr(split, "SPLIT_AT", 0.5)
    path = tmp_path / "big.log"
    _log(path, 0)
    data = path.read_bytes()
    k = split.split_chunk(os.open(path, os.O_RDONLY), len(data))
    cut = k * CHUNK
    start = data.rfind(b"\n", 0, cut - 900) + 1  # SPAN's lines on both sides of the helper's first chunk
    path.write_bytes(data[:start] + SPAN.encode() + data[start:])
    got = _two_processes(bundled_kb, path)
    _same(_one_process(bundled_kb, path), got)
    block = next(b for b in got[1].blocks if any("SpanError" in line for line in b.lines))
    assert block.kind == "traceback" and len([l for l in block.lines if l.lstrip().startswith('File "')]) == 40


def test_a_failing_helper_changes_nothing(bundled_kb, tmp_path, small_chunks, monkeypatch):
    path = tmp_path / "big.log"
    _log(path, 100_000)

    def broken(*args):
        raise RuntimeError("helper down")

    monkeypatch.setattr(split, "_helper", broken)
    _same(_one_process(bundled_kb, path), _two_processes(bundled_kb, path))
    assert not any(small_chunks)


def test_the_helper_is_reaped_when_the_scan_is_interrupted(bundled_kb, tmp_path, small_chunks, monkeypatch):
    path = tmp_path / "big.log"
    _log(path, 100_000)
    forked: list[int] = []
    real_fork = os.fork

    def fork():
        pid = real_fork()
        if pid:
            forked.append(pid)
        return pid

    monkeypatch.setattr(split.os, "fork", fork)

    class Interrupted(io.RawIOBase):
        def __init__(self, raw):
            self.raw, self.seen = raw, 0

        def read(self, n=-1):
            self.seen += 1
            if self.seen > 40:
                raise KeyboardInterrupt
            return self.raw.read(n)

    with path.open("rb") as fh, pytest.raises(KeyboardInterrupt):
        split.scan_file(bundled_kb, Interrupted(fh), fh.fileno())
    assert len(forked) == 1
    with pytest.raises(ChildProcessError):
        os.waitpid(forked[0], os.WNOHANG)  # already reaped: no zombie, no orphan left running


def test_small_or_piped_inputs_are_not_split(tmp_path):
    path = tmp_path / "small.log"
    path.write_text("error: x\n" * 1000)
    fd = os.open(path, os.O_RDONLY)
    assert split.split_chunk(fd, path.stat().st_size) is None
    long_lines = tmp_path / "long.log"
    long_lines.write_bytes(b"y" * (matcher.SPLIT_MIN_BYTES + (1 << 20)))  # no line break before any candidate chunk
    assert split.split_chunk(os.open(long_lines, os.O_RDONLY), long_lines.stat().st_size) is None


def test_records_read_ahead_are_bounded(monkeypatch):
    # once MAX_HELD_BYTES are held this process stops reading ahead (the helper then waits on
    # the full pipe); taking a record frees room again
    import marshal

    monkeypatch.setattr(split, "MAX_HELD_BYTES", 1)
    read_end, write_end = os.pipe()

    def send(pos: int) -> None:
        record = marshal.dumps((pos, 0, False, b"", b"", b"", {}))
        os.write(write_end, len(record).to_bytes(8, "little") + record)

    records = split._Records(read_end)
    send(10)
    records.drain()
    send(20)
    records.drain()
    assert [r[1][0] for r in records.records] == [10]  # the second record stays in the pipe
    assert records.take(10)[0] == 10
    records.drain()
    assert [r[1][0] for r in records.records] == [20]
    os.close(write_end)
    assert records.take(20)[0] == 20 and records.take(30) is None and records.done
    os.close(read_end)


def test_the_command_splits_a_big_file_with_the_same_output(tmp_path, small_chunks, monkeypatch, cli):
    # `porter diagnose FILE` hands the file's descriptor down (commands/diagnose.py): same JSON
    # as with the split off, and the helper's batches were used
    from tests.kb.conftest import BUNDLED_PATTERNS

    path = tmp_path / "big.log"
    _log(path, 150_000)
    args = ["diagnose", "--kb", str(BUNDLED_PATTERNS), str(path), "--json"]
    monkeypatch.setattr(matcher, "SPLIT_MIN_BYTES", 1 << 40)
    cli(args)  # builds the compiled-KB cache (the output says whether it was cached)
    code_one, out_one = cli(args)
    assert not small_chunks
    monkeypatch.setattr(matcher, "SPLIT_MIN_BYTES", 0)
    code_two, out_two = cli(args)
    assert sum(small_chunks) >= 10
    import difflib
    diff = list(difflib.unified_diff(out_one.splitlines(), out_two.splitlines(), lineterm="", n=1))
    assert (code_two, diff) == (code_one, []) and '"status"' in out_one
