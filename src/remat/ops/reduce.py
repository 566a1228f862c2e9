"""Reductions over a tuple of axes: sum, prod, max, min (primitives), argmax, argmin; mean, all,
any and count_nonzero composed.

The primitives drop the reduced axes; `keepdims` is a reshape in the front end.
"""

from __future__ import annotations

import builtins

from remat import dtypes
from remat.core import NOT_DIFFERENTIABLE, Aval, declare
from remat.errors import ArgumentTypeError, DTypeError, ShapeError
from remat.ops import creation as _creation  # modules, not names: an import cycle (ops/__init__.py)
from remat.ops import elementwise as _elementwise
from remat.ops import shape as _shape
from remat.ops.axes import axis_index, listed, normalize_axes
from remat.tensor import Tensor
from remat.trace import asarray, bind, linear_jvp
from remat.vaxes import axes_shifted, axis_shifted


def _reduce_rule(x: Aval, *, axes: tuple[int, ...]) -> Aval:
    normalize_axes(axes, x.ndim)
    return Aval(tuple(n for i, n in enumerate(x.shape) if i not in axes), x.dtype)


def _arg_rule(x: Aval, *, axis: int) -> Aval:
    normalize_axes(axis, x.ndim)
    if x.shape[axis] == 0:
        raise ShapeError("attempt to get the arg-extremum of an empty axis")
    return Aval(tuple(n for i, n in enumerate(x.shape) if i != axis), dtypes.int32)


