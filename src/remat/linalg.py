"""`rm.linalg`: norms, composed from remat ops (as `jnp.linalg.norm` is from jax.numpy's), and the
solvers and decompositions of `jnp.linalg` (and `jax.scipy.linalg.solve_triangular`), whose
primitives and derivative rules live in remat/ops/decompositions.py.

They take real float32 or float64 matrices on the last two axes and batch over the leading ones;
integers are promoted to float32, as in JAX.
"""

from __future__ import annotations

import builtins
import math
from typing import NamedTuple

from remat import dtypes
from remat.errors import ArgumentTypeError, ArgumentValueError, DTypeError, ShapeError
from remat.ops import abs, broadcast_to, eye, matrix_transpose, max, min, pow, reshape, sqrt, squeeze, sum, where
from remat.ops import decompositions as dec
from remat.ops.axes import ordered_axes
from remat.tensor import Tensor
from remat.trace import asarray

__all__ = ["cholesky", "det", "eigh", "inv", "norm", "qr", "slogdet", "solve", "solve_triangular", "svd"]

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


# ---------------------------------------------------------------- solvers and decompositions


class QRResult(NamedTuple):
    Q: Tensor
    R: Tensor


class EighResult(NamedTuple):
    eigenvalues: Tensor
    eigenvectors: Tensor


class SVDResult(NamedTuple):
    U: Tensor
    S: Tensor
    Vh: Tensor


class SlogdetResult(NamedTuple):
    sign: Tensor
    logabsdet: Tensor


def _floats(fn: str, *xs) -> list[Tensor]:
    """The operands as tensors of one LAPACK float dtype: integers promote to float32, as in JAX."""
    ts = [asarray(x) for x in xs]
    for t in ts:
        if t.dtype == dtypes.bool_:
            raise DTypeError(f"{fn}: expects float matrices, got bool; cast with .astype('float32')")
    dtype = dtypes.result_type(*(t.dtype for t in ts))
    dtype = dtype if dtypes.is_float(dtype) else dtypes.DEFAULT_FLOAT
    if dtype in dtypes.LOW_PRECISION:
        raise DTypeError(f"{fn}: LAPACK has no {dtype} routines (JAX refuses them too); cast to float32 first")
    return [t if t.dtype == dtype else t.astype(dtype) for t in ts]


def _matrices(fn: str, a: Tensor, square: bool = True) -> Tensor:
    if a.ndim < 2:
        raise ShapeError(f"{fn}: expects a matrix or a batch of them (..., m, n), got shape {a.shape}")
    if square and a.shape[-1] != a.shape[-2]:
        raise ShapeError(f"{fn}: expects square matrices (..., n, n), got shape {a.shape}")
    return a


def _square(fn: str, a) -> Tensor:
    (a,) = _floats(fn, a)
    return _matrices(fn, a)


def _symmetrized(a: Tensor) -> Tensor:
    return (a + matrix_transpose(a)) * 0.5


def _right_hand_side(fn: str, a: Tensor, b: Tensor) -> tuple[Tensor, Tensor, bool]:
    """a and b of equal rank, b as (..., n, k); and whether b was one vector (n,)."""
    n = a.shape[-1]
    vector = b.ndim == 1
    if b.ndim == 0 or b.shape[-1 if vector else -2] != n:
        raise ShapeError(
            f"{fn}: b of shape {b.shape} does not fit a of shape {a.shape}: give b as (n,) or (..., n, k) with "
            f"n = {n} (for a batch of vectors, b[..., None])"
        )
    if vector:
        b = reshape(b, (n, 1))
    rank = builtins.max(a.ndim, b.ndim)
    return reshape(a, (1,) * (rank - a.ndim) + a.shape), reshape(b, (1,) * (rank - b.ndim) + b.shape), vector


