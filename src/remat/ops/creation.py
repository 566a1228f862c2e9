"""Tensors made from nothing: zeros, ones, full, arange, eye and the *_like forms.

They are concrete; used inside a trace they become constants of the graph.
"""

from __future__ import annotations

import numpy as np

from remat import dtypes
from remat.trace import Tensor, asarray


def _dtype(dtype, fill=0.0) -> np.dtype:
    if dtype is None:
        return dtypes.scalar_dtype(fill)
    return dtypes.canonical(dtype)


def full(shape, fill_value, dtype=None) -> Tensor:
    """A tensor of `shape` filled with `fill_value` (float32 for Python floats).

    >>> import remat as rm
    >>> rm.full((2,), 7)
    Tensor([7, 7], dtype=int32)
    """
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if isinstance(fill_value, Tensor):
        from remat.ops.shape import broadcast_to

        return broadcast_to(asarray(fill_value, dtype), shape)
    return asarray(np.full(shape, fill_value, _dtype(dtype, fill_value)))


def zeros(shape, dtype=None) -> Tensor:
    """A tensor of zeros (float32 unless `dtype` says otherwise)."""
    return full(shape, 0.0 if dtype is None else 0, dtype)


def ones(shape, dtype=None) -> Tensor:
    """A tensor of ones (float32 unless `dtype` says otherwise)."""
    return full(shape, 1.0 if dtype is None else 1, dtype)


def zeros_like(x, dtype=None) -> Tensor:
    """Zeros with the shape, vectorized axes and (unless given) dtype of `x`."""
    return _filled_like(x, 0, dtype)


def ones_like(x, dtype=None) -> Tensor:
    """Ones with the shape, vectorized axes and (unless given) dtype of `x`."""
    return _filled_like(x, 1, dtype)


def _filled_like(x, value, dtype) -> Tensor:
    x = asarray(x)
    return full(x._full_shape, value, dtype or x.dtype)._relabel(x.vectorized_axes)


def arange(start, stop=None, step=1, dtype=None) -> Tensor:
    """Evenly spaced values in [start, stop), as `np.arange` (int32 or float32 by default)."""
    if stop is None:
        start, stop = 0, start
    values = np.arange(start, stop, step)
    return asarray(values.astype(_dtype(dtype, values.dtype.type(0).item())))


def eye(n: int, m: int | None = None, k: int = 0, dtype=None) -> Tensor:
    """An `n` x `m` matrix with ones on diagonal `k`."""
    return asarray(np.eye(n, m, k, dtype=_dtype(dtype)))
