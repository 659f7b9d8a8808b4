"""Rollout side of vime: the in-process engine (`engine.RolloutEngine`) and the sampling helpers
(`sampling`). Weight transports that feed the engine live in `vime.weight_sync`."""

from vime.rollout.engine import (  # noqa: F401
    EngineStateError,
    RolloutEngine,
    RolloutOutput,
    WeightCheckError,
    WeightUpdateError,
    build_engine,
    fingerprint,
)
