"""Matrix solvers and decompositions as primitives: `solve` (LU), `triangular_solve`,
`cholesky`, `qr`, `eigh`, `svd`, `slogdet` and `det`; `rm.linalg` composes `inv` and the
rest from them. Every primitive works on the last two axes and batches over the leading ones
(which broadcast, for the two solves), so vmap lays its axes in front and binds them unchanged.

Each derivative is made of remat ops (products, transposes, triangles and these solves), so it
differentiates again. The JVP rules are the classic ones (as in JAX's `lax.linalg`); each VJP
rule is the transpose of its JVP, derived in one line above it. Inputs are real floats of
float32 or float64; the front end (remat/linalg.py) checks and promotes them.
"""

from __future__ import annotations

from remat import dtypes
from remat.core import Aval, declare
from remat.errors import ArgumentValueError, DTypeError, ShapeError
from remat.ops.arrays import diagonal, tril, triu
from remat.ops.creation import eye, zeros_like
from remat.ops.elementwise import broadcast_shapes, unbroadcast, where
from remat.ops.linalg import _matmul
from remat.ops.reduce import sum
from remat.ops.shape import broadcast_to, concat, expand_dims, matrix_transpose, slice_axis
from remat.tensor import Tensor
from remat.trace import bind

# ---------------------------------------------------------------- shape rules


def _float_matrices(*xs: Aval) -> None:
    for x in xs:
        if x.dtype not in (dtypes.float32, dtypes.float64):
            raise DTypeError(f"expects float32 or float64 matrices, got {x.dtype}")
        if x.ndim < 2:
            raise ShapeError(f"expects matrices (..., m, n), got shape {x.shape}")
    if len({x.dtype for x in xs}) > 1:
        raise DTypeError(f"operands must share a dtype, got {' and '.join(str(x.dtype) for x in xs)}")


def _square(a: Aval) -> None:
    _float_matrices(a)
    if a.shape[-1] != a.shape[-2]:
        raise ShapeError(f"expects square matrices (..., n, n), got shape {a.shape}")


def _solve_rule(a: Aval, b: Aval, **_) -> Aval:
    _square(a)
    _float_matrices(a, b)
    if a.ndim != b.ndim or b.shape[-2] != a.shape[-1]:
        raise ShapeError(f"cannot solve {a.shape} against {b.shape}: give b as (..., n, k), of a's rank")
    return Aval(broadcast_shapes(a.shape[:-2], b.shape[:-2]) + b.shape[-2:], a.dtype)


def _cholesky_rule(a: Aval) -> Aval:
    _square(a)
    return a


def _qr_rule(a: Aval, *, full_matrices: bool) -> tuple[Aval, Aval]:
    _float_matrices(a)
    *batch, m, n = a.shape
    k = m if full_matrices else min(m, n)
    return Aval((*batch, m, k), a.dtype), Aval((*batch, k, n), a.dtype)


def _eigh_rule(a: Aval, *, lower: bool) -> tuple[Aval, Aval]:
    _square(a)
    return Aval(a.shape[:-1], a.dtype), a


def _svd_rule(a: Aval, *, full_matrices: bool, compute_uv: bool) -> tuple[Aval, ...]:
    _float_matrices(a)
    *batch, m, n = a.shape
    k = min(m, n)
    s = Aval((*batch, k), a.dtype)
    if not compute_uv:
        return (s,)
    ku, kv = (m, n) if full_matrices else (k, k)
    return Aval((*batch, m, ku), a.dtype), s, Aval((*batch, kv, n), a.dtype)


def _slogdet_rule(a: Aval) -> tuple[Aval, Aval]:
    return _det_rule(a), _det_rule(a)


def _det_rule(a: Aval) -> Aval:
    _square(a)
    return Aval(a.shape[:-2], a.dtype)


# ---------------------------------------------------------------- small pieces of the rules


def _mT(x: Tensor) -> Tensor:
    return matrix_transpose(x)


def _mm(a: Tensor, b: Tensor) -> Tensor:
    return bind(_matmul, a, b)


def _diag(x: Tensor) -> Tensor:
    return diagonal(x, axis1=-2, axis2=-1)


def _as_diag(v: Tensor) -> Tensor:
    """The matrices with the vectors `v` (..., k) on their diagonal."""
    return expand_dims(v, -2) * eye(v.shape[-1], dtype=v.dtype)


def _or_zeros(g: Tensor | None, like: Tensor) -> Tensor:
    return zeros_like(like) if g is None else g


def _sum(*terms: Tensor | None) -> Tensor | None:
    present = [t for t in terms if t is not None]
    out = present[0] if present else None
    for t in present[1:]:
        out = out + t
    return out


def _triangle(x: Tensor, lower: bool) -> Tensor:
    return tril(x) if lower else triu(x)


