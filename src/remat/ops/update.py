"""Functional updates, as in JAX: `x.at[idx].set(v)`, `.add`, `.multiply`, `.divide`, `.power`,
`.min`, `.max`, `.apply(fn)` and `.get()` return a new tensor; `x` is unchanged (tensors are
immutable).

`idx` is anything `x[idx]` takes. The flat positions it names are those of `arange(x.size)`
indexed the same way; an update is then a gather, a scatter (`index_add`) and a `where` on the
flattened tensor, so its gradient is theirs: no new primitive. Positions repeated in `idx`:
`add`, `multiply`, `min` and `max` combine every update there, `divide` and `power` divide and
raise once per update, `apply` applies its function once per occurrence (as JAX's); `set` keeps
the last one, as NumPy's `x[idx] = v` does (JAX leaves the winner unspecified).

Out-of-range entries of an integer-tensor index follow JAX's `mode=`: an update drops them by
default ("drop", "fill" and "promise_in_bounds" alike) or writes the nearest end ("clip"); `get`
reads the nearest end by default ("clip", "promise_in_bounds") or `fill_value` ("fill", "drop":
NaN for floats, the least integer, True). Negative entries count from the end first. An index
known when tracing and out of range is an `IndexOutOfRange` unless a mode is asked for.
"""

from __future__ import annotations

import math
from builtins import slice as builtin_slice
from collections.abc import Callable

import numpy as np

from remat import dtypes
from remat import values as values_module
from remat.errors import ArgumentTypeError, ArgumentValueError, DTypeError, ShapeError
from remat.ops.creation import arange, full, zeros
from remat.ops.elementwise import broadcast_shapes, clip, maximum, minimum, where
from remat.ops.indexing import _expand_ellipsis, _is_int, getitem, index_add, take
from remat.ops.shape import broadcast_to, concat, reshape, slice_axis
from remat.ops.sort import argsort
from remat.tensor import Tensor, is_device_array
from remat.trace import asarray


class IndexUpdater:
    """What `x.at` is: `x.at[idx]` names the elements an update will change. Functional
    updates, as JAX's: `x.at[idx].set(v)`, `.add(v)`, `.multiply(v)`, `.get()` return a new
    tensor."""

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

    def get(self, mode: str | None = None, fill_value=None) -> Tensor:
        """`x[idx]`; out-of-range entries of an index read the nearest end ("clip", the default)
        or `fill_value` ("fill", "drop")."""
        return _get(self._x, self._index, mode, fill_value)

    def set(self, values, mode: str | None = None) -> Tensor:
        """`x` with the elements at `idx` replaced by `values` (broadcast to `x[idx]`'s shape);
        where `idx` repeats a position, its last update wins."""
        return _update(self._x, self._index, values, "set", _last, mode)

    def add(self, values, mode: str | None = None) -> Tensor:
        """`x` with `values` added at `idx`; repeated positions add every update."""
        return _update(self._x, self._index, values, "add", None, mode)

    def multiply(self, values, mode: str | None = None) -> Tensor:
        """`x` with the elements at `idx` multiplied by `values`; repeated positions multiply by
        every update."""
        return _update(self._x, self._index, values, "multiply", _product, mode)

    def divide(self, values, mode: str | None = None) -> Tensor:
        """`x` with the elements at `idx` divided by `values`, once per update."""
        x = asarray(self._x)
        ones = full(x.shape, 1, x.dtype)
        return x / _update(ones, self._index, values, "divide", _product, mode)

    def power(self, values, mode: str | None = None) -> Tensor:
        """`x` with the elements at `idx` raised to `values`, once per update (so `(x ** a) ** b`
        where `idx` names a position twice)."""
        x = asarray(self._x)
        ones = full(x.shape, 1, x.dtype)
        return x ** _update(ones, self._index, values, "power", _product, mode)

    def min(self, values, mode: str | None = None) -> Tensor:
        """`x` with the elements at `idx` replaced by their minimum with `values`."""
        return _update(self._x, self._index, values, "min", _extreme(minimum), mode)

    def max(self, values, mode: str | None = None) -> Tensor:
        """`x` with the elements at `idx` replaced by their maximum with `values`."""
        return _update(self._x, self._index, values, "max", _extreme(maximum), mode)

    def apply(self, fn: Callable, mode: str | None = None) -> Tensor:
        """`x` with `fn` (elementwise, tensor to tensor) applied to the elements at `idx`, once
        per occurrence of a position."""
        if not callable(fn):
            raise ArgumentTypeError(f"at[...].apply: fn must be a function of a tensor, got {type(fn).__name__}")
        return _apply(asarray(self._x), self._index, fn, mode)


MODES = ("drop", "fill", "clip", "promise_in_bounds")


