"""Tensors made from nothing: zeros, ones, full, arange, eye and the *_like forms.

They are concrete; used inside a trace they become constants of the graph. Their values follow
the rules of remat/values.py: Python numbers take int32 or float32 unless `dtype` says otherwise,
and a value the dtype cannot hold is a ValueOverflow, never a wrapped integer or an infinity.
"""

from __future__ import annotations

import numpy as np

from remat import dtypes, values
from remat.errors import ArgumentTypeError, ArgumentValueError, ShapeError, ValueOverflow
from remat.ops import elementwise as _elementwise  # modules, not names: an import cycle (ops/__init__.py)
from remat.ops import shape as _shape
from remat.ops.axes import axis_index, shape_tuple, static_int
from remat.tensor import Tensor
from remat.trace import asarray


def full(shape, fill_value, dtype=None) -> Tensor:
    """A tensor of `shape` filled with `fill_value` (float32 for Python floats, int32 for ints).

    >>> import remat as rm
    >>> rm.full((2,), 7)
    Tensor([7, 7], dtype=int32)
    >>> rm.full((2,), 2**40, "int64")
    Tensor([1099511627776, 1099511627776], dtype=int64)
    """
    return _full("full", shape_tuple("full", shape), fill_value, dtype)


def _full(what: str, shape: tuple[int, ...], fill_value, dtype, vaxes: tuple = ()) -> Tensor:
    """`shape` (which includes the vectorized axes `vaxes`, leading) filled with `fill_value`."""
    if isinstance(fill_value, Tensor):
        if vaxes:
            shape = shape[len(vaxes):]
        return _shape.broadcast_to(asarray(fill_value, dtype), shape)
    value = values.array(fill_value, dtype, what)
    try:
        return _tensor(np.full(shape, value, value.dtype))._relabel(vaxes)
    except ValueError:
        raise ShapeError(f"{what}: a fill_value of shape {value.shape} does not broadcast to shape "
                         f"{shape[len(vaxes):]}") from None


def zeros(shape, dtype=None) -> Tensor:
    """A tensor of zeros (float32 unless `dtype` says otherwise)."""
    return _filled("zeros", shape, 0, dtype)


def ones(shape, dtype=None) -> Tensor:
    """A tensor of ones (float32 unless `dtype` says otherwise)."""
    return _filled("ones", shape, 1, dtype)


def _filled(what: str, shape, value: int, dtype) -> Tensor:
    dtype = dtypes.DEFAULT_FLOAT if dtype is None else dtypes.canonical(dtype, what)
    return _tensor(np.full(shape_tuple(what, shape), value, dtype))


def zeros_like(x, dtype=None) -> Tensor:
    """Zeros with the shape, vectorized axes and (unless given) dtype of `x`."""
    return _filled_like("zeros_like", x, 0, dtype)


def ones_like(x, dtype=None) -> Tensor:
    """Ones with the shape, vectorized axes and (unless given) dtype of `x`."""
    return _filled_like("ones_like", x, 1, dtype)


def full_like(x, fill_value, dtype=None, shape=None) -> Tensor:
    """A tensor with the shape, vectorized axes and (unless given) dtype of `x`, filled with
    `fill_value`, as `np.full_like`; `shape=` gives another shape.

    >>> import remat as rm
    >>> rm.full_like(rm.zeros((2,), "int32"), 7.9)
    Tensor([7, 7], dtype=int32)
    """
    x = asarray(x)
    dtype = x.dtype if dtype is None else dtypes.canonical(dtype, "full_like")
    if shape is not None:
        return _full("full_like", shape_tuple("full_like", shape), fill_value, dtype)
    return _full("full_like", x._full_shape, fill_value, dtype, x.vectorized_axes)


def _filled_like(what: str, x, value: int, dtype) -> Tensor:
    x = asarray(x)
    dtype = x.dtype if dtype is None else dtypes.canonical(dtype, what)
    return _tensor(np.full(x._full_shape, value, dtype))._relabel(x.vectorized_axes)


def arange(start, stop=None, step=1, dtype=None) -> Tensor:
    """Evenly spaced values in [start, stop), as `np.arange`: int32 when the bounds and step are
    ints, float32 otherwise, unless `dtype` says. The values are computed in 64 bits and must
    fit the dtype: `arange(2**31, 2**31 + 3)` needs `dtype="int64"`.

    >>> import remat as rm
    >>> rm.arange(3)
    Tensor([0, 1, 2], dtype=int32)
    >>> rm.arange(2**31, 2**31 + 2, dtype="int64")
    Tensor([2147483648, 2147483649], dtype=int64)
    """
    if stop is None:
        start, stop = 0, start
    start, stop, step = (_number("arange", v, name) for v, name in ((start, "start"), (stop, "stop"), (step, "step")))
    if step == 0:
        raise ArgumentValueError("arange: step must not be 0")
    for v in (start, stop, step):
        if isinstance(v, int) and not -(2**63) <= v < 2**63:
            raise ValueOverflow(f"arange: the Python int {v!r} does not fit int64, the widest integer dtype")
    try:
        a = np.arange(start, stop, step)
    except (ValueError, MemoryError):
        raise ArgumentValueError(f"arange: {start!r} to {stop!r} by {step!r} is too many values") from None
    target = values.default_dtype(a) if dtype is None else dtypes.canonical(dtype, "arange")
    return _tensor(values.convert(a, target, "arange"))