def solve_triangular(a: Tensor, b: Tensor, lower: bool) -> Tensor:
    """`a⁻¹ b`, reading only `a`'s lower (or upper) triangle."""
    return bind(_triangular_solve, a, b, lower=lower)


def _times_inverse(b: Tensor, a: Tensor, lower: bool) -> Tensor:
    """`b a⁻¹` for triangular `a`: (b a⁻¹)ᵀ = a⁻ᵀ bᵀ, and aᵀ has the other triangle."""
    return _mT(solve_triangular(_mT(a), _mT(b), not lower))


def _inverse_pairs(w: Tensor) -> Tensor:
    """F with F[i, j] = 1 / (w[j] - w[i]) off the diagonal and 0 on it (distinct w assumed)."""
    eye_n = eye(w.shape[-1], dtype=w.dtype)
    return 1.0 / (eye_n + (expand_dims(w, -2) - expand_dims(w, -1))) - eye_n


# ---------------------------------------------------------------- solve (LU) and triangular solve


def _solve_jvp(ts, a, b, out):
    # A x = b: dA x + A dx = db, so dx = A⁻¹ (db - dA x).
    da, db = ts
    return bind(_solve, a, _sum(db, None if da is None else -_mm(da, out)))


def _solve_vjp(g, a, b, out):
    # dx = A⁻¹ (db - dA x): gb = A⁻ᵀ g and gA = -gb xᵀ (summed over broadcast batch axes).
    gb = bind(_solve, _mT(a), g)
    return unbroadcast(-_mm(gb, _mT(out)), a.shape), unbroadcast(gb, b.shape)


def _triangular_jvp(ts, a, b, out, *, lower):
    # as solve's, with dA restricted to the triangle the solve reads
    da, db = ts
    return solve_triangular(a, _sum(db, None if da is None else -_mm(_triangle(da, lower), out)), lower)


def _triangular_vjp(g, a, b, out, *, lower):
    # gb = A⁻ᵀ g (Aᵀ has the other triangle); gA = -gb xᵀ on A's triangle only.
    gb = solve_triangular(_mT(a), g, not lower)
    return unbroadcast(_triangle(-_mm(gb, _mT(out)), lower), a.shape), unbroadcast(gb, b.shape)


_solve = declare("solve", _solve_rule, _solve_vjp, jvp=_solve_jvp)
_triangular_solve = declare("triangular_solve", _solve_rule, _triangular_vjp, jvp=_triangular_jvp)


def solve(a: Tensor, b: Tensor) -> Tensor:
    """`a⁻¹ b` by LU with partial pivoting, for (..., n, n) and (..., n, k) of equal rank."""
    return bind(_solve, a, b)


# ---------------------------------------------------------------- Cholesky


def _phi(x: Tensor) -> Tensor:
    """The lower triangle of x with its diagonal halved."""
    return where(eye(x.shape[-1], dtype=bool), 0.5 * x, tril(x))


def _cholesky_jvp(ts, a, out):
    # A = L Lᵀ (Murray 2016): dL = L Φ(L⁻¹ dA L⁻ᵀ).
    inner = _times_inverse(solve_triangular(out, ts[0], True), _mT(out), False)
    return _mm(out, _phi(inner))


def _cholesky_vjp(g, a, out):
    # the transpose of the JVP (Φ is a mask, its own transpose): gA = L⁻ᵀ Φ(Lᵀ g) L⁻¹.
    lt = _mT(out)
    return (_times_inverse(solve_triangular(lt, _phi(_mm(lt, g)), False), out, True),)


_cholesky = declare("cholesky", _cholesky_rule, _cholesky_vjp, jvp=_cholesky_jvp)


def cholesky(a: Tensor) -> Tensor:
    """The lower Cholesky factor of symmetric positive definite (..., n, n), from its lower triangle."""
    return bind(_cholesky, a)


# ---------------------------------------------------------------- QR


def _qr_derivable(a: Tensor, full_matrices: bool) -> None:
    m, n = a.shape[-2:]
    if full_matrices and m > n:
        raise ArgumentValueError(
            f"qr: the derivative of mode='complete' of a tall {m}x{n} matrix is not available (its last "
            f"{m - n} columns of q are not unique); use mode='reduced'"
        )


def _thin_qr_jvp(q, r, da):
    # A = QR with QᵀQ = I, R upper: with Y = dA R⁻¹, C = QᵀY and Ω = tril(C, -1) - tril(C, -1)ᵀ,
    # dQ = Q(Ω - C) + Y and dR = (C - Ω) R.
    y = _times_inverse(da, r, False)
    c = _mm(_mT(q), y)
    low = tril(c, -1)
    omega = low - _mT(low)
    return _mm(q, omega - c) + y, _mm(c - omega, r)


