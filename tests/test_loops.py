"""Loops and branches (rm.scan, fori_loop, while_loop, cond, switch): values and gradients against
the unrolled Python loop and against JAX in float64 on both backends; the blocks in the graph,
the residuals their gradients keep, the NumPy evaluator's count; vmap through them."""

import functools
import tracemalloc

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import remat as rm
from conftest import run_on
from remat.graph import check


def f64(rng, *shape, scale=1.0):
    return rm.asarray(rng.normal(size=shape) * scale, "float64")


def assert_close(got, expected, rtol=1e-10, atol=1e-11):
    a, b = rm.tree.leaves(got), rm.tree.leaves(expected)
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert np.shape(x) == np.shape(y)
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol)


def on_jax(fn, *args):
    """`jax.jit(fn)(*args)` in float64, as NumPy arrays."""
    with jax.enable_x64(True):
        out = jax.jit(fn)(*[jnp.asarray(np.asarray(a)) for a in rm.tree.leaves(args)])
        return jax.tree_util.tree_map(np.asarray, out)


ALL3 = (0, 1, 2)

# ---------------------------------------------------------------- the residual MLP over stacked weights


def _layer(h, w, b):
    return h + rm.tanh(h @ w + b)


def mlp_scan(x, W, b, checkpointed=False):
    def step(h, wb):
        new = rm.checkpoint(_layer, h, *wb) if checkpointed else _layer(h, *wb)
        return new, rm.sum(new)

    h, sums = rm.scan(step, x, (W, b))
    return rm.sum(h * h) + rm.sum(sums * sums)


def mlp_loop(x, W, b):
    h, total = x, 0.0
    for i in range(W.shape[0]):
        h = _layer(h, W[i], b[i])
        total = total + rm.sum(h) ** 2
    return rm.sum(h * h) + total


def mlp_jax(x, W, b, checkpointed=False):
    def step(h, wb):
        layer = lambda h, w, b: h + jnp.tanh(h @ w + b)  # noqa: E731
        new = (jax.checkpoint(layer) if checkpointed else layer)(h, *wb)
        return new, jnp.sum(new)

    h, sums = jax.lax.scan(step, x, (W, b))
    return jnp.sum(h * h) + jnp.sum(sums * sums)


@pytest.mark.parametrize("checkpointed", [False, True], ids=["plain", "checkpointed-body"])
def test_scanned_residual_mlp_equals_python_loop_and_jax(backend, rng, checkpointed):
    x, W, b = f64(rng, 3, 4), f64(rng, 6, 4, 4, scale=0.5), f64(rng, 6, 4)
    got = run_on(backend, rm.value_and_grad(lambda *a: mlp_scan(*a, checkpointed), ALL3), x, W, b)
    assert_close(got, rm.value_and_grad(mlp_loop, ALL3)(x, W, b))
    assert_close(got, on_jax(jax.value_and_grad(lambda *a: mlp_jax(*a, checkpointed), ALL3), x, W, b))


def test_checkpoint_inside_scan_keeps_one_carry_per_step(rng):
    """Without a checkpoint the gradient keeps two (T, B, D) arrays (the carry for the matmul's VJP,
    tanh's output for its own); with one, only the carry, and the backward loop recomputes."""
    T, B, D = 8, 3, 4
    x, W, b = f64(rng, B, D), f64(rng, T, D, D, scale=0.5), f64(rng, T, D)

    def stacked(checkpointed):
        rows = rm.memory.saved_residuals(lambda x, W, b: mlp_scan(x, W, b, checkpointed), x, W, b)
        return [r for r in rows if r.kind == "output" and len(r.shape) == 3]

    plain, ck = stacked(False), stacked(True)
    assert [r.shape for r in ck] == [(T, B, D)]
    scan_line = f"test_loops.py:{mlp_scan.__code__.co_firstlineno + 5}"  # the rm.scan line
    assert ck[0].provenance == f"the loop's carry, one per step of the scan at {scan_line}"
    assert [r.shape for r in plain] == [(T, B, D), (T, B, D)]
    layer_line = f"test_loops.py:{_layer.__code__.co_firstlineno + 1}"  # tanh, in the body
    assert [r.provenance for r in plain] == [f"output of tanh at {layer_line}, one per step of the scan at {scan_line}",
                                             f"the loop's carry, one per step of the scan at {scan_line}"]
    assert sum(r.nbytes for r in ck) * 2 == sum(r.nbytes for r in plain) == 2 * T * B * D * 8


def test_gradient_runs_the_forward_loop_once(rng):
    """The forward scan gains the residuals as extra outputs instead of running a second time."""
    x, W, b = f64(rng, 3, 4), f64(rng, 6, 4, 4), f64(rng, 6, 4)
    graph = rm.make_graph(rm.value_and_grad(mlp_scan, ALL3))(x, W, b)
    check(graph)
    scans = [n for n in graph.nodes if n.op == "scan"]
    assert [n.params["reverse"] for n in scans] == [False, True]
    assert len(scans[0].outputs) == 2 + 2  # h, sums, then the stacked carry and tanh's output


# ---------------------------------------------------------------- a recurrent network over 1,000 steps


def rnn(h0, xs, Wh, Wx):
    def cell(h, x):
        h = rm.tanh(h @ Wh + x @ Wx)
        return h, rm.sum(h * h)

    h, ys = rm.scan(cell, h0, xs)
    return rm.sum(ys) + rm.sum(h)


def rnn_jax(h0, xs, Wh, Wx):
    def cell(h, x):
        h = jnp.tanh(h @ Wh + x @ Wx)
        return h, jnp.sum(h * h)

    h, ys = jax.lax.scan(cell, h0, xs)
    return jnp.sum(ys) + jnp.sum(h)


def rnn_numpy_loop(h0, xs, Wh, Wx):
    """The unrolled Python loop, forward and backward by hand (backpropagation through time)."""
    hs = [h0]
    for x in xs:
        hs.append(np.tanh(hs[-1] @ Wh + x @ Wx))
    loss = sum(float(np.sum(h * h)) for h in hs[1:]) + float(np.sum(hs[-1]))
    dh, dWh, dWx, dxs = np.ones_like(h0), np.zeros_like(Wh), np.zeros_like(Wx), np.zeros_like(xs)
    for t in range(len(xs), 0, -1):
        dz = (dh + 2 * hs[t]) * (1 - hs[t] ** 2)  # d tanh(z) = (1 - tanh²) dz
        dWh += np.outer(hs[t - 1], dz)
        dWx += np.outer(xs[t - 1], dz)
        dxs[t - 1] = dz @ Wx.T
        dh = dz @ Wh.T
    return loss, (dh, dxs, dWh, dWx)


def test_rnn_over_1000_steps(backend, rng):
    h0, xs, Wh, Wx = f64(rng, 3), f64(rng, 1000, 2), f64(rng, 3, 3, scale=0.5), f64(rng, 2, 3)
    got = run_on(backend, rm.value_and_grad(rnn, (0, 1, 2, 3)), h0, xs, Wh, Wx)
    assert_close(got, rnn_numpy_loop(*[np.asarray(a) for a in (h0, xs, Wh, Wx)]), rtol=1e-9)
    assert_close(got, on_jax(jax.value_and_grad(rnn_jax, (0, 1, 2, 3)), h0, xs, Wh, Wx), rtol=1e-9)


