"""calibration.json is read through a marshal memo keyed by its content, and a warm text-mode
`porter diagnose` imports no json module."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from porter.kb import calibrate
from porter.kb.calibrate import FEATURES, load


def _write(path, weight: float) -> None:
    doc = {"features": list(FEATURES), "weights": [weight] * len(FEATURES), "fitted_on": "dev", "samples": 120,
           "entry_records": {"VLLM-001": [3, 4]}}
    path.write_text(json.dumps(doc), encoding="utf-8")


def test_memo_gives_the_same_model_and_follows_the_content(tmp_path, monkeypatch):
    path, cache = tmp_path / "calibration.json", tmp_path / "cache"
    _write(path, 0.5)
    direct = load(path)
    assert direct is not None and load(path, cache) == direct
    assert len(list((cache / "kb").glob("calibration-*.marshal"))) == 1
    monkeypatch.setattr(json, "loads", lambda *a, **k: 1 / 0)  # the memo answers without parsing
    assert load(path, cache) == direct
    monkeypatch.undo()
    _write(path, 0.25)  # new content: a new key, parsed again
    changed = load(path, cache)
    assert changed is not None and changed.weights[0] == 0.25
    (tmp_path / "broken.json").write_text("{not json", encoding="utf-8")
    assert load(tmp_path / "broken.json", cache) is None and load(tmp_path / "missing.json", cache) is None


def test_a_damaged_memo_is_parsed_again(tmp_path):
    path, cache = tmp_path / "calibration.json", tmp_path / "cache"
    _write(path, 0.5)
    good = load(path, cache)
    for memo in (cache / "kb").glob("calibration-*.marshal"):
        memo.write_bytes(b"\x00garbage")
    assert load(path, cache) == good


def test_warm_text_diagnose_does_not_import_json(tmp_path):
    trace = tmp_path / "t.txt"
    trace.write_text('Traceback (most recent call last):\n  File "x.py", line 1, in <module>\nValueError: boom\n', encoding="utf-8")
    code = ("import sys; sys.argv = ['porter', 'diagnose', sys.argv[1]]\n"
            "from porter.cli import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "sys.stderr.write('JSON' if 'json' in sys.modules else 'NO-JSON')\n"
            "sys.stderr.write(' HASHLIB' if 'hashlib' in sys.modules else ' NO-HASHLIB')\n")
    env = {**os.environ, "PORTER_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    runs = [subprocess.run([sys.executable, "-c", code, str(trace)], capture_output=True, text=True, env=env, timeout=120,
                           cwd=os.path.dirname(os.path.dirname(calibrate.__file__))) for _ in range(2)]
    # the second call: every memo warm; nor is hashlib (OpenSSL's start-up) imported: calibrate needs it only to fit
    assert runs[1].stderr.endswith("NO-JSON NO-HASHLIB"), runs[1].stderr[-2000:]
