"""rm.checkpoint: captures found by tracing, the block in the graph, and its gradient rule."""

import functools

import numpy as np
import pytest

import remat as rm
from conftest import run_on


def f32(rng, *shape):
    return rm.asarray(rng.normal(size=shape), "float32")


def assert_trees_close(a, b, rtol=1e-5, atol=1e-6):
    la, ta = rm.tree.flatten(a)
    lb, tb = rm.tree.flatten(b)
    assert ta == tb
    for x, y in zip(la, lb):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol)


def both(backend, make_loss, *args, argnums=0):
    """Value and gradient of `make_loss(checkpointed)` with and without checkpoints."""
    with_ck = run_on(backend, rm.value_and_grad(make_loss(True), argnums), *args)
    without = run_on(backend, rm.value_and_grad(make_loss(False), argnums), *args)
    return with_ck, without


# ---------------------------------------------------------------- same values and gradients


@pytest.mark.parametrize("argnums", [0, 1, (0, 1)], ids=["explicit", "captured", "both"])
def test_captured_weights(backend, rng, argnums):
    def make(ck):
        def loss(x, w):
            layer = lambda h: rm.tanh(h @ w)  # noqa: E731
            return rm.sum(rm.checkpoint(layer, x) if ck else layer(x))

        return loss

    a, b = both(backend, make, f32(rng, 4, 3), f32(rng, 3, 3), argnums=argnums)
    assert_trees_close(a, b)


def test_captured_dict_of_parameters(backend, rng):
    params = {"w": f32(rng, 3, 3), "b": f32(rng, 3), "scale": f32(rng)}

    def make(ck):
        def loss(p, x):
            layer = lambda h: p["scale"] * rm.tanh(h @ p["w"] + p["b"])  # noqa: E731
            return rm.sum(rm.checkpoint(layer, x) if ck else layer(x))

        return loss

    (va, ga), (vb, gb) = both(backend, make, params, f32(rng, 4, 3))
    assert set(ga) == {"w", "b", "scale"}
    assert_trees_close((va, ga), (vb, gb))


def test_checkpoint_without_inputs_takes_everything_from_scope(backend, rng):
    def make(ck):
        def loss(x, w):
            body = lambda: rm.sin(x @ w)  # noqa: E731
            return rm.sum(rm.checkpoint(body) if ck else body())

        return loss

    a, b = both(backend, make, f32(rng, 2, 3), f32(rng, 3, 3), argnums=(0, 1))
    assert_trees_close(a, b)


def test_captured_tensor_that_is_not_the_grad_target(backend, rng):
    def make(ck):
        def loss(x, w):
            layer = lambda h: rm.exp(h * w)  # noqa: E731
            return rm.sum(rm.checkpoint(layer, x) if ck else layer(x))

        return loss

    a, b = both(backend, make, f32(rng, 5), f32(rng, 5), argnums=0)
    assert_trees_close(a, b)


def test_body_that_rebinds_a_name_from_enclosing_scope(backend, rng):
    def make(ck):
        def loss(x, w):
            def body(h):
                w2 = w * 2.0  # reads the captured w
                h = h @ w2  # rebinds its argument
                return rm.tanh(h)

            return rm.sum(rm.checkpoint(body, x) if ck else body(x))

        return loss

    a, b = both(backend, make, f32(rng, 2, 3), f32(rng, 3, 3), argnums=(0, 1))
    assert_trees_close(a, b)


class Dense:
    def __init__(self, w, b):
        self.w, self.b = w, b

    def __call__(self, h):
        return rm.tanh(h @ self.w + self.b)

    def apply(self, h):
        return self(h)


def _layer_fn(h, w, scale):
    return scale * rm.sin(h @ w)


CALLABLES = {
    "lambda": lambda w: (lambda h: rm.sin(h @ w)),
    "stored_in_variable": lambda w: (callback := lambda h: rm.sin(h @ w)) and callback,
    "named_function": lambda w: _named(w),
    "partial": lambda w: functools.partial(_layer_fn, w=w, scale=1.0),
    "bound_method": lambda w: Dense(w, rm.zeros((3,))).apply,
    "object_with_call": lambda w: Dense(w, rm.zeros((3,))),
}


