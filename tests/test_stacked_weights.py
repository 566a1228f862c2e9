"""Layers reading their weights from one stacked tensor (`W[i]`) get the list-of-weights gradient,
written once into one buffer: the slices' cotangents are laid side by side (remat/accumulate.py),
not padded to full size one by one and summed."""

from __future__ import annotations

import collections
import re

import numpy as np
import pytest

import remat as rm
from remat import models

L, D, B = 6, 5, 3


def _stacked_loss(stacked, x):
    w, b = stacked
    h = x
    for i in range(w.shape[0]):
        h = h + rm.tanh(h @ w[i] + b[i])
    return rm.mean(h * h)


def _setup(depth=L):
    params = models.residual_mlp_params(depth, D, dtype="float64")
    rng = np.random.default_rng(1)
    params = [(w, rm.asarray(rng.normal(size=D), "float64")) for w, _ in params]
    x = rm.asarray(rng.normal(size=(B, D)), "float64")
    return params, models.stack_params(params), x


def test_stacked_gradient_equals_the_list_gradient(backend):
    params, stacked, x = _setup()
    g_list = rm.jit(rm.grad(models.residual_mlp_loss), backend=backend)(params, x)
    g_stacked = rm.jit(rm.grad(_stacked_loss), backend=backend)(stacked, x)
    w_list = np.stack([np.asarray(w) for w, _ in g_list])
    b_list = np.stack([np.asarray(b) for _, b in g_list])
    np.testing.assert_allclose(np.asarray(g_stacked[0]), w_list, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(np.asarray(g_stacked[1]), b_list, rtol=1e-12, atol=1e-14)
    assert g_stacked[0].shape == (L, D, D) and g_stacked[1].shape == (L, D)


def test_stacked_gradient_has_no_per_layer_full_size_pad():
    _, stacked, x = _setup(depth=32)
    graph = rm.make_graph(rm.grad(_stacked_loss))(stacked, x)
    full = {(32, D, D), (32, D)}
    pads = [n for n in graph.nodes if n.op == "pad" and n.outputs[0].shape in full]
    adds = [n for n in graph.nodes if n.op == "add" and n.outputs[0].shape in full]
    concats = [n for n in graph.nodes if n.op == "concat" and n.outputs[0].shape in full]
    assert pads == [] and adds == []
    assert len(concats) == 2 and all(len(n.inputs) == 32 for n in concats)  # one for w, one for b
    assert graph.outputs[0] is concats[0].outputs[0] or graph.outputs[0] is concats[1].outputs[0]


def test_stacked_gradient_costs_the_list_gradients_memory_on_numpy():
    params, stacked, x = _setup(depth=16)
    p_list = rm.memory.profile(models.residual_mlp_loss, params, x, argnums=0)
    p_stacked = rm.memory.profile(_stacked_loss, stacked, x, argnums=0)
    grads = 16 * (D * D + D) * 8
    # Both hold the activations and the gradient; the stacked one also its pieces until they are
    # joined, one gradient's worth more at most, where pads summed one by one held two full ones.
    assert p_stacked.peak_bytes <= p_list.peak_bytes + grads


def _grad(fn, w):
    return np.asarray(rm.grad(fn)(w))


def test_gaps_repeats_and_ends_of_the_sliced_axis():
    w = rm.asarray(np.arange(24.0).reshape(6, 4), "float64")
    # rows 1 and 3 read (row 3 twice), rows 0, 2, 4, 5 never: zeros there
    fn = lambda w: rm.sum(w[1] * 2.0) + rm.sum(w[3] * w[3]) + rm.sum(w[3])  # noqa: E731
    want = np.zeros((6, 4))
    want[1] = 2.0
    want[3] = 2 * np.asarray(w)[3] + 1
    np.testing.assert_array_equal(_grad(fn, w), want)
    graph = rm.make_graph(rm.grad(fn))(w)
    assert [n.op for n in graph.nodes].count("concat") == 1


def test_slices_of_ranges_and_of_another_axis():
    w = rm.asarray(np.arange(30.0).reshape(5, 6), "float64")
    fn = lambda w: rm.sum(w[:, 0:2] * 3.0) + rm.sum(w[:, 4:6] ** 2)  # noqa: E731
    want = np.zeros((5, 6))
    want[:, 0:2] = 3.0
    want[:, 4:6] = 2 * np.asarray(w)[:, 4:6]
    np.testing.assert_array_equal(_grad(fn, w), want)


@pytest.mark.parametrize("fn", [
    lambda w: rm.sum(w[0:3] * 2.0) + rm.sum(w[2:5] * 3.0),  # overlapping ranges
    lambda w: rm.sum(w[::2] * 2.0) + rm.sum(w[1] * 3.0),  # a strided slice
    lambda w: rm.sum(w[1, 2:4] * 2.0) + rm.sum(w[3, 0:2] * 3.0),  # two axes cut
    lambda w: rm.sum(w[1] * 2.0) + rm.sum(w * w) + rm.sum(w[4] * 3.0),  # a dense cotangent too
], ids=["overlap", "strided", "two-axes", "dense"])
def test_slices_that_cannot_be_laid_side_by_side_keep_their_gradient(fn):
    w = np.arange(30.0).reshape(5, 6)
    got = _grad(fn, rm.asarray(w, "float64"))
    eps = 1e-6
    want = np.zeros_like(w)
    for idx in np.ndindex(*w.shape):
        d = np.zeros_like(w)
        d[idx] = eps
        want[idx] = (float(fn(rm.asarray(w + d, "float64"))) - float(fn(rm.asarray(w - d, "float64")))) / (2 * eps)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_second_order_through_combined_slices(backend):
    w = rm.asarray(np.linspace(-1, 1, 12).reshape(4, 3), "float64")

    def f(w):
        return rm.sum(rm.tanh(w[0]) * w[1]) + rm.sum(w[2] ** 3) + rm.sum(w[3])

    def gsum(w):
        return rm.sum(rm.grad(f)(w) ** 2)

    got = np.asarray(rm.jit(rm.grad(gsum), backend=backend)(w))
    import jax
    import jax.numpy as jnp

    with jax.enable_x64(True):
        jf = lambda w: jnp.sum(jnp.tanh(w[0]) * w[1]) + jnp.sum(w[2] ** 3) + jnp.sum(w[3])  # noqa: E731
        want = np.asarray(jax.grad(lambda w: jnp.sum(jax.grad(jf)(w) ** 2))(jnp.asarray(np.asarray(w))))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("where", ["outside", "inside"])
def test_stacked_weights_sliced_outside_or_inside_checkpoints(backend, where):
    _, stacked, x = _setup()

    def loss(stacked, x):
        w, b = stacked
        h = x
        for i in range(L):
            if where == "outside":
                wi, bi = w[i], b[i]
                h = rm.checkpoint(lambda h, wi=wi, bi=bi: h + rm.tanh(h @ wi + bi), h)
            else:  # the body slices the captured w; its gradient takes the slice outside (autodiff.py)
                h = rm.checkpoint(lambda h, i=i: h + rm.tanh(h @ w[i] + b[i]), h)
        return rm.mean(h * h)

    got = rm.jit(rm.grad(loss), backend=backend)(stacked, x)
    want = rm.jit(rm.grad(_stacked_loss), backend=backend)(stacked, x)
    np.testing.assert_allclose(np.asarray(got[0]), np.asarray(want[0]), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(np.asarray(got[1]), np.asarray(want[1]), rtol=1e-12, atol=1e-14)
    graph = rm.make_graph(rm.grad(loss))(stacked, x)
    full = [n.op for n in graph.walk() if n.outputs and n.outputs[0].shape in {(L, D, D), (L, D)}]
    assert sorted(full) == ["concat", "concat"]
    backward = [n for n in graph.nodes if n.op == "checkpoint" and n.params.get("differentiated")]
    assert len(backward) == L and all(v.shape != (L, D, D) for n in backward for v in n.inputs + n.outputs)


# ---------------------------------------------------------------- on XLA: the list model's executables


def _layered(stacked, x):
    w, b = stacked
    layers = [lambda h, wi=w[i], bi=b[i]: h + rm.tanh(h @ wi + bi) for i in range(w.shape[0])]
    return rm.mean(rm.square(models.checkpointed(layers, x, "layer")))


def test_xla_slices_stacked_arguments_and_joins_gradients_on_the_host():
    _, stacked, x = _setup(depth=8)
    lowered = rm.jit(rm.grad(_stacked_loss), backend="xla").lower(stacked, x)
    text = lowered.as_text()
    assert "stablehlo.slice" not in text and "stablehlo.concatenate" not in text
    assert "gather" not in text
    compiled = lowered.compile()
    g = compiled(stacked, x)
    assert isinstance(g[0]._value, np.ndarray) and g[0].shape == (8, D, D)  # joined by NumPy
    assert compiled.last_memory is not None


def test_stacked_and_list_models_compile_the_same_program():
    params, stacked, x = _setup(depth=8)
    step = rm.value_and_grad(lambda p, x: models.residual_mlp_loss(p, x, "layer"))
    as_list = rm.jit(step, backend="xla").lower(params, x)
    as_stack = rm.jit(rm.value_and_grad(_layered), backend="xla").lower(stacked, x)
    # The same program, its arguments in another order; W[i] arrives as a (1, D, D) slice, reshaped.
    ops = lambda text: collections.Counter(re.findall(r"stablehlo\.(?!reshape)\w+", text))  # noqa: E731
    assert ops(as_stack.as_text()) == ops(as_list.as_text())
    as_list, as_stack = as_list.compile(), as_stack.compile()
    got, want = as_stack(stacked, x), as_list(params, x)
    np.testing.assert_allclose(float(got[0]), float(want[0]), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(got[1][0]), np.stack([np.asarray(w) for w, _ in want[1]]), rtol=1e-12)


def test_a_stacked_jax_array_is_sliced_in_place():
    _, stacked, x = _setup(depth=4)
    import jax
    import jax.numpy as jnp

    with jax.enable_x64(True):  # float64 JAX arrays
        on_device = tuple(rm.asarray(jnp.asarray(np.asarray(a))) for a in stacked)
    assert on_device[0]._value.dtype == np.float64
    f = rm.jit(rm.grad(_stacked_loss), backend="xla")
    got, want = f(on_device, x), f(stacked, x)
    np.testing.assert_array_equal(np.asarray(got[0]), np.asarray(want[0]))


def _read_whole_too(stacked, x):
    return _stacked_loss(stacked, x) + rm.sum(stacked[0] ** 2) * 1e-3  # its gradient reads w whole


def test_a_stacked_argument_also_read_whole_reaches_xla_whole_and_sliced_on_the_host():
    # W is read whole too (as by weight decay, or an optimizer's update in the step): XLA gets it
    # whole for that read and its slices for the layers'; the layers' kernels are the list model's.
    _, stacked, x = _setup(depth=6)
    lowered = rm.jit(rm.grad(_read_whole_too), backend="xla").lower(stacked, x)
    graph = lowered._program.graph
    assert [n.op for n in graph.nodes].count("slice") == 0 and "take" not in [n.op for n in graph.nodes]
    assert [v.shape for v in graph.inputs] == [(6, D, D)] + [(1, D, D)] * 6 + [(1, D)] * 6 + [(B, D)]
    got = lowered.compile()(stacked, x)
    want = rm.jit(rm.grad(_read_whole_too))(stacked, x)
    np.testing.assert_allclose(np.asarray(got[0]), np.asarray(want[0]), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(np.asarray(got[1]), np.asarray(want[1]), rtol=1e-12, atol=1e-14)


def test_a_donated_stacked_argument_also_read_whole_is_sliced_at_run_time_offsets():
    # Donated, W is not sliced on the host (XLA may write its buffer, and the slices would be views
    # of it): its slices become takes at array-constant indices, which reach XLA as arguments, not
    # as constants of the program's text (one kernel for every layer, not one each).
    _, stacked, x = _setup(depth=6)
    want = rm.jit(rm.grad(_read_whole_too))(stacked, x)
    lowered = rm.jit(rm.grad(_read_whole_too), backend="xla", donate_argnums=0).lower(stacked, x)
    ops = [n.op for n in lowered._program.graph.nodes]
    assert ops.count("take") == 6 and "slice" not in ops  # w's; b is sliced on the host
    main = re.search(r"func\.func public @main\(([^)]*)\)", lowered.as_text()).group(1)
    assert main.count("tensor<1xi32>") == 6
    got = lowered.compile()(stacked, x)
    np.testing.assert_allclose(np.asarray(got[0]), np.asarray(want[0]), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(np.asarray(got[1]), np.asarray(want[1]), rtol=1e-12, atol=1e-14)


def test_the_slices_of_the_stacked_idiom_each_pass_takes():
    from remat import stacked

    def reads(w):
        return w[1], w[:, 2:4], w[0:2, 1], w[::2], w[3:4:2], w[1:1]

    g = rm.make_graph(reads)(rm.ones((4, 5)))
    slices = [n for n in g.nodes if n.op == "slice"]
    assert [stacked.cut_axis(n) for n in slices] == [0, 1, None, 0, 0, 0]
    assert [stacked.unit_step_cut(n) for n in slices] == [0, 1, None, None, None, None]  # host_slices, accumulate
    assert [stacked.one_element_cut(n) for n in slices] == [0, None, None, None, 0, None]  # xla_offsets
    assert stacked.shared_cut(slices[:1] * 2) == 0 and stacked.shared_cut(slices[:2]) is None
    read_by = stacked.readers(g)[g.inputs[0]]
    assert read_by == slices and stacked.only_sliced(read_by)  # checkpoint's hoisting: any slices
    assert not stacked.only_sliced([]) and not stacked.only_sliced([n for n in g.nodes if n.op != "slice"])