def _thin_qr_vjp(q, r, gq, gr):
    # the transpose of `_thin_qr_jvp`: with M = QᵀgQ - gR Rᵀ and N = tril(M - Mᵀ, -1) - M,
    # gA = (gQ + Q N) R⁻ᵀ.
    m = _mm(_mT(q), gq) - _mm(gr, _mT(r))
    n = tril(m - _mT(m), -1) - m
    return _times_inverse(gq + _mm(q, n), _mT(r), True)


def _qr_jvp(ts, a, out, *, full_matrices):
    _qr_derivable(a, full_matrices)
    (da,), (q, r) = ts, out
    m, n = a.shape[-2:]
    if m >= n:
        return _thin_qr_jvp(q, r, da)
    # A wide [A1 A2] = Q [R1 R2]: (Q, R1) is the QR of the square A1, and R2 = Qᵀ A2.
    dq, dr1 = _thin_qr_jvp(q, slice_axis(r, -1, 0, m), slice_axis(da, -1, 0, m))
    dr2 = _mm(_mT(dq), slice_axis(a, -1, m, n)) + _mm(_mT(q), slice_axis(da, -1, m, n))
    return dq, concat([dr1, dr2], axis=-1)


def _qr_vjp(gs, a, out, *, full_matrices):
    _qr_derivable(a, full_matrices)
    q, r = out
    gq, gr = _or_zeros(gs[0], q), _or_zeros(gs[1], r)
    m, n = a.shape[-2:]
    if m >= n:
        return (_thin_qr_vjp(q, r, gq, gr),)
    # the wide case's R2 = Qᵀ A2 sends gR2 to Q (as A2 gR2ᵀ) and to A2 (as Q gR2)
    gr2 = slice_axis(gr, -1, m, n)
    g1 = _thin_qr_vjp(q, slice_axis(r, -1, 0, m), gq + _mm(slice_axis(a, -1, m, n), _mT(gr2)),
                      slice_axis(gr, -1, 0, m))
    return (concat([g1, _mm(q, gr2)], axis=-1),)


_qr = declare("qr", _qr_rule, _qr_vjp, multiple_results=True, jvp=_qr_jvp)


def qr(a: Tensor, full_matrices: bool) -> tuple[Tensor, Tensor]:
    """(q, r) of (..., m, n) by Householder reflections, as LAPACK's geqrf/orgqr."""
    return bind(_qr, a, full_matrices=bool(full_matrices))


# ---------------------------------------------------------------- symmetric eigendecomposition


def _eigh_jvp(ts, a, out, *, lower):
    # A = V diag(w) Vᵀ, distinct w: with M = Vᵀ dA V, dw = diag(M) and dV = V (F ∘ M),
    # F[i, j] = 1 / (w[j] - w[i]) off the diagonal.
    w, v = out
    m = _mm(_mm(_mT(v), ts[0]), v)
    return _diag(m), _mm(v, _inverse_pairs(w) * m)


def _eigh_vjp(gs, a, out, *, lower):
    # the transpose of the JVP: gA = V (diag(gw) + F ∘ (Vᵀ gV)) Vᵀ.
    (w, v), (gw, gv) = out, gs
    inner = _sum(None if gw is None else _as_diag(gw),
                 None if gv is None else _inverse_pairs(w) * _mm(_mT(v), gv))
    return (_mm(_mm(v, inner), _mT(v)),)


_eigh = declare("eigh", _eigh_rule, _eigh_vjp, multiple_results=True, jvp=_eigh_jvp)


def eigh(a: Tensor, lower: bool) -> tuple[Tensor, Tensor]:
    """(w ascending, v) of symmetric (..., n, n), reading its lower (or upper) triangle."""
    return bind(_eigh, a, lower=bool(lower))


# ---------------------------------------------------------------- singular value decomposition


def _svd_derivable(a: Tensor, full_matrices: bool) -> None:
    m, n = a.shape[-2:]
    if full_matrices and m != n:
        raise ArgumentValueError(
            f"svd: the derivative of full_matrices=True for a non-square {m}x{n} matrix is not available "
            "(the extra singular vectors are not unique; JAX refuses it too); use full_matrices=False"
        )


