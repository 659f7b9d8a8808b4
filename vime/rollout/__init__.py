"""Rollout side of vime: the in-process engine (`engine.RolloutEngine`), its output record
(`output.RolloutOutput`) and the sampling helpers (`sampling`). Weight transports that feed the
engine live in `vime.weight_sync`. Names are resolved lazily, so importing `vime.rollout.sampling`
or `vime.rollout.output` (as speculative decoding does) does not import the engine."""

from __future__ import annotations

import importlib
from typing import Any

_ENGINE_NAMES = ("EngineStateError", "RolloutEngine", "WeightCheckError", "WeightUpdateError", "build_engine", "fingerprint")


def __getattr__(name: str) -> Any:
    if name in _ENGINE_NAMES:
        return getattr(importlib.import_module("vime.rollout.engine"), name)
    if name == "RolloutOutput":
        return importlib.import_module("vime.rollout.output").RolloutOutput
    raise AttributeError(f"module 'vime.rollout' has no attribute {name!r}")
