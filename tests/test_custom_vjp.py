"""rm.custom_vjp: the user's gradient is used, on both backends, with pytrees, to second order,
inside checkpoints, with vectorized arguments; and its errors."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import remat as rm
from conftest import run_on


def assert_close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


@rm.custom_vjp
def clip_gradient(x):
    return x


clip_gradient.defvjp(lambda x: (x, None), lambda _, g: (rm.clip(g, -1.0, 1.0),))


@rm.custom_vjp
def my_sin(x):
    return rm.sin(x)


# residual cos x, computed in fwd: the first gradient reads it, so the second reaches it
my_sin.defvjp(lambda x: (rm.sin(x), rm.cos(x)), lambda c, g: (g * c,))


def test_the_custom_gradient_is_used():
    x = rm.asarray([0.5, -2.0])
    assert np.asarray(clip_gradient(x)).tolist() == [0.5, -2.0]
    g = rm.grad(lambda x: rm.sum(clip_gradient(x) * rm.asarray([5.0, 0.5])))(x)
    assert_close(g, [1.0, 0.5])


def test_outside_a_trace_it_runs_fn_only():
    calls = []

    def fwd(x):
        calls.append("fwd")
        return x, None

    f = rm.custom_vjp(lambda x: x * 2.0)
    f.defvjp(fwd, lambda _, g: (g,))
    assert_close(f(rm.asarray(3.0)), 6.0)
    assert calls == []


def test_values_and_gradients_on_each_backend(backend, rng):
    x = rng.normal(size=(3, 4)).astype(np.float32)
    val, g = run_on(backend, rm.value_and_grad(lambda x: rm.sum(my_sin(x) ** 2)), x)
    assert_close(val, np.sum(np.sin(x) ** 2))
    assert_close(g, 2 * np.sin(x) * np.cos(x))


def test_one_node_holds_fwd_as_its_body():
    graph = rm.make_graph(my_sin)(rm.ones((3,)))
    (node,) = graph.nodes
    assert node.op == "custom_vjp" and node.params["num_residuals"] == 1
    assert [n.op for n in node.params["body"].nodes] == ["sin", "cos"]
    rm.graph.check(graph)
    assert "bwd=<lambda> num_residuals=1" in str(graph)


def test_pytree_arguments_outputs_and_none_cotangents(backend, rng):
    @rm.custom_vjp
    def f(p, scale):
        return {"y": p["a"] * p["b"] * scale, "z": p["a"]}

    def fwd(p, scale):
        return f.fn(p, scale), (p["a"], p["b"])

    def bwd(res, g):
        a, b = res
        # d/da = g_y b s + g_z, d/db = g_y a s; the scale gets none
        return {"a": g["y"] * b * 3.0 + g["z"], "b": g["y"] * a * 3.0}, None

    f.defvjp(fwd, bwd)
    a, b = rng.normal(size=(2, 3)).astype(np.float32)
    loss = lambda p, s: rm.sum(f(p, s)["y"]) + rm.sum(f(p, s)["z"] * 2.0)  # noqa: E731
    gp, gs = run_on(backend, rm.grad(loss, argnums=(0, 1)), {"a": a, "b": b}, np.float32(3.0))
    assert_close(gp["a"], b * 3.0 + 2.0)
    assert_close(gp["b"], a * 3.0)
    assert float(gs) == 0.0


def test_python_scalar_arguments_are_static():
    f = rm.custom_vjp(lambda x, k: x * k)
    f.defvjp(lambda x, k: (x * k, None), lambda _, g: (g * 10.0, None))
    assert_close(rm.grad(lambda x: rm.sum(f(x, 2.0)))(rm.ones((2,))), [10.0, 10.0])


def test_second_order_reaches_the_residuals(backend, rng):
    x = rng.normal(size=(5,)).astype(np.float32)
    gg = run_on(backend, rm.grad(lambda x: rm.sum(rm.grad(lambda y: rm.sum(my_sin(y)))(x))), x)
    assert_close(gg, -np.sin(x))


def test_second_order_through_the_bwd_rule():
    sq = rm.custom_vjp(lambda x: x * x)
    sq.defvjp(lambda x: (x * x, x), lambda x, g: (2.0 * x * g,))
    x = rm.asarray([1.0, -3.0])
    assert_close(rm.grad(lambda x: rm.sum(rm.grad(lambda y: rm.sum(sq(y) * y))(x)))(x), 6.0 * np.asarray(x))


@pytest.mark.parametrize("policy", [None, rm.policies.everything_saveable, rm.policies.dots_saveable])
def test_inside_a_checkpoint(policy, backend, rng):
    x, w = rng.normal(size=(2, 3, 3)).astype(np.float32)

    def loss(x, w, ck):
        block = lambda h: my_sin(h @ w) * clip_gradient(h)  # noqa: E731
        return rm.sum(rm.checkpoint(block, x, policy=policy) if ck else block(x))

    want = run_on("numpy", rm.grad(lambda x, w: loss(x, w, False), argnums=(0, 1)), x, w)
    got = run_on(backend, rm.grad(lambda x, w: loss(x, w, True), argnums=(0, 1)), x, w)
    assert_close(got[0], want[0])
    assert_close(got[1], want[1])


def test_vectorized_arguments(rng):
    x = rng.normal(size=(4, 3)).astype(np.float32)
    w = rng.normal(size=(3,)).astype(np.float32)
    f = rm.custom_vjp(lambda x, w: rm.sum(x * w))
    # x' = g w, w' = g x; bwd sees unvectorized shapes
    f.defvjp(lambda x, w: (rm.sum(x * w), (x, w)), lambda r, g: (g * r[1], g * r[0]))
    assert_close(rm.vmap(f, in_axes=(0, None))(x, w), x @ w)
    assert_close(rm.vmap(rm.grad(f), in_axes=(0, None))(x, w), np.broadcast_to(w, (4, 3)))
    # w is shared by the entries: its cotangent sums over the vectorized axis
    gw = rm.grad(lambda w: rm.sum(rm.vmap(lambda xi: f(xi, w))(x) ** 2))(w)
    assert_close(gw, 2 * (x @ w) @ x, tol=1e-4)


def test_nn_gradients_keep_one_tensor():
    x = rm.ones((4, 8))
    rows = rm.memory.saved_residuals(lambda x: rm.sum(rm.nn.gelu(x) * 3.0), x)
    assert [r.shape for r in rows] == [(4, 8)]


def test_bwd_with_the_wrong_number_of_cotangents():
    f = rm.custom_vjp(lambda x, y: x * y)
    f.defvjp(lambda x, y: (x * y, None), lambda _, g: (g,))
    with pytest.raises(rm.ArgumentTypeError, match=r"custom_vjp: the bwd rule <lambda> of <lambda> returned a tuple "
                                                   r"of 1 cotangent, but <lambda> has 2 differentiable positional "
                                                   r"arguments \(x, y\)"):
        rm.grad(lambda x: rm.sum(f(x, x)))(rm.ones((2,)))


def test_bwd_with_a_cotangent_of_the_wrong_shape():
    @rm.custom_vjp
    def double(x):
        return x * 2.0

    def double_bwd(_, g):
        return (rm.sum(g),)

    double.defvjp(lambda x: (x * 2.0, None), double_bwd)
    with pytest.raises(rm.ShapeError, match=r"custom_vjp: the bwd rule double_bwd of double returned a cotangent of "
                                            r"shape \(\) for argument x of shape \(2, 3\)"):
        rm.grad(lambda x: rm.sum(double(x)))(rm.ones((2, 3)))


def test_calling_without_defvjp():
    f = rm.custom_vjp(lambda x: x)
    with pytest.raises(TypeError, match=r"defvjp\(fwd, bwd\)"):
        f(rm.ones(()))


def test_fwd_reading_a_traced_tensor_from_scope():
    def loss(w):
        f = rm.custom_vjp(lambda x: x * w)
        f.defvjp(lambda x: (x * w, None), lambda _, g: (g,))
        return rm.sum(f(rm.ones((2,))))

    with pytest.raises(TypeError, match="pass it to <lambda> as an argument"):
        rm.grad(loss)(rm.ones((2,)))


# ---------------------------------------------------------------- fwd may call the function itself


def test_fwd_may_call_the_function_itself():
    # JAX's standard pattern; binding f inside its own fwd used to recurse without end
    f = rm.custom_vjp(rm.sin)
    f.defvjp(lambda x: (f(x), rm.cos(x)), lambda c, g: (c * g,))
    assert_close(rm.grad(f)(1.0), np.cos(1.0))
    (node,) = rm.make_graph(f)(rm.ones((3,))).nodes
    assert [n.op for n in node.params["body"].nodes] == ["sin", "cos"]  # f is its primal function there


def test_inside_fwd_another_custom_vjp_keeps_its_rule():
    f = rm.custom_vjp(lambda x: clip_gradient(x) * 2.0)
    f.defvjp(lambda x: (f(x), None), lambda _, g: (g * 2.0,))
    g = rm.custom_vjp(lambda x: x * 2.0)
    g.defvjp(lambda x: (clip_gradient(x) * 2.0, None), lambda _, c: (c * 2.0,))
    x = rm.asarray([0.5])
    assert_close(rm.grad(lambda x: rm.sum(f(x)))(x), [2.0])
    # d/dy (g(y) y) = 2y (bwd) + g(y) (fwd's value, clip_gradient(y) 2); its derivative, times 10,
    # is 2 * 10 from bwd's term plus clip(2 * 10) = 1 through clip_gradient, whose rule applies
    assert_close(rm.grad(lambda x: rm.sum(rm.grad(lambda y: rm.sum(g(y) * y))(x) * 10.0))(x), [21.0])


# ---------------------------------------------------------------- higher order follows JAX


def _jax_doubling_sin():
    import jax
    import jax.numpy as jnp

    @jax.custom_vjp
    def f(x):
        return jnp.sin(x)

    f.defvjp(lambda x: (jnp.sin(x), jnp.cos(x)), lambda c, g: (2 * c * g,))
    return jax, f


doubling_sin = rm.custom_vjp(rm.sin)
doubling_sin.defvjp(lambda x: (rm.sin(x), rm.cos(x)), lambda c, g: (2 * c * g,))  # not sin's true derivative


def test_the_issue_example_gives_jax_value():
    # the custom rule is the derivative of f's output only; the second order differentiates fwd
    f = doubling_sin
    assert float(rm.grad(rm.grad(lambda x: f(f(x))))(2.0)) == pytest.approx(-2.7809271, rel=1e-6)


_ALL = rm.policies.everything_saveable
THROUGH = {
    "plain": (lambda f: lambda x: f(f(x)) ** 2, lambda jax, f: lambda x: f(f(x)) ** 2),
    "checkpoint": (lambda f: lambda x: rm.checkpoint(lambda h: f(f(h)) ** 2, x),
                   lambda jax, f: jax.checkpoint(lambda h: f(f(h)) ** 2)),
    "checkpoint-saving-everything": (
        lambda f: lambda x: rm.checkpoint(lambda h: f(f(h)) ** 2, x, policy=_ALL),
        lambda jax, f: jax.checkpoint(lambda h: f(f(h)) ** 2, policy=jax.checkpoint_policies.everything_saveable)),
    "scan": (lambda f: lambda x: rm.scan(lambda c, _: (f(c), None), x, length=2)[0] ** 2,
             lambda jax, f: lambda x: jax.lax.scan(lambda c, _: (f(c), None), x, length=2)[0] ** 2),
    "cond": (lambda f: lambda x: rm.cond(x > 0.0, lambda h: f(f(h)) ** 2, lambda h: h, x),
             lambda jax, f: lambda x: jax.lax.cond(x > 0.0, lambda h: f(f(h)) ** 2, lambda h: h, x)),
}


@pytest.mark.parametrize("where", THROUGH)
def test_higher_orders_follow_jax(where):
    jax, jf = _jax_doubling_sin()
    ours, theirs = THROUGH[where][0](doubling_sin), THROUGH[where][1](jax, jf)
    x = rm.asarray(2.0, "float64")
    with jax.enable_x64(True):
        want = [float(jax.grad(theirs)(2.0)), float(jax.grad(jax.grad(theirs))(2.0)),
                float(jax.grad(jax.grad(jax.grad(theirs)))(2.0))]
    got = [float(rm.grad(ours)(x)), float(rm.grad(rm.grad(ours))(x)), float(rm.grad(rm.grad(rm.grad(ours)))(x))]
    np.testing.assert_allclose(got, want, rtol=1e-12)
    assert want[1] == pytest.approx(-3.8658945222)  # not sin's: the rule doubles the first derivative


# ---------------------------------------------------------------- nondiff_argnums


def test_nondiff_python_values_are_passed_first_to_bwd():
    seen = []

    def bwd(k, name, res, g):
        seen.append((k, name))
        return (g * k * 10.0,)

    f = rm.custom_vjp(lambda k, x, name: x * k, nondiff_argnums=(0, 2))
    f.defvjp(lambda k, x, name: (x * k, None), bwd)
    assert_close(rm.grad(lambda x: rm.sum(f(3.0, x, "scale")))(rm.ones((2,))), [30.0, 30.0])
    assert seen == [(3.0, "scale")]


def test_nondiff_callable_as_jax_uses_it():
    apply = rm.custom_vjp(lambda fn, x: fn(x), nondiff_argnums=(0,))
    # d fn(x) / dx, with the derivative fn supplies: here fn = tanh, its derivative 1 - tanh²
    apply.defvjp(lambda fn, x: (fn(x), fn(x)), lambda fn, y, g: (g * (1.0 - y * y),))
    x = rm.asarray([0.3, -1.2])
    assert_close(rm.grad(lambda x: rm.sum(apply(rm.tanh, x)))(x), 1.0 - np.tanh(np.asarray(x)) ** 2)


def test_nondiff_tensors_reach_bwd_and_get_no_gradient(backend):
    f = rm.custom_vjp(lambda x, k: x * k, nondiff_argnums=(-1,))
    f.defvjp(lambda x, k: (x * k, None), lambda k, _, g: (g * k,))
    x, k = np.asarray([1.0, 2.0], np.float32), np.asarray([3.0, 5.0], np.float32)
    gx, gk = run_on(backend, rm.grad(lambda x, k: rm.sum(f(x, k) * x), argnums=(0, 1)), x, k)
    assert_close(gx, 2 * x * k)  # bwd's k * g (g = x), and the product's own f(x, k) = x k
    assert_close(gk, [0.0, 0.0])  # k reaches the loss only through f, which gives it no cotangent
    # vmapped over x, k shared: bwd sees k as the call did
    assert_close(rm.vmap(rm.grad(lambda x: rm.sum(f(x, rm.asarray(k)))))(np.stack([x, x])), np.stack([k, k]))


def test_nondiff_argnums_match_jax():
    import functools

    import jax

    @functools.partial(jax.custom_vjp, nondiff_argnums=(1,))
    def jf(x, n):
        return x**n

    jf.defvjp(lambda x, n: (x**n, x), lambda n, x, g: (g * n * x ** (n - 1) * 3.0,))
    f = rm.custom_vjp(lambda x, n: x**n, nondiff_argnums=(1,))
    f.defvjp(lambda x, n: (x**n, x), lambda n, x, g: (g * n * x ** (n - 1) * 3.0,))
    with jax.enable_x64(True):
        want = [float(jax.grad(jf)(1.5, 3.0)), float(jax.grad(jax.grad(jf))(1.5, 3.0))]
    x = rm.asarray(1.5, "float64")
    assert [float(rm.grad(f)(x, 3.0)), float(rm.grad(rm.grad(f))(x, 3.0))] == pytest.approx(want, rel=1e-12)


def test_bwd_returning_a_python_number_for_a_scalar():
    f = rm.custom_vjp(lambda x: x * 2.0)
    f.defvjp(lambda x: (x * 2.0, None), lambda _, g: (7.0,))
    g = rm.grad(f)(rm.asarray(1.0, "float64"))
    assert g.dtype == np.float64 and float(g) == 7.0


def test_bwd_with_a_cotangent_of_another_float_dtype_is_cast():
    f = rm.custom_vjp(lambda x: x * 2.0)
    f.defvjp(lambda x: (x * 2.0, None), lambda _, g: (g.astype("float32") * 2.0,))
    g = rm.grad(lambda x: rm.sum(f(x)))(rm.ones((2,), "float64"))
    assert g.dtype == np.float64 and np.asarray(g).tolist() == [2.0, 2.0]


# ---------------------------------------------------------------- names set in fwd reach the policies


named_cos = rm.custom_vjp(rm.sin)
named_cos.defvjp(lambda x: (rm.sin(x), rm.checkpoint_name(rm.cos(x), "cos")), lambda c, g: (c * g,))


def _named_loss(policy, outer=lambda y: y):
    return lambda x: rm.sum(rm.checkpoint(lambda h: outer(named_cos(h) * 2.0), x, policy=policy))


def _counts(graph: rm.graph.Graph, op: str) -> list[int]:
    """`op`'s count in the forward block's body, then in the backward block's."""
    return [n.params["body"].count(op) for n in graph.nodes if n.op == "checkpoint"]