def test_grad_of_grad_through_scan(backend, rng):
    h0, xs, Wh, Wx = f64(rng, 3), f64(rng, 5, 2), f64(rng, 3, 3, scale=0.5), f64(rng, 2, 3)
    v = f64(rng, 3, 3)

    def hvp(loss, grad, vdot):
        return lambda Wh: grad(lambda Wh: vdot(grad(loss, 2)(h0, xs, Wh, Wx), v))(Wh)

    got = run_on(backend, hvp(rnn, rm.grad, lambda g, v: rm.sum(g * v)), Wh)
    unrolled = rm.grad(lambda Wh: rm.sum(rm.grad(_rnn_unrolled, 2)(h0, xs, Wh, Wx) * v))(Wh)
    assert_close(got, unrolled)
    expected = on_jax(lambda Wh, h0, xs, Wx, v: jax.grad(
        lambda Wh: jnp.sum(jax.grad(rnn_jax, 2)(h0, xs, Wh, Wx) * v))(Wh), Wh, h0, xs, Wx, v)
    assert_close(got, expected)


def _rnn_unrolled(h0, xs, Wh, Wx):
    h, total = h0, 0.0
    for t in range(xs.shape[0]):
        h = rm.tanh(h @ Wh + xs[t] @ Wx)
        total = total + rm.sum(h * h)
    return total + rm.sum(h)


# ---------------------------------------------------------------- nesting, direction, branches


def nested(x, W):
    def row(c, w_row):
        inner, ys = rm.scan(lambda d, w: (rm.sin(d * w + c), d * w), c, w_row)
        return inner, rm.sum(ys)

    c, sums = rm.scan(row, x, W)
    return rm.sum(c) + rm.sum(sums * sums)


def nested_loop(x, W):
    c, total = x, 0.0
    for i in range(W.shape[0]):
        d, s = c, 0.0
        for j in range(W.shape[1]):
            s = s + rm.sum(d * W[i, j])
            d = rm.sin(d * W[i, j] + c)
        c, total = d, total + s * s
    return rm.sum(c) + total


def nested_jax(x, W):
    def row(c, w_row):
        inner, ys = jax.lax.scan(lambda d, w: (jnp.sin(d * w + c), d * w), c, w_row)
        return inner, jnp.sum(ys)

    c, sums = jax.lax.scan(row, x, W)
    return jnp.sum(c) + jnp.sum(sums * sums)


def test_nested_scans(backend, rng):
    x, W = f64(rng, 2), f64(rng, 3, 4)
    got = run_on(backend, rm.value_and_grad(nested, (0, 1)), x, W)
    assert_close(got, rm.value_and_grad(nested_loop, (0, 1))(x, W))
    assert_close(got, on_jax(jax.value_and_grad(nested_jax, (0, 1)), x, W))


def test_scan_inside_checkpoint(backend, rng):
    x, W = f64(rng, 2), f64(rng, 3, 4)
    ck = rm.value_and_grad(lambda x, W: rm.checkpoint(nested, x, W), (0, 1))
    got = run_on(backend, ck, x, W)
    assert_close(got, rm.value_and_grad(nested_loop, (0, 1))(x, W))
    expected = on_jax(jax.value_and_grad(jax.checkpoint(nested_jax), (0, 1)), x, W)
    assert_close(got, expected)
    graph = rm.make_graph(ck)(x, W)
    (block,) = [n for n in graph.nodes if n.op == "checkpoint" and not n.params.get("differentiated")]
    # The forward block keeps none of the loops' values; the recomputation after the barrier (in
    # the backward block, a checkpoint of its own) does.
    assert [len(n.outputs) for n in block.params["body"].nodes if n.op == "scan"] == [2]
    assert graph.count("barrier") == 1 and graph.count("scan") == 2 + 1 + 2 + 1  # forward, recomputed, backward


def test_reverse_scan(backend, rng):
    c0, xs, w = f64(rng, 3), f64(rng, 6, 3), f64(rng, 3)

    def loss(c0, xs, w):
        c, ys = rm.scan(lambda c, x: (rm.tanh(c * w + x), c * x), c0, xs, reverse=True)
        return rm.sum(c) + rm.sum(ys * ys * rm.arange(6.0, dtype="float64")[:, None])

    def loop(c0, xs, w):
        c, ys = c0, [None] * 6
        for t in reversed(range(6)):
            ys[t] = c * xs[t]
            c = rm.tanh(c * w + xs[t])
        return rm.sum(c) + rm.sum(rm.stack(ys) ** 2 * rm.arange(6.0, dtype="float64")[:, None])

    def jax_loss(c0, xs, w):
        c, ys = jax.lax.scan(lambda c, x: (jnp.tanh(c * w + x), c * x), c0, xs, reverse=True)
        return jnp.sum(c) + jnp.sum(ys * ys * jnp.arange(6.0)[:, None])

    got = run_on(backend, rm.value_and_grad(loss, ALL3), c0, xs, w)
    assert_close(got, rm.value_and_grad(loop, ALL3)(c0, xs, w))
    assert_close(got, on_jax(jax.value_and_grad(jax_loss, ALL3), c0, xs, w))


def test_cond_and_switch_inside_scan(backend, rng):
    c0, xs, w = f64(rng, 3), f64(rng, 8, 3), f64(rng, 3)
    kinds = rm.asarray([0, 2, 1, 5, -1, 1, 0, 2], "int32")  # out of range clamps, as lax.switch

    def loss(c0, xs, w):
        def step(c, x_k):
            x, k = x_k
            c = rm.cond(rm.sum(x) > 0, lambda: rm.tanh(c * w + x), lambda: c * 0.5 - x)
            y = rm.switch(k, [lambda v: rm.sin(v), lambda v: v * w, lambda v: v * v], c)
            return c, y

        c, ys = rm.scan(step, c0, (xs, kinds))
        return rm.sum(c) + rm.sum(ys)

    def jax_step(c, x_k, w):
        x, k = x_k
        c = jax.lax.cond(jnp.sum(x) > 0, lambda: jnp.tanh(c * w + x), lambda: c * 0.5 - x)
        return c, jax.lax.switch(k, [jnp.sin, lambda v: v * w, lambda v: v * v], c)

    def jax_loss(c0, xs, w):
        c, ys = jax.lax.scan(lambda c, xk: jax_step(c, xk, w), c0, (xs, jnp.asarray(np.asarray(kinds))))
        return jnp.sum(c) + jnp.sum(ys)

    positive = np.asarray(xs).sum(axis=1) > 0  # the loop's branches, decided in Python
    chosen = np.clip(np.asarray(kinds), 0, 2)

    def loop(c0, xs, w):
        c, total = c0, 0.0
        for t in range(8):
            c = rm.tanh(c * w + xs[t]) if positive[t] else c * 0.5 - xs[t]
            total = total + rm.sum([rm.sin(c), c * w, c * c][chosen[t]])
        return rm.sum(c) + total

    got = run_on(backend, rm.value_and_grad(loss, ALL3), c0, xs, w)
    assert_close(got, rm.value_and_grad(loop, ALL3)(c0, xs, w))
    assert_close(got, on_jax(jax.value_and_grad(jax_loss, ALL3), c0, xs, w))


