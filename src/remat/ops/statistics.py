"""Variance, standard deviation and (weighted) average, composed from mean, multiply and sum."""

from __future__ import annotations

import math

import numpy as np

from remat import dtypes
from remat.errors import ArgumentValueError, ShapeError
from remat.ops.axes import normalize_axes, static_int
from remat.ops.elementwise import promote, sqrt
from remat.ops.reduce import mean, sum
from remat.ops.shape import broadcast_to, reshape
from remat.tensor import Tensor
from remat.trace import asarray


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


def average(a, axis=None, weights=None, returned: bool = False, keepdims: bool = False):
    """The mean of `a` over `axis`, weighted by `weights` if given, as `np.average`: `weights`
    has `a`'s shape, or is 1-d along the one `axis`. `returned=True` also gives the sum of the
    weights (broadcast to the result). Integer inputs give float32.

    >>> import remat as rm
    >>> rm.average(rm.asarray([1.0, 2.0, 4.0]), weights=rm.asarray([1.0, 1.0, 2.0]))
    Tensor(2.75, dtype=float32)
    """
    a = asarray(a)
    if weights is None:
        a = a if dtypes.is_float(a.dtype) else a.astype(dtypes.DEFAULT_FLOAT)
        avg = mean(a, axis=axis, keepdims=keepdims)
        count = math.prod(a.shape[i] for i in normalize_axes(axis, a.ndim, "average"))
        scale = broadcast_to(asarray(np.asarray(count, avg.dtype)), avg.shape)
        return (avg, scale) if returned else avg
    a, w = promote(a, weights, what="average")
    if not dtypes.is_float(a.dtype):
        a, w = a.astype(dtypes.DEFAULT_FLOAT), w.astype(dtypes.DEFAULT_FLOAT)
    axes = normalize_axes(axis, a.ndim, "average")
    if w.shape != a.shape:
        if axis is None or len(axes) != 1 or w.ndim != 1 or w.shape[0] != a.shape[axes[0]]:
            raise ShapeError(
                f"average: weights of shape {w.shape} must have the shape of a {a.shape}, or be 1-d with the "
                f"length of the one axis averaged over (axis={axis!r})"
            )
        w = reshape(w, tuple(n if i == axes[0] else 1 for i, n in enumerate(a.shape)))
    scale = sum(broadcast_to(w, a.shape), axis=axes, keepdims=keepdims)
    avg = sum(a * w, axis=axes, keepdims=keepdims) / scale
    return (avg, broadcast_to(scale, avg.shape)) if returned else avg