def test_a_name_set_in_fwd_is_saved_by_a_name_policy():
    x = rm.asarray([0.5, 1.0, 2.0])
    policy = rm.policies.save_only_these_names("cos")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the policy's name is found: no UnusedNameWarning
        rows = rm.memory.saved_residuals(_named_loss(policy), x)
        graph = rm.make_graph(rm.grad(_named_loss(policy)))(x)
    assert [(r.provenance, r.shape) for r in rows] == [("named 'cos'", (3,))]  # not x: nothing is recomputed
    assert _counts(graph, "cos") == [1, 0]  # computed once, read by the backward block
    assert_close(rm.grad(_named_loss(policy))(x), rm.grad(_named_loss(None))(x))
    assert [r.provenance for r in rm.memory.saved_residuals(_named_loss(None), x)] == ["argument x"]
    assert _counts(rm.make_graph(rm.grad(_named_loss(None)))(x), "cos") == [1]  # the backward block only


def test_only_the_named_output_is_saved():
    # tanh's gradient needs the custom_vjp's output too: it is recomputed from x, not saved
    x = rm.asarray([0.5, 1.0])
    policy = rm.policies.save_any_names_but_these("other")
    with pytest.warns(rm.policies.UnusedNameWarning):
        rows = rm.memory.saved_residuals(_named_loss(policy, rm.tanh), x)
        graph = rm.make_graph(rm.grad(_named_loss(policy, rm.tanh)))(x)
    assert [r.provenance for r in rows] == ["argument x", "named 'cos'"]
    assert _counts(graph, "cos") == [1, 0] and _counts(graph, "sin")[1] == 1


