"""Named vectorized axes, vmap, and per-entry gradients, through checkpoints."""

import numpy as np
import pytest

import remat as rm
from conftest import run_on
from remat.core import NOT_DIFFERENTIABLE


def arr(rng, *shape):
    return rng.normal(size=shape).astype(np.float32)


def loop(fn, *stacked):
    """fn applied to entry i of every stacked argument, stacked again."""
    return np.stack([np.asarray(fn(*(rm.asarray(a[i]) for a in stacked))) for i in range(len(stacked[0]))])


def devec(t):
    return np.asarray(rm.devectorize(t))


# One row per op: (name, fn over inner tensors, inner shapes of the vectorized arguments).
OPS = [
    ("add", lambda x, y: x + y, [(3,), (3,)]),
    ("add_broadcast", lambda x, y: x + y, [(2, 3), (3,)]),
    ("subtract", rm.subtract, [(3,), (3,)]),
    ("multiply_scalar", lambda x: x * 2.0, [(3,)]),
    ("divide", rm.divide, [(3,), (3,)]),
    ("pow", lambda x: rm.pow(rm.abs(x) + 1.0, 1.5), [(3,)]),
    ("maximum", rm.maximum, [(3,), (3,)]),
    ("where", lambda x, y: rm.where(x > y, x, y), [(3,), (3,)]),
    ("unary", lambda x: rm.tanh(rm.exp(rm.sin(x)) + rm.cos(x) + rm.sqrt(rm.abs(x)) + rm.log1p(rm.abs(x))), [(4,)]),
    ("log_sign_neg", lambda x: rm.log(rm.abs(x) + 1.0) * rm.sign(x) - x, [(4,)]),
    ("compare_logic", lambda x, y: rm.logical_or(rm.logical_not(x < y), x == y).astype("float32"), [(3,), (3,)]),
    ("sum_axis", lambda x: rm.sum(x, axis=1), [(2, 3)]),
    ("sum_all_keepdims", lambda x: rm.sum(x, keepdims=True), [(2, 3)]),
    ("mean_prod", lambda x: rm.mean(x, axis=0) + rm.prod(x, axis=0), [(2, 3)]),
    ("max_min", lambda x: rm.max(x, axis=-1) - rm.min(x, axis=0), [(3, 3)]),
    ("argmax_argmin", lambda x: rm.argmax(x, axis=1) + rm.argmin(x), [(2, 3)]),
    ("reshape", lambda x: rm.reshape(x, (3, 2)), [(2, 3)]),
    ("transpose", lambda x: rm.transpose(x), [(2, 3)]),
    ("permute_dims", lambda x: rm.permute_dims(x, (2, 0, 1)), [(2, 3, 4)]),
    ("expand_squeeze", lambda x: rm.squeeze(rm.expand_dims(x, 1), 1), [(2, 3)]),
    ("broadcast_to", lambda x: rm.broadcast_to(x, (4, 3)), [(3,)]),
    ("concat", lambda x, y: rm.concat([x, y], axis=1), [(2, 3), (2, 2)]),
    ("stack", lambda x, y: rm.stack([x, y], axis=0), [(3,), (3,)]),
    ("getitem", lambda x: x[1:, ::-1][None, ..., 0], [(3, 4)]),
    ("getitem_int", lambda x: x[1], [(3, 4)]),
    ("pad_flip", lambda x: rm.flip(rm.pad(x, (1,), (2,), (1,)), 0), [(3,)]),
    ("matmul", lambda a, b: a @ b, [(2, 3), (3, 4)]),
    ("matmul_vector", lambda a, b: a @ b, [(3,), (3, 2)]),
    ("tensordot", lambda a, b: rm.tensordot(a, b, axes=([1, 2], [0, 1])), [(2, 3, 4), (3, 4, 2)]),
    ("astype", lambda x: rm.astype(x, "float64"), [(3,)]),
    ("clip_square", lambda x: rm.clip(rm.square(x), 0.1, 0.5), [(3,)]),
    ("stop_gradient", rm.stop_gradient, [(3,)]),
    ("softmax", lambda x: rm.nn.softmax(x), [(2, 4)]),
    ("layer_norm", lambda x: rm.nn.layer_norm(x), [(2, 4)]),
]


