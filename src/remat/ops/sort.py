"""Sorting along one axis. One primitive, `sort`, gives the sorted values and the permutation
that sorts (as XLA sorts a tensor together with an iota); `rm.sort` and `rm.argsort` each take
the output they want.

Both backends sort stably in NumPy's order, as `jnp.sort` does: NaNs (of either sign) last, and
-0.0 equal to 0.0 (they keep their input order). The gradient flows through the permutation:
each element's cotangent goes back to the place the element came from.
"""

from __future__ import annotations

import math

import numpy as np

from remat import dtypes
from remat.core import Aval, declare
from remat.ops.axes import axis_index
from remat.ops.creation import zeros
from remat.ops.indexing import _index_add, _take
from remat.ops.shape import flip, permute_dims, reshape
from remat.tensor import Tensor
from remat.trace import asarray, bind
from remat.vaxes import axis_shifted


def _sort_rule(x: Aval, *, axis: int) -> tuple[Aval, Aval]:
    axis_index("", axis, x.ndim)
    return Aval(x.shape, x.dtype), Aval(x.shape, dtypes.int32)


def _lanes(x: Tensor, axis: int) -> Tensor:
    """`x` with `axis` last, as a matrix (lanes, n)."""
    order = [i for i in range(x.ndim) if i != axis] + [axis]
    return reshape(permute_dims(x, order), (-1, x.shape[axis]))


def _unlanes(m: Tensor, shape: tuple[int, ...], axis: int) -> Tensor:
    """The inverse of `_lanes` for a tensor of `shape`."""
    moved = tuple(n for i, n in enumerate(shape) if i != axis) + (shape[axis],)
    order = list(range(len(shape) - 1))
    order.insert(axis, len(shape) - 1)
    return permute_dims(reshape(m, moved), order)


def _flat_positions(perm: Tensor, axis: int) -> Tensor:
    """Where each entry of `perm` (indices along `axis`) lies in the flattened lanes."""
    lanes = _lanes(perm, axis)
    rows, n = lanes.shape
    offsets = asarray((np.arange(rows, dtype=np.int64) * n).astype(perm.dtype).reshape(rows, 1))
    return reshape(lanes + offsets, (-1,))


def take_along(x: Tensor, perm: Tensor, axis: int) -> Tensor:
    """`x` gathered along `axis` at `perm` (an int tensor of x's shape), lane by lane."""
    flat = bind(_take, reshape(_lanes(x, axis), (-1,)), _flat_positions(perm, axis), axis=0)
    return _unlanes(flat, x.shape, axis)


def put_along(g: Tensor, perm: Tensor, axis: int) -> Tensor:
    """The transpose of `take_along`: `g`'s entries added back at `perm` along `axis`."""
    n = math.prod(g.shape)
    back = bind(_index_add, zeros((n,), g.dtype), _flat_positions(perm, axis),
                reshape(_lanes(g, axis), (-1,)), axis=0)
    return _unlanes(back, g.shape, axis)


def _sort_vjp(gs, x, out, *, axis):
    # values = x[perm] along the axis: the cotangent goes back through the permutation.
    g, _ = gs
    return (None if g is None else put_along(g, out[1], axis),)


def _sort_jvp(ts, x, out, *, axis):
    # The tangent is permuted as the values are.
    return (None if ts[0] is None else take_along(ts[0], out[1], axis), None)


_sort = declare("sort", _sort_rule, _sort_vjp, multiple_results=True, jvp=_sort_jvp, batch=axis_shifted)


# ---------------------------------------------------------------- front end


def _sorted(fn: str, x, axis, descending: bool) -> tuple[Tensor, Tensor, int]:
    """(values, permutation, axis) of `x` sorted along `axis` (flattened if None)."""
    x = asarray(x)
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    axis = axis_index(fn, axis, x.ndim)
    if not descending:
        values, perm = bind(_sort, x, axis=axis)
        return values, perm, axis
    # Stable and descending: sort the reversed tensor, reverse the result, so that equal
    # elements keep their order (as jnp.sort(descending=True) does).
    values, perm = bind(_sort, flip(x, axis), axis=axis)
    last = asarray(np.int32(x.shape[axis] - 1))
    return flip(values, axis), last - flip(perm, axis), axis


def sort(x, axis: int | None = -1, descending: bool = False) -> Tensor:
    """`x` sorted along `axis` (the flattened tensor if None), stably, NaNs last, as `np.sort`
    and `jnp.sort`. The gradient goes back through the permutation.

    >>> import remat as rm
    >>> rm.sort(rm.asarray([3.0, 1.0, 2.0]))
    Tensor([1., 2., 3.], dtype=float32)
    >>> rm.sort(rm.asarray([3, 1, 2]), descending=True)
    Tensor([3, 2, 1], dtype=int32)
    """
    return _sorted("sort", x, axis, bool(descending))[0]


def argsort(x, axis: int | None = -1, descending: bool = False) -> Tensor:
    """The int32 indices that sort `x` along `axis` (the flattened tensor if None), stably: equal
    elements keep their order, also with `descending=True`.

    >>> import remat as rm
    >>> rm.argsort(rm.asarray([3.0, 1.0, 2.0]))
    Tensor([1, 2, 0], dtype=int32)
    """
    return _sorted("argsort", x, axis, bool(descending))[1]
