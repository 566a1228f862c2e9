"""Cumulative sums and products along one axis: `cumsum` and `cumprod`, each one primitive (one
pass forward, `reverse` for the gradient's backward direction).

`cumprod`'s derivatives are those of its parallel-prefix form (Hillis and Steele: log2(n) rounds
of `y = y * shift(y, d)`), as JAX differentiates `lax.cumprod` through `associative_scan`. That
form is made of products only, so its gradient divides by nothing: it is exact where the input
has zeros, to every order.
"""

from __future__ import annotations

from remat import dtypes
from remat.core import Aval, declare
from remat.errors import DTypeError
from remat.ops.axes import axis_index
from remat.ops.creation import ones, zeros
from remat.ops.shape import concat, flip, reshape, slice_axis
from remat.tensor import Tensor
from remat.trace import asarray, bind, linear_jvp
from remat.vaxes import axis_shifted


def _cumulative_rule(x: Aval, *, axis: int, reverse: bool) -> Aval:
    axis_index("", axis, x.ndim)
    if x.dtype == dtypes.bool_:
        raise DTypeError("expects a numeric operand, got bool")
    return x


def _cumsum_vjp(g, x, out, *, axis, reverse):
    # out_i = sum_{j <= i} x_j, so x_j's cotangent is sum_{i >= j} g_i: the sum the other way.
    return (bind(_cumsum, g, axis=axis, reverse=not reverse),)


# ---------------------------------------------------------------- cumprod through its prefix form


def _shift(y: Tensor, axis: int, d: int, fill) -> Tensor:
    """`y` moved d places along `axis` (towards the end), `fill` (ones or zeros) coming in."""
    n = y.shape[axis]
    lead = fill(y.shape[:axis] + (d,) + y.shape[axis + 1 :], y.dtype)
    return concat([lead, slice_axis(y, axis, 0, n - d)], axis=axis)


def _unshift(h: Tensor, axis: int, d: int) -> Tensor:
    """The transpose of `_shift` on its moved part: `h` moved d places back, zeros coming in."""
    n = h.shape[axis]
    tail = zeros(h.shape[:axis] + (d,) + h.shape[axis + 1 :], h.dtype)
    return concat([slice_axis(h, axis, d, n), tail], axis=axis)


def _levels(x: Tensor, axis: int) -> list[tuple[int, Tensor]]:
    """(d, y) of every round of the forward prefix product: y_0 = x, y_{k+1} = y_k * shift(y_k, d)."""
    levels, y, d = [], x, 1
    while d < x.shape[axis]:
        levels.append((d, y))
        y = y * _shift(y, axis, d, ones)
        d *= 2
    return levels


def _forward(fn, x: Tensor, axis: int, reverse: bool, *rest):
    """`fn` of the forward-direction scan; a reverse scan is the forward one on flipped operands."""
    if not reverse:
        return fn(x, axis, *rest)
    return flip(fn(flip(x, axis), axis, *(flip(r, axis) for r in rest)), axis)


def _cumprod_grad(x: Tensor, axis: int, g: Tensor) -> Tensor:
    # Each round y' = y * s(y) sends its cotangent h back as h * s(y) + s^T(h * y).
    for d, y in reversed(_levels(x, axis)):
        g = g * _shift(y, axis, d, ones) + _unshift(g * y, axis, d)
    return g


def _cumprod_tangent(x: Tensor, axis: int, t: Tensor) -> Tensor:
    # Each round y' = y * s(y) has the tangent t * s(y) + y * s(t), zeros coming in to s(t).
    for d, y in _levels(x, axis):
        t = t * _shift(y, axis, d, ones) + y * _shift(t, axis, d, zeros)
    return t


def _cumprod_vjp(g, x, out, *, axis, reverse):
    return (_forward(_cumprod_grad, x, axis, reverse, g),)


def _cumprod_jvp(ts, x, out, *, axis, reverse):
    if ts[0] is None:
        return None
    return _forward(_cumprod_tangent, x, axis, reverse, ts[0])


_cumsum = declare("cumsum", _cumulative_rule, _cumsum_vjp, jvp=linear_jvp("cumsum"), batch=axis_shifted,
                  traits={"reduction"})
_cumprod = declare("cumprod", _cumulative_rule, _cumprod_vjp, jvp=_cumprod_jvp, batch=axis_shifted,
                   traits={"reduction"})


# ---------------------------------------------------------------- front end


def _cumulative(op, fn: str, x, axis, dtype) -> Tensor:
    x = asarray(x)
    if dtype is not None:
        x = x.astype(dtypes.canonical(dtype, fn))
    elif x.dtype == dtypes.bool_:
        x = x.astype(dtypes.int32)  # booleans count, as in sum
    if axis is None:
        x = reshape(x, (-1,))
        axis = 0
    axis = axis_index(fn, axis, x.ndim)
    return bind(op, x, axis=axis, reverse=False)


def cumsum(x, axis: int | None = None, dtype=None) -> Tensor:
    """Running sums along `axis` (of the flattened tensor if None), as `np.cumsum`; booleans are
    summed as int32, integers keep their dtype (unless `dtype` says otherwise).

    >>> import remat as rm
    >>> rm.cumsum(rm.asarray([[1, 2], [3, 4]]), axis=1)
    Tensor([[1, 3],
            [3, 7]], dtype=int32)
    """
    return _cumulative(_cumsum, "cumsum", x, axis, dtype)


def cumprod(x, axis: int | None = None, dtype=None) -> Tensor:
    """Running products along `axis` (of the flattened tensor if None), as `np.cumprod`. The
    gradient is exact where `x` has zeros (it divides by nothing), as JAX's.

    >>> import remat as rm
    >>> rm.cumprod(rm.asarray([1.0, 2.0, 0.0, 4.0]))
    Tensor([1., 2., 0., 0.], dtype=float32)
    """
    return _cumulative(_cumprod, "cumprod", x, axis, dtype)
