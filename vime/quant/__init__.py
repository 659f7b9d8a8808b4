"""Rollout-side weight quantisation (W8A8-MXFP8 for Ascend 950, with a CPU/CUDA reference)."""

from vime.quant.mxfp8 import (  # noqa: F401
    FLOAT,
    GROUP_SIZE,
    W8A8_MXFP8,
    MXFP8ConfigError,
    MXFP8LifecycleError,
    QuantDescription,
    dequantize_mx,
    error_bound,
    quantize_mx,
)