def test_pytree_carry_and_xs_with_an_integer_counter(backend, rng):
    h, xs = f64(rng, 2), (f64(rng, 4, 2), [f64(rng, 4)])

    def loss(h, xs):
        def step(s, x):
            a, (b,) = x
            return {"h": rm.sin(s["h"]) * a + b, "n": s["n"] + 1}, (s["h"] * b, s["n"])

        final, (ys, counts) = rm.scan(step, {"h": h, "n": rm.asarray(0, "int32")}, xs)
        return rm.sum(final["h"]) + rm.sum(ys), (final["n"], counts)

    (value, (n, counts)), grads = run_on(backend, rm.value_and_grad(loss, (0, 1), has_aux=True), h, xs)
    assert int(n) == 4 and counts.tolist() == [0, 1, 2, 3] and counts.dtype == np.int32

    def jax_loss(h, a, b):
        def step(h, x):
            a, b = x
            return jnp.sin(h) * a + b, h * b

        final, ys = jax.lax.scan(step, h, (a, b))
        return jnp.sum(final) + jnp.sum(ys)

    expected = on_jax(jax.value_and_grad(jax_loss, ALL3), h, xs[0], xs[1][0])
    assert_close((value, grads[0], grads[1][0], grads[1][1][0]), (expected[0], *expected[1]))


def test_length_without_xs_and_an_empty_loop(backend):
    c, ys = run_on(backend, lambda c: rm.scan(lambda c, _: (c * 2.0, c), c, length=4), rm.asarray(1.5))
    assert float(c) == 24.0 and ys.tolist() == [1.5, 3.0, 6.0, 12.0]
    c, ys = run_on(backend, lambda c: rm.scan(lambda c, x: (c + x, c * x), c, rm.zeros((0, 2))), rm.ones((2,)))
    assert c.tolist() == [1.0, 1.0] and ys.shape == (0, 2)


def test_unroll_changes_nothing_but_the_xla_loop(backend, rng):
    c0, xs, w = f64(rng, 3), f64(rng, 7, 3), f64(rng, 3)

    def loss(unroll):
        return lambda c0, xs, w: rm.sum(rm.scan(lambda c, x: (rm.sin(c * w) + x, c), c0, xs, unroll=unroll)[1])

    assert_close(run_on(backend, rm.grad(loss(3), ALL3), c0, xs, w), run_on(backend, rm.grad(loss(1), ALL3), c0, xs, w))
    assert "unroll=3" in str(rm.make_graph(loss(3))(c0, xs, w))


# ---------------------------------------------------------------- fori_loop, while_loop


def test_fori_loop_with_static_bounds_is_a_differentiable_scan(backend, rng):
    x, w = f64(rng, 3), f64(rng, 3)

    def loss(x, w):
        return rm.sum(rm.fori_loop(2, 7, lambda i, v: rm.sin(v * w) + i.astype("float64"), x))

    def jax_loss(x, w):
        return jnp.sum(jax.lax.fori_loop(2, 7, lambda i, v: jnp.sin(v * w) + i, x))

    assert rm.make_graph(loss)(x, w).count("scan") == 1
    got = run_on(backend, rm.value_and_grad(loss, (0, 1)), x, w)
    assert_close(got, on_jax(jax.value_and_grad(jax_loss, (0, 1)), x, w))


def test_fori_loop_with_traced_bounds_is_a_while_loop(backend):
    f = lambda n, x: rm.fori_loop(1, n, lambda i, v: v * 2.0 + i.astype("float32"), x)  # noqa: E731
    assert rm.make_graph(f)(rm.asarray(5), rm.asarray(1.0)).count("while") == 1
    assert float(run_on(backend, f, rm.asarray(5), rm.asarray(1.0))) == 42.0  # 1 -> 3 -> 8 -> 19 -> 42
    with pytest.raises(TypeError, match=r"while_loop.*rm\.scan.*fori_loop with Python int bounds"):
        rm.grad(lambda x, n: f(n, x))(rm.asarray(1.0), rm.asarray(5))


def test_while_loop_forward_equals_jax(backend, rng):
    w = f64(rng, 2)

    def collatz_like(x):
        def body(c):
            i, v = c
            return i + 1, rm.where(v > 1.0, v * 0.5, v * 3.0 + w)

        return rm.while_loop(lambda c: (c[0] < 20) & (rm.sum(c[1]) > 0.5), body, (rm.asarray(0), x))

    def jax_version(x, w):
        def body(c):
            i, v = c
            return i + 1, jnp.where(v > 1.0, v * 0.5, v * 3.0 + w)

        return jax.lax.while_loop(lambda c: (c[0] < 20) & (jnp.sum(c[1]) > 0.5), body, (jnp.int32(0), x))

    x = rm.asarray([7.0, 3.0], "float64")
    got = run_on(backend, collatz_like, x)
    assert_close(got, on_jax(jax_version, x, w))
    assert int(got[0]) > 1


def test_while_loop_has_no_reverse_mode(backend):
    """Differentiating through a while loop names it and says what to use; a gradient that does
    not pass through the loop (its inputs are data, or under stop_gradient) is computed as usual."""
    loop = lambda x: rm.while_loop(lambda v: rm.sum(v) < 10.0, lambda v: v * 2.0, x)  # noqa: E731
    with pytest.raises(rm.ArgumentTypeError, match="use rm.scan, or rm.fori_loop") as info:
        run_on(backend, rm.grad(lambda x: rm.sum(loop(x))), rm.ones((2,)))
    assert isinstance(info.value, TypeError)
    assert info.value.source == f"test_loops.py:{loop.__code__.co_firstlineno}"  # the while loop's line
    g = run_on(backend, rm.grad(lambda x, y: rm.sum(loop(y) * x) + rm.sum(rm.stop_gradient(loop(x)))),
               rm.ones((2,)), rm.asarray([1.0, 2.0]))
    assert g.tolist() == [4.0, 8.0]


# ---------------------------------------------------------------- cond, switch


def test_cond_reads_captures_of_either_branch(backend, rng):
    x, a, b = f64(rng, 3), f64(rng, 3), f64(rng, 3)

    def loss(x, a, b):
        return rm.sum(rm.cond(rm.sum(x) > 0, lambda v: rm.sin(v) * a, lambda v: v * b + 1.0, x))

    def jax_loss(x, a, b):
        return jnp.sum(jax.lax.cond(jnp.sum(x) > 0, lambda v: jnp.sin(v) * a, lambda v: v * b + 1.0, x))

    for sign in (1.0, -1.0):
        xs = x * sign
        got = run_on(backend, rm.value_and_grad(loss, ALL3), xs, a, b)
        assert_close(got, on_jax(jax.value_and_grad(jax_loss, ALL3), xs, a, b))


