"""rm.linalg's solvers and decompositions against jax.numpy.linalg (and jax.scipy's
solve_triangular) in float64: values, gradients, forward mode, second order and vmap, eagerly
and under `rm.jit` on both backends; then dtypes, batching, failures (singular, not positive
definite) and the derivatives remat refuses, as JAX does.

Each row gives a function over a namespace (`rm`, or jax.numpy with solve_triangular) whose
outputs do not depend on the sign choices of a decomposition: eigenvectors and singular vectors
enter as `v * v` and as `u diag(c) vh`, the QR factors normalized to a positive diagonal of R.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import zlib
from collections.abc import Callable

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax.scipy.linalg import solve_triangular  # noqa: E402

import remat as rm  # noqa: E402

JNP = types.SimpleNamespace(**{n: getattr(jnp, n) for n in ("sign", "diagonal", "expand_dims", "sum")},
                            linalg=types.SimpleNamespace(solve_triangular=solve_triangular,
                                                         **{n: getattr(jnp.linalg, n) for n in (
                                                             "solve", "inv", "cholesky", "qr", "eigh", "svd",
                                                             "det", "slogdet")}))
MODES = ["eager", "numpy", "xla"]


# ---------------------------------------------------------------- inputs


def general(rng, shape):
    n = shape[-1]
    return rng.normal(size=shape) + n * np.eye(n)  # well conditioned


def spd(rng, shape):
    m = rng.normal(size=shape)
    return m @ np.swapaxes(m, -1, -2) + shape[-1] * np.eye(shape[-1])


def symmetric(rng, shape):
    m = rng.normal(size=shape)
    return m + np.swapaxes(m, -1, -2)  # distinct eigenvalues, almost surely


def normal(rng, shape):
    return rng.normal(size=shape)


# ---------------------------------------------------------------- sign-free views of the outputs


def _qr_normalized(xp, q, r):
    d = xp.sign(xp.diagonal(r, axis1=-2, axis2=-1))
    return q * xp.expand_dims(d, -2), r * xp.expand_dims(d, -1)


def _qr(mode):
    return lambda xp, a: _qr_normalized(xp, *xp.linalg.qr(a, mode=mode))


def _eigh(xp, a):
    w, v = xp.linalg.eigh(a)
    return w, v * v


def _svd(full_matrices):
    def fn(xp, a):
        u, s, vh = xp.linalg.svd(a, full_matrices=full_matrices)
        k = min(a.shape[-2:])
        c = np.linspace(1.0, 2.0, k)  # u diag(c) vh: each pair of singular vectors, signs cancelling
        return s, u[..., :, :k] * u[..., :, :k], (u[..., :, :k] * c) @ vh[..., :k, :]

    return fn


@dataclasses.dataclass(frozen=True)
class Row:
    id: str
    fn: Callable  # fn(xp, *xs) -> an array or a tuple of them
    shapes: tuple
    domain: tuple
    tol: float = 1e-9
    # without symmetrizing, the derivative (JAX's too) is that of a symmetric input: so are the tangents
    symmetric_tangents: bool = False
    on_xla: bool = False

    def sample(self) -> list[np.ndarray]:
        rng = np.random.default_rng(zlib.crc32(self.id.encode()))
        return [d(rng, s) for d, s in zip(self.domain, self.shapes)]


ROWS = [
    Row("solve", lambda xp, a, b: xp.linalg.solve(a, b), ((4, 4), (4, 2)), (general, normal), on_xla=True),
    Row("solve-broadcast-batch", lambda xp, a, b: xp.linalg.solve(a, b), ((2, 1, 3, 3), (4, 3, 2)),
        (general, normal)),
    Row("solve_triangular-upper-trans-unit", lambda xp, a, b: xp.linalg.solve_triangular(
        a, b, trans="T", unit_diagonal=True), ((2, 3, 3), (3,)), (general, normal), on_xla=True),
    Row("inv", lambda xp, a: xp.linalg.inv(a), ((2, 4, 4),), (general,), on_xla=True),
    Row("cholesky-batched-upper", lambda xp, a: xp.linalg.cholesky(a, upper=True), ((2, 3, 3),), (spd,),
        on_xla=True),
    Row("cholesky-not-symmetrized", lambda xp, a: xp.linalg.cholesky(a, symmetrize_input=False), ((3, 3),),
        (spd,), symmetric_tangents=True),
    Row("qr-tall", _qr("reduced"), ((5, 3),), (normal,)),
    Row("qr-wide-batched", _qr("reduced"), ((2, 3, 5),), (normal,), on_xla=True),
    Row("qr-complete-square", _qr("complete"), ((4, 4),), (normal,)),
    Row("eigh-batched-nonsymmetric", _eigh, ((2, 3, 3),), (normal,), on_xla=True),  # symmetrized first
    Row("eigh-upper", lambda xp, a: _eigh_upper(xp, a), ((4, 4),), (symmetric,), symmetric_tangents=True),
    Row("svd-square", _svd(True), ((4, 4),), (normal,)),
    Row("svd-tall", _svd(False), ((5, 3),), (normal,), on_xla=True),
    Row("svd-wide-batched", _svd(False), ((2, 3, 5),), (normal,)),
    Row("svd-values", lambda xp, a: xp.linalg.svd(a, compute_uv=False), ((2, 5, 3),), (normal,)),
    Row("det", lambda xp, a: xp.linalg.det(a), ((2, 4, 4),), (normal,)),
    Row("slogdet", lambda xp, a: tuple(xp.linalg.slogdet(a)), ((3, 3, 3),), (normal,), on_xla=True),
]


def _eigh_upper(xp, a):
    w, v = xp.linalg.eigh(a, UPLO="U", symmetrize_input=False)
    return w, v * v


def _leaves(out) -> list:
    return list(out) if isinstance(out, tuple) else [out]


def _rm(row: Row) -> Callable:
    return lambda *xs: row.fn(rm, *xs)


def _run(mode: str, fn: Callable, *xs):
    if mode == "eager":
        return rm.tree.map(np.asarray, fn(*[rm.asarray(x) for x in xs]))
    return rm.tree.map(np.asarray, rm.jit(fn, backend=mode)(*xs))


def _close(got, expected, tol):
    got, expected = np.asarray(got), np.asarray(expected)
    assert got.shape == expected.shape and got.dtype == expected.dtype, (got.shape, got.dtype, expected.shape)
    scale = max(1.0, float(np.max(np.abs(expected), initial=0.0)))
    np.testing.assert_allclose(got, expected, rtol=tol, atol=tol * scale)


def _weights(row: Row, xs) -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    with jax.enable_x64(True):
        outs = _leaves(jax.eval_shape(lambda *ys: row.fn(JNP, *ys), *xs))
    return [rng.normal(size=o.shape) for o in outs]


def _loss(row: Row, xp, ws):
    return lambda *xs: functools.reduce(lambda a, b: a + b, [xp.sum(o * w) for o, w in
                                                             zip(_leaves(row.fn(xp, *xs)), ws)])


@functools.cache
def _reference(row: Row):
    """Inputs, weights, tangents, and JAX's outputs, gradient and tangents: one jitted JAX
    program per row (op by op, JAX takes seconds a row)."""
    xs, rng = row.sample(), np.random.default_rng(2)
    ws = _weights(row, xs)
    ts = [symmetric(rng, x.shape) if row.symmetric_tangents else rng.normal(size=x.shape) for x in xs]

    def everything(xs, ts):
        grad = jax.grad(_loss(row, JNP, ws), argnums=tuple(range(len(xs))))(*xs)
        return _leaves(row.fn(JNP, *xs)), grad, _leaves(jax.jvp(lambda *ys: row.fn(JNP, *ys), xs, ts)[1])

    with jax.enable_x64(True):
        out = jax.jit(everything)(tuple(map(jnp.asarray, xs)), tuple(map(jnp.asarray, ts)))
    return (xs, ws, ts, *([np.asarray(a) for a in part] for part in out))


def _everything(row: Row, ws):
    """The row's outputs, gradient and tangents, in remat."""
    def fn(xs, ts):
        grad = rm.grad(_loss(row, rm, ws), argnums=tuple(range(len(xs))))(*xs)
        return _leaves(row.fn(rm, *xs)), grad, _leaves(rm.jvp(lambda *ys: row.fn(rm, *ys), tuple(xs), tuple(ts))[1])

    return fn