def _solved(fn: str, a, b, solver) -> Tensor:
    a, b = _floats(fn, a, b)
    a = _matrices(fn, a)
    batch = a.shape[:-2]
    a, b, vector = _right_hand_side(fn, a, b)
    x = solver(a, b)
    # a vector b gives one vector per matrix of a, of a's batch shape
    return reshape(squeeze(x, -1), batch + (a.shape[-1],)) if vector else x


def solve(a, b) -> Tensor:
    """`x` with `a @ x == b`, by LU with partial pivoting, as `jnp.linalg.solve`: `a` is (..., n, n),
    `b` one vector (n,) or matrices (..., n, k) whose batch axes broadcast with `a`'s. A singular `a`
    gives nan or inf.

    >>> import remat as rm
    >>> rm.linalg.solve(rm.asarray([[2.0, 0.0], [1.0, 4.0]]), rm.asarray([2.0, 9.0]))
    Tensor([1., 2.], dtype=float32)
    """
    return _solved("solve", a, b, dec.solve)


def solve_triangular(a, b, trans=0, lower: bool = False, unit_diagonal: bool = False) -> Tensor:
    """`x` with `op(a) @ x == b` for triangular `a`, as `jax.scipy.linalg.solve_triangular`: only the
    lower (`lower=True`) or upper triangle of `a` is read, `op` is the identity for `trans` 0 or
    'N' and the transpose for 1, 'T', 2 or 'C'; `unit_diagonal` takes the diagonal as ones.

    >>> import remat as rm
    >>> rm.linalg.solve_triangular(rm.asarray([[2.0, 0.0], [1.0, 4.0]]), rm.asarray([2.0, 9.0]), lower=True)
    Tensor([1., 2.], dtype=float32)
    """
    if isinstance(trans, bool) or trans not in (0, 1, 2, "N", "T", "C"):
        raise ArgumentValueError(f"solve_triangular: trans must be 0, 1, 2, 'N', 'T' or 'C', got {trans!r}")
    lower = bool(lower)

    def solver(a: Tensor, b: Tensor) -> Tensor:
        if unit_diagonal:
            a = where(eye(a.shape[-1], dtype=bool), 1.0, a)
        if trans in (0, "N"):
            return dec.solve_triangular(a, b, lower)
        return dec.solve_triangular(matrix_transpose(a), b, not lower)

    return _solved("solve_triangular", a, b, solver)


def inv(a) -> Tensor:
    """The inverse of (..., n, n), as `jnp.linalg.inv`: `solve(a, I)`, so its derivative is
    `-inv(a) da inv(a)`. A singular `a` gives nan or inf.

    >>> import remat as rm
    >>> rm.linalg.inv(rm.asarray([[2.0, 0.0], [0.0, 4.0]]))
    Tensor([[0.5 , 0.  ],
            [0.  , 0.25]], dtype=float32)
    """
    a = _square("inv", a)
    return dec.solve(a, broadcast_to(eye(a.shape[-1], dtype=a.dtype), a.shape))


def cholesky(a, *, upper: bool = False, symmetrize_input: bool = True) -> Tensor:
    """The Cholesky factor `L` (lower, `a = L Lᵀ`; `Lᵀ` with `upper=True`) of symmetric positive
    definite (..., n, n), as `jnp.linalg.cholesky`: `a` is first symmetrized, `(a + aᵀ) / 2`, unless
    `symmetrize_input=False`, when only its lower triangle is read. A matrix that is not positive
    definite gives nan.

    >>> import remat as rm
    >>> rm.linalg.cholesky(rm.asarray([[4.0, 2.0], [2.0, 5.0]]))
    Tensor([[2., 0.],
            [1., 2.]], dtype=float32)
    """
    a = _square("cholesky", a)
    factor = dec.cholesky(_symmetrized(a) if symmetrize_input else a)
    return matrix_transpose(factor) if upper else factor


