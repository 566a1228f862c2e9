"""Rounding to integral values: floor, ceil and round (half to even) are primitives, trunc is
composed from them (as in JAX). They are piecewise constant, so their gradient is zero, as JAX
defines it. Integer and bool inputs come back unchanged, as from jax.numpy.
"""

from __future__ import annotations

import math

from remat import dtypes
from remat.core import NOT_DIFFERENTIABLE, declare
from remat.errors import ArgumentValueError, DTypeError
from remat.ops.axes import static_int
from remat.ops.elementwise import _float_unary, where
from remat.tensor import Tensor
from remat.trace import asarray, bind

# Piecewise constant: zero gradient (JAX's jvp of floor, ceil and round is zero).
_floor = declare("floor", _float_unary, NOT_DIFFERENTIABLE)
_ceil = declare("ceil", _float_unary, NOT_DIFFERENTIABLE)
_round = declare("round", _float_unary, NOT_DIFFERENTIABLE)  # to nearest, ties to even


def floor(x) -> Tensor:
    """The largest integral value `<= x` (integers are returned unchanged); gradient zero.

    >>> import remat as rm
    >>> rm.floor(rm.asarray([-1.5, 1.5]))
    Tensor([-2.,  1.], dtype=float32)
    """
    x = asarray(x)
    return bind(_floor, x) if dtypes.is_float(x.dtype) else x


def ceil(x) -> Tensor:
    """The smallest integral value `>= x` (integers are returned unchanged); gradient zero."""
    x = asarray(x)
    return bind(_ceil, x) if dtypes.is_float(x.dtype) else x


def trunc(x) -> Tensor:
    """`x` rounded toward zero (integers are returned unchanged); gradient zero."""
    x = asarray(x)
    if not dtypes.is_float(x.dtype):
        return x
    return where(x < 0, bind(_ceil, x), bind(_floor, x))


def round(x, decimals: int = 0) -> Tensor:
    """`x` rounded to `decimals` decimal places, halves to even, as `np.round` and `jnp.round`
    (with `decimals != 0`, `round(x * 10**decimals) / 10**decimals`). Integers are returned
    unchanged (`decimals` must then be >= 0); bool is a DTypeError. Gradient zero.

    >>> import remat as rm
    >>> rm.round(rm.asarray([0.5, 1.5, 2.5, -0.5]))
    Tensor([ 0.,  2.,  2., -0.], dtype=float32)
    >>> rm.round(rm.asarray(3.14159), 2)
    Tensor(3.14, dtype=float32)
    """
    x = asarray(x)
    decimals = static_int("round", decimals, "decimals")
    if x.dtype == dtypes.bool_:
        raise DTypeError("round: expects a numeric operand, got bool; use astype first")
    if not dtypes.is_float(x.dtype):
        if decimals < 0:
            raise ArgumentValueError(f"round: decimals={decimals} is not supported for integers ({x.dtype}), "
                                     "as in JAX; pass decimals >= 0 or convert to a float dtype first")
        return x
    if decimals == 0:
        return bind(_round, x)
    if decimals > math.log10(float(dtypes.finfo(x.dtype).max)):
        return x  # rounding beyond the dtype's precision changes nothing
    work = x.astype(dtypes.float32) if x.dtype == dtypes.float16 else x  # as JAX: float16 in float32
    factor = 10.0**decimals
    out = bind(_round, work * factor) / factor
    return out.astype(x.dtype)