# ---------------------------------------------------------------- against JAX

# Each primitive's lowering runs on XLA in one row at least; every row runs eagerly and on NumPy
# (an XLA compilation of a row costs about a second).
CASES = [(r, m) for r in ROWS for m in MODES if m != "xla" or r.on_xla]


@pytest.mark.parametrize("row, mode", CASES, ids=[f"{r.id}-{m}" for r, m in CASES])
def test_values_gradients_and_forward_mode_match_jax(row: Row, mode: str):
    """Values, `rm.grad` and `rm.jvp`, in one program."""
    xs, ws, ts, *expected = _reference(row)
    fn = _everything(row, ws)
    if mode == "eager":
        got = rm.tree.map(np.asarray, fn([rm.asarray(x) for x in xs], [rm.asarray(t) for t in ts]))
    else:
        got = rm.tree.map(np.asarray, rm.jit(fn, backend=mode)(xs, ts))
    for part, got_part, expected_part in zip(("values", "gradient", "tangents"), got, expected):
        assert len(got_part) == len(expected_part), part
        for g, e in zip(got_part, expected_part):
            _close(g, e, row.tol if part == "values" else row.tol * 10)


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_second_order_matches_finite_differences(row: Row):
    """The derivative rules are remat ops, so they differentiate again: the jvp of the gradient
    against central differences of the gradient (JAX agrees with the first order above)."""
    xs, ws, ts, *_ = _reference(row)
    grad = rm.grad(_loss(row, rm, ws), argnums=tuple(range(len(xs))))
    hvp = rm.jvp(grad, tuple(map(rm.asarray, xs)), tuple(map(rm.asarray, ts)))[1]
    eps = 1e-5
    plus = grad(*[rm.asarray(x + eps * t) for x, t in zip(xs, ts)])
    minus = grad(*[rm.asarray(x - eps * t) for x, t in zip(xs, ts)])
    for h, p, m in zip(hvp, plus, minus):
        _close(np.asarray(h), (np.asarray(p) - np.asarray(m)) / (2 * eps), 1e-5)


