"""Gathering and scattering along one axis (`take`, `index_add`), and `x[index]` built from them
and the slicing ops."""

from __future__ import annotations

import numbers
from builtins import slice as builtin_slice

import numpy as np

from remat import dtypes
from remat.errors import DTypeError, ShapeError
from remat.ops.core import Aval, declare
from remat.ops.reduce import normalize_axes
from remat.ops.shape import flip, permute_dims, reshape, slice
from remat.trace import Tensor, asarray, bind


def _take_rule(x: Aval, idx: Aval, *, axis: int) -> Aval:
    normalize_axes(axis, x.ndim)
    if not dtypes.is_int(idx.dtype):
        raise DTypeError(f"indices must be integers, got {idx.dtype}")
    return Aval(x.shape[:axis] + idx.shape + x.shape[axis + 1 :], x.dtype)


def _index_add_rule(x: Aval, idx: Aval, upd: Aval, *, axis: int) -> Aval:
    expected = _take_rule(x, idx, axis=axis)
    if upd.shape != expected.shape or upd.dtype != x.dtype:
        raise ShapeError(f"updates must be {expected.shape} {x.dtype}, got {upd.shape} {upd.dtype}")
    return x


def _take_vjp(g, x, idx, out, *, axis):
    # Gathering copies x[idx]; its transpose adds each cotangent back where it came from.
    from remat.ops.creation import zeros

    return bind(_index_add, zeros(x.shape, g.dtype), idx, g, axis=axis), None


def _index_add_vjp(g, x, idx, upd, out, *, axis):
    # out = x + scatter(upd): x gets g unchanged, the updates read g where they were added.
    return g, None, take(g, idx, axis=axis)


_take = declare("take", _take_rule, _take_vjp)
_index_add = declare("index_add", _index_add_rule, _index_add_vjp)


def take(x, indices, axis: int | None = None) -> Tensor:
    """Elements of `x` at integer `indices` along `axis` (of the flattened `x` if None).
    Negative indices count from the end.

    >>> import remat as rm
    >>> rm.take(rm.asarray([10.0, 20.0, 30.0]), rm.asarray([2, 0]))
    Tensor([30., 10.], dtype=float32)
    """
    x, idx = asarray(x), asarray(indices)
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    (axis,) = normalize_axes(axis, x.ndim)
    return bind(_take, x, idx, axis=axis)


def index_add(x, indices, updates, axis: int = 0) -> Tensor:
    """`x` with `updates` added at `indices` along `axis`; repeated indices accumulate."""
    x, idx, upd = asarray(x), asarray(indices), asarray(updates)
    (axis,) = normalize_axes(axis, x.ndim)
    return bind(_index_add, x, idx, upd.astype(x.dtype), axis=axis)


def _expand_ellipsis(index: tuple, ndim: int) -> tuple:
    if sum(i is Ellipsis for i in index) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(1 for i in index if i is not None and i is not Ellipsis)
    if used > ndim:
        raise IndexError(f"too many indices ({used}) for a {ndim}-d tensor")
    # Found by identity: `in` and `.index` would compare tensors and arrays with `==`.
    at = next((k for k, i in enumerate(index) if i is Ellipsis), None)
    if at is None:
        return index + (builtin_slice(None),) * (ndim - used)
    return index[:at] + (builtin_slice(None),) * (ndim - used) + index[at + 1 :]




def getitem(x, index) -> Tensor:
    """`x[index]` for ints, slices (any step), None, `...` and one integer tensor or array."""
    x = asarray(x)
    index = _expand_ellipsis(index if isinstance(index, tuple) else (index,), x.ndim)
    start, stop, step, flips = [], [], [], []
    final: list[int] = []
    tensor_axis, tensor_index, tensor_at = None, None, 0
    advanced: list[int] = []  # positions in `index` of the ints and the tensor
    axis = 0
    for pos, item in enumerate(index):
        if item is None:
            final.append(1)
            continue
        n = x.shape[axis]
        if isinstance(item, builtin_slice):
            a, b, s = item.indices(n)
            m = len(range(a, b, s))
            if s < 0 and m:
                a, b, s = a + (m - 1) * s, a + 1, -s
                flips.append(axis)
            elif not m:
                a, b, s = 0, 0, 1
            start.append(a), stop.append(b), step.append(s)
            final.append(m)
        elif _is_int(item):
            i = int(item)
            if not -n <= i < n:
                raise IndexError(f"index {i} is out of bounds for axis {axis} with size {n}")
            i %= n
            start.append(i), stop.append(i + 1), step.append(1)
            advanced.append(pos)
        else:
            idx = asarray(item)
            if not dtypes.is_int(idx.dtype):
                raise IndexError(f"tensor indices must be integers, got {idx.dtype}")
            if tensor_index is not None:
                raise IndexError("only one integer-tensor index is supported; use take() per axis")
            tensor_axis, tensor_index, tensor_at = axis, idx, len(final)
            start.append(0), stop.append(n), step.append(1)
            final.extend(idx.shape)
            advanced.append(pos)
        axis += 1
    out = slice(x, start, stop, step)
    out = flip(out, tuple(flips)) if flips else out
    if tensor_index is not None:
        out = take(out, tensor_index, axis=tensor_axis)
    out = reshape(out, tuple(final))
    if tensor_index is not None and advanced[-1] - advanced[0] >= len(advanced):
        # As in NumPy: ints and the tensor not side by side put the tensor's axes first.
        k = tensor_index.ndim
        rest = [d for d in range(len(final)) if not tensor_at <= d < tensor_at + k]
        out = permute_dims(out, tuple(range(tensor_at, tensor_at + k)) + tuple(rest))
    return out


def _is_int(item) -> bool:
    if isinstance(item, bool):
        return False
    if isinstance(item, numbers.Integral):
        return True
    return isinstance(item, (np.ndarray, Tensor)) and item.ndim == 0 and dtypes.is_int(item.dtype) and (
        not isinstance(item, Tensor) or item.is_concrete
    )