def eye(N: int, M: int | None = None, k: int = 0, dtype=None) -> Tensor:
    """An `N` x `M` matrix (`M` defaults to `N`) with ones on diagonal `k` (above the main one
    for `k > 0`), as `np.eye`.

    >>> import remat as rm
    >>> rm.eye(2)
    Tensor([[1., 0.],
            [0., 1.]], dtype=float32)
    >>> rm.eye(2, M=3, k=1, dtype="int32")
    Tensor([[0, 1, 0],
            [0, 0, 1]], dtype=int32)
    """
    n, k = static_int("eye", N, "N"), static_int("eye", k, "k")
    m = n if M is None else static_int("eye", M, "M")
    if n < 0 or m < 0:
        raise ArgumentValueError(f"eye: the size {(n, m)} has a negative entry")
    dtype = dtypes.DEFAULT_FLOAT if dtype is None else dtypes.canonical(dtype, "eye")
    return _tensor(np.eye(n, m, k, dtype=dtype))


def linspace(start, stop, num: int = 50, endpoint: bool = True, dtype=None, axis: int = 0) -> Tensor:
    """`num` evenly spaced values from `start` to `stop` (included unless `endpoint=False`), as
    `np.linspace`: float32 unless `dtype` (or float64 bounds) says otherwise; an integer `dtype`
    takes the floor. Bounds may be tensors (even traced ones); tensor bounds give one sequence
    per element, along the new axis `axis`. Python bounds are spaced in float64 and rounded
    once, as NumPy does.

    >>> import remat as rm
    >>> rm.linspace(0.0, 1.0, 5)
    Tensor([0.  , 0.25, 0.5 , 0.75, 1.  ], dtype=float32)
    """
    num = static_int("linspace", num, "num")
    if num < 0:
        raise ArgumentValueError(f"linspace: num must be non-negative, got {num}")
    bounds = [b if isinstance(b, Tensor) else asarray(_number_or_array("linspace", b, name))
              for b, name in ((start, "start"), (stop, "stop"))]
    floats = [b.dtype for b in bounds if dtypes.is_float(b.dtype)]
    work = max(floats, key=lambda d: d.itemsize) if floats else dtypes.DEFAULT_FLOAT
    target = work if dtype is None else dtypes.canonical(dtype, "linspace")
    if all(b.is_concrete and not b._vaxes for b in bounds):
        a = np.linspace(*(_exact(b, x) for b, x in zip(bounds, (start, stop))), num, endpoint=endpoint,
                        axis=_axis("linspace", axis, bounds, num))
        a = np.floor(a) if dtypes.is_int(target) else a
        return _tensor(values.convert(np.asarray(a), target, "linspace"))
    return _traced_linspace(bounds, num, endpoint, work, target, axis)


def _number_or_array(what: str, value, name: str):
    """A Python number (kept exact) or an array-like bound."""
    if isinstance(value, (bool, str)) or value is None:
        raise ArgumentTypeError(
            f"{what}: {name} must be a number or a tensor, got {value!r:.60} ({type(value).__name__})"
        )
    return value


def _exact(bound: Tensor, given):
    """The bound in float64 where the user gave a Python number (so 0.1 stays 0.1)."""
    if isinstance(given, (int, float)) and not isinstance(given, bool):
        return float(given)
    return np.asarray(bound._value)


def _axis(what: str, axis, bounds: list[Tensor], num: int) -> int:
    ndim = len(_elementwise.broadcast_shapes(*(b.shape for b in bounds))) + 1
    return axis_index(what, axis, ndim)


def _traced_linspace(bounds: list[Tensor], num: int, endpoint: bool, work, target, axis) -> Tensor:
    """linspace from tensor bounds, with NumPy's formula: start + i * (stop - start) / div."""
    lo, hi = (b.astype(work) for b in bounds)
    shape = _elementwise.broadcast_shapes(lo.shape, hi.shape)
    lo, hi = _shape.broadcast_to(lo, shape), _shape.broadcast_to(hi, shape)
    div = num - 1 if endpoint else num
    steps = _shape.reshape(arange(num, dtype=work), (num,) + (1,) * len(shape))
    y = lo + steps * ((hi - lo) / float(div)) if div > 0 else lo + steps * (hi - lo)
    if endpoint and num > 1:
        y = _shape.concat([_shape.slice_axis(y, 0, 0, num - 1), _shape.expand_dims(hi, 0)], axis=0)
    order = list(range(1, y.ndim))
    order.insert(_axis("linspace", axis, bounds, num), 0)
    y = _shape.permute_dims(y, order)
    return (y // 1.0 if dtypes.is_int(target) else y).astype(target)


def _tensor(a: np.ndarray) -> Tensor:
    """A new array as a tensor, read-only as tensor values are (a trace takes it uncopied)."""
    a.flags.writeable = False
    return asarray(a)


def _number(what: str, value, name: str):
    """A real Python number (a concrete 0-d tensor gives its value)."""
    if isinstance(value, Tensor):
        value = value._concrete_value(f"{what}'s {name}").item() if value.ndim == 0 else value
    if isinstance(value, (np.integer, np.floating)):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ArgumentTypeError(f"{what}: {name} must be a number, got {value!r:.60} ({type(value).__name__})")
    return value
