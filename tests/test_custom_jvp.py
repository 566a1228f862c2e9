"""`rm.custom_jvp`: the examples of JAX's "Custom derivative rules" documentation (a numerically
stable log1pexp, a differentiation convention at a singular point, a function argument in
nondiff_argnums, gradient clipping in forward mode), checked against JAX to first and second
order, under jit on both backends and under vmap; and its mistakes."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import remat as rm


@rm.custom_jvp
def log1pexp(x):
    return rm.log1p(rm.exp(x))


@log1pexp.defjvp
def _log1pexp_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return log1pexp(x), (1.0 - 1.0 / (1.0 + rm.exp(x))) * t


@jax.custom_jvp
def jlog1pexp(x):
    return jnp.log1p(jnp.exp(x))


@jlog1pexp.defjvp
def _jlog1pexp_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return jlog1pexp(x), (1.0 - 1.0 / (1.0 + jnp.exp(x))) * t


@rm.custom_jvp
def convention(x):
    return x / (1.0 + rm.sqrt(x))


convention.defjvps(lambda t, ans, x: ((rm.sqrt(x) + 2.0) / (2.0 * (rm.sqrt(x) + 1.0) ** 2.0)) * t)


@jax.custom_jvp
def jconvention(x):
    return x / (1 + jnp.sqrt(x))


jconvention.defjvps(lambda t, ans, x: ((jnp.sqrt(x) + 2) / (2 * (jnp.sqrt(x) + 1) ** 2)) * t)

POINTS = [0.0, 3.0, 10.0, 1000.0]


@pytest.mark.parametrize("x", POINTS)
def test_log1pexp_is_stable_to_first_and_second_order(x):
    first = float(rm.grad(log1pexp)(rm.asarray(x)))
    second = float(rm.grad(rm.grad(log1pexp))(rm.asarray(x)))
    assert first == pytest.approx(float(jax.grad(jlog1pexp)(x)), rel=1e-6)
    # At 1000 the rule's own derivative is inf/inf in JAX too: nan in both.
    np.testing.assert_allclose(second, float(jax.grad(jax.grad(jlog1pexp))(x)), rtol=1e-5, atol=1e-12)
    assert not np.isnan(first)  # the plain formula's gradient is nan at 1000
    _, t = rm.jvp(log1pexp, (rm.asarray(x),), (rm.asarray(2.0),))
    assert float(t) == pytest.approx(2.0 * float(jax.grad(jlog1pexp)(x)), rel=1e-6)
    hess = rm.hessian(log1pexp)(rm.asarray(x))
    np.testing.assert_allclose(float(hess), second, rtol=1e-6, atol=1e-12)


def test_plain_log1pexp_gradient_is_nan_at_1000():
    """What the rule fixes (so the test above can fail)."""
    assert np.isnan(float(rm.grad(lambda x: rm.log1p(rm.exp(x)))(rm.asarray(1000.0))))


def test_differentiation_convention_at_zero(backend):
    grad = rm.jit(rm.grad(convention), backend=backend)
    assert float(grad(rm.asarray(0.0))) == pytest.approx(float(jax.grad(jconvention)(0.0)))
    assert float(jax.grad(jconvention)(0.0)) == 1.0
    xs = np.asarray([0.5, 2.0, 4.0], np.float32)
    got = rm.vmap(rm.grad(rm.grad(convention)))(xs)
    np.testing.assert_allclose(np.asarray(got), np.asarray(jax.vmap(jax.grad(jax.grad(jconvention)))(xs)), rtol=1e-5)


def test_nondiff_argnums_takes_a_function():
    @functools.partial(rm.custom_jvp, nondiff_argnums=(0,))
    def app(f, x):
        return f(x)

    @app.defjvp
    def _(f, primals, tangents):
        (x,), (t,) = primals, tangents
        return f(x), 2.0 * t

    assert float(rm.grad(lambda x: app(lambda y: y**2.0, x))(rm.asarray(4.0))) == 2.0
    assert float(rm.jvp(lambda x: app(rm.sin, x), (rm.asarray(4.0),), (rm.asarray(3.0),))[1]) == 6.0
    assert float(rm.jit(lambda x: app(rm.sin, x))(rm.asarray(0.5))) == pytest.approx(np.sin(0.5))


def test_clipped_tangent_in_forward_mode():
    """JAX's gradient-clipping idea as a JVP rule: forward mode uses the rule as written."""

    @functools.partial(rm.custom_jvp, nondiff_argnums=(0, 1))
    def clip_tangent(lo, hi, x):
        return x

    @clip_tangent.defjvp
    def _(lo, hi, primals, tangents):
        return primals[0], rm.clip(tangents[0], lo, hi)

    @functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1))
    def jclip_tangent(lo, hi, x):
        return x

    @jclip_tangent.defjvp
    def _(lo, hi, primals, tangents):
        return primals[0], jnp.clip(tangents[0], lo, hi)

    x, t = np.asarray([1.0, 2.0, 3.0], np.float32), np.asarray([-5.0, 0.5, 5.0], np.float32)
    got = rm.jvp(lambda x: clip_tangent(-1.0, 1.0, rm.sin(x)), (x,), (t,))[1]
    expected = jax.jvp(lambda x: jclip_tangent(-1.0, 1.0, jnp.sin(x)), (x,), (t,))[1]
    np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-6)


