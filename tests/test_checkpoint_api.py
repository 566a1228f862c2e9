"""rm.checkpoint / rm.remat as JAX and PyTorch users call them (issue 13): static arguments,
keyword inputs, Python values among the outputs, prevent_cse, the decorator factory, and eager
calls traced once per signature."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import remat as rm
from conftest import run_on


def f32(rng, *shape):
    return rm.asarray(rng.normal(size=shape), "float32")


# ---------------------------------------------------------------- traced once per signature


def test_eager_calls_trace_the_body_once_as_jax_does():
    calls = {"remat": 0, "jax": 0}

    @rm.remat
    def g(x):
        calls["remat"] += 1
        return rm.sin(x), 3.0

    @jax.remat
    def jg(x):
        calls["jax"] += 1
        return jnp.sin(x), 3.0

    for _ in range(10):
        y, three = g(rm.asarray(2.0))
        jy, _ = jg(2.0)
    assert calls == {"remat": 1, "jax": 1}
    np.testing.assert_allclose(y, jy, rtol=1e-6)
    assert three == 3.0 and type(three) is float
    g(rm.ones(3))  # another shape: one more trace
    assert calls["remat"] == 2


def test_static_argnums_select_code_paths_and_retrace_only_when_they_change():
    calls = 0

    @rm.remat(static_argnums=(1,))
    def g(x, positive):
        nonlocal calls
        calls += 1
        return rm.sin(x) if positive else rm.cos(x)

    for _ in range(5):
        g(rm.asarray(2.0), True)
    assert calls == 1
    np.testing.assert_allclose(g(rm.asarray(2.0), False), np.cos(2.0), rtol=1e-6)
    assert calls == 2
    jg = jax.remat(lambda x, p: jnp.sin(x) if p else jnp.cos(x), static_argnums=(1,))
    for p in (True, False):
        got = rm.grad(lambda x, p=p: g(x, p))(rm.asarray(2.0))
        np.testing.assert_allclose(got, jax.grad(lambda x, p=p: jg(x, p))(2.0), rtol=1e-6)
        np.testing.assert_allclose(run_on("xla", rm.grad(lambda x, p=p: g(x, p)), rm.asarray(2.0)), got, rtol=1e-6)


def test_an_unhashable_static_argument_is_compared_by_identity():
    calls = 0

    def h(x, cfg):
        nonlocal calls
        calls += 1
        return x * cfg["scale"]

    cfg = {"scale": rm.asarray(2.0)}
    for _ in range(3):
        out = rm.checkpoint(h, rm.ones(4), cfg, static_argnums=1)
    assert calls == 1
    np.testing.assert_allclose(out, np.full(4, 2.0))
    out = rm.checkpoint(h, rm.ones(4), {"scale": rm.asarray(3.0)}, static_argnums=1)
    assert calls == 2 and float(out[0]) == 3.0
    g = rm.grad(lambda x: rm.sum(rm.checkpoint(h, x, {"scale": 3.0}, static_argnums=(1,))))(rm.ones(4))
    np.testing.assert_allclose(g, np.full(4, 3.0))


def test_rebinding_what_the_body_reads_traces_again():
    w = rm.ones(3)

    def body(x):
        return x * w

    np.testing.assert_allclose(rm.checkpoint(body, rm.ones(3)), np.ones(3))
    w = rm.zeros(3)  # noqa: F841  (read by body through its closure)
    np.testing.assert_allclose(rm.checkpoint(body, rm.ones(3)), np.zeros(3))

    class Layer:
        def __init__(self, w):
            self.w = w

        def __call__(self, x):
            return x * self.w

    layer = Layer(rm.ones(3))
    assert float(rm.checkpoint(layer, rm.ones(3))[0]) == 1.0
    layer.w = rm.full((3,), 5.0)
    assert float(rm.checkpoint(layer, rm.ones(3))[0]) == 5.0
    params = [rm.ones(3)]
    fn = lambda x: x * params[0]  # noqa: E731
    assert float(rm.checkpoint(fn, rm.ones(3))[0]) == 1.0
    params[0] = rm.full((3,), 7.0)  # a container's leaf replaced in place
    assert float(rm.checkpoint(fn, rm.ones(3))[0]) == 7.0


# ---------------------------------------------------------------- keyword inputs, Python outputs


def test_keyword_tensors_are_inputs_with_gradients_like_positional_ones(rng):
    x, s, w = f32(rng, 3), f32(rng), f32(rng, 3)
    body = lambda h, *, scale, square: scale * (rm.sin(h * w) ** 2 if square else rm.sin(h * w))  # noqa: E731
    loss = lambda x, s: rm.sum(rm.checkpoint(body, x, scale=s, square=True))  # noqa: E731
    graph = rm.make_graph(loss)(x, s)
    (block,) = [n for n in graph.nodes if n.op == "checkpoint"]
    assert block.params["saved"] == (0, 1)  # x and scale explicit; w captured
    jbody = lambda h, s: s * jnp.sin(h * np.asarray(w)) ** 2  # noqa: E731
    want = jax.grad(lambda x, s: jnp.sum(jax.checkpoint(jbody)(x, s)), (0, 1))(np.asarray(x), np.asarray(s))
    for backend in ("numpy", "xla"):
        got = run_on(backend, rm.grad(loss, (0, 1)), x, s)
        np.testing.assert_allclose(got[0], want[0], rtol=1e-5)
        np.testing.assert_allclose(got[1], want[1], rtol=1e-5)


def test_python_values_and_none_come_back_as_they_are(rng):
    x = f32(rng, 3)
    body = lambda h: {"y": rm.sin(h), "n": 2**40, "flag": True, "none": None, "scale": 0.5}  # noqa: E731
    eager = rm.checkpoint(body, x)
    traced = rm.jit(lambda x: rm.checkpoint(body, x)["y"])(x)
    assert eager["n"] == 2**40 and eager["flag"] is True and eager["none"] is None and eager["scale"] == 0.5
    np.testing.assert_allclose(eager["y"], traced)

    def loss(x):
        out = rm.checkpoint(body, x)
        assert out["n"] == 2**40 and out["none"] is None  # Python values inside a trace too
        return rm.sum(out["y"]) * out["scale"]

    np.testing.assert_allclose(rm.grad(loss)(x), 0.5 * np.cos(np.asarray(x)), rtol=1e-6)


# ---------------------------------------------------------------- prevent_cse and the decorator


def _layers(prevent_cse):
    from remat.models import residual_mlp_params

    params = residual_mlp_params(depth=3, width=8)

    def loss(params, x):
        h = x
        for w, b in params:
            h = rm.checkpoint(lambda h, w=w, b=b: h + rm.tanh(h @ w + b), h, prevent_cse=prevent_cse)
        return rm.mean(h * h)

    return loss, params, rm.ones((4, 8))


def test_prevent_cse_false_drops_the_barrier_and_the_conditional_on_xla():
    from remat.backends import xla

    texts = {}
    for cse in (True, False):
        loss, params, x = _layers(cse)
        step = rm.grad(loss)
        texts[cse] = xla.lower(rm.make_graph(step)(params, x), branches=True).as_text()
        got = run_on("xla", step, params, x)
        want = rm.grad(lambda p, x: _layers(True)[0](p, x))(params, x)
        for a, b in zip(rm.tree.leaves(got), rm.tree.leaves(want)):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    assert "optimization_barrier" in texts[True] and "stablehlo.case" in texts[True]
    # as in JAX: the recomputation may merge with the forward pass
    assert "optimization_barrier" not in texts[False] and "stablehlo.case" not in texts[False]
    graph = rm.make_graph(rm.grad(_layers(False)[0]))(*_layers(False)[1:])
    assert graph.count("barrier") == 0
    assert all(n.params.get("prevent_cse") is False for n in graph.walk() if n.op == "checkpoint")


def test_prevent_cse_per_argument_bars_only_the_arguments_flagged_as_jax_does():
    """As `jax.checkpoint(prevent_cse=(True, False))`: one flag per positional argument (a bool or a
    pytree of bools shaped like it); the arguments flagged False reach the recomputation without
    passing the barrier. Gradients are the same and equal JAX's."""
    import jax
    import jax.numpy as jnp

    from remat.backends import xla

    w = np.array([[0.5, -0.3], [0.2, 0.8]], np.float32)
    x, y = np.array([[1.0, 2.0]], np.float32), np.array([[0.5, -1.0]], np.float32)

    def loss(x, y, flags):
        block = lambda a, bc: rm.tanh(a @ w) * bc[0] + bc[1]  # noqa: E731
        return rm.sum(rm.checkpoint(block, x, (y, y * 2.0), prevent_cse=flags))

    def jloss(x, y, flags):
        block = lambda a, bc: jnp.tanh(a @ w) * bc[0] + bc[1]  # noqa: E731
        return jnp.sum(jax.checkpoint(block, prevent_cse=flags)(x, (y, y * 2.0)))

    want = jax.grad(jloss, argnums=(0, 1))(x, y, (True, (False, True)))
    # The recomputation reads a and b (not c: d out / d c = 1); the cotangent is barred with any.
    for flags, barred in [((True, False), 2), ((False, (True, False)), 2), ((True, (False, True)), 2),
                          ((False, (False, True)), 1), ((False, False), 0), (True, 3)]:
        step = rm.grad(lambda x, y, flags=flags: loss(x, y, flags), argnums=(0, 1))
        graph = rm.make_graph(step)(x, y)
        (bar,) = [n for n in graph.nodes if n.op == "barrier"] or [None]
        assert (0 if bar is None else len(bar.inputs)) == barred, flags  # the flagged inputs and the cotangent
        for got, w_ in zip(rm.jit(step)(x, y), want):
            np.testing.assert_allclose(np.asarray(got), np.asarray(w_), rtol=1e-6)
        text = xla.lower(graph, branches=True).as_text()
        assert ("stablehlo.case" in text) == (barred > 0)  # with no barrier, as prevent_cse=False: inline