def test_switch_clamps_its_index_and_differentiates_the_branch_taken(backend, rng):
    x = f64(rng, 2)
    branches = [lambda v: v * 2.0, lambda v: rm.exp(v), lambda v: rm.sin(v)]
    for i, expected in [(-3, 2 * np.ones(2)), (1, np.exp(np.asarray(x))), (9, np.cos(np.asarray(x)))]:
        g = run_on(backend, rm.grad(lambda x, i: rm.sum(rm.switch(i, branches, x))), x, rm.asarray(i))
        np.testing.assert_allclose(g, expected, rtol=1e-12)


# ---------------------------------------------------------------- vmap through loops


def test_vmap_through_scan_cond_and_while(rng):
    xs, w = f64(rng, 4, 5, 2), f64(rng, 2)

    def one(x):  # x: (5, 2); the carry starts unvectorized and becomes vectorized in the body
        c, ys = rm.scan(lambda c, xt: (c * 0.5 + rm.sum(xt * w), rm.cond(rm.sum(xt) > 0, lambda: xt, lambda: -xt)),
                        rm.asarray(0.0, "float64"), x)
        start = (rm.asarray(0), rm.asarray(-3.0, "float64"))
        n, _ = rm.while_loop(lambda s: s[1] < c, lambda s: (s[0] + 1, s[1] + 1.0), start)
        return c, ys, n

    batched = rm.vmap(one)(xs)
    for i in range(4):
        assert_close([b[i] for b in batched], one(xs[i]))
    grads = rm.vmap(rm.grad(lambda x: rm.sum(one(x)[1]) + one(x)[0]))(xs)
    for i in range(4):
        assert_close(grads[i], rm.grad(lambda x: rm.sum(one(x)[1]) + one(x)[0])(xs[i]))


# ---------------------------------------------------------------- the blocks in the graph


def test_scan_prints_as_a_nested_block():
    w = rm.asarray(2.0)
    f = lambda c, xs: rm.scan(lambda c, x: (rm.tanh(c * w + x), c), c, xs)  # noqa: E731
    assert str(rm.make_graph(f)(rm.asarray(1.0), rm.ones((3,)))) == """\
graph(a:f32[], b:f32[3]) {
  c:f32[] d:f32[3] = scan[length=3 num_carry=1 num_xs=1 reverse=False] a b
    body(e:f32[], f:f32[]) {
      g:f32[] = multiply e 2.0
      h:f32[] = add g f
      i:f32[] = tanh h
      return i, e
    }
  return c, d
}"""


def test_captures_become_loop_invariant_inputs(rng):
    x, W, b = f64(rng, 3, 4), f64(rng, 6, 4, 4), f64(rng, 4)
    graph = rm.make_graph(lambda x, W, b: rm.scan(lambda h, w: (rm.tanh(h @ w + b), None), x, W)[0])(x, W, b)
    (node,) = graph.nodes
    assert [v.shape for v in node.inputs] == [(3, 4), (6, 4, 4), (4,)]  # carry, xs, the captured b
    assert [v.shape for v in node.params["body"].inputs] == [(3, 4), (4, 4), (4,)]


def test_gradient_graphs_pass_the_ir_checker(rng):
    x, W = f64(rng, 2), f64(rng, 3, 4)
    check(rm.make_graph(rm.grad(nested, (0, 1)))(x, W))
    check(rm.make_graph(rm.grad(lambda x, W: rm.grad(nested)(x, W) @ x))(x, W))


def test_xla_lowers_loops_to_while_and_case_in_one_stage(rng):
    """The barrier of a checkpoint inside a loop body is inside the loop, not a stage boundary."""

    def loss(c, xs):
        layer = lambda c, x: rm.cond(x > 0, lambda: rm.sin(c) + x, lambda: c * x)  # noqa: E731
        c, _ = rm.scan(lambda c, x: (rm.checkpoint(layer, c, x), None), c, xs)
        return rm.while_loop(lambda v: v < 100.0, lambda v: v * 3.0 + 1.0, rm.stop_gradient(c)) + c

    step = rm.value_and_grad(loss)  # the value keeps the while loop, which the gradient ignores
    text = rm.jit(step, backend="xla").lower(rm.asarray(1.0), rm.ones((4,))).as_text()
    assert text.count("module @") == 1
    assert text.count("stablehlo.while") == 3 and "stablehlo.case" in text  # forward, backward scan; while
    assert "stablehlo.optimization_barrier" in text


# ---------------------------------------------------------------- the NumPy evaluator's count


def test_numpy_loop_frees_each_steps_temporaries_and_counts_exactly():
    """Forward over T steps of a body with 1 MB temporaries: the peak does not grow with T beyond
    the stacked ys, and tracemalloc sees what the evaluator counts."""
    n = 128 * 1024  # float64: 1 MiB

    def run(T):
        f = rm.jit(lambda c, xs: rm.scan(lambda c, x: (rm.sin(rm.exp(c) * x) + c, rm.sum(c)), c, xs))
        compiled = f.lower(rm.zeros((n,), "float64"), rm.ones((T,), "float64")).compile()
        c, xs = np.zeros(n), np.ones(T)
        compiled(c, xs)
        tracemalloc.start()
        compiled(c, xs)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return compiled.last_memory.peak, peak

    (short, _), (long, long_seen) = run(3), run(30)
    assert long - short == (30 - 3) * 8  # only the stacked ys grow
    assert short <= 4 * n * 8  # carry, its successor, two temporaries
    assert abs(long_seen - long) < 0.1 * long


def test_eager_loops_leave_their_operands_alone():
    """Run outside a trace, a block must not let its body overwrite the caller's arrays in place."""
    x = rm.asarray([1.0, 2.0])
    rm.cond(rm.asarray(True), lambda a: rm.sin(a) * 2.0 + 1.0, lambda a: a, x)
    rm.scan(lambda c, a: (rm.sin(c) * 2.0 + 1.0, rm.exp(a) + 1.0), x, rm.stack([x, x]))
    rm.while_loop(lambda c: rm.sum(c) < 100.0, lambda c: rm.exp(c) * 2.0 + 1.0, x)
    assert np.asarray(x).tolist() == [1.0, 2.0]


def _scans(graph) -> list:
    return [n for n in graph.walk() if n.op in ("scan", "scan_binomial")]