def test_custom_jvp_with_pytrees_vmap_and_xla(backend):
    @rm.custom_jvp
    def scale(p, x):
        return {"y": p["a"] * x}

    @scale.defjvp
    def _(primals, tangents):
        (p, x), (tp, tx) = primals, tangents
        return scale(p, x), {"y": tp["a"] * x + 3.0 * p["a"] * tx}  # dx counted three times: the rule wins

    p = {"a": rm.asarray([2.0, 5.0])}
    xs = rm.asarray([[1.0, 1.0], [2.0, 3.0]])
    grads = rm.jit(rm.vmap(rm.grad(lambda x: rm.sum(scale(p, x)["y"]))), backend=backend)(xs)
    np.testing.assert_allclose(np.asarray(grads), [[6.0, 15.0], [6.0, 15.0]])
    jac = rm.jacfwd(lambda x: scale(p, x)["y"])(xs[1])
    np.testing.assert_allclose(np.asarray(jac), np.diag([6.0, 15.0]))
    assert float(rm.grad(lambda a: rm.sum(scale({"a": a}, xs[1])["y"]))(p["a"])[1]) == 3.0


def test_custom_jvp_inside_checkpoint_and_scan():
    def loss(x):
        h = rm.checkpoint(lambda h: log1pexp(h) * 2.0, x)
        return rm.sum(rm.scan(lambda c, _: (log1pexp(c), None), h, length=3)[0])

    def jloss(x):
        h = jax.checkpoint(lambda h: jlog1pexp(h) * 2.0)(x)
        return jnp.sum(jax.lax.scan(lambda c, _: (jlog1pexp(c), None), h, length=3)[0])

    x = np.asarray([0.5, 800.0], np.float32)
    np.testing.assert_allclose(np.asarray(rm.grad(loss)(x)), np.asarray(jax.grad(jloss)(x)), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(rm.hessian(loss)(x)), np.asarray(jax.hessian(jloss)(x)), rtol=1e-4,
                               atol=1e-7)


def test_mistakes_are_named():
    f = rm.custom_jvp(lambda x: x * 2.0)
    with pytest.raises(rm.ArgumentTypeError, match=r"custom_jvp: <lambda> has no JVP rule.*defjvp"):
        rm.grad(f)(rm.asarray(1.0))
    f.defjvp(lambda p, t: (p[0] * 2.0, (t[0], t[0])))
    with pytest.raises(rm.ArgumentTypeError, match=r"custom_jvp: the rule <lambda> of <lambda> returned a tangent "
                                                   r"output of structure \(\*, \*\)"):
        rm.jvp(f, (rm.asarray(1.0),), (rm.asarray(1.0),))
    g = rm.custom_jvp(lambda x: x * 2.0)
    g.defjvp(lambda p, t: (p[0] * 2.0, rm.ones((3,))))
    with pytest.raises(rm.ShapeError, match=r"tangent of shape \(3,\) for an output of shape \(\)"):
        rm.grad(g)(rm.asarray(1.0))


def test_symbolic_zeros_tell_the_rule_which_arguments_move_as_in_jax(backend):
    """defjvp(rule, symbolic_zeros=True) once raised a raw TypeError. The rule sees a SymbolicZero
    for an argument with no tangent (and may return one); its results match JAX's."""
    seen: list = []

    def make(ns, zero_type):
        f = ns.custom_jvp(lambda x, y: ns_sin(ns)(x) * y)

        def rule(primals, tangents):
            x, y = primals
            tx, ty = tangents
            seen.append(tuple(isinstance(t, zero_type) for t in tangents))
            parts = [] if isinstance(tx, zero_type) else [ns_cos(ns)(x) * y * tx]
            parts += [] if isinstance(ty, zero_type) else [ns_sin(ns)(x) * ty]
            return f(x, y), sum(parts) if parts else zero_type(x.shape, x.dtype)

        f.defjvp(rule, symbolic_zeros=True)
        return f

    ours, theirs = make(rm, rm.SymbolicZero), make(jax, jax.custom_derivatives.SymbolicZero)
    x, y = np.float32(0.7), np.float32(1.5)
    got = rm.jit(lambda x, y: rm.jvp(lambda a: ours(a, y), (x,), (rm.ones_like(x),)), backend=backend)(x, y)
    assert seen[-1] == (False, True)  # y is not differentiated: its tangent is a symbolic zero
    want = jax.jvp(lambda a: theirs(a, y), (x,), (np.float32(1.0),))
    np.testing.assert_allclose([float(g) for g in got], [float(w) for w in want], rtol=1e-6)
    g = rm.jit(rm.grad(lambda x, y: ours(x, y), argnums=(0, 1)), backend=backend)(x, y)
    np.testing.assert_allclose([float(v) for v in g], [np.cos(0.7) * 1.5, np.sin(0.7)], rtol=1e-5)
    none = rm.jvp(lambda a: ours(x, y) * a, (rm.asarray(2.0),), (rm.asarray(1.0),))[1]  # no argument moves
    np.testing.assert_allclose(float(none), np.sin(0.7) * 1.5, rtol=1e-6)
    with pytest.raises(rm.ArgumentTypeError, match=r"symbolic_zeros must be True or False, got 'yes'"):
        ours.defjvp(lambda p, t: (p, t), symbolic_zeros="yes")


def ns_sin(ns):
    return rm.sin if ns is rm else jnp.sin


def ns_cos(ns):
    return rm.cos if ns is rm else jnp.cos
