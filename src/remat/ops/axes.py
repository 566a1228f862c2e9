"""The axis and shape arguments of ops, checked in one place: Python ints known when tracing,
in range, never taken modulo the rank, and named back to the user as written when they are not.

Negative axes count from the end, as in NumPy: `-1` is the last of `ndim` axes, and an axis
outside `[-ndim, ndim)` is an error.
"""

from __future__ import annotations

import operator

import numpy as np

from remat.errors import ArgumentTypeError, ArgumentValueError, TracerError
from remat.tensor import Tensor
from remat.values import MAX_RANK


def static_int(fn: str, value, arg: str, expected: str = "an int", written=None) -> int:
    """`value` as a Python int, known when tracing. `written` is the whole argument it is an
    entry of (for the message)."""
    _not_traced(fn, value, arg, written)
    if isinstance(value, (bool, np.bool_)) or not _indexable(value):
        found = f"{value!r} ({type(value).__name__})"
        if written is None:
            raise ArgumentTypeError(f"{_name(fn)}{arg} must be {expected}, got {found}")
        raise ArgumentTypeError(f"{_name(fn)}{arg} {written!r} has an entry {found}; its entries must be ints")
    return operator.index(value)


def listed(fn: str, value, arg: str) -> list | None:
    """The entries of a sequence argument (tuple, list, 1-d array), or None for a single value."""
    _not_traced(fn, value, arg)
    if isinstance(value, (str, bytes)):
        return None
    if isinstance(value, (Tensor, np.ndarray)):
        return None if value.ndim == 0 else list(np.asarray(value))
    try:
        return list(value)
    except TypeError:
        return None


def axis_index(fn: str, axis, ndim: int, arg: str = "axis", written=None, expected: str = "an int") -> int:
    """One axis of an `ndim`-d tensor as a non-negative int."""
    a = static_int(fn, axis, arg, expected, written)
    if not -ndim <= a < ndim:
        said = f"{arg} {a}" if written is None else f"{arg} {written!r}: axis {a}"
        raise ArgumentValueError(f"{_name(fn)}{said} is out of range for a {ndim}-d tensor")
    return a % ndim


def ordered_axes(
    fn: str, axis, ndim: int, arg: str = "axis", expected: str = "an int or a tuple of ints"
) -> tuple[int, ...]:
    """An int or a sequence of distinct axes, non-negative, in the order given."""
    entries = listed(fn, axis, arg)
    if entries is None:
        return (axis_index(fn, axis, ndim, arg, expected=expected),)
    out = tuple(axis_index(fn, a, ndim, arg, axis) for a in entries)
    for i, a in enumerate(out):
        if a in out[:i]:
            raise ArgumentValueError(f"{_name(fn)}{arg} {axis!r} names axis {a} twice")
    return out


def normalize_axes(axis, ndim: int, fn: str = "", arg: str = "axis") -> tuple[int, ...]:
    """`axis` (None for all, an int or a sequence) as sorted non-negative ints."""
    if axis is None:
        return tuple(range(ndim))
    return tuple(sorted(ordered_axes(fn, axis, ndim, arg, "None, an int or a tuple of ints")))


def permutation(fn: str, axes, shape: tuple[int, ...], arg: str = "axes") -> tuple[int, ...]:
    """`axes` as a reordering of every axis of a tensor of `shape`."""
    entries = listed(fn, axes, arg)
    if entries is None:
        raise ArgumentTypeError(f"{_name(fn)}{arg} must be a sequence of ints, got {axes!r}")
    out = tuple(axis_index(fn, a, len(shape), arg, axes) for a in entries)
    if sorted(out) != list(range(len(shape))):
        raise ArgumentValueError(
            f"{_name(fn)}{arg} {axes!r} is not a permutation of the {len(shape)} axes of a tensor of "
            f"shape {shape}; list each axis once"
        )
    return out


def int_tuple(fn: str, value, arg: str) -> tuple[int, ...]:
    """An int or a sequence of ints, known when tracing, as a tuple."""
    entries = listed(fn, value, arg)
    if entries is None:
        return (static_int(fn, value, arg, "an int or a tuple of ints"),)
    return tuple(static_int(fn, n, arg, written=value) for n in entries)


def shape_tuple(fn: str, shape, arg: str = "shape", inferred: bool = False) -> tuple[int, ...]:
    """A shape: sizes >= 0 (and one -1 where `inferred`), at most MAX_RANK of them."""
    dims = int_tuple(fn, shape, arg)
    check_rank(fn, len(dims), arg)
    for n in dims:
        if n < 0 and not (inferred and n == -1):
            fix = "; only -1 (one size inferred from the others) may be negative" if inferred else ""
            raise ArgumentValueError(f"{_name(fn)}{arg} {_shown(shape)} has a negative size {n}{fix}")
    if dims.count(-1) > 1:
        raise ArgumentValueError(
            f"{_name(fn)}{arg} {_shown(shape)} has more than one -1; only one size can be inferred"
        )
    return dims


def check_rank(fn: str, ndim: int, arg: str = "shape") -> None:
    if ndim > MAX_RANK:
        raise ArgumentValueError(
            f"{_name(fn)}{arg} has {ndim} dimensions, more than the {MAX_RANK} a tensor may have (NumPy's limit)"
        )


def _indexable(value) -> bool:
    try:
        operator.index(value)
    except TypeError:
        return False
    return True


def _not_traced(fn: str, value, arg: str, written=None) -> None:
    if isinstance(value, Tensor) and not value.is_concrete:
        said = f"{arg} is" if written is None else f"{arg} {written!r} holds"
        raise TracerError(
            f"{_name(fn)}{said} a tensor traced inside `{value._trace.name}`, but shapes and axes must "
            "be known when tracing; pass the value as a static argument (rm.jit(..., static_argnums=...)) "
            "or compute it from a tensor's .shape"
        )


def _shown(value) -> str:
    return repr(tuple(value)) if isinstance(value, list) else repr(value)


def _name(fn: str) -> str:
    return f"{fn}: " if fn else ""
