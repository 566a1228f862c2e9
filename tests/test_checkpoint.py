"""rm.checkpoint: captures found by tracing, the block in the graph, and its gradient rule."""

import functools
import warnings

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
    # forward: outer, and inner in its body; backward: outer's backward block, which holds
    # inner's recomputation and inner's own backward block
    assert graph.count("checkpoint") == 5
    assert sum(1 for n in graph.walk() if n.op == "checkpoint" and n.params.get("differentiated")) == 2
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


def test_indexing_a_captured_tensor_captures_it_whole_and_the_gradient_reads_the_slice(rng):
    """The seed's rule: the block captures the tensor whole and slices it inside. Its gradient
    takes the slice outside the backward block (autodiff._slices_outside_blocks), so the block's
    cotangent is the row's, joined with other blocks' into one buffer, not a full-size one each."""
    x, w = f32(rng, 3), f32(rng, 4, 3)
    graph = rm.make_graph(lambda x, w: rm.checkpoint(lambda h: h * w[1], x))(x, w)
    (block,) = blocks(graph)
    assert [v.shape for v in block.inputs] == [(3,), (4, 3)]
    assert block.params["body"].count("slice") == 1 and graph.count("slice") == 1
    step = rm.grad(lambda w: rm.sum(rm.checkpoint(lambda h: h * w[1], x)))
    (backward,) = blocks(rm.make_graph(step)(w))
    assert (4, 3) not in [v.shape for v in backward.inputs]  # it reads x and the cotangent, not w
    assert [v.shape for v in backward.outputs] == [(1, 3)]  # the row's cotangent
    np.testing.assert_allclose(step(w), np.stack([np.zeros(3), np.asarray(x), np.zeros(3), np.zeros(3)]), rtol=1e-6)


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
    # The recomputation is in the backward block, which reads the barrier's outputs, not x.
    (barrier,) = [n for n in ck.nodes if n.op == "barrier"]
    assert barrier.inputs[0] is ck.inputs[0]
    (backward,) = [n for n in ck.nodes if n.op == "checkpoint" and n.params.get("differentiated")]
    assert backward.inputs[: len(barrier.outputs)] == barrier.outputs
    assert ck.nodes.index(backward) > ck.nodes.index(barrier)
    assert backward.params["body"].count("tanh") == 1


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


# ---------------------------------------------------------------- what a checkpoint keeps (issue 13)


def jax_residual_shapes(fn, *args) -> list[tuple]:
    import jax
    from jax._src.ad_checkpoint import saved_residuals

    return [a.shape for a, _ in saved_residuals(fn, *[jax.numpy.asarray(np.asarray(x)) for x in args])]


def residual_bytes(fn, *args) -> int:
    return sum(r.nbytes for r in rm.memory.saved_residuals(fn, *args))


def test_a_checkpoint_keeps_no_input_its_gradient_does_not_read():
    import jax
    import jax.numpy as jnp

    # Before: `argument x` was kept, though the body is linear; JAX and the plain program keep nothing.
    assert rm.memory.saved_residuals(lambda x: rm.sum(rm.remat(lambda x: 2.0 * x)(x)), rm.ones(3)) == []
    assert jax_residual_shapes(lambda x: jnp.sum(jax.remat(lambda x: 2.0 * x)(x)), rm.ones(3)) == []
    # A body that does read its input keeps it, as JAX's does.
    sin_loss = lambda x: rm.sum(rm.remat(rm.sin)(x))  # noqa: E731
    assert [r.provenance for r in rm.memory.saved_residuals(sin_loss, rm.ones(3))] == ["argument x"]
    assert jax_residual_shapes(lambda x: jnp.sum(jax.remat(jnp.sin)(x)), rm.ones(3)) == [(3,)]


def test_constants_made_inside_a_body_are_not_residuals():
    import jax
    import jax.numpy as jnp

    c = np.arange(3.0, dtype=np.float32)
    plain = rm.memory.saved_residuals(lambda x: rm.sum(x * rm.asarray(c)), rm.ones(3))
    assert [r.kind for r in plain] == ["constant"]  # without a checkpoint the product's VJP keeps it
    assert rm.memory.saved_residuals(lambda x: rm.sum(rm.remat(lambda x: x * rm.asarray(c))(x)), rm.ones(3)) == []
    assert jax_residual_shapes(lambda x: jnp.sum(jax.remat(lambda x: x * jnp.arange(3.0))(x)), rm.ones(3)) == []
    g = rm.grad(lambda x: rm.sum(rm.remat(lambda x: x * rm.asarray(c))(x)))(rm.ones(3))
    np.testing.assert_array_equal(g, c)


