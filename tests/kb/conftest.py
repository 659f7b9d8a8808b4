"""Fixture knowledge bases built in tmp_path, the bundled knowledge base (built once per run), and a
CLI runner with a private cache."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from porter.kb.loader import load_entries
from porter.kb.index import CompiledKB
from porter.kb.matcher import Match, diagnose_text

BUNDLED_PATTERNS = Path(__file__).resolve().parents[2] / "knowledge" / "patterns"

LORA_TRACE = textwrap.dedent(
    """\
    INFO 05-01 12:00:00 [config.py:12] starting engine
    Traceback (most recent call last):
      File "/opt/app/train.py", line 10, in <module>
        from vllm.lora.models import LoRAModel
    ModuleNotFoundError: No module named 'vllm.lora.models'
    """
)
DCMI_TRACE = textwrap.dedent(
    """\
    dcmi model initialized failed, because the device is used. ret is -8020
    npu get board type failed. ret is -9005
    rtGetDeviceCount:ErrCode=507899, desc=[driver error:internal error]
    """
)


def entry(entry_id: str, layer: str, items: list[dict], *, match: str = "any", examples=None, **extra) -> dict:
    data = {
        "id": entry_id,
        "title": f"title of {entry_id}",
        "layer": layer,
        "kind": "bug",
        "signatures": {"match": match, "items": items},
        "symptoms": [f"symptom text for {entry_id} that is long enough"],
        "root_cause": "because",
        "fix": ["do the fix"],
        "verify": "true",
        "examples": examples if examples is not None else [f"traces/{entry_id}.txt"],
    }
    data.update(extra)
    return data


def _bundled(calibrated: bool) -> CompiledKB:
    if not any(BUNDLED_PATTERNS.rglob("*.yaml")):
        pytest.skip("no knowledge-base entries in this checkout")
    return load_entries(BUNDLED_PATTERNS).compiled(calibrated=calibrated)


@pytest.fixture(scope="session")
def bundled_kb() -> CompiledKB:
    """The bundled knowledge base with raw signature scores (no calibration), compiled once per run."""
    return _bundled(calibrated=False)


@pytest.fixture(scope="session")
def bundled_kb_calibrated() -> CompiledKB:
    """The bundled knowledge base as `porter diagnose` uses it (calibrated confidence)."""
    return _bundled(calibrated=True)


def top_match(kb: CompiledKB, text: str) -> Match | None:
    return diagnose_text(kb, text).top


class FixtureKB:
    """A repository-like directory: knowledge/patterns/<layer>/<ID>.yaml and traces/."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.patterns = root / "knowledge" / "patterns"
        self.patterns.mkdir(parents=True, exist_ok=True)
        (root / "traces").mkdir(exist_ok=True)

    def add(self, data: dict, trace: str | None = None, raw: str | None = None, name: str | None = None) -> Path:
        layer = data.get("layer", "vllm") if isinstance(data, dict) else "vllm"
        path = self.patterns / layer / f"{name or data['id']}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(raw if raw is not None else yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
        if trace is not None:
            (self.root / "traces" / f"{data['id']}.txt").write_text(trace, encoding="utf-8")
        return path

    def compiled(self) -> CompiledKB:
        return load_entries(self.patterns).compiled()


@pytest.fixture
def fixture_kb(tmp_path) -> FixtureKB:
    return FixtureKB(tmp_path / "repo")


@pytest.fixture
def small_kb(fixture_kb) -> FixtureKB:
    """Two entries with real-looking signatures and matching example traces."""
    fixture_kb.add(
        entry(
            "VLLM-001", "vllm",
            [{"literal": "No module named 'vllm.lora.models'", "weight": 1.0},
             {"regex": r"cannot import name '(LoRAModel|LoRAModelManager)' from 'vllm\.lora\.models'", "weight": 0.9}],
            symptoms=["ModuleNotFoundError: No module named vllm.lora.models after upgrading vllm"],
            applies_to=[{"package": "vllm", "versions": ">=0.13"}],
            discriminators=["If the missing module is vllm.lora.request, see another entry."],
            aliases=["NPU-CP-002"],
        ),
        LORA_TRACE,
    )
    fixture_kb.add(
        entry(
            "DRV-001", "driver",
            [{"literal": "dcmi model initialized failed, because the device is used", "weight": 0.9},
             {"regex": r"rtGetDeviceCount:ErrCode=507899", "weight": 0.6}],
            symptoms=["dcmi model initialized failed because the device is used inside a container"],
            aliases=["NPU-OPS-009"],
        ),
        DCMI_TRACE,
    )
    return fixture_kb


@pytest.fixture
def cli(tmp_path, monkeypatch):
    """Invoke the porter CLI with a private cache/config; returns (exit_code, stdout)."""
    from porter.cli import app

    monkeypatch.setenv("PORTER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    runner = CliRunner()

    def invoke(args: list[str], input: bytes | str | None = None):
        result = runner.invoke(app, args, input=input)
        return result.exit_code, result.stdout

    return invoke