def test_a_product_computed_in_fwd_is_saved_by_dots_saveable():
    # as JAX's policies see fwd's code: the matmul fwd returns as a residual is a dot
    f = rm.custom_vjp(lambda x, w: rm.sin(x @ w))
    f.defvjp(lambda x, w: (rm.sin(x @ w), (x @ w, x, w)),
             lambda r, g: ((g * rm.cos(r[0])) @ r[2].T, r[1].T @ (g * rm.cos(r[0]))))

    def loss(policy):
        return lambda x, w: rm.sum(rm.checkpoint(lambda h: f(h, w) * 2.0, x, policy=policy))

    x, w = rm.ones((2, 3)), rm.ones((3, 4)) * 0.5
    rows = rm.memory.saved_residuals(loss(rm.policies.dots_saveable), x, w)
    assert [r.provenance for r in rows][:2] == ["argument x", "argument w"]
    assert [r.shape for r in rows if r.kind == "output"] == [(2, 4)] and "matmul" in rows[-1].provenance
    graph = rm.make_graph(rm.grad(loss(rm.policies.dots_saveable), argnums=(0, 1)))(x, w)
    assert [n.params["body"].count("matmul") for n in graph.nodes if n.op == "checkpoint"] == [1, 2]  # x @ w: once
    want = rm.grad(loss(None), argnums=(0, 1))(x, w)
    for a, b in zip(rm.grad(loss(rm.policies.dots_saveable), argnums=(0, 1))(x, w), want):
        assert_close(a, b)


