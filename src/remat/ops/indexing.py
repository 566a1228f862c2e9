"""Gathering and scattering along one axis (`take`, `index_add`), and `x[index]` built from them
and the slicing ops.

Out-of-range indices, one rule on every backend: an index known when tracing (a Python int, a
list, a NumPy array, a concrete tensor) must lie in `[-n, n)` for an axis of size `n`, else
`IndexOutOfRange`. A traced index is only known when the program runs, so it cannot raise: a
negative entry counts from the end, as in NumPy, and an entry still outside `[0, n)` reads (and,
in the gradient, writes) the nearest end, as JAX's `x.at[i].get(mode="clip")`.
"""

from __future__ import annotations

import math
import numbers
from builtins import slice as builtin_slice

import numpy as np

from remat import dtypes
from remat.core import Aval, declare
from remat.errors import (
    ArgumentTypeError,
    ArgumentValueError,
    DTypeError,
    IndexOutOfRange,
    ShapeError,
    TracerError,
)
from remat.ops.axes import axis_index, static_int
from remat.ops.creation import zeros
from remat.ops.elementwise import clip, where
from remat.ops.shape import flip, permute_dims, reshape, slice
from remat.tensor import Tensor, is_device_array
from remat.trace import asarray, bind
from remat.vaxes import lay_out, sizes, wrap


def _take_rule(x: Aval, idx: Aval, *, axis: int) -> Aval:
    axis_index("", axis, x.ndim)
    if not dtypes.is_int(idx.dtype):
        raise DTypeError(f"indices must be integers, got {idx.dtype}")
    if x.shape[axis] == 0 and math.prod(idx.shape):
        raise ShapeError(f"cannot take from axis {axis} of {x.shape}: it is empty")
    return Aval(x.shape[:axis] + idx.shape + x.shape[axis + 1 :], x.dtype)


def _index_add_rule(x: Aval, idx: Aval, upd: Aval, *, axis: int) -> Aval:
    expected = _take_rule(x, idx, axis=axis)
    if upd.shape != expected.shape or upd.dtype != x.dtype:
        raise ShapeError(f"updates must be {expected.shape} {x.dtype}, got {upd.shape} {upd.dtype}")
    return x


def _take_vjp(g, x, idx, out, *, axis):
    # Gathering copies x[idx]; its transpose adds each cotangent back where it came from. Both
    # backends clamp an index the same way in take and index_add, so that is where it was read.
    return bind(_index_add, zeros(x.shape, g.dtype), idx, g, axis=axis), None


def _index_add_vjp(g, x, idx, upd, out, *, axis):
    # out = x + scatter(upd): x gets g unchanged, the updates read g where they were added.
    return g, None, bind(_take, g, idx, axis=axis)


def _index_add_jvp(ts, x, idx, upd, out, *, axis):
    # Linear in x and the updates: the tangents scattered the same way.
    tx, _, tu = ts
    if tu is None:
        return tx
    return bind(_index_add, zeros(x.shape, x.dtype) if tx is None else tx, idx, tu, axis=axis)


# ---------------------------------------------------------------- batch rules
# With unvectorized indices the vectorized axes just lead x. With vectorized ones, each entry
# of the vectorized axes has its own indices into its own x: x is flattened to one gather axis
# of P*n rows (P entries of n), and each entry's indices are offset to its rows.


def _flat_gather_layout(x: Tensor, idx: Tensor, axis: int, names: tuple):
    """x as (P*n, *rest) and idx as (P, *idx.shape) offset into it, P the vectorized entries."""
    p, n = math.prod(sizes(names)), x.shape[axis]
    xf = reshape(lay_out(x, names, x.ndim, True), (p,) + x.shape)
    xf = permute_dims(xf, [0, 1 + axis] + [1 + i for i in range(x.ndim) if i != axis])
    rest = x.shape[:axis] + x.shape[axis + 1 :]
    i2 = reshape(lay_out(idx, names, idx.ndim, True), (p,) + idx.shape)
    i2 = clip(where(i2 < 0, i2 + n, i2), 0, n - 1)  # take's clamp, before rows are merged
    offsets = asarray((np.arange(p) * n).astype(idx.dtype).reshape((p,) + (1,) * idx.ndim))
    return reshape(xf, (p * n,) + rest), i2 + offsets, p, n, rest