_BODIES = {
    "sin": lambda x, w: rm.sin(x),
    "linear": lambda x, w: 2.0 * x + w,
    "dense": lambda x, w: rm.tanh(x @ w) + x,
    # The plain gradient keeps a scalar; recomputing it would keep x (JAX's checkpoint does).
    "reduce-then-sin": lambda x, w: rm.sin(rm.sum(x)) * w,
    "exp-times-input": lambda x, w: rm.exp(x) * x,
    "row-then-broadcast": lambda x, w: rm.exp(rm.broadcast_to(x[0], (16, 16))) * w,
    "named": lambda x, w: rm.checkpoint_name(rm.tanh(x @ w), "h") @ w,
    "two-outputs": lambda x, w: (rm.sin(x) * w, rm.cos(rm.sum(x, axis=0))),
}


@pytest.mark.parametrize("policy", [None, rm.policies.dots_saveable, rm.policies.save_only_these_names("h"),
                                    rm.policies.everything_saveable], ids=["nothing", "dots", "names", "everything"])
@pytest.mark.parametrize("name", list(_BODIES))
def test_a_checkpoint_never_keeps_more_than_the_same_program_without_it(rng, name, policy):
    body = _BODIES[name]
    x, w = f32(rng, 16, 16), f32(rng, 16, 16)

    def loss(ck):
        def f(x, w):
            out = rm.checkpoint(body, x, w, policy=policy) if ck else body(x, w)
            return sum(rm.sum(o) for o in rm.tree.leaves(out))

        return f

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", rm.policies.UnusedNameWarning)
        assert residual_bytes(loss(True), x, w) <= residual_bytes(loss(False), x, w)
        got = rm.grad(loss(True), (0, 1))(x, w)
    assert_trees_close(got, rm.grad(loss(False), (0, 1))(x, w))


def test_a_block_keeps_the_small_value_when_recomputing_would_need_a_large_input(rng):
    x, w = f32(rng, 256, 64), f32(rng)
    loss = lambda x, w: rm.sum(rm.checkpoint(lambda h: rm.sin(rm.sum(h)) * w, x))  # noqa: E731
    kept = rm.memory.saved_residuals(loss, x, w)
    assert all(r.nbytes == 4 for r in kept)  # scalars: the sum (and w), not x's 64 KiB
    np.testing.assert_allclose(rm.grad(loss)(x, w), np.full((256, 64), np.cos(np.sum(np.asarray(x))) * float(w)),
                               rtol=1e-4)


# ---------------------------------------------------------------- higher order keeps checkpoints


def test_the_second_order_program_still_holds_checkpoint_blocks(rng):
    import jax
    import jax.numpy as jnp

    x, w = f32(rng, 4, 3), f32(rng, 3, 3)
    loss = lambda x, w: rm.sum(rm.checkpoint(lambda h: rm.tanh(h @ w), x))  # noqa: E731
    second = lambda x, w: rm.sum(rm.grad(loss)(x, w) ** 2)  # noqa: E731
    graph = rm.make_graph(rm.grad(second))(x, w)
    top = [n for n in graph.nodes if n.op == "checkpoint"]
    # the first-order backward block (the forward block's value is not needed, so it is gone),
    # and the backward block that recomputes it in the second-order backward pass
    assert len(top) == 2 and all(n.params.get("differentiated") for n in top)
    assert "checkpoint[differentiated=True" in str(graph)
    rm.graph.check(graph)
    jloss = lambda x, w: jnp.sum(jax.checkpoint(lambda h: jnp.tanh(h @ w))(x))  # noqa: E731
    want = jax.grad(lambda x, w: jnp.sum(jax.grad(jloss)(x, w) ** 2))(np.asarray(x), np.asarray(w))
    for backend in ("numpy", "xla"):
        np.testing.assert_allclose(run_on(backend, rm.grad(second), x, w), want, rtol=1e-5, atol=1e-6)


def test_third_order_through_a_checkpoint_matches_jax():
    import jax
    import jax.numpy as jnp

    f = lambda x: rm.sum(rm.remat(lambda h: rm.sin(h) * h)(x))  # noqa: E731
    jf = lambda x: jnp.sum(jax.remat(lambda h: jnp.sin(h) * h)(x))  # noqa: E731
    x = rm.asarray([0.3, 1.2])
    got = rm.grad(lambda x: rm.sum(rm.grad(lambda x: rm.sum(rm.grad(f)(x)))(x)))(x)
    want = jax.grad(lambda x: jnp.sum(jax.grad(lambda x: jnp.sum(jax.grad(jf)(x)))(x)))(np.asarray(x))
    np.testing.assert_allclose(got, want, rtol=1e-5)


def test_grad_with_respect_to_the_input_only_computes_no_weight_gradient(rng):
    # The backward block computes a cotangent for every input; those nobody reads are pruned.
    x, w = f32(rng, 4, 3), f32(rng, 3, 3)
    loss = lambda x, w: rm.sum(rm.checkpoint(lambda h: rm.tanh(h @ w), x))  # noqa: E731
    plain = lambda x, w: rm.sum(rm.tanh(x @ w))  # noqa: E731
    for argnums in (0, 1, (0, 1)):
        ck = rm.make_graph(rm.grad(loss, argnums))(x, w)
        assert ck.count("matmul") == rm.make_graph(rm.grad(plain, argnums))(x, w).count("matmul")
