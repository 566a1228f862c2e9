"""Matrix products: `matmul` is the primitive (batched, broadcasting); `tensordot` is composed."""

from __future__ import annotations

import math

from remat import dtypes
from remat.core import Aval, declare
from remat.errors import ArgumentValueError, DTypeError, ShapeError
from remat.ops.axes import axis_index, listed, static_int
from remat.ops.elementwise import broadcast_shapes, promote, unbroadcast
from remat.ops.shape import expand_dims, matrix_transpose, permute_dims, reshape, squeeze
from remat.tensor import Tensor
from remat.trace import bind


def _matmul_rule(a: Aval, b: Aval) -> Aval:
    if a.dtype != b.dtype or a.dtype == dtypes.bool_:
        raise DTypeError(f"operands must share a numeric dtype, got {a.dtype} and {b.dtype}")
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-2]:
        raise ShapeError(f"cannot multiply {a.shape} by {b.shape}: inner sizes differ")
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return Aval(batch + (a.shape[-2], b.shape[-1]), a.dtype)


def _matmul_vjp(g, a, b, out):
    # d(AB) = dA B + A dB, so gA = g Bᵀ and gB = Aᵀ g (summed over broadcast batch axes).
    return unbroadcast(g @ matrix_transpose(b), a.shape), _rhs_cotangent(g, a, b)


def _rhs_cotangent(g, a, b):
    if b.ndim == 2 and a.ndim > 2:
        # A layer's weights, shared by every batch entry: Aᵀ g over all rows in one product, not a
        # product per entry summed after (which makes a copy of gB per entry: 16 of them for a
        # batch of 16 sequences, and on XLA:CPU twice the step time of a small transformer).
        rows = math.prod(a.shape[:-1])
        return matrix_transpose(reshape(a, (rows, a.shape[-1]))) @ reshape(g, (rows, g.shape[-1]))
    return unbroadcast(matrix_transpose(a) @ g, b.shape)


def _matmul_jvp(ts, a, b, out):
    # d(AB) = dA B + A dB
    ta, tb = ts
    left = None if ta is None else bind(_matmul, ta, b)
    right = None if tb is None else bind(_matmul, a, tb)
    return right if left is None else left if right is None else left + right


# Under vmap the vectorized axes lead the batch axes, which broadcast: the default, elementwise rule.
_matmul = declare("matmul", _matmul_rule, _matmul_vjp, jvp=_matmul_jvp, traits={"dot"})


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
    pair of axis sequences (negative axes count from the end). Composed from permute_dims,
    reshape and matmul.

    >>> import remat as rm
    >>> rm.tensordot(rm.ones((2, 3)), rm.ones((3, 4)), ([1], [0])).shape
    (2, 4)
    """
    a, b = promote(a, b)
    axes_a, axes_b = _contracted(a.shape, b.shape, axes)
    if any(a.shape[i] != b.shape[j] for i, j in zip(axes_a, axes_b)):
        raise ShapeError(f"tensordot: axes {axes_a} of {a.shape} and {axes_b} of {b.shape} differ in size")
    free_a = tuple(i for i in range(a.ndim) if i not in axes_a)
    free_b = tuple(i for i in range(b.ndim) if i not in axes_b)
    k = math.prod(a.shape[i] for i in axes_a)
    a2 = reshape(permute_dims(a, free_a + axes_a), (math.prod(a.shape[i] for i in free_a), k))
    b2 = reshape(permute_dims(b, axes_b + free_b), (k, math.prod(b.shape[i] for i in free_b)))
    out = bind(_matmul, a2, b2)
    return reshape(out, tuple(a.shape[i] for i in free_a) + tuple(b.shape[i] for i in free_b))


def _contracted(sa: tuple[int, ...], sb: tuple[int, ...], axes) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The axes of `a` and of `b` that `tensordot(a, b, axes)` sums over, non-negative."""
    pair = listed("tensordot", axes, "axes")
    if pair is None:
        n = static_int("tensordot", axes, "axes", "an int or a pair of axis sequences")
        if not 0 <= n <= min(len(sa), len(sb)):
            raise ArgumentValueError(
                f"tensordot: axes {n} must be from 0 to {min(len(sa), len(sb))}, the smaller rank of "
                f"the operands {sa} and {sb}"
            )
        return tuple(range(len(sa) - n, len(sa))), tuple(range(n))
    if len(pair) != 2:
        raise ArgumentValueError(f"tensordot: axes {axes!r} must be an int or a pair (axes of a, axes of b)")
    axes_a = _operand_axes(pair[0], sa, axes)
    axes_b = _operand_axes(pair[1], sb, axes)
    if len(axes_a) != len(axes_b):
        raise ArgumentValueError(
            f"tensordot: axes {axes!r} pairs {len(axes_a)} axes of a {sa} with {len(axes_b)} of b {sb}; "
            "give as many of each"
        )
    return axes_a, axes_b


def _operand_axes(given, shape: tuple[int, ...], written) -> tuple[int, ...]:
    entries = listed("tensordot", given, "axes")
    entries = [given] if entries is None else entries
    out = tuple(axis_index("tensordot", a, len(shape), "axes", written) for a in entries)
    if len(set(out)) != len(out):
        raise ArgumentValueError(f"tensordot: axes {written!r} names an axis of the {shape} operand twice")
    return out


def outer(a, b) -> Tensor:
    """The outer product of `a` and `b`, flattened first, as `np.outer`: `out[i, j] = a[i] * b[j]`.

    >>> import remat as rm
    >>> rm.outer(rm.asarray([1, 2]), rm.asarray([1, 10, 100]))
    Tensor([[  1,  10, 100],
            [  2,  20, 200]], dtype=int32)
    """
    a, b = promote(a, b, what="outer")
    return reshape(a, (-1, 1)) * reshape(b, (1, -1))