def _take_batch(op, tensors, params, names):
    x, idx = tensors
    axis = params["axis"]
    if not idx._vaxes:
        return wrap(bind(op, x._raw(), idx, axis=axis + len(names)), names)
    xf, i2, p, _, _ = _flat_gather_layout(x, idx, axis, names)
    flat = bind(op, xf, i2, axis=0)  # (P, *idx.shape, *rest)
    m = idx.ndim
    order = [0] + [1 + m + i for i in range(axis)] + [1 + i for i in range(m)]
    order += [1 + m + i for i in range(axis, x.ndim - 1)]
    out_shape = x.shape[:axis] + idx.shape + x.shape[axis + 1 :]
    return wrap(reshape(permute_dims(flat, order), sizes(names) + out_shape), names)


def _index_add_batch(op, tensors, params, names):
    x, idx, upd = tensors
    axis = params["axis"]
    if not idx._vaxes:
        raws = [lay_out(t, names, t.ndim, True) for t in (x, upd)]
        return wrap(bind(op, raws[0], idx, raws[1], axis=axis + len(names)), names)
    xf, i2, p, n, rest = _flat_gather_layout(x, idx, axis, names)
    m = idx.ndim
    u = reshape(lay_out(upd, names, upd.ndim, True), (p,) + upd.shape)
    u = permute_dims(u, [0] + [1 + axis + i for i in range(m)] + [1 + i for i in range(axis)]
                     + [1 + axis + m + i for i in range(x.ndim - 1 - axis)])
    added = bind(op, xf, reshape(i2, (-1,)), reshape(u, (-1,) + rest), axis=0)  # (P*n, *rest)
    back = reshape(added, (p, n) + rest)
    back = permute_dims(back, [0] + [2 + i for i in range(axis)] + [1] + [2 + i for i in range(axis, x.ndim - 1)])
    return wrap(reshape(back, sizes(names) + x.shape), names)


# Gathering is linear in x: the tangent is gathered from the same places.
_take = declare("take", _take_rule, _take_vjp,
                jvp=lambda ts, x, idx, out, *, axis: None if ts[0] is None else bind(_take, ts[0], idx, axis=axis),
                batch=_take_batch, traits={"layout", "copies"})
_index_add = declare("index_add", _index_add_rule, _index_add_vjp, jvp=_index_add_jvp, batch=_index_add_batch,
                     traits={"layout", "copies"})


def take(x, indices, axis: int | None = None) -> Tensor:
    """Elements of `x` at integer `indices` along `axis` (of the flattened `x` if None).
    Negative indices count from the end. Indices known when tracing must lie in `[-n, n)`
    (`IndexOutOfRange` otherwise); traced indices outside it are clamped to the nearest end,
    as `jnp.take(x, i, mode="clip")` after NumPy's wrap of negatives, on every backend, and
    the gradient goes to the element read.

    >>> import remat as rm
    >>> rm.take(rm.asarray([10.0, 20.0, 30.0]), rm.asarray([2, -3]))
    Tensor([30., 10.], dtype=float32)
    """
    x, idx = asarray(x), asarray(indices)
    if axis is None:
        x = reshape(x, (-1,))
        check_in_range("take", idx, x.shape[0], "the flattened tensor")
        return bind(_take, x, idx, axis=0)
    axis = axis_index("take", axis, x.ndim)
    check_in_range("take", idx, x.shape[axis], f"axis {axis}")
    return bind(_take, x, idx, axis=axis)


def index_add(x, indices, updates, axis: int = 0) -> Tensor:
    """`x` with `updates` added at `indices` along `axis`; repeated indices accumulate. Indices
    follow `take`'s rule: concrete ones must be in range, traced ones are clamped.

    >>> import remat as rm
    >>> rm.index_add(rm.zeros((3,)), rm.asarray([0, 0, -1]), rm.ones((3,)))
    Tensor([2., 0., 1.], dtype=float32)
    """
    x, idx, upd = asarray(x), asarray(indices), asarray(updates)
    axis = axis_index("index_add", axis, x.ndim)
    check_in_range("index_add", idx, x.shape[axis], f"axis {axis}")
    return bind(_index_add, x, idx, upd.astype(x.dtype), axis=axis)