def _named(w):
    def layer(h):
        return rm.sin(h @ w)

    return layer


@pytest.mark.parametrize("kind", sorted(CALLABLES))
def test_every_kind_of_callable(backend, rng, kind):
    def make(ck):
        def loss(x, w):
            fn = CALLABLES[kind](w)
            return rm.sum(rm.checkpoint(fn, x) if ck else fn(x))

        return loss

    x, w = f32(rng, 2, 3), f32(rng, 3, 3)
    a, b = both(backend, make, x, w, argnums=(0, 1))
    assert_trees_close(a, b)
    graph = rm.make_graph(make(True))(x, w)
    (block,) = [n for n in graph.nodes if n.op == "checkpoint"]
    assert len(block.inputs) == 2  # x explicit, w captured: found by tracing whatever fn is


def test_nested_checkpoints(backend, rng):
    def make(ck):
        def loss(x, w, v):
            inner = lambda h: rm.sin(h @ v)  # noqa: E731
            outer = lambda h: rm.tanh((rm.checkpoint(inner, h) if ck else inner(h)) @ w)  # noqa: E731
            return rm.sum(rm.checkpoint(outer, x) if ck else outer(x))

        return loss

    args = f32(rng, 2, 3), f32(rng, 3, 3), f32(rng, 3, 3)
    a, b = both(backend, make, *args, argnums=(0, 1, 2))
    assert_trees_close(a, b)
    graph = rm.make_graph(rm.value_and_grad(make(True), (0, 1, 2)))(*args)
    # outer in the forward pass; inner in outer's body and in outer's recomputation
    assert graph.count("checkpoint") == 3
    assert graph.count("barrier") == 2


def test_pytree_inputs_and_outputs(backend, rng):
    def make(ck):
        def loss(x, w):
            def body(pair, scale):
                a, b = pair["a"], pair["b"]
                return {"sum": rm.tanh(a @ w) + b, "prod": (a * b * scale,)}

            inputs = ({"a": x, "b": x * 2.0}, 3)  # the int passes through unchanged
            out = rm.checkpoint(body, *inputs) if ck else body(*inputs)
            return rm.sum(out["sum"]) + rm.sum(out["prod"][0])

        return loss

    a, b = both(backend, make, f32(rng, 3, 3), f32(rng, 3, 3), argnums=(0, 1))
    assert_trees_close(a, b)


def test_grad_of_grad_through_a_checkpoint(backend, rng):
    def make(ck):
        def inner(x, w):
            layer = lambda h: rm.sin(h * w)  # noqa: E731
            return rm.sum(rm.checkpoint(layer, x) if ck else layer(x))

        return lambda x, w: rm.sum(rm.grad(inner)(x, w) ** 2)

    a, b = both(backend, make, f32(rng, 4), f32(rng, 4), argnums=(0, 1))
    assert_trees_close(a, b)


def test_model_whose_layers_are_callable_objects(backend, rng):
    layers = [Dense(f32(rng, 3, 3), f32(rng, 3)) for _ in range(4)]

    def make(ck):
        def loss(params, x):
            h = x
            for w, b in params:
                layer = Dense(w, b)
                h = h + (rm.checkpoint(layer, h) if ck else layer(h))
            return rm.mean(h * h)

        return loss

    params = [(layer.w, layer.b) for layer in layers]
    a, b = both(backend, make, params, f32(rng, 5, 3))
    assert_trees_close(a, b)
    assert isinstance(a[1], list) and isinstance(a[1][0], tuple)


# ---------------------------------------------------------------- the block in the graph


def blocks(graph):
    return [n for n in graph.nodes if n.op == "checkpoint"]