VMAP_ROWS = [r for r in ROWS if r.id in ("solve", "cholesky-batched-upper", "qr-tall", "eigh-upper", "svd-tall")]


@pytest.mark.parametrize("row", VMAP_ROWS, ids=[r.id for r in VMAP_ROWS])
def test_vmap_and_its_gradient_match_jax(row: Row):
    rng = np.random.default_rng(3)
    xs = [np.stack([d(rng, s) for _ in range(3)]) for d, s in zip(row.domain, row.shapes)]
    argnums = tuple(range(len(xs)))
    loss = _reference(row)[1]
    with jax.enable_x64(True):
        out, grads = jax.jit(lambda *ys: (jax.vmap(lambda *zs: row.fn(JNP, *zs))(*ys),
                                          jax.vmap(jax.grad(_loss(row, JNP, loss), argnums=argnums))(*ys)))(*xs)
    expected = [np.asarray(e) for e in _leaves(out) + list(grads)]
    per_entry = rm.grad(_loss(row, rm, loss), argnums=argnums)
    for mode in MODES:
        got, got_grads = _run(mode, lambda *ys: (rm.vmap(_rm(row))(*ys), rm.vmap(per_entry)(*ys)), *xs)
        for g, e in zip(_leaves(got) + list(got_grads), expected):
            _close(g, e, row.tol * 10)


def test_vmap_over_right_hand_sides_only():
    """An unmapped matrix against mapped right-hand sides: the solve broadcasts a's batch of one."""
    rng = np.random.default_rng(4)
    a, bs = general(rng, (3, 3)), rng.normal(size=(5, 3))
    fn = rm.vmap(lambda a, b: rm.linalg.solve(a, b), in_axes=(None, 0))
    with jax.enable_x64(True):
        solves = jax.vmap(jnp.linalg.solve, in_axes=(None, 0))
        expected = jax.jit(jax.grad(lambda a, b: jnp.sum(solves(a, b) ** 2)))(a, bs)
    for mode in MODES:
        got = _run(mode, fn, a, bs)
        np.testing.assert_allclose(got, np.linalg.solve(a, bs.T).T, rtol=1e-12)
        g = _run(mode, rm.grad(lambda a, b: rm.sum(fn(a, b) ** 2)), a, bs)
        np.testing.assert_allclose(g, np.asarray(expected), rtol=1e-10)