def check_in_range(fn: str, idx: Tensor, n: int, axis: str) -> None:
    """IndexOutOfRange if `idx` is known now and has an entry outside [-n, n)."""
    if not idx.is_concrete or not dtypes.is_int(idx.dtype):
        return  # traced indices are clamped when run; the shape rule rejects non-integers
    values = np.asarray(idx._value)
    bad = (values < -n) | (values >= n)
    if bad.any():
        raise IndexOutOfRange(f"{fn}: index {values[bad].flat[0]} is out of bounds for {axis} with size {n}")


def _expand_ellipsis(index: tuple, shape: tuple[int, ...]) -> tuple:
    ellipses = sum(i is Ellipsis for i in index)
    if ellipses > 1:
        raise ArgumentValueError(f"getitem: an index can have one ellipsis ('...'), got {ellipses}")
    used = sum(1 for i in index if i is not None and i is not Ellipsis)
    if used > len(shape):
        raise IndexOutOfRange(f"getitem: too many indices ({used}) for a tensor of shape {shape}")
    # Found by identity: `in` and `.index` would compare tensors and arrays with `==`.
    at = next((k for k, i in enumerate(index) if i is Ellipsis), None)
    if at is None:
        return index + (builtin_slice(None),) * (len(shape) - used)
    return index[:at] + (builtin_slice(None),) * (len(shape) - used) + index[at + 1 :]


def getitem(x, index) -> Tensor:
    """`x[index]` for ints, slices (any step), None, `...`, one integer tensor or array, or one
    boolean mask known when tracing.

    Ints and integer arrays known when tracing must lie in `[-n, n)` for an axis of size `n`
    (`IndexOutOfRange` otherwise). A traced integer tensor is read as `take` reads it: negative
    entries count from the end, entries still out of range are clamped to the nearest end, the
    same on every backend, and the gradient goes to the element read (JAX's
    `x.at[i].get(mode="clip")`). A boolean mask (an array, a list or a concrete tensor) picks the
    elements where it is True, as in NumPy; a traced mask is a TracerError, as the result's
    shape would depend on its values (use `rm.where(mask, x, 0)`).

    >>> import remat as rm
    >>> rm.arange(5)[rm.asarray([-1, 1])]
    Tensor([4, 1], dtype=int32)
    >>> x = rm.asarray([1.0, -2.0, 3.0])
    >>> x[x > 0]
    Tensor([1., 3.], dtype=float32)
    """
    x = asarray(x)
    x, index = _unmasked(x, index if isinstance(index, tuple) else (index,))
    index = _expand_ellipsis(index, x.shape)
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
            a, b, s, m = _slice_item(item, n)
            if s < 0 and m:
                a, b, s = a + (m - 1) * s, a + 1, -s
                flips.append(axis)
            elif not m:
                a, b, s = 0, 0, 1
            start.append(a), stop.append(b), step.append(s)
            final.append(m)
        elif _is_int(item):
            i = _int_item(item, axis, n)
            start.append(i), stop.append(i + 1), step.append(1)
            advanced.append(pos)
        else:
            if tensor_index is not None:
                raise ArgumentValueError("getitem: only one integer-tensor index is supported; use take() per axis")
            tensor_axis, tensor_index, tensor_at = axis, _tensor_item(item, axis, n), len(final)
            start.append(0), stop.append(n), step.append(1)
            final.extend(tensor_index.shape)
            advanced.append(pos)
        axis += 1
    out = slice(x, start, stop, step)
    out = flip(out, tuple(flips)) if flips else out
    if tensor_index is not None:
        out = bind(_take, out, tensor_index, axis=tensor_axis)
    out = reshape(out, tuple(final))
    if tensor_index is not None and advanced[-1] - advanced[0] >= len(advanced):
        # As in NumPy: ints and the tensor not side by side put the tensor's axes first.
        k = tensor_index.ndim
        rest = [d for d in range(len(final)) if not tensor_at <= d < tensor_at + k]
        out = permute_dims(out, tuple(range(tensor_at, tensor_at + k)) + tuple(rest))
    return out


