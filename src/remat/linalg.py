"""`rm.linalg`: norms, composed from remat ops (as `jnp.linalg.norm` is from jax.numpy's)."""

from __future__ import annotations

import math

from remat import dtypes
from remat.errors import ArgumentTypeError, ArgumentValueError
from remat.ops import abs, max, min, pow, reshape, sqrt, sum, where
from remat.ops.axes import ordered_axes
from remat.trace import Tensor, asarray

__all__ = ["norm"]

_MATRIX_ONLY = ("fro", "nuc")


def norm(x, ord=None, axis=None, keepdims: bool = False) -> Tensor:
    """The norm of `x` as `np.linalg.norm`: a vector norm over one axis (`axis` an int, or a
    1-d `x`), a matrix norm over two (`axis` a pair, or a 2-d `x`); with `axis=None` and
    `ord=None`, the 2-norm of all elements. Vector `ord`: None or 2, 1, inf, -inf, 0 (the count
    of nonzeros) or any other p (`sum(|x|**p) ** (1/p)`); matrix `ord`: None or "fro", 1, -1,
    inf, -inf. The matrix 2-norm and nuclear norm need singular values and are not available.

    NOTE: the gradient of the 2-norm at the zero vector is 0 (a subgradient); JAX's is nan.

    >>> import remat as rm
    >>> rm.linalg.norm(rm.asarray([3.0, 4.0]))
    Tensor(5., dtype=float32)
    >>> rm.linalg.norm(rm.asarray([[1.0, -2.0], [3.0, 4.0]]), ord=1)
    Tensor(6., dtype=float32)
    """
    x = asarray(x)
    if not dtypes.is_float(x.dtype):
        x = x.astype(dtypes.DEFAULT_FLOAT)
    _check_ord(ord)
    if axis is None:
        if ord is None:
            return _euclid(x, tuple(range(x.ndim)), keepdims)
        if x.ndim not in (1, 2):
            raise ArgumentValueError(
                f"norm: ord={ord!r} with axis=None needs a 1-d or 2-d tensor, got shape {x.shape}; "
                "name the axis (or the pair of axes) to take it over"
            )
        axes = tuple(range(x.ndim))
    else:
        axes = ordered_axes("norm", axis, x.ndim)
    if len(axes) == 1:
        return _vector(x, axes, ord, keepdims)
    if len(axes) == 2:
        return _matrix(x, axes, ord, keepdims)
    raise ArgumentValueError(f"norm: axis={axis!r} names {len(axes)} axes; a norm is over one axis (a vector "
                             "norm) or two (a matrix norm)")


def _check_ord(ord) -> None:
    if ord is None or ord in _MATRIX_ONLY:
        return
    if isinstance(ord, str):
        raise ArgumentValueError(f"norm: ord={ord!r} is not a norm order; use None, a number, 'fro' or 'nuc'")
    if isinstance(ord, bool) or not isinstance(ord, (int, float)):
        raise ArgumentTypeError(f"norm: ord must be None, a number, 'fro' or 'nuc', got {ord!r} "
                                f"({type(ord).__name__})")


def _euclid(x: Tensor, axes: tuple[int, ...], keepdims: bool) -> Tensor:
    # sqrt's slope is infinite at 0, and inf * 0 is nan: the square root of a safe argument,
    # chosen by where, gives the zero vector the subgradient 0 instead, at every order.
    s = sum(x * x, axis=axes, keepdims=keepdims)
    positive = s > 0
    return where(positive, sqrt(where(positive, s, 1.0)), 0.0)


def _vector(x: Tensor, axes: tuple[int, ...], ord, keepdims: bool) -> Tensor:
    if ord is None or ord == 2:
        return _euclid(x, axes, keepdims)
    if ord in _MATRIX_ONLY:
        raise ArgumentValueError(f"norm: ord={ord!r} is a matrix norm, but axis names one axis; pass a pair of axes")
    a = abs(x)
    if ord == math.inf:
        return max(a, axis=axes, keepdims=keepdims)
    if ord == -math.inf:
        return min(a, axis=axes, keepdims=keepdims)
    if ord == 0:
        return sum((x != 0).astype(x.dtype), axis=axes, keepdims=keepdims)
    if ord == 1:
        return sum(a, axis=axes, keepdims=keepdims)
    return pow(sum(pow(a, float(ord)), axis=axes, keepdims=keepdims), 1.0 / float(ord))


def _matrix(x: Tensor, axes: tuple[int, ...], ord, keepdims: bool) -> Tensor:
    rows, cols = axes
    if ord is None or ord == "fro":
        return _euclid(x, tuple(sorted(axes)), keepdims)
    if ord in (1, -1, math.inf, -math.inf):
        # 1 and -1: the largest and smallest column sum of |x|; inf and -inf: of the row sums.
        summed, other = (rows, cols) if ord in (1, -1) else (cols, rows)
        pick = max if ord > 0 else min
        out = pick(sum(abs(x), axis=summed, keepdims=True), axis=other, keepdims=True)
        return out if keepdims else reshape(out, tuple(n for i, n in enumerate(x.shape) if i not in axes))
    if ord in (2, -2, "nuc"):
        raise ArgumentValueError(f"norm: ord={ord!r} over a matrix needs its singular values, which remat cannot "
                                 "compute yet; use ord='fro', 1, -1, inf or -inf")
    raise ArgumentValueError(f"norm: ord={ord!r} is not a matrix norm; use None, 'fro', 1, -1, inf or -inf")