@pytest.mark.parametrize("name,fn,shapes", OPS, ids=[o[0] for o in OPS])
def test_op_on_vectorized_inputs_equals_a_loop(rng, name, fn, shapes):
    stacked = [arr(rng, 5, *s) for s in shapes]
    got = fn(*(rm.vectorize(rm.asarray(a), "batch") for a in stacked))
    assert got.vectorized_axes == (("batch", 5),)
    np.testing.assert_allclose(devec(got), loop(fn, *stacked), rtol=1e-5, atol=1e-6)
    traced = rm.jit(lambda *xs: fn(*(rm.vectorize(x, "batch") for x in xs)))(*stacked)
    np.testing.assert_allclose(devec(traced), loop(fn, *stacked), rtol=1e-5, atol=1e-6)


def test_only_some_operands_vectorized(rng):
    a, w = arr(rng, 4, 3), arr(rng, 3, 2)
    got = rm.vectorize(rm.asarray(a), "b") @ rm.asarray(w)
    np.testing.assert_allclose(devec(got), a @ w, rtol=1e-5)


def test_take_with_vectorized_indices_and_operand(rng):
    x = arr(rng, 4, 5, 3)
    idx = rng.integers(-5, 5, size=(4, 2)).astype(np.int32)
    fn = lambda x, i: rm.take(x, i, axis=0)  # noqa: E731
    got = fn(rm.vectorize(rm.asarray(x), "b"), rm.vectorize(rm.asarray(idx), "b"))
    want = np.stack([np.take(x[k], idx[k], axis=0) for k in range(4)])
    np.testing.assert_allclose(devec(got), want)
    idx1 = idx % 3
    got1 = rm.take(rm.vectorize(rm.asarray(x), "b"), rm.vectorize(rm.asarray(idx1), "b"), axis=1)
    np.testing.assert_allclose(devec(got1), np.stack([np.take(x[k], idx1[k], axis=1) for k in range(4)]))
    # Only the indices vectorized: each entry gathers from the same table.
    got2 = rm.take(rm.asarray(x[0]), rm.vectorize(rm.asarray(idx), "b"), axis=0)
    np.testing.assert_allclose(devec(got2), np.stack([np.take(x[0], idx[k], axis=0) for k in range(4)]))


def test_index_add_with_vectorized_indices(rng):
    x, upd = arr(rng, 3, 4, 2), arr(rng, 3, 5, 2)
    idx = rng.integers(0, 4, size=(3, 5)).astype(np.int32)
    got = rm.index_add(rm.vectorize(rm.asarray(x), "b"), rm.vectorize(rm.asarray(idx), "b"),
                       rm.vectorize(rm.asarray(upd), "b"), axis=0)
    want = x.copy()
    for k in range(3):
        np.add.at(want[k], idx[k], upd[k])
    np.testing.assert_allclose(devec(got), want, rtol=1e-6)


def test_two_names_broadcast_against_each_other(rng):
    a, b = arr(rng, 3, 2), arr(rng, 4, 2)
    out = rm.vectorize(rm.asarray(a), "i") * rm.vectorize(rm.asarray(b), "j")
    assert out.vectorized_axes == (("i", 3), ("j", 4)) and out.shape == (2,)
    np.testing.assert_allclose(devec(out), a[:, None, :] * b[None, :, :], rtol=1e-6)


def test_stacked_names_and_partial_devectorize(rng):
    a = arr(rng, 3, 4, 2)
    v = rm.vectorize(rm.vectorize(rm.asarray(a), "i"), "j")
    assert v.vectorized_axes == (("i", 3), ("j", 4)) and v.shape == (2,)
    inner = rm.devectorize(v, "i")
    assert inner.vectorized_axes == (("j", 4),) and inner.shape == (3, 2)
    np.testing.assert_allclose(devec(inner), a.transpose(1, 0, 2))


def test_mismatched_sizes_name_the_axis(rng):
    a = rm.vectorize(rm.asarray(arr(rng, 3, 2)), "batch")
    b = rm.vectorize(rm.asarray(arr(rng, 4, 2)), "batch")
    with pytest.raises(ValueError, match="vectorized axis 'batch' has size 3 in one operand and 4"):
        a + b


def test_vectorize_errors():
    with pytest.raises(ValueError, match="0-d"):
        rm.vectorize(rm.asarray(1.0), "a")
    v = rm.vectorize(rm.ones((2, 2)), "a")
    with pytest.raises(ValueError, match="already vectorized over 'a'"):
        rm.vectorize(v, "a")
    with pytest.raises(ValueError, match="not vectorized over 'b'"):
        rm.devectorize(v, "b")