def test_remat_is_also_a_decorator_factory(rng):
    @rm.remat(policy=rm.policies.dots_saveable)
    def layer(h, w):
        return rm.tanh(h @ w)

    x, w = f32(rng, 2, 3), f32(rng, 3, 3)
    (block,) = [n for n in rm.make_graph(layer)(x, w).nodes if n.op == "checkpoint"]
    assert block.params["policy"] is rm.policies.dots_saveable
    np.testing.assert_allclose(rm.grad(lambda x: rm.sum(layer(x, w)))(x),
                               rm.grad(lambda x: rm.sum(rm.tanh(x @ w)))(x), rtol=1e-6)
    assert layer.__name__ == "layer"


# ---------------------------------------------------------------- checkpoint_name on pytrees


def test_checkpoint_name_tags_every_leaf_of_a_pytree(rng):
    x, w = f32(rng, 4, 3), f32(rng, 3, 3)

    def body(h):
        kv = rm.checkpoint_name({"k": rm.tanh(h @ w), "v": rm.sin(h @ w)}, "kv")
        return kv["k"] * kv["v"]

    loss = lambda x: rm.sum(rm.checkpoint(body, x, policy=rm.policies.save_only_these_names("kv")))  # noqa: E731
    kept = [r.provenance for r in rm.memory.saved_residuals(loss, x)]
    assert kept.count("named 'kv'") == 2  # both leaves (sin's VJP reads its input: x is kept too)
    jw = np.asarray(w)
    from jax.ad_checkpoint import checkpoint_name

    def jbody(h):
        kv = checkpoint_name({"k": jnp.tanh(h @ jw), "v": jnp.sin(h @ jw)}, "kv")
        return kv["k"] * kv["v"]

    jpolicy = jax.checkpoint_policies.save_only_these_names("kv")
    want = jax.grad(lambda x: jnp.sum(jax.checkpoint(jbody, policy=jpolicy)(x)))(np.asarray(x))
    np.testing.assert_allclose(rm.grad(loss)(x), want, rtol=1e-5)


