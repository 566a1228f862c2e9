"""float16 and bfloat16 on both backends: ops against JAX (eagerly and in jit), float32
accumulation in sums and matrix products, gradients in the low dtype, and the mixed-precision
GPT example (bfloat16 compute, float32 master weights) against JAX's mixed-precision gradients
and against its own float32 run."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import remat as rm
from conftest import run_on
from remat import models

LOW = ["float16", "bfloat16"]
EPS = {"float16": 2.0**-10, "bfloat16": 2.0**-7}  # one unit in the last place, relative
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def f32(x) -> np.ndarray:
    return np.asarray(x).astype(np.float32)


def inputs(dtype, shape=(4, 6), seed=0):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=shape).astype(dtype), rng.uniform(0.5, 2.0, shape).astype(dtype))


# Each row: remat's function and JAX's, of (x, y) with x ~ N(0, 1) and y in [0.5, 2].
OPS = {
    "exp": (lambda x, y: rm.exp(x), lambda x, y: jnp.exp(x)),
    "log": (lambda x, y: rm.log(y), lambda x, y: jnp.log(y)),
    "log1p": (lambda x, y: rm.log1p(y), lambda x, y: jnp.log1p(y)),
    "tanh": (lambda x, y: rm.tanh(x), lambda x, y: jnp.tanh(x)),
    "sqrt": (lambda x, y: rm.sqrt(y), lambda x, y: jnp.sqrt(y)),
    "sin": (lambda x, y: rm.sin(x), lambda x, y: jnp.sin(x)),
    "cos": (lambda x, y: rm.cos(x), lambda x, y: jnp.cos(x)),
    "abs": (lambda x, y: rm.abs(x), lambda x, y: jnp.abs(x)),
    "negative": (lambda x, y: -x, lambda x, y: -x),
    "add": (lambda x, y: x + y, lambda x, y: x + y),
    "subtract": (lambda x, y: x - y, lambda x, y: x - y),
    "multiply": (lambda x, y: x * y, lambda x, y: x * y),
    "divide": (lambda x, y: x / y, lambda x, y: x / y),
    "pow": (lambda x, y: y**x, lambda x, y: y**x),
    "maximum": (lambda x, y: rm.maximum(x, y), lambda x, y: jnp.maximum(x, y)),
    "weak-scalars": (lambda x, y: 2.5 * x - 1, lambda x, y: 2.5 * x - 1),
    "where": (lambda x, y: rm.where(x > 0, x, y), lambda x, y: jnp.where(x > 0, x, y)),
    "sum": (lambda x, y: rm.sum(x * y, axis=1), lambda x, y: jnp.sum(x * y, axis=1)),
    "mean": (lambda x, y: rm.mean(x, axis=0), lambda x, y: jnp.mean(x, axis=0)),
    "prod": (lambda x, y: rm.prod(y, axis=1), lambda x, y: jnp.prod(y, axis=1)),
    "max": (lambda x, y: rm.max(x, axis=1), lambda x, y: jnp.max(x, axis=1)),
    "matmul": (lambda x, y: x @ y.T, lambda x, y: x @ y.T),
    "tensordot": (lambda x, y: rm.tensordot(x, y, 2), lambda x, y: jnp.tensordot(x, y, 2)),
    "softmax": (lambda x, y: rm.nn.softmax(x), lambda x, y: jax.nn.softmax(x)),
    "log_softmax": (lambda x, y: rm.nn.log_softmax(x), lambda x, y: jax.nn.log_softmax(x)),
    "gelu": (lambda x, y: rm.nn.gelu(x), lambda x, y: jax.nn.gelu(x, approximate=True)),
    "to-float32": (lambda x, y: x.astype("float32") * y, lambda x, y: x.astype(jnp.float32) * y),
}


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("dtype", LOW)
def test_ops_match_jax_eagerly_and_on_both_backends(dtype, name):
    fn, ref = OPS[name]
    x, y = inputs(dtype)
    want = jax.jit(ref)(x, y)
    got = {"eager": fn(rm.asarray(x), rm.asarray(y))}
    got.update({backend: rm.jit(fn, backend=backend)(x, y) for backend in ("numpy", "xla")})
    for how, out in got.items():
        assert out.dtype == want.dtype, how
        # Within two units in the last place: NumPy's and XLA's float32 exp, log, ... differ in
        # their last bits, and XLA may keep a float32 intermediate it need not round.
        np.testing.assert_allclose(f32(out), f32(want), rtol=2 * EPS[dtype], atol=2 * EPS[dtype], err_msg=how)


@pytest.mark.parametrize("dtype", LOW)
def test_argmax_and_comparisons_of_low_precision_tensors(dtype, backend):
    x, y = inputs(dtype)
    out = run_on(backend, lambda x, y: (rm.argmax(x, axis=1), x < y, rm.min(y)), x, y)
    np.testing.assert_array_equal(out[0], np.argmax(f32(x), axis=1))
    np.testing.assert_array_equal(out[1], f32(x) < f32(y))
    assert out[2].dtype == np.dtype(dtype) and f32(out[2]) == f32(y).min()


# ---------------------------------------------------------------- accumulation


@pytest.mark.parametrize("dtype,expected", [("bfloat16", 41.0), ("float16", 40.94)])
def test_sums_accumulate_in_float32(backend, dtype, expected):
    """4096 times 0.01: accumulated in bfloat16 the sum stalls at 4 (each 0.01 is below half a unit
    of the running sum); in float32 it is 40.96, then rounded once to bfloat16 (41) or float16."""
    x = np.full(4096, 0.01, dtype)
    want = np.float32(np.sum(x, dtype=np.float32)).astype(dtype)
    for out in (run_on(backend, rm.sum, x), rm.sum(x), jnp.sum(x)):
        assert out.dtype == np.dtype(dtype) and f32(out) == f32(want)
    assert float(want) == pytest.approx(expected, rel=EPS[dtype])
    assert f32(run_on(backend, lambda x: rm.mean(x) * 4096, x)) == pytest.approx(40.96, rel=EPS[dtype])


def _ulps(got, exact, dtype) -> float:
    ulp = np.spacing(np.abs(exact).astype(np.dtype(dtype))).astype(np.float64)
    return float(np.max(np.abs(np.asarray(got).astype(np.float64) - exact) / ulp))


@pytest.mark.parametrize("name", ["cumsum", "cumprod"])
@pytest.mark.parametrize("dtype", LOW)
def test_cumulative_ops_accumulate_in_float32(backend, dtype, name):
    """Within half an ulp (and float32's own drift, a hundredth) of the exact running sums and
    products of 4,096 numbers: stepping in
    the low dtype drifted 31,792 ulp (NumPy), XLA's own cumsum 472 ulp (bfloat16). A cumsum's
    gradient is a reverse cumsum: it accumulates so too."""
    x = np.random.default_rng(0).normal(size=4096)
    x = (x if name == "cumsum" else 1 + 0.001 * x).astype(np.dtype(dtype))
    fn = getattr(rm, name)
    got = np.asarray(rm.jit(fn, backend=backend)(rm.asarray(x)))
    assert got.dtype == np.dtype(dtype)
    assert _ulps(got, getattr(np, name)(x.astype(np.float64)), dtype) <= 0.51
    assert _ulps(fn(rm.asarray(x)), getattr(np, name)(x.astype(np.float64)), dtype) <= 0.51  # eagerly too
    if name == "cumsum":
        w = rm.asarray(x)
        g = rm.jit(rm.grad(lambda t: rm.sum(rm.cumsum(t) * w).astype("float32")), backend=backend)(rm.asarray(x))
        assert _ulps(g, np.cumsum(x.astype(np.float64)[::-1])[::-1], dtype) <= 0.51


@pytest.mark.parametrize("dtype", LOW)
def test_matrix_products_accumulate_in_float32(backend, dtype):
    """The product of two low-precision numbers is exact in float32, so accumulating there and
    rounding once gives the float32 product of the same operands, rounded."""
    x = np.full((3, 4096), 0.01, dtype)
    want = (f32(x) @ f32(x).T).astype(dtype)
    out = run_on(backend, lambda a: a @ a.T, x)
    assert out.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(f32(out), f32(want))
    np.testing.assert_array_equal(f32(out), f32(jnp.matmul(x, x.T)))


def test_the_xla_program_accumulates_a_bfloat16_product_in_float32():
    text = rm.jit(lambda a, b: a @ b, backend="xla").lower(rm.ones((2, 3), "bfloat16"), rm.ones((3, 4), "bfloat16"))
    assert re.search(r"dot_general .*\(tensor<2x3xbf16>, tensor<3x4xbf16>\) -> tensor<2x4xf32>", text.as_text())
    assert "stablehlo.convert" in text.as_text()


def test_graphs_print_low_precision_types():
    g = rm.make_graph(lambda x, y: x * y)(rm.ones((2,), "bfloat16"), rm.ones((2,), "float16"))
    assert str(g) == ("graph(a:bf16[2], b:f16[2]) {\n  c:f32[2] = convert[dtype=f32] a\n"
                      "  d:f32[2] = convert[dtype=f32] b\n  e:f32[2] = multiply c d\n  return e\n}")


# ---------------------------------------------------------------- arguments and gradients


@pytest.mark.parametrize("dtype", LOW)
def test_low_precision_arrays_are_jit_arguments(backend, dtype):
    """float16 arrays used to be refused (before that, silently made float32)."""
    for x in (np.arange(4).astype(dtype), jnp.arange(4, dtype=dtype)):
        out = run_on(backend, lambda x: x * 2 + 1, x)
        assert out.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(f32(out), [1, 3, 5, 7])


@pytest.mark.parametrize("dtype", LOW)
def test_gradients_are_in_the_low_dtype_and_match_jax(backend, dtype):
    rng = np.random.default_rng(1)
    x, w = rng.normal(size=(8, 16)).astype(dtype), (rng.normal(size=(16, 4)) / 4).astype(dtype)

    def loss(x, w):
        return rm.sum(rm.tanh(rm.checkpoint(lambda h: h @ w, x)) ** 2)

    gx, gw = rm.jit(rm.grad(loss, argnums=(0, 1)), backend=backend)(x, w)
    jx, jw = jax.grad(lambda x, w: jnp.sum(jnp.tanh(x @ w) ** 2), argnums=(0, 1))(x, w)
    assert gx.dtype == gw.dtype == np.dtype(dtype)
    for got, want in ((gx, jx), (gw, jw)):
        scale = np.abs(f32(want)).max()
        np.testing.assert_allclose(f32(got), f32(want), rtol=4 * EPS[dtype], atol=4 * EPS[dtype] * scale)


# ---------------------------------------------------------------- the mixed-precision example


def _example():
    sys.path.insert(0, str(EXAMPLES))
    try:
        import train_gpt_adamw
    finally:
        sys.path.remove(str(EXAMPLES))
    return train_gpt_adamw


def _jax_loss(master, data, dtype, heads):
    """The example's loss written in JAX: the same casts, JAX's own layer norm, softmax and gelu."""
    from remat.bench import impl_jax

    p = jax.tree.map(lambda w: w.astype(dtype), master)
    tokens, targets = data
    mask = jnp.asarray(models.causal_mask(tokens.shape[1])).astype(dtype)
    h = p["tok"][tokens] + p["pos"]
    for block in p["blocks"]:
        h = impl_jax.gpt_block(block, h, heads, mask)
    logits = impl_jax._layer_norm(h, p["lnf_g"], p["lnf_b"]) @ p["head"]
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, targets[..., None], axis=-1))


# Jitted (JAX's op-by-op dispatch took 11 s of the test's 12), and once for the module, so that
# both backends' tests use one compiled oracle per dtype.
_jax_value_and_grad = jax.jit(jax.value_and_grad(_jax_loss), static_argnums=(2, 3))


def _rel(a, b) -> float:
    return float(np.linalg.norm(f32(a) - f32(b)) / np.linalg.norm(f32(b)))


def test_the_examples_mixed_precision_gradients_match_jax(backend):
    """One step's float32 gradients of the bfloat16 model against jax.grad of the same model in
    JAX: within 3% per parameter (a few bfloat16 units; JAX's own bfloat16 gradients are 2% from
    its float32 ones here), and against the float32 model to float32 precision."""
    ex = _example()
    master = ex.init_params()
    data = ex.batches(1)[0]
    heads = ex.CONFIG.heads
    numpy_master = rm.tree.map(np.asarray, master)
    step = rm.jit(rm.value_and_grad(ex.loss_fn), backend=backend, static_argnums=2)
    for dtype, per_leaf, overall in (("bfloat16", 0.03, 0.015), ("float32", 1e-5, 1e-5)):
        loss, grads = step(master, data, dtype)
        jloss, jgrads = _jax_value_and_grad(numpy_master, data, jnp.dtype(dtype), heads)
        got, want = rm.tree.leaves(grads), jax.tree.leaves(jgrads)
        assert all(g.dtype == np.float32 for g in got)  # the master weights' gradients
        assert float(loss) == pytest.approx(float(jloss), rel=overall)
        assert max(_rel(g, w) for g, w in zip(got, want)) < per_leaf, dtype
        flat = lambda leaves: np.concatenate([f32(x).ravel() for x in leaves])  # noqa: E731
        assert _rel(flat(got), flat(want)) < overall, dtype
    bf16 = rm.tree.leaves(step(master, data, "bfloat16")[1])
    assert max(_rel(a, b) for a, b in zip(bf16, got)) > 1e-3  # bfloat16 compute really happened


@pytest.mark.claims
def test_the_example_trains_in_bfloat16_as_in_float32():
    """200 AdamW steps: the bfloat16 run's loss falls like the float32 run's (within 2%)."""
    out = subprocess.run([sys.executable, str(EXAMPLES / "train_gpt_adamw.py")], capture_output=True, text=True,
                         check=True).stdout
    start = float(re.search(r"before training: (\S+)", out).group(1))
    f32_loss, bf16_loss = map(float, re.search(r"after 200 steps: float32 (\S+), bfloat16 (\S+)", out).groups())
    assert f32_loss < 0.5 * start and bf16_loss < 0.5 * start
    assert abs(bf16_loss - f32_loss) / f32_loss < 0.02
    assert float(re.search(r"relative difference: (\S+)%", out).group(1)) < 2.0