@pytest.mark.parametrize("checkpoint", [None, "step", rm.loops.binomial()], ids=["plain", "step", "binomial"])
def test_backward_loop_computes_only_the_cotangents_asked_for(backend, rng, checkpoint):
    """An RNN differentiated with respect to its weights only: the backward loop computes no
    cotangent of xs (the data) nor of the loop-invariant input it does not ask for, and stacks
    no residual that only those needed; the gradients are those of the full gradient."""
    T, B, X, H = 7, 2, 5, 3
    h0, xs, Wh, Wx = f64(rng, B, H), f64(rng, T, B, X), f64(rng, H, H, scale=0.5), f64(rng, X, H)

    def loss(Wh, Wx, h0, xs):
        def cell(h, x):
            h = rm.tanh(h @ Wh + x @ Wx)
            return h, rm.sum(h * h)

        h, ys = rm.scan(cell, h0, xs, checkpoint=checkpoint)
        return rm.sum(ys) + rm.sum(h)

    step = rm.value_and_grad(loss, 0)  # Wh only: not Wx, h0 nor xs
    graph = rm.make_graph(step)(Wh, Wx, h0, xs)
    check(graph)
    types = {(v.shape, v.dtype) for n in _scans(graph) for v in n.outputs}
    assert ((T, B, X), np.dtype("float64")) not in types  # no cotangent of xs
    assert ((X, H), np.dtype("float64")) not in types  # nor of Wx, summed over the steps
    backward = _scans(graph)[-1]
    if backward.op == "scan":
        body = backward.params["body"]
        assert [v.shape for v in backward.outputs] == [(B, H), (H, H)]  # the carry's and Wh's cotangents
        assert backward.params["num_carry"] == 2 and [v.shape for v in body.outputs] == [(B, H), (H, H)]
        if checkpoint is None:  # the plain step's VJP reads x only for Wx's cotangent, not asked for
            assert all(v.shape != (B, X) for v in body.inputs)
    else:
        assert backward.params["num_x_cts"] == 0 and [v.shape for v in backward.outputs] == [(B, H), (H, H)]
    value, g = run_on(backend, step, Wh, Wx, h0, xs)
    full = rm.value_and_grad(loss, ALL3 + (3,))(Wh, Wx, h0, xs)
    assert_close((value, g), (full[0], full[1][0]))
    # Before pruning the loop computed every cotangent: ask for all and they are all there.
    everything = rm.make_graph(rm.value_and_grad(loss, (0, 1, 2, 3)))(Wh, Wx, h0, xs)
    assert ((T, B, X), np.dtype("float64")) in {(v.shape, v.dtype) for n in _scans(everything) for v in n.outputs}


def test_unread_loop_outputs_are_pruned_forward_too(backend, rng):
    """A scan whose ys and whose second carry nobody reads loses them, with their work; a carry
    that a kept carry reads stays (a fixed point); an integer carry gets no cotangent."""
    xs = f64(rng, 5, 3)

    def fn(xs):
        def step(c, x):
            a, b, n = c
            return (rm.sin(a) + x, b * 2.0 + a, n + 1), (rm.exp(x), a * b)

        (a, b, n), (e, ab) = rm.scan(step, (rm.zeros(3, "float64"), rm.ones(3, "float64"), rm.asarray(0)), xs)
        return rm.sum(a) + rm.sum(e), n

    graph = rm.make_graph(fn)(xs)
    (node,) = _scans(graph)
    assert node.params["num_carry"] == 1 + 1  # a, and n (an output); b and a * b are gone
    assert [v.shape for v in node.outputs] == [(3,), (), (5, 3)]
    assert {n.op for n in node.params["body"].nodes} == {"sin", "add", "exp"}
    value, n = run_on(backend, fn, xs)
    x = np.asarray(xs)
    a = np.zeros(3)
    for row in x:
        a = np.sin(a) + row
    np.testing.assert_allclose(np.asarray(value), a.sum() + np.exp(x).sum(), rtol=1e-12)
    assert int(n) == 5
    graph = rm.make_graph(rm.grad(lambda xs: fn(xs)[0]))(xs)
    check(graph)
    backward = _scans(graph)[-1]
    assert all(v.dtype == np.float64 for v in backward.outputs)  # no cotangent of the counter


def test_loop_invariant_values_are_computed_once_not_stacked(backend, rng):
    """`w * w` depends only on a capture: the backward loop gets it once, not one copy per step."""
    T, D = 6, 4
    x, w = f64(rng, 2, D), f64(rng, D, D, scale=0.5)

    def loss(x, w):
        return rm.sum(rm.scan(lambda h, _: (rm.tanh(h @ (w * w)), None), x, length=T)[0])

    rows = rm.memory.saved_residuals(loss, x, w)
    assert not [r for r in rows if r.shape == (T, D, D)]
    assert [r.shape for r in rows if r.shape[:1] == (T,)] == [(T, 2, D), (T, 2, D)]  # h and tanh(...), per step

    def jax_loss(x, w):
        return jnp.sum(jax.lax.scan(lambda h, _: (jnp.tanh(h @ (w * w)), None), x, length=T)[0])

    got = run_on(backend, rm.value_and_grad(loss, (0, 1)), x, w)
    assert_close(got, on_jax(jax.value_and_grad(jax_loss, (0, 1)), x, w))


# ---------------------------------------------------------------- checkpointing the loop itself

# (The defaults, segments() and binomial(), run in the models' tests below.)
SCHEDULES = {"step": "step", "segments-5": rm.loops.segments(5), "binomial-2": rm.loops.binomial(2),
             "binomial-4": rm.loops.binomial(4)}


def rnn_ck(checkpoint, reverse=False):
    def loss(h0, xs, Wh, Wx):
        def cell(h, x):
            h = rm.tanh(h @ Wh + x @ Wx)
            return h, rm.sum(h * h)

        h, ys = rm.scan(cell, h0, xs, reverse=reverse, checkpoint=checkpoint)
        return rm.sum(ys * rm.arange(ys.shape[0], dtype="float64")) + rm.sum(h)

    return loss


def rnn_ck_jax(h0, xs, Wh, Wx, reverse=False):
    def cell(h, x):
        h = jnp.tanh(h @ Wh + x @ Wx)
        return h, jnp.sum(h * h)

    h, ys = jax.lax.scan(jax.checkpoint(cell), h0, xs, reverse=reverse)
    return jnp.sum(ys * jnp.arange(ys.shape[0])) + jnp.sum(h)


@pytest.mark.parametrize("name", SCHEDULES)
def test_checkpointed_loop_has_the_plain_loops_gradient(backend, rng, name):
    """T = 23 is prime: segments leave steps over, and binomial's splits are uneven."""
    args = f64(rng, 3), f64(rng, 23, 2), f64(rng, 3, 3, scale=0.5), f64(rng, 2, 3)
    reverse = name in ("segments-5", "binomial-2")  # one of each kind runs in reverse
    got = run_on(backend, rm.value_and_grad(rnn_ck(SCHEDULES[name], reverse), (0, 1, 2, 3)), *args)
    assert_close(got, rm.value_and_grad(rnn_ck(None, reverse), (0, 1, 2, 3))(*args))
    expected = on_jax(jax.value_and_grad(lambda *a: rnn_ck_jax(*a, reverse=reverse), (0, 1, 2, 3)), *args)
    assert_close(got, expected)


def test_checkpointed_loops_with_pytrees_counters_and_no_xs(backend, rng):
    x, w = f64(rng, 2), f64(rng, 2)

    def loss(checkpoint):
        def f(x, w):
            def step(c, _):
                return {"h": rm.sin(c["h"] * w) + 0.1, "n": c["n"] + 1}, (c["h"] * w, c["n"])

            c, (ys, ns) = rm.scan(step, {"h": x, "n": rm.asarray(0, "int32")}, length=10, checkpoint=checkpoint)
            return rm.sum(c["h"]) + rm.sum(ys * ys), (c["n"], ns)

        return rm.value_and_grad(f, (0, 1), has_aux=True)

    (value, (n, ns)), grads = run_on(backend, loss(None), x, w)
    for checkpoint in ("step", rm.loops.segments(3), rm.loops.binomial(2)):
        (v, (n2, ns2)), g = run_on(backend, loss(checkpoint), x, w)
        assert int(n2) == 10 and ns2.tolist() == list(range(10)) and ns2.dtype == np.int32
        assert_close((v, g), (value, grads))


