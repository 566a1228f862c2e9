"""float16 and bfloat16 arithmetic on both backends: matrix products and sums accumulate in
float32 and round once to the operands' dtype, as JAX's `jnp.sum` and XLA's dots do. A product
of two float16 (11-bit) or bfloat16 (8-bit) numbers is exact in float32 (24 bits), so the two
backends differ only in the order of the float32 additions."""

from __future__ import annotations

from collections.abc import Callable

import ml_dtypes
import numpy as np

from remat import rounding

LOW = (np.dtype("float16"), np.dtype(ml_dtypes.bfloat16))
ACCUMULATOR = np.dtype("float32")


def numpy_matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """np.matmul; like the ufunc it is, it writes into `out` (a dying buffer) when given one."""
    if a.dtype not in LOW:
        return np.matmul(a, b, out=out)
    result = np.matmul(a.astype(ACCUMULATOR), b.astype(ACCUMULATOR)).astype(a.dtype)
    if out is None:
        return result
    out[...] = result
    return out


numpy_matmul.takes_out = True  # the evaluator may hand it a dying buffer, as it does ufuncs


def numpy_reduce(fn: Callable) -> Callable:
    """`fn` (np.sum, np.prod) over `axes`, accumulated in float32 for the low dtypes."""

    def reduce(x: np.ndarray, *, axes):
        if x.dtype not in LOW:
            return fn(x, axis=axes)
        return fn(x, axis=axes, dtype=ACCUMULATOR).astype(x.dtype)

    return reduce


def numpy_convert(x: np.ndarray, *, dtype: np.dtype) -> np.ndarray:
    return rounding.to_bfloat16(np, x) if dtype == rounding.BFLOAT16 else x.astype(dtype)


def xla_matmul(a, b):
    """`a @ b` at the precision of the program being traced (see remat/precision.py)."""
    import jax.numpy as jnp
    from jax import lax

    # No precision here: the program is traced inside JAX's setting, which remat.precision
    # chooses (per call, per scope, or JAX's default), so every dot of it gets the same one.
    if a.dtype not in LOW:
        return jnp.matmul(a, b)
    return lax.convert_element_type(jnp.matmul(a, b, preferred_element_type=ACCUMULATOR), a.dtype)


def xla_reduce(fn: Callable) -> Callable:
    """`fn` (jnp.sum, jnp.prod) over `axes`, accumulated in float32 for the low dtypes."""
    from jax import lax

    def reduce(x, *, axes):
        if x.dtype not in LOW:
            return fn(x, axis=axes)
        return lax.convert_element_type(fn(x, axis=axes, dtype=ACCUMULATOR), x.dtype)

    return reduce


def xla_cumulative(fn: Callable) -> Callable:
    """`fn` (lax.cumsum, lax.cumprod) along `axis`, accumulated in float32 for the low dtypes and
    rounded once per output (XLA's own, in bfloat16, was up to 472 ulp from the exact prefix
    sums of 4,096 numbers: remat's are within about half an ulp, on both backends)."""
    from jax import lax

    def cumulative(x, *, axis, reverse):
        if x.dtype not in LOW:
            return fn(x, axis=axis, reverse=reverse)
        wide = fn(lax.convert_element_type(x, ACCUMULATOR), axis=axis, reverse=reverse)
        return xla_convert(wide, dtype=x.dtype)

    return cumulative


def xla_convert(x, *, dtype: np.dtype):
    import jax.numpy as jnp
    from jax import lax

    if dtype == rounding.BFLOAT16:
        return rounding.to_bfloat16(jnp, x)
    return lax.convert_element_type(x, dtype)