# ---------------------------------------------------------------- dtypes, failures, refusals


@pytest.mark.parametrize("backend", ["numpy", "xla"])
def test_float32_and_integer_inputs_have_jaxs_dtypes(backend):
    ints = np.array([[4, 2], [2, 5]], np.int32)
    for name in ("inv", "cholesky", "det"):
        got = _run(backend, getattr(rm.linalg, name), ints)
        expected = getattr(jnp.linalg, name)(ints)
        assert got.dtype == expected.dtype == np.float32
        np.testing.assert_allclose(got, expected, rtol=1e-5)
    got = _run(backend, lambda a: rm.linalg.solve(a, rm.asarray([1.0, 2.0], "float64")), ints.astype(np.float32))
    assert got.dtype == np.float64  # promoted together, as jnp.linalg.solve in x64 mode does
    w, v = _run(backend, rm.linalg.eigh, ints.astype(np.float32))
    assert w.dtype == v.dtype == np.float32


@pytest.mark.parametrize("mode", MODES)
def test_failures_give_nan_per_matrix_as_jax_does(mode):
    singular = np.stack([np.eye(2), np.ones((2, 2))])
    x = _run(mode, rm.linalg.solve, singular, np.ones((2, 2, 1)))
    np.testing.assert_allclose(x[0], np.ones((2, 1)))
    assert not np.isfinite(x[1]).all()  # JAX: inf and nan
    not_pd = np.stack([2.0 * np.eye(2), -np.eye(2)])
    low = _run(mode, rm.linalg.cholesky, not_pd)
    np.testing.assert_allclose(low[0], np.sqrt(2.0) * np.eye(2))
    np.testing.assert_array_equal(low[1], jnp.linalg.cholesky(not_pd)[1])  # nan on and below the diagonal
    sign, logdet = _run(mode, rm.linalg.slogdet, singular)
    np.testing.assert_array_equal(sign, [1.0, 0.0])
    np.testing.assert_array_equal(logdet, [0.0, -np.inf])
    np.testing.assert_array_equal(_run(mode, rm.linalg.det, singular), [1.0, 0.0])


@pytest.mark.parametrize("backend", ["numpy", "xla"])
def test_derivatives_remat_refuses_as_jax_does(backend):
    tall = np.arange(6.0).reshape(3, 2)
    with pytest.raises(rm.ArgumentValueError, match=r"^svd: .*full_matrices=False"):
        rm.jit(rm.grad(lambda a: rm.sum(rm.linalg.svd(a)[0])), backend=backend)(tall)
    with pytest.raises(NotImplementedError):
        jax.grad(lambda a: jnp.sum(jnp.linalg.svd(a)[0]))(tall)
    with pytest.raises(rm.ArgumentValueError, match=r"^qr: .*mode='complete'.*mode='reduced'"):
        rm.jit(lambda a: rm.jvp(lambda a: rm.linalg.qr(a, mode="complete")[0], (a,), (a,)), backend=backend)(tall)
    # but the singular values alone, and a square full SVD, differentiate
    g = rm.jit(rm.grad(lambda a: rm.sum(rm.linalg.svd(a, compute_uv=False))), backend=backend)(tall)
    np.testing.assert_allclose(g, jax.grad(lambda a: jnp.sum(jnp.linalg.svd(a, compute_uv=False)))(tall),
                               rtol=1e-5)


def test_results_are_named_as_jaxs():
    a = rm.asarray(spd(np.random.default_rng(5), (3, 3)))
    assert rm.linalg.qr(a)._fields == jnp.linalg.qr(np.asarray(a))._fields
    assert rm.linalg.eigh(a)._fields == jnp.linalg.eigh(np.asarray(a))._fields
    assert rm.linalg.svd(a)._fields == jnp.linalg.svd(np.asarray(a))._fields
    assert rm.linalg.slogdet(a)._fields == jnp.linalg.slogdet(np.asarray(a))._fields
    assert rm.linalg.qr(a, mode="r").shape == (3, 3)
    u, s, vh = rm.linalg.svd(rm.ones((2, 3)))
    assert (u.shape, s.shape, vh.shape) == ((2, 2), (2,), (3, 3))
