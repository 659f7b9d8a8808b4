"""bench/replay/live.py's check of whether a module provides a name, on a synthetic tree: a name listed
beside another on one line of a parenthesised multi-line import is bound (a line pattern missed it,
which made a re-exported class look gone)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "replay"))

from live import provides  # noqa: E402  (bench/replay/live.py)


def test_provides_reads_the_module_body(tmp_path):
    pkg = tmp_path / "up" / "moe"
    pkg.mkdir(parents=True)
    (tmp_path / "up" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "config.py").write_text("class FusedConfig:\n    pass\n\n\nclass ParallelConfig:\n    pass\n")
    (pkg / "layer.py").write_text(
        "# yapf: disable\n"
        "from up.moe.config import (\n"
        "    FusedConfig, ParallelConfig)\n"
        "# yapf: enable\n"
        "try:\n"
        "    from fast import kernel\n"
        "except ImportError:\n"
        "    kernel = None\n"
        "\n"
        "\n"
        "def build(moe: FusedConfig) -> None:\n"
        "    MoEConfig = moe\n")
    assert provides(tmp_path, "up.moe.layer", "ParallelConfig")
    assert provides(tmp_path, "up.moe.layer", "FusedConfig")
    assert provides(tmp_path, "up.moe.layer", "kernel")
    assert not provides(tmp_path, "up.moe.layer", "MoEConfig")  # a local of a function body is not a module name
    assert not provides(tmp_path, "up.moe.gone", "FusedConfig")
