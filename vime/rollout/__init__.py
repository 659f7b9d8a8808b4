"""Rollout side of vime: the in-process engine (`engine.RolloutEngine`), sampling helpers
(`sampling`), and the in-process sender of weight updates (`handover.DirectHandOver`)."""

from vime.rollout.engine import (  # noqa: F401
    EngineStateError,
    RolloutEngine,
    RolloutOutput,
    WeightCheckError,
    WeightUpdateError,
    fingerprint,
)