def test_an_op_without_a_batch_rule_names_itself_under_vmap(declare_op):
    from remat.trace import bind

    op = declare_op("test_vectorize_unbatchable", lambda x: x, NOT_DIFFERENTIABLE, batch=None)
    with pytest.raises(rm.TracerError, match="test_vectorize_unbatchable has no batch rule, so it cannot take "
                                             "operands vectorized over 'vmap"):
        rm.vmap(lambda x: bind(op, x))(rm.ones((3, 2)))


def test_vectorized_constant_built_inside_a_traced_function(rng):
    table = arr(rng, 3, 2)

    def fn(x):
        return x * rm.vectorize(rm.asarray(table), "k")

    out = rm.jit(fn)(rm.ones((2,)))
    assert out.vectorized_axes == (("k", 3),)
    np.testing.assert_allclose(devec(out), table)


# ---------------------------------------------------------------- transformations


def test_vectorized_tensors_through_jit_and_grad(backend, rng):
    x = rm.vectorize(rm.asarray(arr(rng, 4, 3)), "b")
    out = rm.jit(lambda x: rm.sin(x) * 2.0, backend=backend)(x)
    assert out.vectorized_axes == (("b", 4),)
    np.testing.assert_allclose(devec(out), np.sin(devec(x)) * 2.0, rtol=1e-5)
    g = run_on(backend, rm.grad(lambda x: rm.sum(rm.sin(x))), x)  # per-entry gradient: cos(x)
    np.testing.assert_allclose(g, np.cos(devec(x)), rtol=1e-5)


def test_vmap_in_axes_out_axes_and_none(rng):
    a, w = arr(rng, 3, 5), arr(rng, 5, 2)
    f = lambda x, w: x @ w  # noqa: E731
    np.testing.assert_allclose(rm.vmap(f, in_axes=(0, None))(a, w), a @ w, rtol=1e-5)
    np.testing.assert_allclose(rm.vmap(f, in_axes=(1, None))(a.T.copy(), w), a @ w, rtol=1e-5)
    np.testing.assert_allclose(rm.vmap(f, in_axes=(0, None), out_axes=1)(a, w), (a @ w).T, rtol=1e-5)
    ws = arr(rng, 3, 5, 2)
    np.testing.assert_allclose(rm.vmap(f)(a, ws), np.einsum("bi,bij->bj", a, ws), rtol=1e-5)
    # A result that does not depend on the mapped argument is broadcast.
    np.testing.assert_allclose(rm.vmap(lambda x, w: w, in_axes=(0, None))(a, w), np.stack([w] * 3))
    # Pytree arguments with a pytree of in_axes.
    out = rm.vmap(lambda p: p["x"] @ p["w"], in_axes=({"x": 0, "w": None},))({"x": a, "w": w})
    np.testing.assert_allclose(out, a @ w, rtol=1e-5)
    nested = rm.vmap(rm.vmap(lambda x, y: x * y, in_axes=(0, None)), in_axes=(None, 0))(a[0], a[:, 1])
    np.testing.assert_allclose(nested, a[:, 1][:, None] * a[0][None, :], rtol=1e-6)


def test_vmap_errors(rng):
    with pytest.raises(ValueError, match="share one size"):
        rm.vmap(lambda x, y: x + y)(arr(rng, 3), arr(rng, 4))
    with pytest.raises(ValueError, match="no argument is mapped"):
        rm.vmap(lambda x: x, in_axes=None)(arr(rng, 3))
    with pytest.raises(ValueError, match="in_axes"):
        rm.vmap(lambda x, y: x, in_axes=(0,))(arr(rng, 3), arr(rng, 3))


def test_per_example_gradients_of_a_linear_model(backend, rng):
    xs, ys, w = arr(rng, 6, 3), arr(rng, 6), arr(rng, 3)

    def loss(w, x, y):
        return (rm.sum(x * w) - y) ** 2

    got = run_on(backend, rm.grad(loss), w, rm.vectorize(rm.asarray(xs), "ex"), rm.vectorize(rm.asarray(ys), "ex"))
    want = np.stack([np.asarray(rm.grad(loss)(w, xs[i], ys[i])) for i in range(6)])
    np.testing.assert_allclose(got, want, rtol=1e-5)
    via_vmap = rm.vmap(rm.grad(loss), in_axes=(None, 0, 0))(w, xs, ys)
    np.testing.assert_allclose(via_vmap, want, rtol=1e-5)


