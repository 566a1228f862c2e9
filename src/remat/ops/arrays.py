"""NumPy's array manipulations, composed from the shape and indexing primitives as jax.numpy
composes them: swapaxes and moveaxis are permutes, tril and triu a `where` with a constant mask,
diagonal a strided slice of a reshape, roll two slices joined, repeat and tile broadcasts (or a
gather with a constant index), take_along_axis a gather from the flattened tensor. Their
gradients are those of the ops they are made of. Sizes, shifts and axes are static ints.
"""

from __future__ import annotations

import builtins
import math

import numpy as np

from remat import dtypes
from remat.errors import ArgumentValueError, DTypeError, ShapeError
from remat.ops.axes import axis_index, int_tuple, listed, ordered_axes, static_int
from remat.ops.elementwise import broadcast_shapes, maximum, minimum, where
from remat.ops.indexing import check_in_range, take
from remat.ops.shape import broadcast_to, concat, pad, permute_dims, reshape, slice, slice_axis, transpose
from remat.tensor import Tensor
from remat.trace import asarray

# ---------------------------------------------------------------- axes


def swapaxes(x, axis1: int, axis2: int) -> Tensor:
    """`x` with axes `axis1` and `axis2` exchanged, as `np.swapaxes`.

    >>> import remat as rm
    >>> rm.swapaxes(rm.zeros((2, 3, 4)), 0, -1).shape
    (4, 3, 2)
    """
    x = asarray(x)
    a = axis_index("swapaxes", axis1, x.ndim, "axis1")
    b = axis_index("swapaxes", axis2, x.ndim, "axis2")
    order = list(range(x.ndim))
    order[a], order[b] = b, a
    return permute_dims(x, order)


