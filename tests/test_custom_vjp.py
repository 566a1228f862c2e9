"""rm.custom_vjp: the user's gradient is used, on both backends, with pytrees, to second order,
inside checkpoints, with vectorized arguments; and its errors."""

from __future__ import annotations

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
    with pytest.raises(TypeError, match=r"custom_vjp: the bwd rule <lambda> of <lambda> returned 1 cotangents"):
        rm.grad(lambda x: rm.sum(f(x, x)))(rm.ones((2,)))


def test_bwd_with_a_cotangent_of_the_wrong_shape():
    @rm.custom_vjp
    def double(x):
        return x * 2.0

    def double_bwd(_, g):
        return (rm.sum(g),)

    double.defvjp(lambda x: (x * 2.0, None), double_bwd)
    with pytest.raises(ValueError, match=r"custom_vjp: the bwd rule double_bwd of double .* shape \(\) .* \(2, 3\)"):
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