def test_segments_is_a_scan_of_checkpointed_scans(rng):
    """23 steps in segments of 5: an outer scan of 4 over checkpoint blocks holding a scan of 5,
    then one checkpoint block with the 3 steps left over."""
    graph = rm.make_graph(rnn_ck(rm.loops.segments(5)))(f64(rng, 3), f64(rng, 23, 2), f64(rng, 3, 3), f64(rng, 2, 3))
    outer = [n for n in graph.nodes if n.op == "scan"]
    assert [n.params["length"] for n in outer] == [4]
    (block,) = [n for n in outer[0].params["body"].nodes if n.op == "checkpoint"]
    assert [n.params["length"] for n in block.params["body"].nodes if n.op == "scan"] == [5]
    (rest,) = [n for n in graph.nodes if n.op == "checkpoint"]
    assert [n.params["length"] for n in rest.params["body"].nodes if n.op == "scan"] == [3]


def test_grad_of_grad_through_a_segmented_loop(rng):
    args = f64(rng, 3), f64(rng, 9, 2), f64(rng, 3, 3, scale=0.5), f64(rng, 2, 3)
    v = f64(rng, 3, 3)

    def hvp(checkpoint):
        return rm.grad(lambda Wh: rm.sum(rm.grad(rnn_ck(checkpoint), 2)(args[0], args[1], Wh, args[3]) * v))

    assert_close(hvp(rm.loops.segments(4))(args[2]), hvp(None)(args[2]))
    with pytest.raises(rm.ArgumentTypeError, match=r"binomial\(2\) cannot be differentiated again.*segments"):
        hvp(rm.loops.binomial(2))(args[2])


@pytest.mark.parametrize("checkpoint", ["step", rm.loops.segments(4), rm.loops.binomial(2)],
                         ids=["step", "segments", "binomial"])
def test_vmap_of_grad_through_a_checkpointed_loop_matches_a_python_loop(rng, checkpoint):
    xs, w = f64(rng, 4, 9, 3), f64(rng, 3)

    def one(x, w):
        c, ys = rm.scan(lambda c, xt: (rm.tanh(c * w + xt), rm.sum(c * xt)), rm.zeros((3,), "float64"), x,
                        checkpoint=checkpoint)
        return rm.sum(c) + rm.sum(ys * ys)

    batched = rm.vmap(rm.grad(one, (0, 1)), in_axes=(0, None))(xs, w)
    for i in range(4):
        assert_close([g[i] for g in batched], rm.grad(one, (0, 1))(xs[i], w))


def _brute_force_advances(T: int, s: int, memo={}) -> float:  # noqa: B006 (a cache)
    """Revolve's recursion: advance m steps, reverse the rest with one snapshot fewer, then the
    first m steps from the first snapshot again."""
    if T <= 1:
        return 0
    if s < 1:
        return float("inf")
    if (T, s) not in memo:
        memo[T, s] = min(m + _brute_force_advances(T - m, s - 1) + _brute_force_advances(m, s) for m in range(1, T))
    return memo[T, s]


def test_binomial_schedule_does_the_fewest_advances():
    from math import comb

    from remat.loops import revolve

    for s in range(1, 7):
        for T in range(1, 70):
            t = next(t for t in range(T + 1) if comb(s + t, t) >= T)
            formula = t * T - (comb(s + t, t - 1) if t else 0)
            table = revolve.actions(T, s)
            assert _brute_force_advances(T, s) == formula == revolve.advances(T, s)
            assert (table[:, 0] == revolve.ADVANCE).sum() == formula, (T, s)
            assert (table[:, 0] == revolve.YOUTURN).sum() == T


def _count_tanh(monkeypatch) -> list[int]:
    from remat.backends import numpy as numpy_backend

    calls = [0]
    tanh = numpy_backend.IMPLS["tanh"]

    def counted(*a, **k):
        calls[0] += 1
        return tanh(*a, **k)

    monkeypatch.setitem(numpy_backend.IMPLS, "tanh", counted)
    return calls


@pytest.mark.parametrize("T", [1, 2, 17, 100])
def test_binomial_gradient_evaluates_the_step_as_often_as_revolve(monkeypatch, rng, T):
    """The step has one tanh, and its VJP needs tanh's output: counting tanh counts evaluations."""
    from remat.loops import revolve

    s = max(1, int(np.ceil(np.log2(T))))
    h0, xs = f64(rng, 3), f64(rng, T, 3)
    calls = _count_tanh(monkeypatch)

    def loss(h0, xs):
        return rm.sum(rm.scan(lambda h, x: (rm.tanh(h * 0.9 + x), None), h0, xs, checkpoint=rm.loops.binomial(s))[0])

    def count(fn) -> int:
        calls[0] = 0
        rm.jit(fn)(h0, xs)
        return calls[0]

    assert count(loss) == T
    # The gradient alone (the loss's cotangent needs no value): Revolve's F(T, s) advances, the
    # first descent's run by the forward sweep, which skips the last step, and T youturns.
    assert count(rm.grad(loss, (0, 1))) == revolve.advances(T, s) + T
    # The value comes from the same sweep, which then also runs the last step: one more.
    assert count(rm.value_and_grad(loss, (0, 1))) == revolve.advances(T, s) + T + 1
    # A loss whose cotangent reads the last carry needs it for the gradient alone too.
    squared = lambda h0, xs: loss(h0, xs) ** 2  # noqa: E731
    optimum = revolve.advances(T, s) + T + 1
    assert count(rm.grad(squared, (0, 1))) == count(rm.value_and_grad(squared, (0, 1))) == optimum
    assert revolve.advances(100, 7) == 255  # about 2.5 T: the O(T log T) of s = ceil(log2 T)