def test_a_float_cotangent_of_another_width_is_cast_to_the_arguments_dtype_as_in_jax(backend):
    """A bfloat16 input whose bwd returns float32: JAX accepts it (its gradient then float32),
    remat raised a DTypeError; now it casts to the argument's dtype, so that a gradient is in the
    dtype of what it differentiates, as everywhere in remat."""
    import jax
    import jax.numpy as jnp

    f = rm.custom_vjp(lambda x: x * 2.0)
    f.defvjp(lambda x: (x * 2.0, None), lambda r, g: (g.astype("float32") * 3.0,))
    jf = jax.custom_vjp(lambda x: x * 2.0)
    jf.defvjp(lambda x: (x * 2.0, None), lambda r, g: (g.astype("float32") * 3.0,))
    x = np.ones(3, rm.bfloat16)
    got = rm.jit(rm.grad(lambda x: rm.sum(f(x)).astype("float32")), backend=backend)(x)
    want = jax.grad(lambda x: jnp.sum(jf(x)).astype("float32"))(jnp.asarray(x))
    assert got.dtype == rm.bfloat16
    np.testing.assert_array_equal(np.asarray(got).astype(np.float32), np.asarray(want).astype(np.float32))
    g = rm.custom_vjp(lambda x: x * 2.0)
    g.defvjp(lambda x: (x * 2.0, None), lambda r, c: (rm.ones((3,), "int32"),))
    with pytest.raises(rm.DTypeError, match=r"returned a cotangent of dtype int32 for argument x of dtype float32"):
        rm.grad(lambda x: rm.sum(g(x)))(rm.ones((3,)))