def kept_shape(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(1 if i in axes else n for i, n in enumerate(shape))


def _expand(g: Tensor, x: Tensor, axes) -> Tensor:
    """`g`, reduced over `axes`, reshaped so it broadcasts against `x`."""
    return _shape.reshape(g, kept_shape(x.shape, axes))


def _sum_vjp(g, x, out, *, axes):
    # d sum(x) = sum(dx): every element gets the cotangent of its sum.
    return (_shape.broadcast_to(_expand(g, x, axes), x.shape),)


def _prod_vjp(g, x, out, *, axes):
    # d prod(x) = sum_i (prod_{j != i} x_j) dx_i. The product of the others is that of the
    # nonzero ones, prod(x') / x'_i with zeros replaced by 1 (so nothing divides by 0), times
    # that of the zero ones: 1 if there is none, the other zero itself if there is one (value 0,
    # derivative 1), else 0. NOTE: exact to second order at zeros, not beyond.
    zero = x == 0
    safe = _elementwise.where(zero, 1, x)
    nonzero_part = _expand(prod(safe, axis=axes), x, axes) / safe
    zeros = _elementwise.where(zero, x, 0)
    n_other = _expand(sum(zero, axis=axes), x, axes) - zero.astype(dtypes.int32)
    other_zero = _expand(sum(zeros, axis=axes), x, axes) - zeros
    zero_part = _elementwise.where(n_other == 0, 1, _elementwise.where(n_other == 1, other_zero, 0))
    return (_expand(g, x, axes) * nonzero_part * zero_part,)


def _extremum_vjp(g, x, out, *, axes):
    # The maximal elements share the cotangent evenly.
    hit = (x == _expand(out, x, axes)).astype(x.dtype)
    count = _expand(sum(hit, axis=axes), x, axes)
    return (_expand(g, x, axes) * hit / count,)


def _weighted_jvp(vjp):
    """d f(x) = sum(df/dx * dx) over the reduced axes, df/dx being the VJP of a cotangent of ones
    (so the JVP treats zeros and ties exactly as the VJP does)."""

    def jvp(ts, x, out, *, axes):
        (slope,) = vjp(_creation.ones(out.shape, out.dtype), x, out, axes=axes)
        return sum(ts[0] * slope, axis=axes)

    return jvp


_sum = declare("sum", _reduce_rule, _sum_vjp, jvp=linear_jvp("sum"), batch=axes_shifted, traits={"reduction"})
_prod = declare("prod", _reduce_rule, _prod_vjp, jvp=_weighted_jvp(_prod_vjp), batch=axes_shifted, traits={"reduction"})
_max = declare("max", _reduce_rule, _extremum_vjp, jvp=_weighted_jvp(_extremum_vjp), batch=axes_shifted,
               traits={"reduction"})
_min = declare("min", _reduce_rule, _extremum_vjp, jvp=_weighted_jvp(_extremum_vjp), batch=axes_shifted,
               traits={"reduction"})
_argmax = declare("argmax", _arg_rule, NOT_DIFFERENTIABLE, batch=axis_shifted, traits={"reduction"})
_argmin = declare("argmin", _arg_rule, NOT_DIFFERENTIABLE, batch=axis_shifted, traits={"reduction"})


def _reduction(op, x, axis, keepdims) -> Tensor:
    x = asarray(x)
    axes = normalize_axes(axis, x.ndim, op.name)
    out = bind(op, x, axes=axes)
    return _shape.reshape(out, kept_shape(x.shape, axes)) if keepdims else out


def sum(x, axis=None, keepdims: bool = False) -> Tensor:
    """Sum over `axis` (all axes by default). Booleans are summed as int32.

    >>> import remat as rm
    >>> rm.sum(rm.asarray([[1.0, 2.0], [3.0, 4.0]]), axis=0)
    Tensor([4., 6.], dtype=float32)
    """
    x = asarray(x)
    if x.dtype == dtypes.bool_:
        x = x.astype(dtypes.int32)
    return _reduction(_sum, x, axis, keepdims)


def prod(x, axis=None, keepdims: bool = False) -> Tensor:
    """Product over `axis` (all axes by default)."""
    x = asarray(x)
    if x.dtype == dtypes.bool_:
        x = x.astype(dtypes.int32)
    return _reduction(_prod, x, axis, keepdims)


def max(x, axis=None, keepdims: bool = False) -> Tensor:
    """Largest element over `axis`."""
    return _reduction(_max, _nonempty(x, "max"), axis, keepdims)


def min(x, axis=None, keepdims: bool = False) -> Tensor:
    """Smallest element over `axis`."""
    return _reduction(_min, _nonempty(x, "min"), axis, keepdims)


def _nonempty(x, name: str) -> Tensor:
    x = asarray(x)
    if x.size == 0:
        raise ShapeError(f"{name}: cannot reduce an empty tensor of shape {x.shape}")
    return x


def mean(x, axis=None, keepdims: bool = False) -> Tensor:
    """Arithmetic mean over `axis`; integer inputs give float32. float16 and bfloat16 are
    summed and divided in float32 and rounded once, as in JAX.

    >>> import remat as rm
    >>> rm.mean(rm.asarray([1.0, 2.0, 2.0], "bfloat16"))
    Tensor(1.66406, dtype=bfloat16)
    """
    x = asarray(x)
    dtype = x.dtype
    low = dtype in dtypes.LOW_PRECISION
    if low or not dtypes.is_float(dtype):
        # NOTE: for the low dtypes this is a float32 copy of x (XLA fuses it away), but the sum
        # rounded to bfloat16 and then divided would round twice.
        x = x.astype(dtypes.DEFAULT_FLOAT)
    axes = normalize_axes(axis, x.ndim, "mean")
    count = 1
    for a in axes:
        count *= x.shape[a]
    out = sum(x, axis=axes, keepdims=keepdims) / float(count)
    return out.astype(dtype) if low else out


def _arg(op, x, axis, keepdims) -> Tensor:
    x = asarray(x)
    if x.dtype == dtypes.bool_:
        raise DTypeError(f"{op.name}: expects a numeric operand, got bool")
    if axis is None:
        out = bind(op, _shape.reshape(x, (-1,)), axis=0)
        return _shape.reshape(out, (1,) * x.ndim) if keepdims else out
    if listed(op.name, axis, "axis") is not None:  # NumPy reduces over one axis only here
        raise ArgumentTypeError(f"{op.name}: axis must be an int or None, got {axis!r}")
    a = axis_index(op.name, axis, x.ndim)
    out = bind(op, x, axis=a)
    return _shape.reshape(out, kept_shape(x.shape, (a,))) if keepdims else out


def argmax(x, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """Index (int32) of the largest element along `axis` (of the flattened tensor if None)."""
    return _arg(_argmax, x, axis, keepdims)


def argmin(x, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """Index (int32) of the smallest element along `axis` (of the flattened tensor if None)."""
    return _arg(_argmin, x, axis, keepdims)


def any(x, axis=None, keepdims: bool = False) -> Tensor:
    """Whether any element over `axis` is true (nonzero), as `np.any`; False over no elements.

    >>> import remat as rm
    >>> rm.any(rm.asarray([[0.0, 1.0], [0.0, 0.0]]), axis=1)
    Tensor([ True, False], dtype=bool)
    """
    return _logical("any", _max, x, axis, keepdims)


def all(x, axis=None, keepdims: bool = False) -> Tensor:
    """Whether every element over `axis` is true (nonzero), as `np.all`; True over no elements."""
    return _logical("all", _min, x, axis, keepdims)


def _logical(what: str, op, x, axis, keepdims: bool) -> Tensor:
    x = _elementwise.astype(x, dtypes.bool_)
    axes = normalize_axes(axis, x.ndim, what)
    if builtins.all(x.shape[a] for a in axes):
        return _reduction(op, x, axes, keepdims)
    # Over no elements the answer is the identity: count the exceptions instead (no max of nothing).
    exceptions = sum(x if what == "any" else _elementwise.logical_not(x), axis=axes, keepdims=keepdims)
    return exceptions > 0 if what == "any" else exceptions == 0


def count_nonzero(x, axis=None, keepdims: bool = False) -> Tensor:
    """The number (int32) of nonzero elements over `axis`, as `np.count_nonzero`."""
    x = asarray(x)
    normalize_axes(axis, x.ndim, "count_nonzero")
    return sum(_elementwise.astype(x, dtypes.bool_), axis=axis, keepdims=keepdims)
