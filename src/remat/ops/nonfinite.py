"""NaN and infinity: isnan, isinf, isfinite, nan_to_num, fmax, fmin and nansum, composed from
comparisons and where as in jax.numpy (`isnan(x)` is `x != x`). The tests are bool, with no
gradient; integer and bool inputs are never nan or infinite.
"""

from __future__ import annotations

import math

from remat import dtypes, values
from remat.ops.creation import full_like
from remat.ops.elementwise import abs, broadcast_shapes_for, promote, where
from remat.ops.reduce import sum
from remat.tensor import Tensor
from remat.trace import asarray


def isnan(x) -> Tensor:
    """Where `x` is nan (`x != x`).

    >>> import remat as rm
    >>> rm.isnan(rm.asarray([1.0, float("nan"), float("inf")]))
    Tensor([False,  True, False], dtype=bool)
    """
    x = asarray(x)
    return x != x if dtypes.is_float(x.dtype) else full_like(x, False, dtypes.bool_)


def isinf(x) -> Tensor:
    """Where `x` is `inf` or `-inf`."""
    x = asarray(x)
    return abs(x) == math.inf if dtypes.is_float(x.dtype) else full_like(x, False, dtypes.bool_)


def isfinite(x) -> Tensor:
    """Where `x` is neither nan nor infinite."""
    x = asarray(x)
    return abs(x) < math.inf if dtypes.is_float(x.dtype) else full_like(x, True, dtypes.bool_)


def nan_to_num(x, copy: bool = True, nan: float = 0.0, posinf: float | None = None,
               neginf: float | None = None) -> Tensor:
    """`x` with nan replaced by `nan`, inf by `posinf` and -inf by `neginf` (by default the
    dtype's largest and smallest finite values), as `np.nan_to_num`; gradient 1 where `x` is
    finite, 0 elsewhere. Integers are returned unchanged (`copy` is accepted and ignored:
    tensors are immutable).

    >>> import remat as rm
    >>> rm.nan_to_num(rm.asarray([float("nan"), float("-inf"), 1.0]), neginf=-9.0)
    Tensor([ 0., -9.,  1.], dtype=float32)
    """
    x = asarray(x)
    if not dtypes.is_float(x.dtype):
        return x
    info = dtypes.finfo(x.dtype)
    fills = [_fill(x, v) for v in (nan, posinf, neginf)]
    big = fills[1] if posinf is not None else asarray(info.max, x.dtype)
    small = fills[2] if neginf is not None else asarray(info.min, x.dtype)
    out = where(x != x, fills[0], x)
    out = where(out == math.inf, big, out)
    return where(out == -math.inf, small, out)


def _fill(x: Tensor, value) -> Tensor | None:
    if value is None:
        return None
    if isinstance(value, Tensor):
        return value.astype(x.dtype)
    return asarray(values.array(value, x.dtype, "nan_to_num"))


def fmax(x1, x2) -> Tensor:
    """Elementwise maximum ignoring nan (nan only where both are), as `np.fmax`: `x1` where
    `x1 > x2` or `x2` is nan, else `x2` (which takes a tie's gradient), as in JAX."""
    a, b = promote(x1, x2, what="fmax")
    broadcast_shapes_for("fmax", a.shape, b.shape)
    return where((a > b) | (b != b), a, b)


def fmin(x1, x2) -> Tensor:
    """Elementwise minimum ignoring nan, as `np.fmin` (see `fmax`)."""
    a, b = promote(x1, x2, what="fmin")
    broadcast_shapes_for("fmin", a.shape, b.shape)
    return where((a < b) | (b != b), a, b)


def nansum(x, axis=None, keepdims: bool = False) -> Tensor:
    """`sum` with nan counted as zero (bool is summed as int32), as `np.nansum`."""
    x = asarray(x)
    if dtypes.is_float(x.dtype):
        x = where(x != x, 0, x)
    return sum(x, axis=axis, keepdims=keepdims)