# ---------------------------------------------------------------- checkpoint_sequential


def _torch_layout(n: int, segments: int) -> list[bool]:
    """Which of n functions torch.utils.checkpoint.checkpoint_sequential runs in a checkpoint
    (the reentrant one runs those forwards without grad)."""
    import torch
    from torch.utils.checkpoint import checkpoint_sequential

    seen = []

    def make():
        def fn(x):
            seen.append(not torch.is_grad_enabled())
            return torch.sin(x)

        return fn

    checkpoint_sequential([make() for _ in range(n)], segments, torch.ones(2, requires_grad=True),
                          use_reentrant=True)
    return seen


# PyTorch's rule: segments of n // segments functions, all checkpointed but the last, which runs
# plainly to the end. PyTorch is not a test dependency: the layouts are written out here, and
# checked against torch itself where it is installed.
SEQUENTIAL_LAYOUTS = {
    (5, 2): [True, True, False, False, False],
    (6, 3): [True, True, True, True, False, False],
    (7, 3): [True, True, True, True, False, False, False],
    (4, 1): [False, False, False, False],
    (4, 4): [True, True, True, False],
}


@pytest.mark.torch
@pytest.mark.parametrize("n, segments", list(SEQUENTIAL_LAYOUTS))
def test_the_written_layouts_are_pytorchs(n, segments):
    assert _torch_layout(n, segments) == SEQUENTIAL_LAYOUTS[n, segments]


@pytest.mark.parametrize("n, segments", list(SEQUENTIAL_LAYOUTS))
def test_checkpoint_sequential_cuts_segments_as_pytorch_does(rng, n, segments):
    ws = [f32(rng, 3, 3) * 0.5 for _ in range(n)]
    layers = [lambda h, w=w: h + rm.tanh(h @ w) for w in ws]
    x = f32(rng, 2, 3)
    graph = rm.make_graph(lambda x: rm.checkpoint_sequential(layers, segments, x))(x)
    blocks = [n for n in graph.nodes if n.op == "checkpoint"]
    layout = [True] * sum(b.params["body"].count("tanh") for b in blocks)
    layout += [False] * (graph.count("tanh") - len(layout))
    assert layout == SEQUENTIAL_LAYOUTS[n, segments]
    assert len(blocks) == segments - 1
    plain = lambda x: rm.sum(functools.reduce(lambda h, f: f(h), layers, x))  # noqa: E731
    seq = lambda x: rm.sum(rm.checkpoint_sequential(layers, segments, x))  # noqa: E731
    for backend in ("numpy", "xla"):
        np.testing.assert_allclose(run_on(backend, rm.grad(seq), x), run_on(backend, rm.grad(plain), x), rtol=1e-5)