def _none_cotangent_pair(lib):
    """A custom_vjp of two arguments and two outputs whose bwd gives y no cotangent (None, a
    symbolic zero) and reads the cotangent of the second output (zeros when it is unused)."""
    import jax
    import jax.numpy as jnp

    np_ = rm if lib == "rm" else jnp
    f = (rm.custom_vjp if lib == "rm" else jax.custom_vjp)(lambda x, y: (np_.sin(x) * y, x * 2.0))
    f.defvjp(lambda x, y: (f(x, y), (np_.cos(x), y)),
             lambda res, g: (g[0] * res[0] * res[1] + 2.0 * g[1], None))
    return f


@pytest.mark.parametrize("policy", [None, "everything_saveable", "dots_saveable"])
def test_none_cotangents_under_checkpoint_match_jax(backend, policy):
    """JAX's custom_vjp symbolic-zero cases under a checkpoint (issue 26), as remat writes them:
    bwd returns None for an input that also reaches the loss another way, and one output goes
    unused (bwd gets zeros for it, as JAX's does without symbolic_zeros); under rm.checkpoint
    with a policy, eagerly and jitted, against jax.custom_vjp under jax.checkpoint."""
    import jax
    import jax.numpy as jnp

    f, jf = _none_cotangent_pair("rm"), _none_cotangent_pair("jax")
    pol = None if policy is None else getattr(rm.policies, policy)
    jpol = None if policy is None else getattr(jax.checkpoint_policies, policy)

    def loss(x, y):
        return rm.sum(rm.checkpoint(lambda x, y: f(x @ y, y)[0] + y, x, y, policy=pol))

    def jloss(x, y):
        return jnp.sum(jax.checkpoint(lambda x, y: jf(x @ y, y)[0] + y, policy=jpol)(x, y))

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(3, 3)).astype(np.float32), rng.normal(size=(3, 3)).astype(np.float32)
    want = jax.grad(jloss, argnums=(0, 1))(x, y)
    for got in (rm.grad(loss, argnums=(0, 1))(rm.asarray(x), rm.asarray(y)),
                run_on(backend, rm.grad(loss, argnums=(0, 1)), x, y)):
        for a, b in zip(got, want):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    # Only y's path through x @ y (and the + y) carries its gradient: bwd's None adds nothing.
    jgrad_y = jax.grad(lambda y: jnp.sum(jnp.sin(x @ y) * jax.lax.stop_gradient(y) + y))(y)
    np.testing.assert_allclose(np.asarray(want[1]), np.asarray(jgrad_y), rtol=1e-5, atol=1e-6)
