"""An independent MXFP8 (E4M3) reference, written from the OCP Microscaling Formats spec v1.0 and
the OCP 8-bit floating point spec, in numpy with integer bit arithmetic (no torch float8 cast, no
code shared with vime.quant.mxfp8). Gate G5 compares vime's quantiser with it bit for bit.

Rules implemented:
  * block size k = 32 along the last axis; a short last block only holds the remaining elements;
  * shared scale X = 2**(floor(log2(amax)) - emax_elem), emax_elem = 8 for E4M3 (max normal 448 =
    1.75 * 2**8); X is stored as E8M0 (biased by 127; 0xFF encodes NaN) and clamped to 2**-127..2**127;
    an all-zero block gets the smallest scale (the spec leaves it open; any scale decodes zeros);
  * elements P_i = V_i / X rounded to nearest, ties to even, in E4M3 (bias 7, 3 mantissa bits,
    subnormals with spacing 2**-9, no infinities, NaN = S.1111.111); normal values beyond 448 clamp
    to +-448 (the MX conversion saturates);
  * special values: a block that holds a NaN or an Inf gets the NaN scale 0xFF, and every element of a
    block whose scale is NaN decodes to NaN (E4M3 cannot represent Inf; the spec's NaN scale
    propagates). Its element bytes are set to the E4M3 NaN 0x7F.
"""

from __future__ import annotations

import numpy as np

BLOCK = 32
EMAX_ELEM = 8
SCALE_BIAS = 127
SCALE_NAN = 0xFF
E4M3_NAN = 0x7F
E4M3_MAX = 448.0


def _e4m3_bytes(p: np.ndarray) -> np.ndarray:
    """Finite float64 values (already divided by the scale) -> E4M3 bytes, RNE, saturating."""
    sign = np.signbit(p).astype(np.uint8) << 7
    a = np.minimum(np.abs(p), E4M3_MAX)
    # exponent of a's leading bit; subnormals (a < 2**-6) share the spacing of exponent -6
    with np.errstate(divide="ignore"):
        e = np.floor(np.log2(np.where(a > 0, a, 1.0)))
    # log2 can be off by one near powers of two in floating point: fix it exactly
    e = np.where(2.0 ** e > a, e - 1, e)
    e = np.where(2.0 ** (e + 1) <= a, e + 1, e)
    e = np.maximum(e, -6)
    spacing = 2.0 ** (e - 3)
    steps = np.rint(a / spacing)  # exact division by a power of two; rint = ties to even
    value = np.minimum(steps * spacing, E4M3_MAX)
    with np.errstate(divide="ignore"):
        ve = np.floor(np.log2(np.where(value > 0, value, 1.0)))
    ve = np.where(2.0 ** ve > value, ve - 1, ve)
    ve = np.where(2.0 ** (ve + 1) <= value, ve + 1, ve)
    normal = value >= 2.0 ** -6
    exp_field = np.where(normal, ve + 7, 0).astype(np.int64)
    mant = np.where(normal, value / 2.0 ** (ve - 3) - 8, value / 2.0 ** -9).astype(np.int64)
    return sign | ((exp_field << 3) | mant).astype(np.uint8)


def e4m3_value(b: np.ndarray) -> np.ndarray:
    """E4M3 bytes -> float64 values (NaN for S.1111.111)."""
    b = b.astype(np.int64)
    sign = np.where(b & 0x80, -1.0, 1.0)
    exp_field, mant = (b >> 3) & 0xF, b & 0x7
    normal = sign * (1 + mant / 8.0) * 2.0 ** (exp_field - 7)
    sub = sign * mant * 2.0 ** -9
    out = np.where(exp_field == 0, sub, normal)
    return np.where((exp_field == 0xF) & (mant == 0x7), np.nan, out)


def quantize(x: np.ndarray, block: int = BLOCK) -> tuple[np.ndarray, np.ndarray]:
    """x (..., K) float -> (E4M3 bytes (..., K) uint8, E8M0 scales (..., ceil(K/block)) uint8)."""
    x = np.asarray(x, dtype=np.float64)
    k = x.shape[-1]
    groups = -(-k // block)
    q = np.zeros(x.shape, dtype=np.uint8)
    scales = np.zeros(x.shape[:-1] + (groups,), dtype=np.uint8)
    for g in range(groups):
        v = x[..., g * block : (g + 1) * block]
        special = ~np.isfinite(v).all(-1)
        amax = np.where(np.isfinite(v), np.abs(v), 0).max(-1)
        with np.errstate(divide="ignore"):
            e = np.floor(np.log2(np.where(amax > 0, amax, 1.0)))
        e = np.where(2.0 ** e > amax, e - 1, e)  # exact floor(log2) for the float64 amax
        e = np.where((amax > 0) & (2.0 ** (e + 1) <= amax), e + 1, e)
        shared = np.where(amax > 0, e - EMAX_ELEM, -SCALE_BIAS)
        shared = np.clip(shared, -SCALE_BIAS, SCALE_BIAS)
        scales[..., g] = np.where(special, SCALE_NAN, shared + SCALE_BIAS).astype(np.uint8)
        finite_v = np.where(np.isfinite(v), v, 0.0)
        elems = _e4m3_bytes(finite_v / 2.0 ** shared[..., None])
        q[..., g * block : (g + 1) * block] = np.where(special[..., None], E4M3_NAN, elems)
    return q, scales


def dequantize(q: np.ndarray, scales: np.ndarray, block: int = BLOCK) -> np.ndarray:
    k = q.shape[-1]
    values = e4m3_value(q)
    factor = np.repeat(2.0 ** (scales.astype(np.float64) - SCALE_BIAS), block, axis=-1)[..., :k]
    nan_block = np.repeat(scales == SCALE_NAN, block, axis=-1)[..., :k]
    return np.where(nan_block, np.nan, values * factor)
