"""Functional updates, as in JAX: `x.at[idx].set(v)`, `.add(v)`, `.multiply(v)` and `.get()`
return a new tensor; `x` is unchanged (tensors are immutable).

`idx` is anything `x[idx]` takes. The flat positions it names are those of `arange(x.size)`
indexed the same way; an update is then a gather, a scatter (`index_add`) and a `where` on the
flattened tensor, so its gradient is theirs: no new primitive. Positions repeated in `idx`:
`add` and `multiply` combine every update there; `set` keeps the last one, as NumPy's
`x[idx] = v` does (JAX leaves the winner unspecified). A traced integer index follows `take`'s
rule: negative entries count from the end and the rest is clamped to the axis (JAX's scatter
drops out-of-range updates instead).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from remat import dtypes
from remat import values as values_module
from remat.errors import DTypeError, ShapeError
from remat.ops.creation import arange, full, zeros
from remat.ops.elementwise import broadcast_shapes, where
from remat.ops.indexing import getitem, index_add, take
from remat.ops.shape import broadcast_to, concat, reshape, slice_axis
from remat.ops.sort import argsort
from remat.trace import Tensor, asarray, is_device_array


class IndexUpdater:
    """What `x.at` is: `x.at[idx]` names the elements an update will change."""

    def __init__(self, x: Tensor):
        self._x = x

    def __getitem__(self, index) -> IndexedSlot:
        return IndexedSlot(self._x, index)

    def __repr__(self) -> str:
        return f"_IndexUpdater({self._x!r})"


class IndexedSlot:
    """`x.at[idx]`: `.get()`, `.set(v)`, `.add(v)`, `.multiply(v)` each return a new tensor.

    >>> import remat as rm
    >>> x = rm.zeros((4,))
    >>> x.at[1].set(5.0)
    Tensor([0., 5., 0., 0.], dtype=float32)
    >>> x.at[rm.asarray([0, 0, 3])].add(1.0)
    Tensor([2., 0., 0., 1.], dtype=float32)
    """

    def __init__(self, x: Tensor, index):
        self._x = x
        self._index = index

    def get(self) -> Tensor:
        """`x[idx]`."""
        return getitem(self._x, self._index)

    def set(self, values) -> Tensor:
        """`x` with the elements at `idx` replaced by `values` (broadcast to `x[idx]`'s shape);
        where `idx` repeats a position, its last update wins."""
        return _update(self._x, self._index, values, "set", _last)

    def add(self, values) -> Tensor:
        """`x` with `values` added at `idx`; repeated positions add every update."""
        return _update(self._x, self._index, values, "add", None)

    def multiply(self, values) -> Tensor:
        """`x` with the elements at `idx` multiplied by `values`; repeated positions multiply by
        every update."""
        return _update(self._x, self._index, values, "multiply", _product)


def _update(x: Tensor, index, values, what: str, combine: Callable | None) -> Tensor:
    x = asarray(x)
    fn = f"at[...].{what}"
    target = getitem(x, index)  # checks the index (remat's errors) and gives the updated shape
    if x.dtype == dtypes.bool_ and what != "set":
        raise DTypeError(f"{fn}: a bool tensor can only be set; cast it first (x.astype(\"int32\"))")
    u = _updates(values, x.dtype, fn)
    if broadcast_shapes_or_none(u.shape, target.shape) != target.shape:
        raise ShapeError(f"{fn}: updates of shape {u.shape} do not broadcast to the shape {target.shape} of "
                         f"x[idx] (x has shape {x.shape})")
    flat = reshape(x, (-1,))
    pos = _positions(x, index, target.shape)
    u = reshape(broadcast_to(u, target.shape), (-1,))
    if math.prod(target.shape) == 0:
        return x
    if combine is None:
        return reshape(index_add(flat, pos, u), x.shape)
    return reshape(combine(flat, pos, u), x.shape)


def _updates(values, dtype: np.dtype, fn: str) -> Tensor:
    """The updates in x's dtype: converted as `asarray(values, dtype)` does (floats truncated
    toward zero for an integer x, as NumPy's `x[idx] = v`), a value that does not fit an error."""
    if isinstance(values, Tensor) or is_device_array(values):
        return asarray(values, dtype)
    return Tensor._concrete(_frozen(values_module.array(values, dtype, fn, values_module.CAST_OPERAND)))


def _frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def broadcast_shapes_or_none(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...] | None:
    try:
        return broadcast_shapes(a, b)
    except ShapeError:
        return None


# ---------------------------------------------------------------- positions


def _positions(x: Tensor, index, shape: tuple[int, ...]) -> np.ndarray | Tensor:
    """The flat positions `idx` names, flattened: a NumPy array when the index is known now
    (then duplicates are sorted out while tracing), else a traced tensor."""
    n = math.prod(x.shape)
    dtype = np.int32 if n < 2**31 else np.int64
    static = _static(index)
    if static is not None:
        pos = np.arange(n, dtype=dtype).reshape(x.shape)[static]
        if pos.shape == shape:
            return pos.reshape(-1)
    grid = reshape(arange(n, dtype=dtype), x.shape)
    return reshape(getitem(grid, index), (-1,))


def _static(index):
    """`index` as NumPy would take it, if every part is known now; else None."""
    items = index if isinstance(index, tuple) else (index,)
    out = []
    for item in items:
        if isinstance(item, Tensor):
            if not item.is_concrete or item._vaxes:
                return None
            item = np.asarray(item._value)
        elif isinstance(item, list) or is_device_array(item):
            item = np.asarray(item)
        elif isinstance(item, slice) and any(isinstance(b, Tensor) for b in (item.start, item.stop, item.step)):
            return None
        out.append(item)
    return tuple(out)


# ---------------------------------------------------------------- combining repeated positions


def _runs(pos: np.ndarray | Tensor):
    """The positions sorted (stably), `order` sorting them, which entries start a run of equal
    positions and which end one, and how many doubling rounds cover the longest run."""
    m = pos.shape[0]
    if isinstance(pos, np.ndarray):
        order = np.argsort(pos, kind="stable")
        ps = pos[order]
        change = ps[1:] != ps[:-1]
        start, last = np.r_[True, change], np.r_[change, True]
        bounds = np.flatnonzero(np.r_[True, change, True])
        longest = int(np.diff(bounds).max())
        return order, ps, start, last, math.ceil(math.log2(longest))
    order = argsort(pos)
    ps = take(pos, order)
    change = slice_axis(ps, 0, 1, m) != slice_axis(ps, 0, 0, m - 1)
    true = asarray(np.array([True]))
    return order, ps, concat([true, change]), concat([change, true]), math.ceil(math.log2(m)) if m > 1 else 0


def _last(flat: Tensor, pos, u: Tensor) -> Tensor:
    order, ps, _, last, _ = _runs(pos)
    return _put(flat, ps, last, take(u, order), lambda old, new: new)


def _product(flat: Tensor, pos, u: Tensor) -> Tensor:
    order, ps, start, last, rounds = _runs(pos)
    return _put(flat, ps, last, _segmented_product(take(u, order), start, rounds), lambda old, new: old * new)


def _segmented_product(v: Tensor, start, rounds: int) -> Tensor:
    """Running products of `v` restarting where `start` is True (Hillis-Steele doubling: only
    products, so the gradient is exact at zeros)."""
    start = asarray(start)
    d = 1
    for _ in range(rounds):
        m = v.shape[0]
        shifted_v = concat([full((d,), 1, v.dtype), slice_axis(v, 0, 0, m - d)])
        shifted_s = concat([asarray(np.zeros(d, bool)), slice_axis(start, 0, 0, m - d)])
        v = where(start, v, shifted_v * v)
        start = start | shifted_s
        d *= 2
    return v


def _put(flat: Tensor, ps, last, values: Tensor, merge: Callable) -> Tensor:
    """`flat` with `merge(old, value)` at the position of every run's last entry."""
    n = flat.shape[0]
    # Scattered into -0.0, which leaves every value (even -0.0) unchanged when added to it.
    base = full((n,), -0.0 if dtypes.is_float(flat.dtype) else 0, flat.dtype)
    if isinstance(ps, np.ndarray):
        winners = np.flatnonzero(last)
        touched = np.zeros(n, bool)
        touched[ps[winners]] = True
        scattered = index_add(base, ps[winners], take(values, winners.astype(ps.dtype)))
        return where(touched, merge(flat, scattered), flat)
    last = asarray(last)
    kept = where(last, values, base[:1])
    scattered = index_add(base, ps, kept)
    touched = index_add(zeros((n,), dtypes.int32), ps, last.astype(dtypes.int32)) > 0
    return where(touched, merge(flat, scattered), flat)
