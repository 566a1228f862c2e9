"""Matrix products: `matmul` is the primitive (batched, broadcasting); `tensordot` is composed."""

from __future__ import annotations

import math

from remat import dtypes
from remat.errors import DTypeError, ShapeError
from remat.ops.core import Aval, declare
from remat.ops.elementwise import broadcast_shapes, promote, unbroadcast
from remat.ops.reduce import normalize_axes
from remat.ops.shape import expand_dims, matrix_transpose, permute_dims, reshape, squeeze
from remat.trace import Tensor, bind


def _matmul_rule(a: Aval, b: Aval) -> Aval:
    if a.dtype != b.dtype or a.dtype == dtypes.bool_:
        raise DTypeError(f"operands must share a numeric dtype, got {a.dtype} and {b.dtype}")
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-2]:
        raise ShapeError(f"cannot multiply {a.shape} by {b.shape}: inner sizes differ")
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return Aval(batch + (a.shape[-2], b.shape[-1]), a.dtype)


def _matmul_vjp(g, a, b, out):
    # d(AB) = dA B + A dB, so gA = g Bᵀ and gB = Aᵀ g (summed over broadcast batch axes).
    return (
        unbroadcast(g @ matrix_transpose(b), a.shape),
        unbroadcast(matrix_transpose(a) @ g, b.shape),
    )


_matmul = declare("matmul", _matmul_rule, _matmul_vjp)


def matmul(a, b) -> Tensor:
    """Matrix product with NumPy's rules: 1-d operands are promoted to matrices and back, and
    leading (batch) axes broadcast.

    >>> import remat as rm
    >>> rm.matmul(rm.ones((2, 3)), rm.ones((3,)))
    Tensor([3., 3.], dtype=float32)
    """
    a, b = promote(a, b)
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"matmul: operands must be at least 1-d, got {a.shape} and {b.shape}")
    out = bind(_matmul, expand_dims(a, 0) if a.ndim == 1 else a, expand_dims(b, 1) if b.ndim == 1 else b)
    if b.ndim == 1:
        out = squeeze(out, -1)
    if a.ndim == 1:
        out = squeeze(out, -2 if b.ndim > 1 else -1)
    return out


def tensordot(a, b, axes=2) -> Tensor:
    """Sum of products over `axes`: an int n (the last n of `a` with the first n of `b`) or a
    pair of axis sequences. Composed from permute_dims, reshape and matmul."""
    a, b = promote(a, b)
    if isinstance(axes, int):
        axes_a, axes_b = tuple(range(a.ndim - axes, a.ndim)), tuple(range(axes))
    else:
        axes_a, axes_b = (tuple([x] if isinstance(x, int) else x) for x in axes)
    axes_a = tuple(a_ % max(a.ndim, 1) for a_ in axes_a)
    axes_b = tuple(b_ % max(b.ndim, 1) for b_ in axes_b)
    normalize_axes(axes_a, a.ndim)
    normalize_axes(axes_b, b.ndim)
    if len(axes_a) != len(axes_b) or any(a.shape[i] != b.shape[j] for i, j in zip(axes_a, axes_b)):
        raise ShapeError(f"tensordot: axes {axes_a} of {a.shape} and {axes_b} of {b.shape} differ in size")
    free_a = tuple(i for i in range(a.ndim) if i not in axes_a)
    free_b = tuple(i for i in range(b.ndim) if i not in axes_b)
    k = math.prod(a.shape[i] for i in axes_a)
    a2 = reshape(permute_dims(a, free_a + axes_a), (math.prod(a.shape[i] for i in free_a), k))
    b2 = reshape(permute_dims(b, axes_b + free_b), (k, math.prod(b.shape[i] for i in free_b)))
    out = bind(_matmul, a2, b2)
    return reshape(out, tuple(a.shape[i] for i in free_a) + tuple(b.shape[i] for i in free_b))