def _update(x: Tensor, index, values, what: str, combine: Callable | None, mode: str | None) -> Tensor:
    x = asarray(x)
    fn = f"at[...].{what}"
    _check_mode(fn, mode)
    index, dropped = _bounded(x, index, mode != "clip" and (mode is not None or _traced_index(index)), mode)
    target = getitem(x, index)  # checks the index (remat's errors) and gives the updated shape
    if x.dtype == dtypes.bool_ and what != "set":
        raise DTypeError(f"{fn}: a bool tensor can only be set; cast it first (x.astype(\"int32\"))")
    u = _updates(values, x.dtype, fn)
    if broadcast_shapes_or_none(u.shape, target.shape) != target.shape:
        raise ShapeError(f"{fn}: updates of shape {u.shape} do not broadcast to the shape {target.shape} of "
                         f"x[idx] (x has shape {x.shape})")
    flat = reshape(x, (-1,))
    n = flat.shape[0]
    pos = _positions(x, index, target.shape, dropped)
    u = reshape(broadcast_to(u, target.shape), (-1,))
    if math.prod(target.shape) == 0:
        return x
    if dropped is not None:  # dropped entries land on one more element, cut off after
        flat = concat([flat, zeros((1,), x.dtype)])
    out = index_add(flat, pos, u) if combine is None else combine(flat, pos, u)
    return reshape(slice_axis(out, 0, 0, n) if dropped is not None else out, x.shape)


def _get(x, index, mode: str | None, fill_value) -> Tensor:
    x = asarray(x)
    _check_mode("at[...].get", mode)
    if mode not in ("fill", "drop"):
        if fill_value is not None:
            raise ArgumentValueError(f"at[...].get: fill_value={fill_value!r} is for mode='fill', got mode={mode!r}")
        index, _ = _bounded(x, index, False, mode)
        return getitem(x, index)
    index, dropped = _bounded(x, index, True, mode)
    target = getitem(x, index)
    if dropped is None:
        return target
    fill = _fill_value(x.dtype, fill_value)
    flat = concat([reshape(x, (-1,)), full((1,), fill, x.dtype)])
    return reshape(take(flat, _positions(x, index, target.shape, dropped)), target.shape)


def _check_mode(fn: str, mode) -> None:
    if mode is not None and mode not in MODES:
        raise ArgumentValueError(f"{fn}: mode={mode!r} is not one of {', '.join(map(repr, MODES))} or None")


def _fill_value(dtype: np.dtype, fill_value):
    if fill_value is not None:
        return fill_value
    if dtypes.is_float(dtype):
        return np.nan
    return True if dtype == dtypes.bool_ else np.iinfo(dtype).min


def _traced_index(index) -> bool:
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, Tensor) and not i.is_concrete for i in items)


def _bounded(x: Tensor, index, drop: bool, mode: str | None) -> tuple:
    """`(index, dropped)`: `index` with its integer-array entry (if any) brought into range, and
    where entries were out of range, `dropped`: (the entry's position in the index, the axis it
    indexes, the entry itself with `n` (one past the axis) for each dropped element) — else None.
    With `drop` False (or no mode and nothing traced) out-of-range entries are clamped, by mode,
    or left to `getitem`'s checks."""
    items = index if isinstance(index, tuple) else (index,)
    if mode is None and not drop:
        return index, None
    if any(isinstance(i, (np.ndarray, list)) and np.asarray(i).dtype == np.bool_ for i in items) or \
            any(isinstance(i, Tensor) and i.dtype == dtypes.bool_ for i in items):
        return index, None  # a mask names positions that exist
    expanded = _expand_ellipsis(items, x.shape)
    axis, out = 0, list(expanded)
    for k, item in enumerate(expanded):
        if item is None:
            continue
        if isinstance(item, builtin_slice):
            axis += 1
            continue
        n = x.shape[axis]
        if _is_int(item):
            i = int(item)
            if -n <= i < n:
                axis += 1
                continue
            if not drop:
                out[k] = min(max(i if i >= 0 else i + n, 0), n - 1)
                axis += 1
                continue
            item = np.array(i)
        t = asarray(item)
        if not dtypes.is_int(t.dtype):
            return index, None  # getitem names the mistake
        t = where(t < 0, t + n, t)
        clamped = clip(t, 0, n - 1)
        out[k] = clamped
        if not drop:
            return tuple(out), None
        valid = (t >= 0) & (t < n)
        return tuple(out), (k, axis, where(valid, clamped, asarray(n, t.dtype)))
    return index, None


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


def _positions(x: Tensor, index, shape: tuple[int, ...], dropped=None) -> np.ndarray | Tensor:
    """The flat positions `idx` names, flattened: a NumPy array when the index is known now
    (then duplicates are sorted out while tracing), else a traced tensor. With `dropped` (see
    `_bounded`), the dropped elements name `x.size`, one past the end."""
    n = math.prod(x.shape)
    dtype = np.int32 if n + 1 < 2**31 else np.int64
    if dropped is not None:
        k, axis, entry = dropped
        grid = np.arange(n, dtype=dtype).reshape(x.shape)
        pad = np.full(x.shape[:axis] + (1,) + x.shape[axis + 1 :], n, dtype)
        padded = np.concatenate([grid, pad], axis=axis)
        items = list(_expand_ellipsis(index if isinstance(index, tuple) else (index,), x.shape))
        items[k] = entry
        return reshape(getitem(asarray(padded), tuple(items)), (-1,))
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
    return _segmented(v, start, rounds, lambda a, b: a * b, 1)