def _thin_svd(a: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    return bind(_svd, a, full_matrices=False, compute_uv=True)


def _svd_jvp(ts, a, out, *, full_matrices, compute_uv):
    # A = U S Vᵀ, distinct nonzero s: with dS = Uᵀ dA V, ds = diag(dS),
    # dU = U (F ∘ (dS S + S dSᵀ)) + (I - UUᵀ) dA V S⁻¹ (tall), dV = V (F ∘ (S dS + dSᵀ S))
    # + (I - VVᵀ) dAᵀ U S⁻¹ (wide), F[i, j] = 1 / (s[j]² - s[i]²) off the diagonal.
    (da,) = ts
    if not compute_uv:
        u, _, vt = _thin_svd(a)
        return (_diag(_mm(_mm(_mT(u), da), _mT(vt))),)
    _svd_derivable(a, full_matrices)
    u, s, vt = out
    v = _mT(vt)
    d = _mm(_mm(_mT(u), da), v)
    f = _inverse_pairs(s * s)
    row, col = expand_dims(s, -2), expand_dims(s, -1)
    du = _mm(u, f * (d * row + _mT(d * row)))
    dv = _mm(v, f * (col * d + _mT(col * d)))
    m, n = a.shape[-2:]
    if m > n:
        dav = _mm(da, v)
        du = du + (dav - _mm(u, _mm(_mT(u), dav))) / row
    if n > m:
        datu = _mm(_mT(da), u)
        dv = dv + (datu - _mm(v, _mm(vt, datu))) / row
    return du, _diag(d), _mT(dv)


def _svd_vjp(gs, a, out, *, full_matrices, compute_uv):
    # the transpose of the JVP: gA = U (diag(gs) + (J + Jᵀ) S + S (K + Kᵀ)) Vᵀ, J = F ∘ (UᵀgU),
    # K = F ∘ (VᵀgV), plus (I - UUᵀ) gU S⁻¹ Vᵀ (tall) and U S⁻¹ gVᵀ (I - VVᵀ) (wide).
    if not compute_uv:
        u, _, vt = _thin_svd(a)
        return (_mm(_mm(u, _as_diag(gs[0])), vt),)
    _svd_derivable(a, full_matrices)
    (u, s, vt), (gu, g_s, gvt) = out, gs
    v, gv = _mT(vt), None if gvt is None else _mT(gvt)
    f = _inverse_pairs(s * s)
    row, col = expand_dims(s, -2), expand_dims(s, -1)
    j = None if gu is None else f * _mm(_mT(u), gu)
    k = None if gv is None else f * _mm(vt, gv)
    inner = _sum(None if g_s is None else _as_diag(g_s),
                 None if j is None else (j + _mT(j)) * row,
                 None if k is None else col * (k + _mT(k)))
    ga = _mm(_mm(u, inner), vt)
    m, n = a.shape[-2:]
    if m > n and gu is not None:
        ga = ga + _mm((gu - _mm(u, _mm(_mT(u), gu))) / row, vt)
    if n > m and gv is not None:
        ga = ga + _mm(u, _mT((gv - _mm(v, _mm(vt, gv))) / row))
    return (ga,)


_svd = declare("svd", _svd_rule, _svd_vjp, multiple_results=True, jvp=_svd_jvp)


def svd(a: Tensor, full_matrices: bool, compute_uv: bool) -> tuple[Tensor, ...]:
    """(u, s, vt) of (..., m, n), s descending; (s,) without `compute_uv`."""
    return bind(_svd, a, full_matrices=bool(full_matrices) and bool(compute_uv), compute_uv=bool(compute_uv))


# ---------------------------------------------------------------- determinants


def _trace_of_solve(a: Tensor, da: Tensor) -> Tensor:
    return sum(_diag(bind(_solve, a, da)), axis=-1)  # tr(A⁻¹ dA)


def _times_inverse_t(g: Tensor, a: Tensor) -> Tensor:
    """g A⁻ᵀ for a batch of scalars g."""
    inv_t = bind(_solve, _mT(a), broadcast_to(eye(a.shape[-1], dtype=a.dtype), a.shape))
    return expand_dims(expand_dims(g, -1), -1) * inv_t


def _slogdet_jvp(ts, a, out):
    # d log|det A| = tr(A⁻¹ dA); the sign is piecewise constant.
    return None, _trace_of_solve(a, ts[0])


def _slogdet_vjp(gs, a, out):
    # the transpose of tr(A⁻¹ dA): gA = g A⁻ᵀ.
    return (None if gs[1] is None else _times_inverse_t(gs[1], a),)


def _det_jvp(ts, a, out):
    # d det A = det A tr(A⁻¹ dA) (Jacobi's formula)
    return out * _trace_of_solve(a, ts[0])


def _det_vjp(g, a, out):
    # NOTE: nan at a singular A (0 * inf), where the cofactor matrix would be finite.
    return (_times_inverse_t(g * out, a),)


_slogdet = declare("slogdet", _slogdet_rule, _slogdet_vjp, multiple_results=True, jvp=_slogdet_jvp)


def slogdet(a: Tensor) -> tuple[Tensor, Tensor]:
    """(sign, log|det|) of (..., n, n), by LU."""
    return bind(_slogdet, a)


_det = declare("det", _det_rule, _det_vjp, jvp=_det_jvp)


def det(a: Tensor) -> Tensor:
    """The determinant of (..., n, n), by LU: the product of U's diagonal, signed by the pivots."""
    return bind(_det, a)