def test_binomial_value_comes_from_the_one_forward_sweep(rng):
    """The forward scan takes the first descent's snapshots and keeps the carry before the last
    step; the backward node resumes from them and takes no c0. Without the value the sweep skips
    its last step."""
    from remat.loops import revolve

    T, s = 17, 3
    h0, xs = f64(rng, 3), f64(rng, T, 3)

    def loss(h0, xs):
        return rm.sum(rm.scan(lambda h, x: (rm.tanh(h * 0.9 + x), None), h0, xs, checkpoint=rm.loops.binomial(s))[0])

    positions, row = revolve.first_descent(T, s)
    table = revolve.actions(T, s)
    assert len(positions) == s and positions[0] == 0 and list(positions) == sorted(set(positions))
    assert row == T - 1 + s and table[row, 0] == revolve.YOUTURN  # 16 advances and 3 snapshots before it
    assert set(table[:row, 0].tolist()) == {revolve.ADVANCE, revolve.TAKESHOT}
    for fn, skips in ((rm.value_and_grad(loss, (0, 1)), False), (rm.grad(loss, (0, 1)), True)):
        graph = rm.make_graph(fn)(h0, xs)
        check(graph)
        (fwd,) = [n for n in graph.nodes if n.op == "scan"]
        (bwd,) = [n for n in graph.nodes if n.op == "scan_binomial"]
        assert fwd.params["snapshots"] == positions and fwd.params.get("skip_last", False) == skips
        assert [v.shape for v in fwd.outputs] == [(3,), (s, 3), (3,)]  # cT, the snapshots, c16
        assert bwd.params["resumed"] and list(bwd.inputs[:2]) == list(fwd.outputs[1:])
        assert graph.inputs[0] not in bwd.inputs  # c0 is snapshot 0, the sweep's
    expected = rm.value_and_grad(lambda h0, xs: rm.sum(rm.scan(lambda h, x: (rm.tanh(h * 0.9 + x), None), h0, xs)[0]),
                                 (0, 1))(h0, xs)
    for backend in ("numpy", "xla"):
        assert_close(rm.jit(rm.value_and_grad(loss, (0, 1)), backend=backend)(h0, xs), expected)
        assert_close(rm.jit(rm.grad(loss, (0, 1)), backend=backend)(h0, xs), expected[1])


def test_saved_residuals_of_a_binomial_scan_are_its_snapshots():
    w = rm.asarray(np.full(3, 0.5))

    def loss(h0, xs):
        h, ys = rm.scan(lambda h, x: (rm.tanh(h * w + x), rm.sum(h)), h0, xs, checkpoint=rm.loops.binomial(2))
        return rm.sum(h * h) + rm.sum(ys)

    rows = rm.memory.saved_residuals(loss, rm.ones(3, "float64"), rm.ones((8, 3), "float64"))
    line = f"test_loops.py:{loss.__code__.co_firstlineno + 1}"
    sweep = [(r.shape, r.provenance) for r in rows if "binomial" in r.provenance]
    assert sweep == [((2, 3), f"snapshots of the loop's carry, for the binomial schedule of the scan at {line}"),
                     ((3,), f"the loop's carry before its last step, for the binomial schedule of the scan at {line}")]
    assert not [r for r in rows if r.shape[:1] == (8,) and r.provenance != "argument xs"]  # nothing per step


def test_binomial_keeps_at_most_s_plus_2_carries(monkeypatch):
    """Count the carries the NumPy loop holds whenever it runs a step: its snapshots (the rows of
    the forward sweep's buffer, which the backward loop owns and overwrites), the current carry
    and the one an advance makes. The evaluator's byte count agrees: s + 2 carries, the cotangent
    and its seed, and three temporaries of the step's VJP, against ~2 T carries for the plain
    loop."""
    from remat.loops import numpy_impl

    n, T = 1 << 14, 100
    s = int(np.ceil(np.log2(T)))
    most = {"forward": 0, "backward": 0}
    run, see = numpy_impl._Binomial._run, numpy_impl._Sweep.see

    def counting(self, graph, args):
        outs = run(self, graph, args)
        made = outs if graph is self.advance else []
        assert all(a.base is self.buffers[0] for kept in self.slots.values() for a in kept)  # in the buffer
        loose = {id(a) for a in [*self.current, *made] if a.base is not self.buffers[0]}
        most["backward"] = max(most["backward"], len(self.buffers[0]) + len(loose))
        return outs

    def sweeping(self, i, carry):
        see(self, i, carry)
        # the buffer, the carry before step i, and the one step i makes (until the next call)
        most["forward"] = max(most["forward"], len(self.buffers[0]) + 2)

    monkeypatch.setattr(numpy_impl._Binomial, "_run", counting)
    monkeypatch.setattr(numpy_impl._Sweep, "see", sweeping)

    def peak(checkpoint, how=rm.grad):
        def loss(h0, w):
            return rm.sum(rm.scan(lambda h, _: (rm.tanh(h * w + 0.5), None), h0, length=T, checkpoint=checkpoint)[0])

        args = np.full(n, 0.1), np.full(n, 0.9)
        compiled = rm.jit(how(loss, (0, 1))).lower(*args).compile()
        compiled(*args)
        return compiled.last_memory.peak / (n * 8)

    # A node's inputs live until it ends, so a row of the sweep's buffer outlives its last use
    # (the schedule frees a snapshot after its last restore): s + 6, not the s + 4 of a backward
    # loop that ran the first descent itself and so ran the forward loop twice for a value.
    assert peak(rm.loops.binomial()) <= s + 6
    assert peak(rm.loops.binomial(), rm.value_and_grad) < s + 6.01  # and the loss, a scalar
    assert most == {"forward": s + 2, "backward": s + 2}
    assert peak(None) >= 2 * T


# ---------------------------------------------------------------- the scanned reference models


@pytest.mark.parametrize("checkpoint", [None, "step", rm.loops.segments(), rm.loops.binomial()],
                         ids=["plain", "step", "segments", "binomial"])
def test_scanned_mlp_model_equals_the_unrolled_model(backend, checkpoint):
    from remat import models

    params = models.residual_mlp_params(6, 4, dtype="float64")
    x = rm.asarray(np.random.default_rng(2).normal(size=(3, 4)), "float64")
    stacked = models.stack_params(params)
    assert [t.shape for t in stacked] == [(6, 4, 4), (6, 4)]
    got = run_on(backend, rm.value_and_grad(lambda s, x: models.scanned_mlp_loss(s, x, checkpoint), (0, 1)), stacked, x)
    value, (grads, gx) = rm.value_and_grad(lambda p, x: models.residual_mlp_loss(p, x), (0, 1))(params, x)
    assert_close(got, (value, (models.stack_params(grads), gx)))


@functools.cache
def _scanned_gpt_references():
    """The GPT-style model's loss and gradients, unrolled (remat, eagerly) and as
    jax.lax.scan + jax.checkpoint (float64), once for every schedule and backend."""
    from remat import models
    from remat.bench import impl_jax
    from remat.bench.config import GPT, inputs

    size = GPT(layers=3, d_model=8, heads=2, seq=5, batch=2, vocab=7)
    params32, data = inputs(size)
    params = rm.tree.map(lambda a: a.astype("float64"), params32)
    stacked = models.stack_gpt_params(params)
    value, grads = rm.value_and_grad(lambda p, d: models.gpt_loss(p, d, "none", size.heads))(params, data)
    with jax.enable_x64(True):
        jax_params = jax.tree_util.tree_map(jnp.asarray, rm.tree.map(np.asarray, stacked))
        expected = jax.jit(jax.value_and_grad(lambda p, d: impl_jax.scanned_gpt_loss(p, d, "step", size.heads)))(
            jax_params, data)
        expected = jax.tree_util.tree_map(np.asarray, expected)
    return size, stacked, data, (value, models.stack_gpt_params(grads)), expected


@pytest.mark.parametrize("checkpoint", [None, "step", rm.loops.segments(), rm.loops.binomial()],
                         ids=["plain", "step", "segments", "binomial"])
