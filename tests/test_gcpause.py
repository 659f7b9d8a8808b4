"""porter.gcpause: the collector is off during the CLI's start-up only, and a library caller's
collector is never touched."""

from __future__ import annotations

import gc
import os
import subprocess
import sys

import pytest

from porter import gcpause


@pytest.fixture
def restore_gc():
    enabled = gc.isenabled()
    yield
    gcpause._paused = False
    gc.unfreeze()
    gc.enable() if enabled else gc.disable()


def test_pause_then_settle_freezes_the_start_up_and_collects_again(restore_gc):
    gc.enable()
    gc.unfreeze()
    gcpause.pause()
    assert not gc.isenabled()
    kept = [[i] for i in range(1000)]  # start-up objects
    gcpause.settle()
    assert gc.isenabled() and gc.get_freeze_count() >= len(kept)
    frozen = gc.get_freeze_count()
    gcpause.settle()  # once only
    assert gc.get_freeze_count() == frozen


def test_without_pause_nothing_changes(restore_gc):
    gc.unfreeze()
    gc.disable()  # a caller that turned the collector off itself
    gcpause.pause()
    gcpause.settle()
    gcpause.resume()
    assert not gc.isenabled() and gc.get_freeze_count() == 0
    gc.enable()
    gcpause.settle()
    assert gc.isenabled() and gc.get_freeze_count() == 0  # a library call of run_diagnose freezes nothing


def test_resume_turns_it_back_on_without_freezing(restore_gc):
    gc.enable()
    gc.unfreeze()
    gcpause.pause()
    gcpause.resume()
    assert gc.isenabled() and gc.get_freeze_count() == 0


_PROBE = """\
import gc, sys
import porter.kb.matcher as matcher
seen = []
real = matcher.diagnose_stream
def probe(*a, **k):
    seen.append((gc.isenabled(), gc.get_freeze_count()))
    return real(*a, **k)
matcher.diagnose_stream = probe
sys.argv = ["porter"] + sys.argv[1:]
from porter.cli import main
try:
    main()
except SystemExit:
    pass
sys.stderr.write(f"SEEN {seen} END {gc.isenabled()}")
"""


@pytest.mark.parametrize("argv", [["diagnose", "{trace}", "--json"], ["--version"]])
def test_the_cli_scans_with_the_collector_on_and_the_start_up_frozen(tmp_path, argv):
    trace = tmp_path / "t.txt"
    trace.write_text('Traceback (most recent call last):\n  File "x.py", line 1, in <module>\nValueError: boom\n', encoding="utf-8")
    env = {**os.environ, "PORTER_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    args = [a.format(trace=trace) for a in argv]
    done = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, env=env, timeout=120)
    tail = done.stderr[done.stderr.rindex("SEEN"):]
    assert tail.endswith("END True"), tail  # every path ends with the collector on
    if argv[0] == "diagnose":
        enabled, frozen = eval(tail.split("SEEN ")[1].split(" END")[0])[0]  # noqa: S307 - our own repr
        assert enabled and frozen > 10_000, tail  # modules, the KB plan: frozen before the scan