def test_saved_lists_explicit_inputs_first(rng):
    x, w = f32(rng, 2, 3), f32(rng, 3, 3)
    graph = rm.make_graph(lambda x, w: rm.checkpoint(lambda h: rm.tanh(h @ w), x))(x, w)
    (block,) = blocks(graph)
    assert block.params["saved"] == (0,)
    assert block.inputs == (graph.inputs[0], graph.inputs[1])  # (explicit x, captured w)
    body = block.params["body"]
    assert [v.shape for v in body.inputs] == [(2, 3), (3, 3)]


def test_saved_lists_every_input_when_there_are_no_explicit_ones(rng):
    x, w = f32(rng, 2, 3), f32(rng, 3, 3)
    graph = rm.make_graph(lambda x, w: rm.checkpoint(lambda: rm.tanh(x @ w)))(x, w)
    (block,) = blocks(graph)
    assert block.params["saved"] == (0, 1)
    assert len(block.inputs) == 2


def test_a_body_without_captures_has_exactly_the_explicit_inputs(rng):
    x = f32(rng, 2, 3)
    graph = rm.make_graph(lambda x: rm.checkpoint(lambda h, k: rm.tanh(h) * k, x, x * 2.0))(x)
    (block,) = blocks(graph)
    assert block.params["saved"] == (0, 1)
    assert len(block.inputs) == 2
    assert len(block.params["body"].inputs) == 2


def test_indexing_a_captured_tensor_passes_it_whole(rng):
    x, w = f32(rng, 3), f32(rng, 4, 3)
    graph = rm.make_graph(lambda x, w: rm.checkpoint(lambda h: h * w[1], x))(x, w)
    (block,) = blocks(graph)
    assert [v.shape for v in block.inputs] == [(3,), (4, 3)]
    body = block.params["body"]
    assert body.count("slice") == 1  # the indexing happens inside the block


def test_unused_scope_tensors_are_not_captured(rng):
    x, w, unused = f32(rng, 3), f32(rng, 3), f32(rng, 3)

    def fn(x, w, unused):
        also_unused = unused * 2.0  # noqa: F841
        return rm.checkpoint(lambda h: h * w, x)

    (block,) = blocks(rm.make_graph(fn)(x, w, unused))
    assert len(block.inputs) == 2


def test_gradient_graph_recomputes_the_body_behind_a_barrier(rng):
    # tanh's VJP reads its output, so the gradient needs the body's tanh: with a checkpoint it is
    # computed twice (forward block, recomputation), without it once.
    x, w = f32(rng, 4), f32(rng, 4)

    def loss(ck):
        layer = lambda h: rm.tanh(h * w)  # noqa: E731
        return lambda x: rm.sum(rm.checkpoint(layer, x) if ck else layer(x))

    plain = rm.make_graph(rm.value_and_grad(loss(False)))(x)
    ck = rm.make_graph(rm.value_and_grad(loss(True)))(x)
    assert plain.count("tanh") == 1 and plain.count("barrier") == 0
    assert ck.count("tanh") == 2 and ck.count("barrier") == 1
    rm.graph.check(ck)
    forward = rm.make_graph(loss(True))(x)
    assert forward.count("tanh") == 1 and forward.count("barrier") == 0
    # The recomputation is a top-level node reading the barrier's output, not the forward's x.
    (barrier,) = [n for n in ck.nodes if n.op == "barrier"]
    assert barrier.inputs[0] is ck.inputs[0]
    (recompute,) = [n for n in ck.nodes if n.op == "multiply" and barrier.outputs[0] in n.inputs]
    assert ck.nodes.index(recompute) > ck.nodes.index(barrier)


def test_barrier_ties_explicit_inputs_and_cotangent_not_captures(rng):
    x, w = f32(rng, 4), f32(rng, 4)
    loss = lambda x, w: rm.sum(rm.checkpoint(lambda h: rm.tanh(h * w), x))  # noqa: E731
    ck = rm.make_graph(rm.grad(loss, (0, 1)))(x, w)
    (barrier,) = [n for n in ck.nodes if n.op == "barrier"]
    assert len(barrier.inputs) == 2  # x and the cotangent; w is read directly
    assert all(v is not ck.inputs[1] for v in barrier.inputs)


