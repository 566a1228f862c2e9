"""`jacfwd`, `jacrev` and `hessian` against JAX's: a small map with pytree inputs and outputs, the
residual MLP (plain, checkpointed per layer, in √L segments, with a policy, nested), and
Hessian-vector products of the GPT-style model's loss, on both backends."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import remat as rm
from remat.bench import config, impl_jax
from remat.models import gpt_loss, residual_mlp_loss


def _assert_close(actual, expected, rtol=1e-5, atol=1e-6):
    for a, e in zip(jax.tree_util.tree_leaves(rm.tree.map(np.asarray, actual)), jax.tree_util.tree_leaves(expected)):
        assert np.shape(a) == np.shape(e)
        np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=rtol, atol=atol)


# ---------------------------------------------------------------- a small pytree map


def _map(p, z, np_=rm):
    return {"u": np_.sin(p["a"]) * z, "v": (np_.sum(p["b"] * p["b"]) * p["a"], np_.tanh(z) * p["b"][0])}


def _jmap(p, z):
    return _map(p, z, jnp)


P = {"a": np.asarray([0.3, -0.8], np.float32), "b": np.asarray([1.5, 0.2, -0.4], np.float32)}
Z = np.asarray(0.7, np.float32)


def _rm_p():
    return {k: rm.asarray(v) for k, v in P.items()}


@pytest.mark.parametrize("name", ["jacfwd", "jacrev"])
@pytest.mark.parametrize("argnums", [0, (0, 1), 1])
def test_pytree_map_against_jax(name, argnums, backend):
    ours = rm.jit(getattr(rm, name)(_map, argnums=argnums), backend=backend)(_rm_p(), rm.asarray(Z))
    theirs = getattr(jax, name)(_jmap, argnums=argnums)(P, Z)
    assert jax.tree_util.tree_structure(rm.tree.map(np.asarray, ours)) == jax.tree_util.tree_structure(theirs)
    _assert_close(ours, theirs)


def test_has_aux_and_eager():
    def f(x):
        return rm.sin(x), {"n": rm.sum(x)}

    jac, aux = rm.jacrev(f, has_aux=True)(rm.asarray([0.1, 0.2]))
    np.testing.assert_allclose(np.asarray(jac), np.diag(np.cos([0.1, 0.2])), rtol=1e-6)
    assert float(aux["n"]) == pytest.approx(0.3)
    jac_f, aux_f = rm.jacfwd(f, has_aux=True)(rm.asarray([0.1, 0.2]))
    _assert_close(jac_f, np.asarray(jac))


def test_hessian_of_pytree_argument():
    def f(p):
        return rm.sum(rm.sin(p["a"])) * rm.sum(p["b"] ** 2.0)

    def jf(p):
        return jnp.sum(jnp.sin(p["a"])) * jnp.sum(p["b"] ** 2.0)

    _assert_close(rm.hessian(f)(_rm_p()), jax.hessian(jf)(P))


# ---------------------------------------------------------------- the residual MLP

SIZE = config.MLP(depth=4, width=5, batch=2)


def _mlp():
    params, x = config.inputs(SIZE, seed=3)
    return [(rm.asarray(w), rm.asarray(b)) for w, b in params], rm.asarray(x), params, x


def _mlp_out(params, x, plan="none", policy=None):
    from remat.models import residual_mlp

    return residual_mlp(params, x, plan, policy)


def _jax_mlp_out(params, x):
    for w, b in params:
        x = x + jnp.tanh(x @ w + b)
    return x


def _nested(params, x):
    """Checkpoints inside a checkpoint, reading weights from scope."""

    def outer(h):
        for w, b in params:
            h = rm.checkpoint(lambda g, w=w, b=b: g + rm.tanh(g @ w + b), h)
        return h

    return rm.checkpoint(outer, x)


PLANS = [("none", None), ("layer", None), ("sqrt", None), ("layer", rm.policies.dots_saveable),
         ("nested", None)]
PLAN_IDS = ["plain", "per-layer", "sqrt", "dots-saveable", "nested"]


def _plan_fn(plan, policy):
    if plan == "nested":
        return _nested
    return lambda params, x: _mlp_out(params, x, plan, policy)


@pytest.mark.parametrize("plan,policy", PLANS, ids=PLAN_IDS)
def test_mlp_jacobians_against_jax(plan, policy, backend):
    params, x, jparams, jx = _mlp()
    fn = _plan_fn(plan, policy)
    expected = jax.jacrev(_jax_mlp_out, argnums=1)(jparams, jx)
    for name in ("jacfwd", "jacrev"):
        got = rm.jit(getattr(rm, name)(fn, argnums=1), backend=backend)(params, x)
        _assert_close(got, expected, 1e-4, 1e-5)


@pytest.mark.parametrize("plan,policy", PLANS, ids=PLAN_IDS)
def test_mlp_hessian_against_jax(plan, policy, backend):
    params, x, jparams, jx = _mlp()
    fn = _plan_fn(plan, policy)

    def loss(x, params):
        h = fn(params, x)
        return rm.mean(h * h)

    expected = jax.hessian(lambda x: jnp.mean(_jax_mlp_out(jparams, x) ** 2))(jx)
    got = rm.jit(rm.hessian(loss), backend=backend)(x, params)
    assert got.shape == (2, 5, 2, 5)
    _assert_close(got, expected, 1e-4, 1e-6)


def test_mlp_hessian_with_respect_to_weights_through_captures(backend):
    """Weights read from scope by every checkpoint: second derivatives reach them."""
    params, x, jparams, jx = _mlp()
    w0 = params[0][0]

    def loss(w):
        return residual_mlp_loss([(w, params[0][1])] + params[1:], x, "layer")

    def jloss(w):
        return jnp.mean(_jax_mlp_out([(w, jparams[0][1])] + jparams[1:], jx) ** 2)

    v = rm.asarray(np.random.default_rng(0).normal(size=(5, 5)).astype("float32"))
    hvp = rm.jit(lambda w, v: rm.jvp(rm.grad(loss), (w,), (v,))[1], backend=backend)(w0, v)
    expected = jax.jvp(jax.grad(jloss), (jparams[0][0],), (np.asarray(v),))[1]
    _assert_close(hvp, expected, 1e-4, 1e-6)


# ---------------------------------------------------------------- the GPT-style model


GPT = config.GPT(layers=2, d_model=16, heads=2, seq=8, batch=2, vocab=11)


@functools.cache
def _gpt_case():
    params, data = config.inputs(GPT, seed=1)
    rng = np.random.default_rng(2)
    v = rm.tree.map(lambda p: rng.normal(size=p.shape).astype(np.float32), params)
    return params, data, v


@functools.cache
def _jax_gpt_hvp():
    """JAX's Hessian-vector product of the GPT-style model, once for every plan and backend (a
    checkpoint changes no value)."""
    params, data, v = _gpt_case()
    jloss = lambda p: impl_jax.gpt_loss(p, data, "none", GPT.heads)  # noqa: E731
    return jax.jit(lambda p, v: jax.jvp(jax.grad(jloss), (p,), (v,))[1])(params, v)


@pytest.mark.parametrize("plan", ["none", "layer"])
def test_gpt_hessian_vector_product_against_jax(plan, backend):
    params, data, v = _gpt_case()

    def loss(p):
        return gpt_loss(p, data, plan, GPT.heads)

    hvp = rm.jit(lambda p, v: rm.jvp(rm.grad(loss), (p,), (v,))[1], backend=backend)(rm.tree.map(rm.asarray, params), v)
    _assert_close(hvp, _jax_gpt_hvp(), 2e-3, 2e-5)


# ---------------------------------------------------------------- loops


def _rm_loops(x):
    h = rm.cond(rm.sum(x) > 0, lambda a: rm.sin(a) * a[0], lambda a: a * a, x)
    return rm.scan(lambda c, _: (rm.tanh(c) * x, c), h, length=3)


def _jax_loops(x):
    h = jax.lax.cond(jnp.sum(x) > 0, lambda a: jnp.sin(a) * a[0], lambda a: a * a, x)
    return jax.lax.scan(lambda c, _: (jnp.tanh(c) * x, c), h, length=3)


@pytest.mark.parametrize("name", ["jacfwd", "jacrev", "hessian"])
def test_jacobians_through_cond_and_scan_under_jit(name, backend):
    """jacrev is vmap over the cotangents of the function vjp returns: through cond and scan
    blocks too (cond's gradient once dropped the vectorized axes under jit)."""
    x = np.asarray([0.3, 0.5], np.float32)
    if name == "hessian":
        got = rm.jit(rm.hessian(lambda x: rm.sum(_rm_loops(x)[0])), backend=backend)(x)
        expected = jax.hessian(lambda x: jnp.sum(_jax_loops(x)[0]))(x)
    else:
        got = rm.jit(getattr(rm, name)(_rm_loops), backend=backend)(x)
        expected = getattr(jax, name)(_jax_loops)(x)
    _assert_close(got, expected, 1e-5, 1e-6)


# ---------------------------------------------------------------- the binomial gradient under vmap


def _binomial_scan(x, w):
    return rm.scan(lambda c, _: (rm.sin(c * w) + 0.1, rm.sum(c)), x, length=7, checkpoint=rm.loops.binomial(2))


def _jax_scan(x, w):
    return jax.lax.scan(lambda c, _: (jnp.sin(c * w) + 0.1, jnp.sum(c)), x, length=7)


def test_jacrev_through_a_binomial_scan_matches_jax(backend):
    """jacrev is vmap over the cotangents of vjp: the binomial schedule, which has no batched form,
    runs once per row (it raised an IndexError eagerly and a ShapeError under jit)."""
    x, w = np.array([0.3, -0.2, 0.5], np.float32), np.array([1.1, 0.7, -0.4], np.float32)
    got = rm.jit(rm.jacrev(_binomial_scan, argnums=(0, 1)), backend=backend)(x, w)
    want = jax.jacrev(_jax_scan, argnums=(0, 1))(x, w)
    for g, e in zip(rm.tree.leaves(got), jax.tree.leaves(want), strict=True):
        _assert_close(g, e, 2e-5, 1e-6)
    eager = rm.jacrev(lambda x: _binomial_scan(x, rm.asarray(w))[0])(rm.asarray(x))
    _assert_close(eager, jax.jacrev(lambda x: _jax_scan(x, w)[0])(x), 2e-5, 1e-6)


def test_per_example_gradients_through_a_binomial_scan_under_two_vmaps():
    xs = np.random.default_rng(0).normal(size=(2, 3, 4)).astype(np.float32)
    w = np.array([0.5, -0.3, 0.9, 0.2], np.float32)
    loss = lambda x, w: rm.sum(_binomial_scan(x, w)[0] ** 2)  # noqa: E731
    got = rm.vmap(rm.vmap(rm.grad(loss, argnums=1), in_axes=(0, None)), in_axes=(0, None))(xs, w)
    jloss = lambda x, w: jnp.sum(_jax_scan(x, w)[0] ** 2)  # noqa: E731
    want = jax.vmap(jax.vmap(jax.grad(jloss, argnums=1), in_axes=(0, None)), in_axes=(0, None))(xs, w)
    assert got.shape == (2, 3, 4)
    _assert_close(got, want, 2e-5, 1e-6)


def _binomial_in_segments(np_, scan, outer_kw, inner_kw):
    def f(c0, xs):
        def segment_step(c, x):
            inner = scan(lambda h, _: (np_.tanh(h * x) + 0.1, None), c, None, length=3, **inner_kw)[0]
            return inner, np_.sin(inner)

        return scan(segment_step, c0, xs, **outer_kw)[1]

    return f


def test_jacrev_through_a_binomial_scan_inside_a_segments_scan_matches_jax(backend):
    """A segment's backward block holds the inner scan's binomial gradient, which has no VJP:
    vmapping that block (jacrev) re-emitted it as a forward checkpoint and differentiated its
    body to choose residuals, which raised (fuzz seed 2729)."""
    f = _binomial_in_segments(rm, rm.scan, {"checkpoint": rm.loops.segments(2)}, {"checkpoint": rm.loops.binomial(2)})
    jf = _binomial_in_segments(jnp, jax.lax.scan, {}, {})
    c0 = np.array([0.3, -0.2], np.float32)
    xs = np.linspace(-1, 1, 8).reshape(4, 2).astype(np.float32)
    got = rm.jit(rm.jacrev(f, argnums=(0, 1)), backend=backend)(c0, xs)
    for g, e in zip(rm.tree.leaves(got), jax.tree.leaves(jax.jacrev(jf, argnums=(0, 1))(c0, xs)), strict=True):
        _assert_close(g, e, 2e-5, 1e-6)


def test_hessian_through_a_binomial_scan_is_a_clear_error():
    with pytest.raises(rm.ArgumentTypeError, match=r"binomial\(2\) cannot be differentiated in forward mode"):
        rm.hessian(lambda x: rm.sum(_binomial_scan(x, rm.ones((3,)))[0]))(rm.ones((3,)))


@pytest.mark.parametrize("how", ["eager", "jit"])
def test_vjp_and_jacrev_under_vmap_of_a_shared_input_are_per_entry(how):
    """Under vmap each entry has its own VJP: the cotangent of an input the entries share (in_axes
    None) is one per entry, not their sum (found by the fuzzer: vmap of jacrev summed the rows)."""
    xs, w = np.array([0.2, 0.3, -0.4]), np.array([[0.3, -0.2, 0.5, 0.7]])
    f = lambda a, w: rm.exp(a * w[0, 3]) + w[0, 1]  # noqa: E731
    jf = lambda a, w: jnp.exp(a * w[0, 3]) + w[0, 1]  # noqa: E731
    run = (lambda g: g) if how == "eager" else rm.jit
    got = run(rm.vmap(rm.jacrev(f, 1), in_axes=(0, None)))(xs, w)
    want = jax.vmap(jax.jacrev(jf, 1), in_axes=(0, None))(xs, w)
    assert got.shape == (3, 1, 4)
    _assert_close(got, want, 1e-6, 1e-7)
    back = run(rm.vmap(lambda a, w: rm.vjp(lambda w: f(a, w), w)[1](rm.asarray(2.0))[0], in_axes=(0, None)))(xs, w)
    _assert_close(back, 2 * want, 1e-6, 1e-7)


def test_eager_jacrev_of_a_scan_holding_a_checkpoint_matches_jit():
    """jacrev outside jit vmaps the eager VJP's backward over the cotangents; run op by op, a
    checkpoint block in it wrote into an array it did not own (fuzz seed 6976; see
    test_jit.py::test_a_block_bound_eagerly_never_writes_into_the_callers_array)."""
    x = np.array([[-0.16, -0.81, -0.47], [0.55, -1.41, 0.64], [1.24, -0.85, 1.17]])
    c0 = np.array([0.3, -0.2])

    def f(x):
        sq = x * x

        def body(c, _):
            y = rm.checkpoint(rm.sin, sq * 0.2 + 1.0)
            return 0.5 * c + 0.5 * rm.tanh(rm.mean(y)), y

        c, ys = rm.scan(body, c0, None, length=2)
        return rm.sum(ys * 0.3), rm.sum(c * 0.7)

    def jf(x):
        sq = x * x

        def body(c, _):
            y = jax.checkpoint(jnp.sin)(sq * 0.2 + 1.0)
            return 0.5 * c + 0.5 * jnp.tanh(jnp.mean(y)), y

        c, ys = jax.lax.scan(body, c0, None, length=2)
        return jnp.sum(ys * 0.3), jnp.sum(c * 0.7)

    with jax.enable_x64(True):
        want = jax.jacrev(jf)(x)
    for got in (rm.jacrev(f)(x), rm.jit(rm.jacrev(f))(x)):
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-12, atol=1e-14)