def moveaxis(x, source, destination) -> Tensor:
    """`x` with the axes `source` (an int or a sequence) moved to the positions `destination`,
    the others keeping their order, as `np.moveaxis`.

    >>> import remat as rm
    >>> rm.moveaxis(rm.zeros((2, 3, 4)), 0, -1).shape
    (3, 4, 2)
    """
    x = asarray(x)
    src = ordered_axes("moveaxis", source, x.ndim, "source")
    dst = ordered_axes("moveaxis", destination, x.ndim, "destination")
    if len(src) != len(dst):
        raise ArgumentValueError(
            f"moveaxis: source {source!r} and destination {destination!r} name {len(src)} and {len(dst)} "
            "axes; give one destination per source axis"
        )
    order = [a for a in range(x.ndim) if a not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return permute_dims(x, order)


def ravel(x, order: str = "C") -> Tensor:
    """`x` as 1-d, in row-major (`order="C"`) or column-major (`"F"`) order, as `np.ravel`."""
    x = asarray(x)
    if order not in ("C", "F"):
        raise ArgumentValueError(f"ravel: order must be 'C' or 'F', got {order!r}")
    return reshape(x if order == "C" else transpose(x), (-1,))


def _at_least(arys: tuple, ndim: int, place) -> Tensor | list[Tensor]:
    out = []
    for x in map(asarray, arys):
        out.append(x if x.ndim >= ndim else reshape(x, place(x.shape)))
    return out[0] if len(out) == 1 else out


def atleast_1d(*arys) -> Tensor | list[Tensor]:
    """Each argument with at least one axis (a 0-d tensor becomes shape `(1,)`); one tensor for
    one argument, else a list, as `np.atleast_1d`."""
    return _at_least(arys, 1, lambda s: (1,))


def atleast_2d(*arys) -> Tensor | list[Tensor]:
    """Each argument with at least two axes (`(n,)` becomes `(1, n)`), as `np.atleast_2d`.

    >>> import remat as rm
    >>> rm.atleast_2d(rm.zeros(3)).shape
    (1, 3)
    """
    return _at_least(arys, 2, lambda s: (1,) * (2 - len(s)) + s)


def atleast_3d(*arys) -> Tensor | list[Tensor]:
    """Each argument with at least three axes (`(n,)` becomes `(1, n, 1)`, `(m, n)` becomes
    `(m, n, 1)`), as `np.atleast_3d`."""
    return _at_least(arys, 3, lambda s: {0: (1, 1, 1), 1: (1, *s, 1), 2: (*s, 1)}[len(s)])


# ---------------------------------------------------------------- triangles and diagonals


def _zero(x: Tensor) -> Tensor:
    return asarray(np.zeros((), x.dtype))


def _matrices(what: str, m) -> Tensor:
    m = asarray(m)
    if m.ndim < 2:
        raise ShapeError(f"{what}: needs a tensor of at least 2 axes (a matrix or a batch of them), "
                         f"got shape {m.shape}")
    return m


def tril(m, k: int = 0) -> Tensor:
    """`m` with the elements above diagonal `k` zeroed, on the last two axes, as `jnp.tril`.

    >>> import remat as rm
    >>> rm.tril(rm.ones((2, 3), "int32"))
    Tensor([[1, 0, 0],
            [1, 1, 0]], dtype=int32)
    """
    m = _matrices("tril", m)
    k = static_int("tril", k, "k")
    return where(np.tri(*m.shape[-2:], k, dtype=bool), m, _zero(m))


def triu(m, k: int = 0) -> Tensor:
    """`m` with the elements below diagonal `k` zeroed, on the last two axes, as `jnp.triu`."""
    m = _matrices("triu", m)
    k = static_int("triu", k, "k")
    return where(np.tri(*m.shape[-2:], k - 1, dtype=bool), _zero(m), m)


def diagonal(a, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Tensor:
    """Diagonal `offset` of the matrices on `axis1` and `axis2`, along a new last axis, as
    `np.diagonal`.

    >>> import remat as rm
    >>> rm.diagonal(rm.reshape(rm.arange(6), (2, 3)), offset=1)
    Tensor([1, 5], dtype=int32)
    """
    a = _matrices("diagonal", a)
    offset = static_int("diagonal", offset, "offset")
    a1 = axis_index("diagonal", axis1, a.ndim, "axis1")
    a2 = axis_index("diagonal", axis2, a.ndim, "axis2")
    if a1 == a2:
        raise ArgumentValueError(f"diagonal: axis1 {axis1!r} and axis2 {axis2!r} are the same axis {a1}")
    x = permute_dims(a, [i for i in range(a.ndim) if i not in (a1, a2)] + [a1, a2])
    lead, (n, p) = x.shape[:-2], x.shape[-2:]
    length = builtins.max(0, builtins.min(n, p - offset) if offset >= 0 else builtins.min(n + offset, p))
    row, col = (0, offset) if offset >= 0 else (-offset, 0)
    if length == 0:
        row = col = 0
    block = slice(x, (0,) * len(lead) + (row, col), lead + (row + length, col + length))
    flat = reshape(block, lead + (length * length,))
    # The diagonal of an L x L block is every (L + 1)-th element of it, row by row.
    return slice_axis(flat, len(lead), 0, length * length, length + 1)


def diag(v, k: int = 0) -> Tensor:
    """For a 1-d `v`, the square matrix with `v` on diagonal `k`; for a 2-d `v`, its diagonal
    `k`, as `np.diag`.

    >>> import remat as rm
    >>> rm.diag(rm.asarray([1, 2]), k=1)
    Tensor([[0, 1, 0],
            [0, 0, 2],
            [0, 0, 0]], dtype=int32)
    """
    v = asarray(v)
    k = static_int("diag", k, "k")
    if v.ndim == 2:
        return diagonal(v, k)
    if v.ndim != 1:
        raise ShapeError(f"diag: expects a 1-d tensor (to place on a diagonal) or a 2-d one (to read one), "
                         f"got shape {v.shape}")
    n = v.shape[0] + builtins.abs(k)
    padded = pad(v, (0,), (builtins.abs(k),))
    # v[i] sits at (i, i + k) for k >= 0, at (i - k, i) for k < 0: along rows or along columns.
    along = reshape(padded, (n, 1) if k >= 0 else (1, n))
    return where(np.eye(n, n, k, dtype=bool), along, _zero(v))


# ---------------------------------------------------------------- moving and repeating


def roll(a, shift, axis=None) -> Tensor:
    """`a` with its elements shifted `shift` places along `axis` (each an int or a sequence,
    broadcast together; the flattened tensor if `axis` is None), those falling off the end
    coming back at the start, as `np.roll`.

    >>> import remat as rm
    >>> rm.roll(rm.arange(5), 2)
    Tensor([3, 4, 0, 1, 2], dtype=int32)
    """
    a = asarray(a)
    if axis is None:
        return reshape(roll(reshape(a, (-1,)), shift, 0), a.shape)
    shifts = int_tuple("roll", shift, "shift")
    axes = tuple(axis_index("roll", ax, a.ndim, written=axis) for ax in int_tuple("roll", axis, "axis"))
    if len(shifts) != len(axes) and 1 not in (len(shifts), len(axes)):
        raise ArgumentValueError(f"roll: shift {shift!r} and axis {axis!r} do not broadcast: give one shift per axis")
    total = dict.fromkeys(axes, 0)
    for s, ax in zip(shifts * (len(axes) if len(shifts) == 1 else 1), axes * (len(shifts) if len(axes) == 1 else 1)):
        total[ax] += s
    for ax, s in total.items():
        n = a.shape[ax]
        if n and s % n:
            s %= n
            a = concat([slice_axis(a, ax, n - s, n), slice_axis(a, ax, 0, n - s)], axis=ax)
    return a


def repeat(a, repeats, axis: int | None = None) -> Tensor:
    """Each element of `a` repeated `repeats` times along `axis` (of the flattened `a` if None),
    as `np.repeat`; `repeats` is an int or one int per element along the axis, known when
    tracing.

    >>> import remat as rm
    >>> rm.repeat(rm.asarray([1, 2]), 2)
    Tensor([1, 1, 2, 2], dtype=int32)
    >>> rm.repeat(rm.asarray([[1, 2], [3, 4]]), [1, 2], axis=0)
    Tensor([[1, 2],
            [3, 4],
            [3, 4]], dtype=int32)
    """
    a = asarray(a)
    if axis is None:
        a, axis = reshape(a, (-1,)), 0
    axis = axis_index("repeat", axis, a.ndim)
    n = a.shape[axis]
    counts = listed("repeat", repeats, "repeats")
    if counts is None:
        counts = [static_int("repeat", repeats, "repeats", "an int or a sequence of ints")]
    else:
        counts = [static_int("repeat", c, "repeats", written=repeats) for c in counts]
    if builtins.min(counts, default=0) < 0:
        raise ArgumentValueError(f"repeat: repeats {repeats!r} has a negative count")
    if len(counts) == 1:  # every element as often: a broadcast along a new axis, then merged
        r, shape = counts[0], a.shape
        stretched = broadcast_to(reshape(a, shape[: axis + 1] + (1,) + shape[axis + 1 :]),
                                 shape[: axis + 1] + (r,) + shape[axis + 1 :])
        return reshape(stretched, shape[:axis] + (n * r,) + shape[axis + 1 :])
    if len(counts) != n:
        raise ShapeError(f"repeat: repeats has {len(counts)} counts but axis {axis} of {a.shape} has {n} elements; "
                         "give one count per element, or a single int")
    return take(a, np.repeat(np.arange(n, dtype=np.int32), counts), axis=axis)


def tile(A, reps) -> Tensor:
    """`A` repeated `reps` times along each axis (an int or a sequence, aligned with the last
    axes; a longer `reps` adds leading axes), as `np.tile`.

    >>> import remat as rm
    >>> rm.tile(rm.asarray([1, 2]), (2, 2))
    Tensor([[1, 2, 1, 2],
            [1, 2, 1, 2]], dtype=int32)
    """
    A = asarray(A)
    reps = int_tuple("tile", reps, "reps")
    if builtins.min(reps, default=0) < 0:
        raise ArgumentValueError(f"tile: reps {reps!r} has a negative count")
    d = builtins.max(len(reps), A.ndim)
    reps = (1,) * (d - len(reps)) + reps
    shape = (1,) * (d - A.ndim) + A.shape
    interleaved = reshape(A, tuple(m for n in shape for m in (1, n)))
    stretched = broadcast_to(interleaved, tuple(m for r, n in zip(reps, shape) for m in (r, n)))
    return reshape(stretched, tuple(r * n for r, n in zip(reps, shape)))


def meshgrid(*xi, copy: bool = True, sparse: bool = False, indexing: str = "xy") -> list[Tensor]:
    """Coordinate grids from 1-d tensors, as `np.meshgrid`: with `indexing="xy"` (the default)
    the first two axes of the grids are swapped (Cartesian order), with `"ij"` grid `i` varies
    along axis `i`; `sparse=True` leaves the grids unbroadcast. `copy` is ignored (tensors are
    immutable).

    >>> import remat as rm
    >>> [g.shape for g in rm.meshgrid(rm.zeros(3), rm.zeros(2))]
    [(2, 3), (2, 3)]
    """
    if indexing not in ("xy", "ij"):
        raise ArgumentValueError(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}")
    xs = [asarray(x) for x in xi]
    for i, x in enumerate(xs):
        if x.ndim != 1:
            raise ShapeError(f"meshgrid: expects 1-d tensors, as jnp.meshgrid; argument {i} has shape {x.shape}")
    axes = list(range(len(xs)))
    if indexing == "xy" and len(xs) >= 2:
        axes[0], axes[1] = 1, 0
    shape = [0] * len(xs)
    for x, ax in zip(xs, axes):
        shape[ax] = x.shape[0]
    grids = []
    for x, ax in zip(xs, axes):
        grid = reshape(x, tuple(x.shape[0] if i == ax else 1 for i in range(len(xs))))
        grids.append(grid if sparse else broadcast_to(grid, tuple(shape)))
    return grids


def take_along_axis(arr, indices, axis: int | None) -> Tensor:
    """The elements of `arr` at `indices` along `axis`, as `np.take_along_axis`: `indices` has
    as many axes as `arr`, and the other axes broadcast. `axis=None` reads the flattened `arr`
    (`indices` 1-d). Indices follow `take`'s rule: known ones must lie in `[-n, n)`, traced
    ones count from the end when negative and are clamped to the axis.

    >>> import remat as rm
    >>> x = rm.asarray([[10, 30, 20], [60, 40, 50]])
    >>> rm.take_along_axis(x, rm.argsort(x, axis=1), axis=1)
    Tensor([[10, 20, 30],
            [40, 50, 60]], dtype=int32)
    """
    arr, idx = asarray(arr), asarray(indices)
    if not dtypes.is_int(idx.dtype):
        raise DTypeError(f"take_along_axis: indices must be integers, got {idx.dtype}")
    if axis is None:
        if idx.ndim != 1:
            raise ShapeError(f"take_along_axis: with axis=None indices must be 1-d, got shape {idx.shape}")
        arr, axis = reshape(arr, (-1,)), 0
    if idx.ndim != arr.ndim:
        raise ShapeError(f"take_along_axis: indices of shape {idx.shape} and arr of shape {arr.shape} must have "
                         "the same number of axes")
    axis = axis_index("take_along_axis", axis, arr.ndim)
    n = arr.shape[axis]
    check_in_range("take_along_axis", idx, n, f"axis {axis}")
    lead = [1 if i == axis else s for i, s in enumerate(arr.shape)]
    others = broadcast_shapes(tuple(lead), tuple(1 if i == axis else s for i, s in enumerate(idx.shape)))
    out_shape = others[:axis] + (idx.shape[axis],) + others[axis + 1 :]
    arr = broadcast_to(arr, others[:axis] + (n,) + others[axis + 1 :])
    idx = broadcast_to(idx, out_shape)
    strides = [math.prod(arr.shape[i + 1 :]) for i in range(arr.ndim)]
    itype = np.int64 if arr.size > np.iinfo(np.int32).max else idx.dtype
    offsets = np.zeros(out_shape, itype)  # where each output's row starts in the flattened arr
    for i, (size, stride) in enumerate(zip(out_shape, strides)):
        if i != axis:
            offsets = offsets + (np.arange(size, dtype=itype) * stride).reshape((-1,) + (1,) * (len(out_shape) - i - 1))
    if idx.is_concrete and not idx.vectorized_axes:
        local = np.asarray(idx._value)
        local = np.where(local < 0, local + n, local)
    else:
        local = where(idx < 0, idx + n, idx)
        local = minimum(maximum(local, 0), builtins.max(n - 1, 0)).astype(itype)
    return take(reshape(arr, (-1,)), offsets + local * strides[axis], axis=0)