# ---------------------------------------------------------------- the rest of the contract


def test_outside_a_trace_checkpoint_just_computes(rng):
    x, w = f32(rng, 3), f32(rng, 3)
    out = rm.checkpoint(lambda h: h * w, x)
    np.testing.assert_allclose(np.asarray(out), np.asarray(x) * np.asarray(w))


def test_remat_decorator(backend, rng):
    w = f32(rng, 3, 3)

    @rm.remat
    def layer(h):
        return rm.tanh(h @ w)

    x = f32(rng, 2, 3)
    graph = rm.make_graph(lambda x: layer(x))(x)
    assert blocks(graph)[0].params["saved"] == (0,)
    got = run_on(backend, rm.grad(lambda x: rm.sum(layer(x))), x)
    want = run_on(backend, rm.grad(lambda x: rm.sum(rm.tanh(x @ w))), x)
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_non_tensor_leaves_pass_through_unchanged(rng):
    seen = []

    def body(h, cfg):
        seen.append(cfg)
        return h * cfg["k"]

    graph = rm.make_graph(lambda x: rm.checkpoint(body, x, {"k": 3, "name": "a", "none": None}))(f32(rng, 2))
    assert seen == [{"k": 3, "name": "a", "none": None}]
    assert len(blocks(graph)[0].inputs) == 1


def test_body_returning_a_non_tensor_is_a_type_error(rng):
    with pytest.raises(TypeError, match=r"checkpoint: the body .* returned a str"):
        rm.make_graph(lambda x: rm.checkpoint(lambda h: "oops", x))(f32(rng, 2))


def test_arity_mismatch_is_a_type_error(rng):
    with pytest.raises(TypeError, match="checkpoint: .* cannot be called with 2 inputs"):
        rm.make_graph(lambda x: rm.checkpoint(lambda h: h, x, x))(f32(rng, 2))


def test_non_callable_body_is_a_type_error(rng):
    with pytest.raises(TypeError, match="expected a callable"):
        rm.checkpoint(3, f32(rng, 2))


def test_forward_block_keeps_none_of_its_internals(rng):
    # The block's body makes four (64, 64) float32 intermediates; none outlives the block.
    x, w = f32(rng, 64, 64), f32(rng, 64, 64)

    def fn(x):
        return rm.checkpoint(lambda h: rm.tanh(rm.sin(rm.exp(h @ w))) * 2.0, x)

    compiled = rm.jit(fn).lower(x).compile()
    compiled(x)
    memory = compiled.last_memory
    assert memory.live == 64 * 64 * 4  # only the output is alive afterwards
    assert memory.peak <= 2 * 64 * 64 * 4  # one input and one output of an elementwise op at a time


def test_grad_passes_keyword_arguments_through(backend, rng):
    x, w = f32(rng, 3), f32(rng, 3)

    def loss(x, *, w, square):
        y = rm.checkpoint(lambda h: rm.sin(h * w), x)
        return rm.sum(y * y if square else y)

    got = rm.grad(loss)(x, w=w, square=True)
    want = 2 * np.sin(np.asarray(x) * np.asarray(w)) * np.cos(np.asarray(x) * np.asarray(w)) * np.asarray(w)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    jitted = run_on(backend, lambda x, w: rm.grad(loss)(x, w=w, square=False), x, w)
    np.testing.assert_allclose(jitted, np.cos(np.asarray(x) * np.asarray(w)) * np.asarray(w), rtol=1e-5)


def test_jax_arrays_are_explicit_inputs_like_tensors(rng):
    import jax.numpy as jnp

    x = jnp.asarray(np.asarray(f32(rng, 3)))
    graph = rm.make_graph(lambda w: rm.checkpoint(lambda h, k: h * w * k, x, 2))(f32(rng, 3))
    (block,) = blocks(graph)
    assert block.params["saved"] == (0,) and len(block.inputs) == 2  # x explicit, w captured; 2 passes through
