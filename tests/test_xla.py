"""The XLA backend: its lowering table, one executable per step with backward blocks as
conditionals (the CPU) or inline behind their barriers (accelerators), device arrays, and the
memory the conditionals save where XLA:CPU drops optimization barriers."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import remat as rm  # noqa: E402
from remat.backends import lowerings, xla, xla_ops, xla_scratch  # noqa: E402
from remat.backends import numpy as numpy_backend  # noqa: E402
from remat.core import OPS  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(params=[True, False], ids=["branches", "inline"])
def branches(request, monkeypatch) -> bool:
    """Each test taking it runs with backward blocks as conditionals (the CPU's lowering) and
    inline behind their barriers (the accelerators'), whatever this machine is."""
    monkeypatch.setattr(xla, "default_branches", lambda: request.param)
    return request.param


def f32(rng, *shape, scale=1.0):
    return rm.asarray(rng.normal(0, scale, shape), "float32")


def on(backend, fn, *args):
    out = rm.jit(fn, backend=backend)(*args)
    return rm.tree.map(np.asarray, out)


def assert_trees_close(a, b, rtol=2e-5, atol=2e-6):
    la, ta = rm.tree.flatten(a)
    lb, tb = rm.tree.flatten(b)
    assert ta == tb
    for x, y in zip(la, lb):
        assert np.asarray(x).dtype == np.asarray(y).dtype
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=atol)


# ---------------------------------------------------------------- the lowering table


def test_every_op_is_lowered_by_both_backends():
    # the blocks' lowerings are registered by name, without JAX, and imported when first used
    assert set(xla_ops.IMPLS) | set(lowerings.REGISTERED) == set(OPS)
    assert all(callable(lowerings.resolve(op)) for op in lowerings.REGISTERED)
    assert {"checkpoint", "custom_vjp", "scan", "while", "cond"} <= set(lowerings.REGISTERED)
    assert set(numpy_backend.IMPLS) == set(OPS)


def _ints(rng, *shape):
    return rm.asarray(rng.integers(-5, 6, shape), "int32")


OP_CASES = {
    "unary": lambda x: [f(x) for f in (rm.negative, rm.abs, rm.sign, rm.exp, rm.sin, rm.cos, rm.tanh)],
    "positive": lambda x: [f(rm.abs(x) + 0.5) for f in (rm.log, rm.log1p, rm.sqrt)],
    "binary broadcast": lambda x: [f(x, x[:1]) for f in (rm.add, rm.subtract, rm.multiply, rm.divide,
                                                          rm.maximum, rm.minimum)],
    "pow": lambda x: rm.pow(rm.abs(x) + 0.1, x),
    "compare": lambda x: [f(x, x[::-1]) for f in (rm.equal, rm.not_equal, rm.less, rm.less_equal,
                                                  rm.greater, rm.greater_equal)],
    "logic": lambda x: [rm.logical_and(x > 0, x < 1), rm.logical_or(x > 1, x < 0), rm.logical_not(x > 0)],
    "where": lambda x: rm.where(x > 0, x, x[:, :1] * 2.0),
    "convert": lambda x: [x.astype("int32"), (x * 0).astype("bool"), (x > 0).astype("float32")],
    "reduce": lambda x: [rm.sum(x, axis=0), rm.prod(x, axis=1), rm.max(x), rm.min(x, axis=(0, 1)),
                         rm.mean(x, axis=1, keepdims=True)],
    "arg": lambda x: [rm.argmax(x, axis=0), rm.argmin(x, axis=1)],
    "shape": lambda x: [rm.reshape(x, (-1,)), rm.permute_dims(x, (1, 0)), rm.broadcast_to(x, (2, 4, 5)),
                        rm.concat([x, x * 2], axis=1), rm.stack([x, x]), rm.flip(x, 0),
                        rm.expand_dims(x, 1), rm.squeeze(x[:1], 0)],
    "slice": lambda x: [x[1:3, ::2], x[::-1, 3:0:-2], x[None, ..., 2], x[3:1]],
    "pad": lambda x: rm.pad(x, (1, 0), (2, 1), (1, 0)),
    "matmul": lambda x: [x @ x.T, rm.matmul(x, x[0]), rm.tensordot(x, x, ((0, 1), (0, 1)))],
    "take": lambda x: [rm.take(x, rm.asarray([3, -1, 0]), axis=0), x[:, rm.asarray([[1, 1], [0, 4]])]],
    "index_add": lambda x: rm.index_add(x, rm.asarray([0, 2, 0]), x[:3] * 10.0, axis=0),
    "identity": lambda x: [rm.stop_gradient(x), rm.checkpoint_name(x, "n"), *rm.ops.barrier(x, x * 2)],
    "checkpoint": lambda x: rm.checkpoint(lambda h: rm.tanh(h) * x, x * 3),
    "custom_vjp": lambda x: [rm.nn.softmax(x), rm.nn.layer_norm(x), rm.grad(lambda h: rm.sum(rm.nn.gelu(h) ** 2))(x)],
}


@pytest.mark.parametrize("case", sorted(OP_CASES))
def test_ops_equal_numpy(case, rng):
    x = f32(rng, 4, 5)
    assert_trees_close(on("xla", OP_CASES[case], x), on("numpy", OP_CASES[case], x))


def test_integer_ops_equal_numpy(rng):
    def f(a, b):
        return [a + b, a * b, a - b, rm.divide(a, rm.where(b == 0, 1, b)), rm.sum(a), rm.max(a, axis=0),
                rm.abs(a), rm.sign(a), a @ b.T, rm.prod(a[:, :2], axis=1)]

    a, b = _ints(rng, 3, 4), _ints(rng, 3, 4)
    assert_trees_close(on("xla", f, a, b), on("numpy", f, a, b), rtol=0, atol=0)


def test_64_bit_dtypes_run_in_x64_mode_only_inside_the_backend(rng):
    def f(x, i):
        return [rm.sum(x * x), rm.exp(x), i * 3, rm.argmax(x, axis=0), x.astype("float32")]

    x = rm.asarray(rng.normal(size=(3, 4)), "float64")
    i = rm.asarray(rng.integers(0, 2**40, (2,)), "int64")
    got = on("xla", f, x, i)
    assert [a.dtype for a in got] == [np.float64, np.float64, np.int64, np.int32, np.float32]
    assert_trees_close(got, on("numpy", f, x, i), rtol=1e-12, atol=1e-12)
    assert not jax.config.jax_enable_x64  # the user's JAX is left as it was


# ---------------------------------------------------------------- models: results equal NumPy's


def mlp_loss(params, x, seg):
    h = x
    groups = [params[i : i + seg] for i in range(0, len(params), seg)] if seg else [params]
    for group in groups:

        def block(h, group=group):
            for w, b in group:
                h = h + rm.tanh(h @ w + b)  # w, b captured
            return h

        h = rm.checkpoint(block, h) if seg else block(h)
    return rm.mean(h * h)


def mlp(rng, depth=6, width=16, batch=8):
    params = [(f32(rng, width, width, scale=width**-0.5), f32(rng, width, scale=0.1)) for _ in range(depth)]
    return params, f32(rng, batch, width)


@pytest.mark.parametrize("seg", [0, 1, 2], ids=["none", "layer", "segments"])
def test_mlp_gradients_equal_numpy(seg, branches, rng):
    params, x = mlp(rng)
    step = rm.value_and_grad(lambda p, x: mlp_loss(p, x, seg))
    assert_trees_close(on("xla", step, params, x), on("numpy", step, params, x))


def gpt(params, tokens, targets, checkpointed: bool, heads: int = 2):
    """A small GPT: token and position embeddings, pre-norm blocks of causal self-attention and a
    GELU MLP (each block one checkpoint, its weights captured), a tied read-out, cross-entropy."""
    n, d = tokens.shape[0], params["embed"].shape[1]
    h = rm.take(params["embed"], tokens, axis=0) + params["pos"][:n]
    causal = rm.asarray(np.tril(np.ones((n, n), bool)))

    def block(h, p):
        def attention(x):
            q, k, v = (rm.permute_dims(rm.reshape(x @ p[m], (n, heads, d // heads)), (1, 0, 2)) for m in "qkv")
            scores = rm.where(causal, q @ rm.permute_dims(k, (0, 2, 1)) / np.sqrt(d // heads), -1e9)
            out = rm.permute_dims(rm.nn.softmax(scores, axis=-1) @ v, (1, 0, 2))
            return rm.reshape(out, (n, d)) @ p["o"]

        h = h + attention(rm.nn.layer_norm(h, p["g1"], p["b1"]))
        return h + rm.nn.gelu(rm.nn.layer_norm(h, p["g2"], p["b2"]) @ p["up"]) @ p["down"]

    for p in params["blocks"]:
        h = rm.checkpoint(lambda h, p=p: block(h, p), h) if checkpointed else block(h, p)
    logits = rm.nn.layer_norm(h) @ params["embed"].T
    return rm.nn.cross_entropy(logits, targets)


def gpt_params(rng, vocab=11, d=8, n=6, depth=2):
    def block():
        p = {m: f32(rng, d, d, scale=d**-0.5) for m in "qkvo"}
        p.update(g1=rm.ones((d,)), b1=rm.zeros((d,)), g2=rm.ones((d,)), b2=rm.zeros((d,)))
        return {**p, "up": f32(rng, d, 4 * d, scale=d**-0.5), "down": f32(rng, 4 * d, d, scale=(4 * d) ** -0.5)}

    return {"embed": f32(rng, vocab, d), "pos": f32(rng, n, d, scale=0.1), "blocks": [block() for _ in range(depth)]}


@pytest.mark.parametrize("checkpointed", [True, False], ids=["checkpointed", "plain"])
def test_gpt_gradients_equal_numpy(checkpointed, branches, rng):
    params = gpt_params(rng)
    tokens = rm.asarray(rng.integers(0, 11, 6), "int32")
    targets = rm.asarray(rng.integers(0, 11, 6), "int32")
    step = rm.value_and_grad(lambda p, t, y: gpt(p, t, y, checkpointed))
    assert_trees_close(on("xla", step, params, tokens, targets), on("numpy", step, params, tokens, targets),
                       rtol=1e-4, atol=1e-5)


def test_second_order_through_checkpoint(branches, rng):
    w = f32(rng, 3, 3)
    g = rm.grad(lambda x: rm.sum(rm.checkpoint(lambda h: rm.sin(h @ w), x * x)))
    gg = lambda x: rm.sum(g(x) * g(x))  # noqa: E731
    x = f32(rng, 2, 3)
    assert_trees_close(on("xla", rm.grad(gg), x), on("numpy", rm.grad(gg), x), rtol=1e-4)


def test_policy_residuals(branches, rng):
    w = f32(rng, 4, 4)

    def loss(x):
        block = lambda h: rm.tanh(rm.checkpoint_name(h @ w, "z")) @ w  # noqa: E731
        return rm.sum(rm.checkpoint(block, x, policy=rm.policies.save_only_these_names("z")) ** 2)

    x = f32(rng, 3, 4)
    step = rm.value_and_grad(loss)
    assert_trees_close(on("xla", step, x), on("numpy", step, x))


@pytest.mark.parametrize("fn", [lambda x: x, lambda x: (x, rm.ones((2,)), 3.0), lambda x: []],
                         ids=["identity", "constants", "nothing"])
def test_graphs_without_nodes(fn, branches):
    x = rm.ones((2,))
    assert_trees_close(on("xla", fn, x), on("numpy", fn, x))


# ---------------------------------------------------------------- the programs


def _cases(text: str) -> int:
    return text.count("stablehlo.case")


def test_the_step_is_one_executable_with_a_conditional_per_backward_block(rng):
    params, x = mlp(rng, depth=3)
    graph = rm.make_graph(rm.value_and_grad(lambda p, x: mlp_loss(p, x, 1)))(params, x)
    forward = rm.make_graph(lambda p, x: mlp_loss(p, x, 1))(params, x)
    text = xla.lower(graph, branches=True).as_text()
    assert text.startswith("module @") and text.count("module @") == 1
    assert _cases(text) == 3  # one per checkpointed layer's backward block
    assert text.count("stablehlo.optimization_barrier") == 3  # kept for what honours them
    assert _cases(xla.lower(forward, branches=True).as_text()) == 0  # the forward pass runs inline


def test_identical_backward_blocks_are_traced_into_jax_once(rng, monkeypatch):
    # JAX traces a conditional's branch once per function: identical layers share theirs.
    params, x = mlp(rng, depth=4)
    graph = rm.make_graph(rm.value_and_grad(lambda p, x: mlp_loss(p, x, 1)))(params, x)
    bodies = [n.params["body"] for n in graph.walk() if n.params.get("differentiated")]
    evaluated = []
    real = xla.evaluate
    monkeypatch.setattr(xla, "evaluate", lambda g, *a: evaluated.append(id(g)) or real(g, *a))
    text = xla.lower(graph, branches=True).as_text()
    assert len(bodies) == 4 and _cases(text) == 4
    # The first layer's block alone makes no cotangent for the step's input: two programs.
    assert len({str(b) for b in bodies}) == 2
    assert sum(e in {id(b) for b in bodies} for e in evaluated) == 2


def test_backward_blocks_differing_only_in_their_constants_get_their_own_branches(rng):
    # Array constants print by their type alone: their values tell the programs apart.
    scales = [rng.normal(size=(2, 4)).astype(np.float32) for _ in range(3)]

    def loss(x):
        for s in scales:
            x = rm.checkpoint(lambda h, s=s: rm.tanh(h * s), x)
        return rm.sum(x)

    graph = rm.make_graph(rm.grad(loss))(f32(rng, 2, 4))
    assert len({str(n.params["body"]) for n in graph.walk() if n.params.get("differentiated")}) == 1
    x = f32(rng, 2, 4)
    assert_trees_close(on("xla", rm.grad(loss), x), on("numpy", rm.grad(loss), x))


def test_on_accelerators_backward_blocks_stay_inline_behind_their_barriers(rng):
    params, x = mlp(rng, depth=3)
    graph = rm.make_graph(rm.value_and_grad(lambda p, x: mlp_loss(p, x, 1)))(params, x)
    text = xla.lower(graph, branches=False).as_text()
    assert _cases(text) == 0 and text.count("stablehlo.optimization_barrier") == 3


def test_conditionals_are_the_default_on_the_cpu_and_inline_elsewhere(rng):
    params, x = mlp(rng, depth=2)
    text = rm.jit(rm.value_and_grad(lambda p, x: mlp_loss(p, x, 1)), backend="xla").lower(params, x).as_text()
    assert (_cases(text) == 2) == (jax.default_backend() == "cpu")
    assert xla.default_branches() == (jax.default_backend() == "cpu")


def test_without_a_barrier_a_backward_block_runs_inline(rng):
    """prevent_cse=False asks for no barrier, and lets the recomputation merge with the forward
    pass (as in JAX): no conditional either."""
    w = f32(rng, 4, 4)
    loss = lambda x: rm.sum(rm.checkpoint(lambda h: rm.tanh(h @ w), x, prevent_cse=False))  # noqa: E731
    graph = rm.make_graph(rm.grad(loss))(f32(rng, 2, 4))
    text = xla.lower(graph, branches=True).as_text()
    assert _cases(text) == 0 and "optimization_barrier" not in text


def test_a_backward_block_inside_a_backward_block_is_a_conditional_inside_a_conditional(rng):
    params, x = mlp(rng, depth=4)

    def nested(p, x):
        inner = lambda g: g + mlp_loss(p[2:], g, 1)  # noqa: E731
        return rm.mean(rm.checkpoint(lambda h: mlp_loss(p[:2], rm.checkpoint(inner, h), 1), x))

    graph = rm.make_graph(rm.value_and_grad(nested))(params, x)
    text = xla.lower(graph, branches=True).as_text()
    assert _cases(text) >= 5  # the outer block's, and within it the inner ones'
    step = rm.value_and_grad(nested)
    assert_trees_close(on("xla", step, params, x), on("numpy", step, params, x))


def test_the_executables_buffer_report_is_last_memory(rng):
    params, x = mlp(rng, depth=3)
    compiled = rm.jit(rm.value_and_grad(lambda p, x: mlp_loss(p, x, 1)), backend="xla").lower(params, x).compile()
    assert compiled.last_memory is None
    compiled(params, x)
    memory = compiled.last_memory
    analysis = compiled.lowered._program.executable().memory_analysis()
    assert (memory.temp, memory.outputs) == (analysis.temp_size_in_bytes, analysis.output_size_in_bytes)
    leaves = rm.tree.leaves(params)
    # the loss and the gradients, and the output tuple's table of pointers (8 bytes each)
    assert memory.outputs == 4 + sum(np.asarray(a).nbytes for a in leaves) + 8 * (1 + len(leaves))
    assert memory.peak == memory.temp + memory.outputs


LIBRARY = 'backend_config={"fusion_config":{"kind":"__ynn_fusion"}}'
# A library fusion whose body reads its dot twice (an attention gradient's pattern), one whose
# body reads its exponentials once, and an ordinary fusion reading a value twice.
LIBRARY_HLO = """\
HloModule step

%fused_computation (param_0: f32[8,128,16], param_1: f32[8,16,128], param_2: f32[8,128,128]) -> f32[8,128,128] {
  %param_0 = f32[8,128,16]{2,1,0} parameter(0)
  %param_1 = f32[8,16,128]{2,1,0} parameter(1)
  %dot.1 = f32[8,128,128]{2,1,0} dot(%param_0, %param_1), lhs_batch_dims={0}, lhs_contracting_dims={2}
  %param_2 = f32[8,128,128]{2,1,0} parameter(2)
  %mul.1 = f32[8,128,128]{2,1,0} multiply(%dot.1, %param_2)
  %zero = f32[] constant(0)
  %sum.1 = f32[8,128]{1,0} reduce(%mul.1, %zero), dimensions={2}, to_apply=%add
  %bcast = f32[8,128,128]{2,1,0} broadcast(%sum.1), dimensions={0,1}
  ROOT %sub.1 = f32[8,128,128]{2,1,0} subtract(%dot.1, %bcast)
}

%fused_computation.1 (param_0.1: f32[8,128,128]) -> f32[8,128] {
  %param_0.1 = f32[8,128,128]{2,1,0} parameter(0)
  %exp.1 = f32[8,128,128]{2,1,0} exponential(%param_0.1)
  %square = f32[8,128,128]{2,1,0} multiply(%exp.1, %exp.1)
  %zero.1 = f32[] constant(0)
  ROOT %sum.2 = f32[8,128]{1,0} reduce(%square, %zero.1), dimensions={2}, to_apply=%add
}

%fused_computation.2 (param_0.2: bf16[1024]) -> bf16[1024] {
  %param_0.2 = bf16[1024]{0} parameter(0)
  %tanh.1 = bf16[1024]{0} tanh(%param_0.2)
  ROOT %mul.2 = bf16[1024]{0} multiply(%tanh.1, %param_0.2)
  %neg.1 = bf16[1024]{0} negate(%tanh.1)
}

ENTRY %main (a: f32[8,128,16], b: f32[8,16,128], c: f32[8,128,128], d: bf16[1024]) -> f32[8,128,128] {
  %a = f32[8,128,16]{2,1,0} parameter(0)
  %b = f32[8,16,128]{2,1,0} parameter(1)
  %c = f32[8,128,128]{2,1,0} parameter(2)
  %d = bf16[1024]{0} parameter(3)
  %small = f32[8,128]{1,0} fusion(%c), kind=kCustom, calls=%fused_computation.1, @LIBRARY
  %plain = bf16[1024]{0} fusion(%d), kind=kLoop, calls=%fused_computation.2
  ROOT %grad = f32[8,128,128]{2,1,0} fusion(%a, %b, %c), kind=kCustom, calls=%fused_computation, @LIBRARY
}
""".replace("@LIBRARY", LIBRARY)


def test_library_fusions_count_the_values_their_body_reads_twice():
    # the dot, read by the product and the subtraction: 8 x 128 x 128 floats. The exponentials
    # are read by one instruction (twice over: still streamed); the ordinary fusion is XLA's own,
    # in its buffer report already.
    assert xla_scratch.library_scratch(LIBRARY_HLO) == 8 * 128 * 128 * 4
    assert xla_scratch.library_scratch(LIBRARY_HLO.replace("__ynn_fusion", "__other")) == 0
    ordinary = "kind=kLoop, calls=%fused_computation.2"
    both = LIBRARY_HLO.replace(ordinary, f"kind=kCustom, calls=%fused_computation.2, {LIBRARY}")
    assert xla_scratch.library_scratch(both) == 8 * 128 * 128 * 4  # the largest, not the sum
    only_bf16 = both.replace(f"calls=%fused_computation, {LIBRARY}", "calls=%fused_computation")
    assert xla_scratch.library_scratch(only_bf16) == 1024 * 2


def scaled_by_row_sums(x, w):
    """A product read twice, by its row sums and by the scaling: XLA:CPU runs it as one library
    fusion, which materializes the product beside the result."""
    y = x @ w
    return y * rm.sum(y, -1, keepdims=True)


def test_a_library_fusions_scratch_is_in_the_buffer_report_and_the_peak(rng):
    x, w = f32(rng, 8192, 128), f32(rng, 128, 128, scale=1 / 128)
    compiled = rm.jit(scaled_by_row_sums, backend="xla").lower(x, w).compile()
    compiled(x, w)
    memory = compiled.last_memory
    text = compiled.lowered._program.executable().as_text()
    if "__ynn_fusion" not in text:
        pytest.skip("this XLA runs no library fusion")
    assert memory.scratch == xla_scratch.library_scratch(text) == 8192 * 128 * 4
    assert memory.peak == memory.temp + memory.outputs + memory.scratch
    # a softmax's gradient reads its output's products twice: a profile counts them too
    profile = rm.memory.profile(lambda x: rm.sum(rm.nn.softmax(x) ** 2), f32(rng, 256, 128), backend="xla")
    assert profile.xla.scratch > 0 and profile.peak_bytes == profile.xla.high


LIBRARY_SCRATCH_RSS = """
import gc, json, numpy as np, remat as rm
from remat.bench.rss import peak_during
from remat.bench.worker import set_up_xla
from test_xla import scaled_by_row_sums
rng = np.random.default_rng(0)
x, w = (rm.asarray(rng.normal(size=s), "float32") for s in [(65536, 128), (128, 128)])
compiled = rm.jit(scaled_by_row_sums, backend="xla").lower(x, w).compile()
set_up_xla(); gc.collect()
_, baseline, peak = peak_during(lambda: compiled(x, w)[0].shape, high_water=True)
m = compiled.last_memory
print(json.dumps({"rise": peak - baseline, "report": m.temp + m.outputs, "peak": m.peak}))
"""


@pytest.mark.claims
def test_a_library_fusions_scratch_is_resident_while_it_runs():
    """Resident memory of one run (32 MiB result): the report alone misses the materialized
    product; with the scratch it bounds the run."""
    if jax.default_backend() != "cpu":
        pytest.skip("measures host memory")
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", MALLOC_ARENA_MAX="1",
               PYTHONPATH=os.pathsep.join([os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", LIBRARY_SCRATCH_RSS], capture_output=True, text=True,
                          timeout=300, check=True, env=env)
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["peak"] > got["report"], got  # this XLA materializes the product
    assert 1.5 * got["report"] < got["rise"] <= 1.03 * got["peak"], got


# ---------------------------------------------------------------- arrays: in, out, kept on device


def test_inputs_may_be_numpy_tensors_or_jax_arrays_and_results_stay_on_device(rng):
    params, x = mlp(rng, depth=3)
    step = rm.jit(rm.value_and_grad(lambda p, x: mlp_loss(p, x, 1)), backend="xla")
    as_numpy = rm.tree.map(np.asarray, (params, x))
    as_jax = rm.tree.map(lambda t: jax.numpy.asarray(np.asarray(t)), (params, x))
    results = [step(*args) for args in ((params, x), as_numpy, as_jax)]
    for r in results[1:]:
        assert_trees_close(r, results[0], rtol=0, atol=0)
    assert step.trace_count == 1
    value, grads = results[0]
    assert isinstance(value, rm.Tensor) and isinstance(value._value, jax.Array)
    assert all(isinstance(g._value, jax.Array) for g in rm.tree.leaves(grads))
    # results go back in without leaving the device, and work with eager ops and NumPy
    new = rm.tree.map(lambda p, g: p - 0.1 * g, params, grads)
    assert isinstance(step(grads, x)[0]._value, jax.Array) and step.trace_count == 1
    assert float(step(new, x)[0]) < float(value)
    assert isinstance(np.asarray(value), np.ndarray) and value.shape == () and value.dtype == np.float32


def test_runs_never_consume_the_callers_arrays(rng):
    params, x = mlp(rng, depth=3)
    args = rm.tree.map(lambda t: jax.numpy.asarray(np.asarray(t)), (params, x))
    step = rm.jit(rm.value_and_grad(lambda p, x: mlp_loss(p, x, 1)), backend="xla")
    first = step(*args)
    assert not any(a.is_deleted() for a in rm.tree.leaves(args))
    assert_trees_close(step(*args), first, rtol=0, atol=0)


# ---------------------------------------------------------------- memory (the claims tier: separate processes)


@pytest.mark.claims
def test_checkpoints_lower_peak_memory_on_xla_cpu():
    """32 layers, width 256, batch 8192 (8 MiB activations): peak RSS of one training step,
    each plan in its own process (see benchmarks/xla_memory.py)."""
    if jax.default_backend() != "cpu":
        pytest.skip("measures host memory")
    script = os.path.join(ROOT, "benchmarks", "xla_memory.py")
    done = subprocess.run([sys.executable, script, "--json", "--impls", "remat"],
                          capture_output=True, text=True, timeout=900, check=True)
    peak = {row["plan"]: row["peak_mib"] for row in json.loads(done.stdout.strip().splitlines()[-1])}
    assert peak["layer"] <= 0.60 * peak["none"], peak
    assert peak["sqrt"] <= 0.35 * peak["none"], peak


@pytest.mark.claims
def test_the_first_call_benchmark_times_both_depths_of_each_variant():
    # Not a timing claim: each first call runs in a process of its own, the ratios are the deep
    # depth's over the shallow's, round by round; the peaks are the deep steps' buffer reports.
    script = os.path.join(ROOT, "benchmarks", "xla_first_call.py")
    args = ["--shallow", "2", "--deep", "4", "--repeats", "1", "--width", "8", "--peaks", "--json"]
    done = subprocess.run([sys.executable, script, *args], capture_output=True, text=True, timeout=600, check=True)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    variants = ["jax", "remat", "remat-scan"]
    assert set(out["times"]) == {f"{v}/{d}" for v in variants for d in (2, 4)}
    assert all(len(ts) == 1 and ts[0] > 0 for ts in out["times"].values())
    for v in variants:
        assert out["ratios"][v] == [a / b for a, b in zip(out["times"][f"{v}/4"], out["times"][f"{v}/2"])]
        assert out["medians"][v] == float(np.median(out["ratios"][v]))
    # Four layers of (8, 8) float32 weights and batch 64: the gradients alone are 4 * (256 + 32) bytes.
    assert sorted(out["peaks"]) == ["remat", "remat-scan"] and all(b >= 4 * 288 for b in out["peaks"].values())


@pytest.mark.claims
def test_the_scanned_gpt_benchmark_compares_the_same_step_in_remat_and_jax():
    # Not a timing claim: one round of each plan, each step in a process of its own; the two
    # frameworks' steps start from the same loss, and each ratio is remat's median over JAX's.
    script = os.path.join(ROOT, "benchmarks", "scanned_gpt_step.py")
    done = subprocess.run([sys.executable, script, "--rounds", "1", "--json"], capture_output=True, text=True,
                          timeout=600, check=True)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert sorted(out) == ["none", "step"]
    for r in out.values():
        assert r["ratio"] == pytest.approx(r["remat ms"] / r["jax ms"]) and r["range"] == [r["ratio"]] * 2
        remat_loss, jax_loss = r["losses"]
        assert remat_loss == pytest.approx(jax_loss, rel=1e-5) and 1.0 < remat_loss < 10.0


@pytest.mark.claims
def test_the_savings_kept_benchmark_sets_remat_beside_jax_with_the_same_savings():
    # Not a timing claim: a small model, three rounds. JAX's conditional per layer keeps what
    # remat's checkpoint per layer keeps (XLA's report of both executables), every step computes
    # the same loss, and each ratio is the median of its rounds' ratios.
    script = os.path.join(ROOT, "benchmarks", "jax_savings_kept.py")
    done = subprocess.run([sys.executable, script, "--layers", "8", "--width", "64", "--batch", "128", "--rounds",
                           "3", "--json"], capture_output=True, text=True, timeout=600, check=True)
    out = json.loads(done.stdout.strip().splitlines()[-1])
    steps = ["jax kept", "jax none", "remat none", "remat per layer"]
    assert sorted(out["times"]) == sorted(out["held"]) == sorted(out["losses"]) == steps
    losses = list(out["losses"].values())
    assert max(losses) - min(losses) <= 1e-6 * abs(losses[0])
    held = out["held"]
    assert held["jax kept"] < 0.8 * held["jax none"] and held["remat per layer"] < 0.8 * held["remat none"]
    assert held["remat per layer"] <= held["jax kept"] * 1.05
    times = out["times"]
    kept = [a / b for a, b in zip(times["remat per layer"], times["jax kept"])]
    assert out["ratios"]["remat per layer / jax kept"] == pytest.approx(float(np.median(kept)))
    assert out["ranges"]["remat per layer / jax kept"] == [min(kept), max(kept)]
