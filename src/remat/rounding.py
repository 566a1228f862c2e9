"""Casts to bfloat16 that round once, written over an array namespace `xp` (NumPy or jax.numpy)
so that both backends give the same bits.

ml_dtypes and XLA convert float64 and integers to bfloat16 through float32, rounding twice:
1 + 2**-8 + 2**-40 lands on the tie 1 + 2**-8 in float32 and then on 1, though 1 + 2**-7 is
nearer. Rounding to float32 *to odd* instead (toward zero, then the last bit set if anything was
lost) and then to bfloat16 is one correct rounding: round-to-odd at two or more extra bits
followed by round-to-nearest equals round-to-nearest (Boldo and Melquiond, "Emulation of FMA and
correctly rounded sums: proved algorithms using rounding to odd", IEEE Trans. Computers 2008);
float32 keeps 16 bits more than bfloat16.

Integers are split into two halves that are exact in floating point, summed with Knuth's
TwoSum (the rounded sum and its exact error), and rounded to odd from the pair: int32 in
float32, so the XLA backend needs no 64-bit mode for it, and int64 in float64.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
_THROUGH_FLOAT32 = {np.dtype(d) for d in ("bool", "float16", "float32")} | {BFLOAT16}


def to_bfloat16(xp, x):
    """`x` (any remat dtype) as bfloat16, rounded to nearest (ties to even) once."""
    dtype = np.dtype(x.dtype)
    if dtype in _THROUGH_FLOAT32:  # exact in float32: the one rounding is float32's to bfloat16
        return x.astype(BFLOAT16)
    if dtype == np.int32:
        hi, lo = _two_sum(_split(xp, x, 16, np.float32))
    elif dtype == np.int64:
        hi, lo = _two_sum(_split(xp, x, 32, np.float64))
    else:  # float64
        hi, lo = x, xp.zeros_like(x)
    return _odd_float32(xp, hi, lo).astype(BFLOAT16)


def _split(xp, x, shift: int, float_dtype):
    """`x` as two floats whose exact sum it is: the high bits (a multiple of 2**shift) and the low."""
    high = (x >> shift).astype(float_dtype) * float_dtype(2.0**shift)
    low = (x & ((1 << shift) - 1)).astype(float_dtype)
    return high, low


def _two_sum(pair):
    """(s, e) with s = fl(a + b) and a + b = s + e exactly (Knuth)."""
    a, b = pair
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _odd_float32(xp, hi, lo):
    """The exact value `hi + lo` (`lo` the error of rounding it to `hi`, or 0) rounded to float32
    to odd: toward zero, with the last bit set if the result is inexact. NaN stays NaN (it
    compares inexact, and a NaN with its last bit set is still NaN); infinities stay infinite."""
    with np.errstate(over="ignore", invalid="ignore"):
        f = hi.astype(np.float32)
        back = f.astype(hi.dtype)
        # |f| > |hi + lo|: the nearest float32 was above the exact value, so step toward zero.
        above = (xp.abs(back) > xp.abs(hi)) | ((back == hi) & (lo != 0) & ((lo < 0) != (hi < 0)))
        f = xp.where(above, xp.nextafter(f, xp.zeros_like(f)), f)
        inexact = (f.astype(hi.dtype) != hi) | (lo != 0)
    return _from_bits(xp, _bits(xp, f) | inexact.astype(np.uint32))


def _bits(xp, f):
    if xp is np:
        return f.view(np.uint32)
    from jax import lax

    return lax.bitcast_convert_type(f, np.uint32)


def _from_bits(xp, u):
    if xp is np:
        return u.view(np.float32)
    from jax import lax

    return lax.bitcast_convert_type(u, np.float32)
