"""Rollout-side weight quantisation (W8A8-MXFP8 for Ascend 950, with a CPU/CUDA reference)."""

from vime.quant.mxfp8 import (  # noqa: F401
    FLOAT,
    GROUP_SIZE,
    W8A8_MXFP8,
    MXFP8ConfigError,
    MXFP8LifecycleError,
    MXFP8RolloutExtension,
    QuantDescription,
    dequantize_mx,
    describe_model,
    enable_for_engine,
    error_bound,
    quantize_mx,
    write_description,
)