def test_input_vectorized_over_the_output_name_is_matched_not_crossed(rng):
    xs, w = arr(rng, 4, 3), arr(rng, 3)
    gx, gw = rm.grad(lambda x, w: rm.sum(rm.sin(x * w)), (0, 1))(rm.vectorize(rm.asarray(xs), "b"), w)
    assert gx.vectorized_axes == (("b", 4),) and gx.shape == (3,)
    assert gw.vectorized_axes == (("b", 4),) and gw.shape == (3,)
    np.testing.assert_allclose(devec(gx), np.cos(xs * w) * w, rtol=1e-5)
    np.testing.assert_allclose(devec(gw), np.cos(xs * w) * xs, rtol=1e-5)


# ---------------------------------------------------------------- through checkpoints


def test_checkpoint_with_a_captured_vectorized_weight(backend, rng):
    ws, x = arr(rng, 4, 3, 3), arr(rng, 2, 3)

    def loss(w, x, ck):
        layer = lambda h: rm.tanh(h @ w)  # noqa: E731
        return rm.sum(rm.checkpoint(layer, x) if ck else layer(x))

    wv = rm.vectorize(rm.asarray(ws), "model")
    value = run_on(backend, lambda w, x: loss(w, x, True), wv, x)
    gw, gx = run_on(backend, rm.grad(lambda w, x: loss(w, x, True), (0, 1)), wv, x)
    np.testing.assert_allclose(value, loop(lambda w: loss(w, rm.asarray(x), False), ws), rtol=1e-5)
    want_gw = loop(lambda w: rm.grad(lambda w: loss(w, rm.asarray(x), False))(w), ws)
    want_gx = loop(lambda w: rm.grad(lambda x: loss(w, x, False))(rm.asarray(x)), ws)
    np.testing.assert_allclose(gw, want_gw, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(gx, want_gx, rtol=1e-4, atol=1e-6)
    graph = rm.make_graph(lambda w, x: loss(w, x, True))(wv, x)
    (block,) = [n for n in graph.nodes if n.op == "checkpoint"]
    assert [v.shape for v in block.inputs] == [(2, 3), (4, 3, 3)]  # the captured weight keeps its axis


def test_checkpoint_with_a_vectorized_constant_built_inside(backend, rng):
    scales, x = arr(rng, 3, 2), arr(rng, 2)

    def loss(x, ck):
        body = lambda h: rm.sin(h * rm.vectorize(rm.asarray(scales), "s"))  # noqa: E731
        return rm.sum(rm.checkpoint(body, x) if ck else body(x))

    g = run_on(backend, rm.grad(lambda x: loss(x, True)), x)
    want = np.stack([np.cos(x * s) * s for s in scales])
    np.testing.assert_allclose(g, want, rtol=1e-5)
    np.testing.assert_allclose(run_on(backend, lambda x: loss(x, True), x), np.sin(x * scales).sum(1), rtol=1e-5)


def test_checkpoint_with_a_vectorized_explicit_input_and_plain_captured_weight(backend, rng):
    xs, w = arr(rng, 5, 3), arr(rng, 3, 3)

    def loss(x, w, ck):
        layer = lambda h: rm.tanh(h @ w)  # noqa: E731
        return rm.sum(rm.checkpoint(layer, x) if ck else layer(x))

    xv = rm.vectorize(rm.asarray(xs), "ex")
    gx, gw = run_on(backend, rm.grad(lambda x, w: loss(x, w, True), (0, 1)), xv, w)
    want_gx = loop(lambda x: rm.grad(lambda x: loss(x, rm.asarray(w), False))(x), xs)
    want_gw = loop(lambda x: rm.grad(lambda w: loss(x, w, False))(rm.asarray(w)), xs)
    np.testing.assert_allclose(gx, want_gx, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(gw, want_gw, rtol=1e-4, atol=1e-6)


def test_vmap_of_grad_through_a_checkpoint(backend, rng):
    xs, w = arr(rng, 4, 3), arr(rng, 3)

    def loss(w, x):
        return rm.sum(rm.checkpoint(lambda h: rm.sin(h * w) ** 2.0, x))

    got = run_on(backend, rm.vmap(rm.grad(loss), in_axes=(None, 0)), w, xs)
    want = np.stack([np.asarray(rm.grad(lambda w, x=x: rm.sum(rm.sin(rm.asarray(x) * w) ** 2.0))(w)) for x in xs])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_like_constructors_keep_vectorized_axes():
    v = rm.vectorize(rm.ones((3, 2), "float64"), "b")
    z, o = rm.zeros_like(v), rm.ones_like(v, dtype="int32")
    assert z.vectorized_axes == o.vectorized_axes == (("b", 3),)
    assert z.shape == o.shape == (2,) and z.dtype == np.float64 and o.dtype == np.int32
    np.testing.assert_array_equal(devec(o), np.ones((3, 2)))
