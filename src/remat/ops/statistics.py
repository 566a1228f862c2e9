"""Variance and standard deviation, composed from mean, subtract, multiply and sum."""

from __future__ import annotations

import math

from remat import dtypes
from remat.errors import ArgumentValueError
from remat.ops.axes import normalize_axes, static_int
from remat.ops.elementwise import sqrt
from remat.ops.reduce import mean, sum
from remat.trace import Tensor, asarray


def var(x, axis=None, ddof: int = 0, keepdims: bool = False) -> Tensor:
    """The variance over `axis` (all axes by default): `sum((x - mean)²) / (n - ddof)`, as
    `np.var`; integer inputs give float32. `n - ddof` must be positive.

    >>> import remat as rm
    >>> rm.var(rm.asarray([1.0, 2.0, 3.0, 4.0]))
    Tensor(1.25, dtype=float32)
    >>> rm.var(rm.asarray([1.0, 2.0, 3.0, 4.0]), ddof=1)
    Tensor(1.6666666, dtype=float32)
    """
    return _var("var", x, axis, ddof, keepdims)


def std(x, axis=None, ddof: int = 0, keepdims: bool = False) -> Tensor:
    """The standard deviation over `axis`: `sqrt(var(x, axis, ddof))`, as `np.std`.

    NOTE: as in JAX, its gradient is nan where the variance is 0 (the slope of sqrt there).

    >>> import remat as rm
    >>> rm.std(rm.asarray([1.0, 3.0]))
    Tensor(1., dtype=float32)
    """
    return sqrt(_var("std", x, axis, ddof, keepdims))


def _var(fn: str, x, axis, ddof, keepdims: bool) -> Tensor:
    x = asarray(x)
    if not dtypes.is_float(x.dtype):
        x = x.astype(dtypes.DEFAULT_FLOAT)
    axes = normalize_axes(axis, x.ndim, fn)
    ddof = static_int(fn, ddof, "ddof")
    n = math.prod(x.shape[a] for a in axes)
    if n - ddof <= 0:
        raise ArgumentValueError(
            f"{fn}: ddof={ddof} leaves no degrees of freedom: the reduced axes hold {n} elements; "
            f"use a ddof below {n}"
        )
    centered = x - mean(x, axis=axes, keepdims=True)
    return sum(centered * centered, axis=axes, keepdims=keepdims) / float(n - ddof)