def _segmented(v: Tensor, start, rounds: int, op: Callable, identity) -> Tensor:
    """Running `op` of `v` restarting where `start` is True (Hillis-Steele doubling); `identity`
    fills the shifted-in entries (None: the entries themselves, for idempotent ops)."""
    start = asarray(start)
    d = 1
    for _ in range(rounds):
        m = v.shape[0]
        head = slice_axis(v, 0, 0, d) if identity is None else full((d,), identity, v.dtype)
        shifted_v = concat([head, slice_axis(v, 0, 0, m - d)])
        shifted_s = concat([asarray(np.zeros(d, bool)), slice_axis(start, 0, 0, m - d)])
        v = where(start, v, op(shifted_v, v))
        start = start | shifted_s
        d *= 2
    return v


def _extreme(pick: Callable) -> Callable:
    """min or max over every update at a position, then with the value there."""

    def combine(flat: Tensor, pos, u: Tensor) -> Tensor:
        order, ps, start, last, rounds = _runs(pos)
        return _put(flat, ps, last, _segmented(take(u, order), start, rounds, pick, None), pick)

    return combine


def _apply(x: Tensor, index, fn: Callable, mode: str | None) -> Tensor:
    _check_mode("at[...].apply", mode)
    index, dropped = _bounded(x, index, mode != "clip" and (mode is not None or _traced_index(index)), mode)
    target = getitem(x, index)
    flat = reshape(x, (-1,))
    n = flat.shape[0]
    pos = _positions(x, index, target.shape, dropped)
    if math.prod(target.shape) == 0:
        return x
    if dropped is not None:
        flat = concat([flat, zeros((1,), x.dtype)])
    if isinstance(pos, np.ndarray):  # each distinct position, `fn` applied as often as it is named
        where_, counts = np.unique(pos, return_counts=True)
        values = take(flat, where_)
        for r in range(int(counts.max())):
            values = where(asarray(counts > r), _applied(fn, values), values)
        out = index_add(flat * asarray(np.isin(np.arange(flat.shape[0]), where_, invert=True)), where_, values)
    else:
        out = _in_order(flat, pos, fn)
    return reshape(slice_axis(out, 0, 0, n) if dropped is not None else out, x.shape)


# Positions known only when the program runs are updated one after another, in order: a loop,
# which is a block, above the ops. remat/loops/scan.py registers `rm.scan` here when imported.
_scan: Callable | None = None


def register_scan(scan: Callable) -> None:
    """Give `at[...].apply` the loop over traced positions: `scan(fn, init, xs) -> (carry, ys)`,
    as `rm.scan`."""
    global _scan
    _scan = scan


def _in_order(flat: Tensor, pos: Tensor, fn: Callable) -> Tensor:
    """`flat` with `fn` applied at each entry of `pos` in turn (a position named twice gets it twice)."""
    if _scan is None:
        raise RuntimeError("at[...].apply at traced positions needs rm.scan, which remat.loops registers "
                           "when imported: import remat (or remat.loops) first")
    out, _ = _scan(lambda f, p: (f.at[p].set(_applied(fn, take(f, p))), None), flat, pos)
    return out


def _applied(fn: Callable, values: Tensor) -> Tensor:
    out = asarray(fn(values))
    if out.shape != values.shape:
        raise ShapeError(f"at[...].apply: fn must be elementwise: it made {out.shape} of {values.shape}")
    return out.astype(values.dtype)


def _put(flat: Tensor, ps, last, values: Tensor, merge: Callable) -> Tensor:
    """`flat` with `merge(old, value)` at the position of every run's last entry. Each position
    gathers its winning entry (found by scattering entry numbers, exact in integers), so a value
    is moved, never added: -0.0 stays -0.0, +0.0 stays +0.0 on both backends."""
    n = flat.shape[0]
    if isinstance(ps, np.ndarray):
        winners = np.flatnonzero(last)
        winner = np.zeros(n, np.int64)
        winner[ps[winners]] = winners + 1
        touched = asarray(winner > 0)
        chosen = np.maximum(winner - 1, 0).astype(ps.dtype)
    else:
        m = values.shape[0]
        entry = where(asarray(last), arange(m, dtype=dtypes.int32) + 1, 0)
        winner = index_add(zeros((n,), dtypes.int32), ps, entry)  # one last entry per run: the sum is it
        touched = winner > 0
        chosen = maximum(winner - 1, 0)
    return where(touched, merge(flat, take(values, chosen)), flat)


Tensor.at = property(IndexUpdater, doc=IndexUpdater.__doc__)  # type: ignore[attr-defined]