def _slice_item(item: builtin_slice, n: int) -> tuple[int, int, int, int]:
    """start, stop, step and length of `item` on an axis of size `n`."""
    given = (item.start, item.stop, item.step)
    bounds = [None if b is None else static_int("getitem", b, "a slice bound") for b in given]
    if bounds[2] == 0:
        raise ArgumentValueError(f"getitem: slice step cannot be zero, got {item!r}")
    a, b, s = builtin_slice(*bounds).indices(n)
    return a, b, s, len(range(a, b, s))


def _int_item(item, axis: int, n: int) -> int:
    i = int(item)
    if not -n <= i < n:
        raise IndexOutOfRange(f"getitem: index {i} is out of bounds for axis {axis} with size {n}")
    return i % n


def _tensor_item(item, axis: int, n: int) -> Tensor:
    if not isinstance(item, (Tensor, np.ndarray, np.generic, list)) and not is_device_array(item):
        raise ArgumentTypeError(
            f"getitem: index {item!r} ({type(item).__name__}) is not an int, a slice, None, ... or an "
            "integer tensor"
        )
    idx = asarray(item)
    if idx.dtype == dtypes.bool_:  # masks of one axis or more became positions in _unmasked
        raise DTypeError(
            f"getitem: a 0-d boolean index ({item!r}) is not supported; use rm.where(mask, x, 0) to "
            "choose elements, or rm.expand_dims for a new axis"
        )
    if not dtypes.is_int(idx.dtype):
        raise DTypeError(f"getitem: tensor indices must be integers, got {idx.dtype}")
    check_in_range("getitem", idx, n, f"axis {axis}")
    return idx


def _unmasked(x: Tensor, index: tuple) -> tuple[Tensor, tuple]:
    """`x` and `index` with a boolean mask replaced as NumPy reads it: the axes it covers merged
    into one, indexed by the flat positions of its True entries."""
    at = [k for k, item in enumerate(index) if _is_mask(item)]
    if not at:
        return x, index
    if len(at) > 1:
        raise ArgumentValueError("getitem: only one boolean mask per index is supported; combine the masks "
                                 "with & into one")
    k = at[0]
    mask = _mask_values(index[k])
    after = sum(1 for i in index[k + 1 :] if i is not None and i is not Ellipsis)
    if any(i is Ellipsis for i in index[:k]):
        first = x.ndim - after - mask.ndim
    else:
        first = sum(1 for i in index[:k] if i is not None)
    covered = x.shape[first : first + mask.ndim] if first >= 0 else ()
    if covered != mask.shape:
        raise IndexOutOfRange(f"getitem: a boolean mask of shape {mask.shape} does not match the axes "
                              f"{tuple(range(max(first, 0), max(first, 0) + mask.ndim))} of a tensor of shape "
                              f"{x.shape} that it indexes; give a mask of shape {covered or x.shape}")
    merged = reshape(x, x.shape[:first] + (-1,) + x.shape[first + mask.ndim :])
    positions = np.flatnonzero(mask).astype(np.int32 if mask.size < 2**31 else np.int64)
    return merged, index[:k] + (positions,) + index[k + 1 :]


def _is_mask(item) -> bool:
    """A boolean array, list or tensor of at least one axis."""
    if isinstance(item, Tensor):
        return item.dtype == dtypes.bool_ and (item.ndim > 0 or not item.is_concrete)
    if isinstance(item, list) or is_device_array(item):
        item = np.asarray(item)
    return isinstance(item, np.ndarray) and item.dtype == np.bool_ and item.ndim > 0


def _mask_values(item) -> np.ndarray:
    if isinstance(item, Tensor) and (not item.is_concrete or item._vaxes):
        where = f"traced inside `{item._trace.name}`" if not item.is_concrete else "vectorized"
        raise TracerError(
            f"getitem: the boolean mask is {where}, so how many elements it picks (the result's shape) is "
            "not known when tracing; use rm.where(mask, x, 0) to keep the shape, or pass the mask as a "
            "concrete array (a static argument)"
        )
    return np.asarray(item._value if isinstance(item, Tensor) else item)


def _is_int(item) -> bool:
    if isinstance(item, bool):
        return False
    if isinstance(item, numbers.Integral):
        return True
    return isinstance(item, (np.ndarray, Tensor)) and item.ndim == 0 and dtypes.is_int(item.dtype) and (
        not isinstance(item, Tensor) or item.is_concrete
    )