def qr(a, mode: str = "reduced") -> QRResult | Tensor:
    """The QR decomposition of (..., m, n), as `jnp.linalg.qr`: `(Q, R)` with orthonormal columns in
    `Q` and `R` upper triangular; `mode` "reduced" (Q is m x k, R is k x n, k = min(m, n)),
    "complete" (Q is m x m, R is m x n) or "r" (R alone, as "reduced"). Differentiable but for
    "complete" with m > n, whose last columns of Q are not unique.

    >>> import remat as rm
    >>> q, r = rm.linalg.qr(rm.asarray([[3.0, 0.0], [4.0, 5.0]]))
    >>> rm.abs(r)
    Tensor([[5., 4.],
            [0., 3.]], dtype=float32)
    """
    if mode not in ("reduced", "complete", "r"):
        raise ArgumentValueError(f"qr: mode must be 'reduced', 'complete' or 'r', got {mode!r}")
    (a,) = _floats("qr", a)
    q, r = dec.qr(_matrices("qr", a, square=False), full_matrices=mode == "complete")
    return r if mode == "r" else QRResult(q, r)


def eigh(a, UPLO: str | None = None, symmetrize_input: bool = True) -> EighResult:  # noqa: N803 (JAX's name)
    """The eigenvalues (ascending) and eigenvectors (the columns) of symmetric (..., n, n), as
    `jnp.linalg.eigh`: `a` is first symmetrized, `(a + aᵀ) / 2`, unless `symmetrize_input=False`,
    when only its lower triangle (`UPLO="L"`, the default) or upper one (`"U"`) is read (and the
    derivative, as JAX's, is that of a symmetric `a`). The derivative assumes distinct
    eigenvalues (at repeated ones, the eigenvectors' is inf or nan).

    >>> import remat as rm
    >>> rm.linalg.eigh(rm.asarray([[2.0, 1.0], [1.0, 2.0]])).eigenvalues
    Tensor([1., 3.], dtype=float32)
    """
    if UPLO not in (None, "L", "U"):
        raise ArgumentValueError(f"eigh: UPLO must be None, 'L' or 'U', got {UPLO!r}")
    a = _square("eigh", a)
    w, v = dec.eigh(_symmetrized(a) if symmetrize_input else a, lower=UPLO != "U")
    return EighResult(w, v)


def svd(a, full_matrices: bool = True, compute_uv: bool = True) -> SVDResult | Tensor:
    """The singular value decomposition `a = U diag(S) Vh` of (..., m, n), `S` descending, as
    `jnp.linalg.svd`: U is m x m and Vh n x n with `full_matrices`, else m x k and k x n (k =
    min(m, n)); `S` alone without `compute_uv`. The derivative of U and Vh assumes distinct
    nonzero singular values, and needs `full_matrices=False` for non-square `a` (as in JAX).

    >>> import remat as rm
    >>> rm.linalg.svd(rm.asarray([[3.0, 0.0], [0.0, -4.0]]), compute_uv=False)
    Tensor([4., 3.], dtype=float32)
    """
    (a,) = _floats("svd", a)
    out = dec.svd(_matrices("svd", a, square=False), full_matrices, compute_uv)
    return SVDResult(*out) if compute_uv else out[0]


def slogdet(a) -> SlogdetResult:
    """The sign and the log of the absolute value of the determinant of (..., n, n), by LU, as
    `jnp.linalg.slogdet`: `det(a) == sign * exp(logabsdet)`; a singular `a` gives (0, -inf).

    >>> import remat as rm
    >>> rm.linalg.slogdet(rm.asarray([[0.0, 2.0], [1.0, 0.0]])).sign
    Tensor(-1., dtype=float32)
    """
    return SlogdetResult(*dec.slogdet(_square("slogdet", a)))


def det(a) -> Tensor:
    """The determinant of (..., n, n), by LU, as `jnp.linalg.det`; its gradient is `det(a) * inv(a)ᵀ`.

    NOTE: at a singular `a` the gradient is nan (0 * inf); JAX's comes from the cofactors.

    >>> import remat as rm
    >>> rm.linalg.det(rm.asarray([[2.0, 1.0], [1.0, 3.0]]))
    Tensor(5., dtype=float32)
    """
    return dec.det(_square("det", a))