def test_scanned_gpt_model_equals_the_unrolled_model_and_jax(backend, checkpoint):
    """The GPT-style model as one scan over its stacked blocks: the loss and the gradients of
    every weight are the unrolled model's and those of jax.lax.scan + jax.checkpoint (float64)."""
    from remat import models

    size, stacked, data, unrolled, expected = _scanned_gpt_references()
    assert stacked["blocks"]["fc"].shape == (3, 8, 32) and stacked["tok"].shape == (7, 8)
    step = rm.value_and_grad(lambda p, d: models.scanned_gpt_loss(p, d, checkpoint, size.heads))
    got = run_on(backend, step, stacked, data)
    assert_close(got, unrolled, rtol=1e-9, atol=1e-12)
    assert_close(got[0], expected[0], rtol=1e-9, atol=1e-12)
    for name in ("tok", "pos", "lnf_g", "lnf_b", "head"):
        assert_close(got[1][name], expected[1][name], rtol=1e-9, atol=1e-12)
    for name, g in got[1]["blocks"].items():
        assert_close(g, expected[1]["blocks"][name], rtol=1e-9, atol=1e-12)


def test_rnn_model_equals_jax(backend, rng):
    from remat import models

    params = models.rnn_params(5, 2, dtype="float64")
    h0, xs = f64(rng, 3, 5), f64(rng, 12, 3, 2)

    def jax_loss(p, h0, xs):
        def cell(h, x):
            h = jnp.tanh(h @ p["wh"] + x @ p["wx"] + p["b"])
            return h, jnp.mean(h * h)

        return jnp.mean(jax.lax.scan(jax.checkpoint(cell), h0, xs)[1])

    expected = on_jax(lambda *a: jax.value_and_grad(jax_loss)(dict(zip(["b", "wh", "wx"], a[:3])), *a[3:]),
                      params, h0, xs)
    for checkpoint in (None, rm.loops.binomial()):
        step = rm.value_and_grad(lambda p, h0, xs, ck=checkpoint: models.rnn_loss(p, h0, xs, ck))
        value, grads = run_on(backend, step, params, h0, xs)
        assert_close((value, grads), expected)


@pytest.mark.parametrize("checkpoint", [None, "step", rm.loops.segments(2), rm.loops.binomial(2)],
                         ids=["plain", "step", "segments", "binomial"])
def test_a_scan_of_no_steps_returns_its_carry_and_empty_ys_as_jax(checkpoint, backend):
    """With segments, length 0 once returned no ys at all (JAX: ys of shape (0, ...))."""
    def f(c, xs):
        return rm.scan(lambda c, x: (c + x, (c * 2, rm.sum(c))), c, xs, checkpoint=checkpoint)

    c, (ys, sums) = rm.jit(f, backend=backend)(rm.ones((2,)), rm.ones((0, 2)))
    jc, (jys, jsums) = jax.lax.scan(lambda c, x: (c + x, (c * 2, jnp.sum(c))), jnp.ones(2), jnp.ones((0, 2)))
    assert (ys.shape, sums.shape) == (jys.shape, jsums.shape) == ((0, 2), (0,))
    np.testing.assert_array_equal(np.asarray(c), np.asarray(jc))
    g = rm.jit(rm.grad(lambda c, xs: rm.sum(f(c, xs)[0])), backend=backend)(rm.ones((2,)), rm.ones((0, 2)))
    np.testing.assert_array_equal(np.asarray(g), [1.0, 1.0])


BRANCHY = {  # a branch that is NaN (or infinite) where it is not taken
    "cond sqrt": (lambda v: rm.cond(v > 0, rm.sqrt, lambda a: a * 2.0, v),
                  lambda v: jax.lax.cond(v > 0, jnp.sqrt, lambda a: a * 2.0, v)),
    "cond log": (lambda v: rm.cond(v > 0, rm.log, lambda a: a, v),
                 lambda v: jax.lax.cond(v > 0, jnp.log, lambda a: a, v)),
    "switch": (lambda v: rm.switch(rm.where(v > 0, 0, 1).astype("int32"), [rm.sqrt, lambda a: a * 3.0], v),
               lambda v: jax.lax.switch(jnp.where(v > 0, 0, 1), [jnp.sqrt, lambda a: a * 3.0], v)),
}


@pytest.mark.parametrize("name", list(BRANCHY))
def test_vmapped_branches_send_no_gradient_from_where_they_are_not_taken(name, backend):
    """Each entry's gradient is its own branch's, as in JAX (the untaken branch's 0 * NaN gave NaN)."""
    f, jf = BRANCHY[name]
    x = np.array([4.0, -1.0, 0.0, 2.0], np.float32)
    for got, want in [(rm.jit(rm.vmap(rm.grad(f)), backend=backend)(x), jax.vmap(jax.grad(jf))(x)),
                      (rm.jit(rm.grad(lambda x: rm.sum(rm.vmap(f)(x))), backend=backend)(x),
                       jax.grad(lambda x: jnp.sum(jax.vmap(jf)(x)))(x)),
                      (rm.jit(rm.vmap(rm.grad(rm.grad(f))), backend=backend)(x), jax.vmap(jax.grad(jax.grad(jf)))(x))]:
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)
        assert np.isfinite(np.asarray(got)).all()


def test_vmapped_branches_mask_what_they_capture_as_well_as_their_operands(backend):
    """A branch that reads tensors from enclosing scope (its function's input, shared weights;
    directly, in a loop, in a nested cond) sends no gradient from the entries that do not take it:
    JAX passes a cond's captures as operands, masked per entry like the others (fuzz seed 1509)."""
    def body(np_):
        sqrt, log, cond, fori = ((rm.sqrt, rm.log, rm.cond, rm.fori_loop) if np_ is rm else
                                 (jnp.sqrt, jnp.log, jax.lax.cond, jax.lax.fori_loop))

        def f(w, x):
            taken = lambda p: sqrt(x * w) + fori(0, 2, lambda i, c: c + log(x), p)  # noqa: E731
            nested = lambda p: cond(np_.max(x) > 1.0, lambda q: q * w, lambda q: log(w - q), p)  # noqa: E731
            return np_.sum(cond(np_.min(x) > 0, taken, nested, x))

        return f

    f, jf = body(rm), body(jnp)
    w = np.array([0.5, 2.0], np.float32)
    xs = np.array([[4.0, 1.0], [-1.0, 0.0], [2.5, 3.0], [0.25, -2.0]], np.float32)
    cases = [(rm.vmap(rm.grad(f, argnums=(0, 1)), in_axes=(None, 0)),
              jax.vmap(jax.grad(jf, argnums=(0, 1)), in_axes=(None, 0))),
             (rm.grad(lambda w, xs: rm.sum(rm.vmap(lambda x: f(w, x))(xs)), argnums=(0, 1)),
              jax.grad(lambda w, xs: jnp.sum(jax.vmap(lambda x: jf(w, x))(xs)), argnums=(0, 1)))]
    for mine, theirs in cases:
        for got, want in zip(rm.jit(mine, backend=backend)(w, xs), theirs(w, xs)):
            np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6)
            assert np.isfinite(np.asarray(got)).all()
