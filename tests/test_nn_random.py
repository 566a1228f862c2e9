"""rm.random (stateless keys: the same key, the same numbers, everywhere — keys traced or not)
and the numerical behaviour of rm.nn at the edges. Their gradients are checked in
test_grad_ops.py."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import remat as rm
from remat.backends import threefry
from remat.ops.random_bits import random_fold_in, random_normal, random_uniform

KEY = rm.random.key(0)


def run(backend, fn, *args):
    return rm.tree.map(np.asarray, rm.jit(fn, backend=backend)(*args))


def nodes(graph):
    return [n.op for n in graph.walk()]


# ---------------------------------------------------------------- the hash

# Random123's known answers for Threefry-2x32, 20 rounds: (key, counter) -> output.
KNOWN_ANSWERS = [
    ((0x00000000, 0x00000000), (0x00000000, 0x00000000), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
]


@pytest.mark.parametrize("xp", [np, jnp], ids=["numpy", "jax"])
@pytest.mark.parametrize("key,count,expected", KNOWN_ANSWERS)
def test_threefry_known_answers(xp, key, count, expected):
    words = [xp.asarray([w], dtype=xp.uint32) for w in key + count]
    assert tuple(int(np.asarray(y)[0]) for y in threefry.threefry2x32(xp, *words)) == expected


def test_threefry_matches_jax_on_random_words():
    internal = pytest.importorskip("jax._src.random.threefry2x32")
    k0, k1, x0, x1 = np.random.default_rng(0).integers(0, 2**32, (4, 1000), dtype=np.uint32)
    ours = threefry.threefry2x32(np, k0, k1, x0, x1)
    for i in range(0, 1000, 97):  # jax's hash takes one key at a time
        theirs = internal.threefry_2x32(jnp.asarray([k0[i], k1[i]]), jnp.asarray([x0[i], x1[i]]))
        assert [int(ours[0][i]), int(ours[1][i])] == np.asarray(theirs).tolist()


@pytest.mark.skipif(not jax.config.jax_threefry_partitionable, reason="JAX lays counters out otherwise")
def test_keys_and_bits_are_jax_random_s():
    """Counters laid out as JAX's: split, fold_in and the uniforms' bits equal jax.random's."""
    ours, theirs = rm.random.key(42), jax.random.PRNGKey(42)
    as_i32 = lambda a: np.asarray(a).view(np.int32)  # noqa: E731
    np.testing.assert_array_equal(rm.random.split(ours, 5), as_i32(jax.random.split(theirs, 5)))
    np.testing.assert_array_equal(rm.random.fold_in(ours, 7), as_i32(jax.random.fold_in(theirs, 7)))
    u = np.asarray(rm.random.uniform(ours, (3, 50)))
    np.testing.assert_array_equal(u * 2**24, np.asarray(jax.random.bits(theirs, (3, 50))) >> 8)
    u64 = np.asarray(rm.random.uniform(ours, (50,), "float64"))
    with jax.enable_x64(True):
        bits64 = np.asarray(jax.random.bits(theirs, (50,), jnp.uint64))
    np.testing.assert_array_equal(u64 * 2**53, (bits64 >> 11).astype(np.float64))


# ---------------------------------------------------------------- keys


def test_key_is_a_small_int_tensor():
    k = rm.random.key(2**40 + 5)
    assert k.shape == (2,) and k.dtype == np.int32 and k.is_concrete
    np.testing.assert_array_equal(k, [256, 5])
    np.testing.assert_array_equal(rm.random.key(-1), [-1, -1])  # the seed taken modulo 2**64
    np.testing.assert_array_equal(rm.random.key(np.int64(7)), rm.random.key(rm.asarray(7)))


def test_key_from_a_traced_seed_equals_the_key_from_the_int(backend):
    make = rm.jit(rm.random.key, backend=backend)
    for seed in (0, 5, -1, -(2**31), 2**31 - 1):
        np.testing.assert_array_equal(make(rm.asarray(seed, "int32")), rm.random.key(seed))


def test_key_rejects_a_non_integer_seed():
    with pytest.raises(TypeError, match="seed must be an int, got float"):
        rm.random.key(1.5)
    with pytest.raises(TypeError, match=r"seed must be an int, got a float32 tensor of shape \(\)"):
        rm.random.key(rm.asarray(1.5))
    with pytest.raises(TypeError, match=r"traced seed must be an int32 tensor of shape \(\), got \(2,\)"):
        rm.jit(rm.random.key)(rm.asarray([1, 2]))


def test_split_gives_distinct_keys_deterministically():
    keys = rm.random.split(KEY, 4)
    assert keys.shape == (4, 2) and keys.dtype == np.int32
    rows = {tuple(k) for k in np.asarray(keys).tolist()} | {tuple(np.asarray(KEY).tolist())}
    assert len(rows) == 5
    np.testing.assert_array_equal(keys, rm.random.split(KEY, 4))
    a, b = rm.random.split(KEY)  # unpacking gives keys
    assert a.shape == b.shape == (2,)
    assert rm.random.split(KEY, 0).shape == (0, 2)


def test_split_rows_are_fold_ins():
    keys = rm.random.split(KEY, 3)
    for i in range(3):
        np.testing.assert_array_equal(keys[i], rm.random.fold_in(KEY, i))
    np.testing.assert_array_equal(rm.random.fold_in(KEY, rm.arange(3)), keys)
    assert not np.array_equal(rm.random.fold_in(KEY, 1), rm.random.fold_in(rm.random.key(1), 1))
    np.testing.assert_array_equal(rm.random.fold_in(KEY, -1), rm.random.fold_in(KEY, 2**32 - 1))


def test_a_split_key_draws_other_numbers_than_its_parent():
    (child, _) = rm.random.split(KEY)
    assert not np.array_equal(rm.random.normal(KEY, (8,)), rm.random.normal(child, (8,)))


def test_a_bad_key_is_a_clear_error():
    with pytest.raises(ValueError, match=r"random.normal: a key is an int32 tensor of shape \(2,\), got \(3,\)"):
        rm.random.normal(rm.asarray([1, 2, 3]), (2,))
    with pytest.raises(ValueError, match=r"got \(3, 2\); .*pick one of rm.random.split\(key, n\) by indexing"):
        rm.random.uniform(rm.random.split(KEY, 3))
    with pytest.raises(TypeError, match="random.bernoulli: a key is an int32 tensor .*got float32"):
        rm.random.bernoulli(rm.asarray([0.0, 1.0]))
    with pytest.raises(ValueError, match=r"random.split: n must be a non-negative int, got -1"):
        rm.random.split(KEY, -1)
    with pytest.raises(TypeError, match="random.fold_in: data must be an int or an integer tensor, got float32"):
        rm.random.fold_in(KEY, rm.asarray(1.5))
    with pytest.raises(ValueError, match=r"random.uniform: shape \(-1,\) has a negative size"):
        rm.random.uniform(KEY, (-1,))


def test_an_int64_key_is_taken_as_int32():
    wide = rm.asarray(np.asarray(KEY).astype(np.int64))
    np.testing.assert_array_equal(rm.random.uniform(wide, (4,)), rm.random.uniform(KEY, (4,)))


def test_the_primitives_check_their_operands():
    with pytest.raises(TypeError, match=r"random_uniform: a key is int32, got float32 \[operands: \(2,\) float32\]"):
        random_uniform(rm.asarray([1.0, 2.0]), (3,), "float32")
    with pytest.raises(ValueError, match=r"random_uniform: a key has shape \(2,\) .*got \(3,\)"):
        random_uniform(rm.asarray([1, 2, 3]), (3,), "float32")
    with pytest.raises(TypeError, match="random_uniform: dtype must be a float dtype, got int32"):
        random_uniform(KEY, (3,), "int32")
    with pytest.raises(ValueError, match="fewer than 2\\*\\*32 elements"):
        rm.make_graph(lambda k: random_uniform(k, (2**16, 2**16), "float32"))(KEY)
    with pytest.raises(TypeError, match="random_fold_in: data must be int32, got int64"):
        random_fold_in(KEY, rm.asarray(np.int64(3)))
    with pytest.raises(ValueError, match=r"random_fold_in: shapes \(3,\) and \(2,\) do not broadcast"):
        random_fold_in(rm.random.split(KEY, 3), rm.asarray([1, 2]))


def test_a_batch_of_keys_draws_a_batch_of_arrays():
    keys = rm.random.split(KEY, 3)
    batch = np.asarray(random_uniform(keys, (4,), "float32"))
    np.testing.assert_array_equal(batch, np.stack([rm.random.uniform(k, (4,)) for k in keys]))


# ---------------------------------------------------------------- the same key, the same numbers

DRAWS = [
    lambda k: rm.random.normal(k, (3, 4)),
    lambda k: rm.random.uniform(k, (5,), "float64", -1.0, 3.0),
    lambda k: rm.random.bernoulli(k, 0.3, (6,)),
    lambda k: rm.nn.dropout(k, rm.ones((4, 4)), 0.5),
]
DRAW_IDS = ["normal", "uniform", "bernoulli", "dropout"]


def assert_same_draw(got, expected, backend):
    np.testing.assert_array_equal(got, expected)  # to the bit on every backend, normal numbers too


@pytest.mark.parametrize("draw", DRAWS, ids=DRAW_IDS)
def test_same_key_same_numbers_eagerly_and_in_traces(draw, backend):
    eager = np.asarray(draw(KEY))
    np.testing.assert_array_equal(draw(KEY), eager)
    jitted = rm.jit(lambda x: draw(KEY) + x, backend=backend)
    assert_same_draw(jitted(rm.zeros((), eager.dtype)), eager, backend)
    assert_same_draw(jitted(rm.zeros((), eager.dtype)), eager, backend)  # and from the cache
    in_checkpoint = rm.jit(lambda x: rm.checkpoint(lambda h: draw(KEY) + h, x), backend=backend)
    assert_same_draw(in_checkpoint(rm.zeros((), eager.dtype)), eager, backend)


@pytest.mark.parametrize("draw", DRAWS, ids=DRAW_IDS)
def test_keys_are_jit_arguments(draw, backend):
    f = rm.jit(draw, backend=backend)
    for seed in (0, 1, 2**40 + 3):
        k = rm.random.key(seed)
        assert_same_draw(np.asarray(f(k)), np.asarray(draw(k)), backend)
    assert f.trace_count == 1  # one program for every key
    assert not np.array_equal(f(rm.random.key(0)), f(rm.random.key(1)))


def test_normal_numbers_are_one_op_of_the_graph():
    g = rm.make_graph(lambda k: rm.random.normal(k, (2, 3), "float64"))(KEY)
    assert nodes(g) == ["random_normal"] and (g.outputs[0].shape, g.outputs[0].dtype) == ((2, 3), np.float64)
    # Each number takes two counters, so a draw holds fewer than 2**31.
    with pytest.raises(ValueError, match=r"random_normal: shape \(65536, 32768\) .*fewer than 2\*\*31 elements"):
        rm.make_graph(lambda k: random_normal(k, (2**16, 2**15), "float32"))(KEY)
    keys = rm.random.split(KEY, 3)
    np.testing.assert_array_equal(random_normal(keys, (4,), "float32"),
                                  np.stack([rm.random.normal(k, (4,)) for k in keys]))


def test_random_numbers_are_ops_of_the_graph_not_constants():
    g = rm.make_graph(lambda k: rm.random.uniform(rm.random.split(k)[1], (1000,)))(KEY)
    assert "random_uniform" in nodes(g) and "random_fold_in" in nodes(g)
    assert all(a.size <= 2 for a in g.constants.values())  # only the split's counters


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_uniform_and_bernoulli_are_bit_identical_across_backends(dtype):
    def draws(k):
        a, b = rm.random.split(k)
        return (rm.random.uniform(a, (1000, 37), dtype), rm.random.bernoulli(b, 0.3, (513,)),
                rm.nn.dropout(b, rm.ones((64, 64), dtype), 0.25))

    for ours, theirs in zip(run("numpy", draws, KEY), run("xla", draws, KEY)):
        assert ours.dtype == theirs.dtype
        np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_normal_is_bit_identical_across_backends(dtype):
    draw = lambda k: rm.random.normal(k, (5000,), dtype)  # noqa: E731
    np.testing.assert_array_equal(run("xla", draw, KEY), run("numpy", draw, KEY))


def test_keys_are_grad_arguments(backend):
    x = rm.asarray(np.linspace(1, 2, 16), "float32")
    loss = lambda x, k: rm.sum(rm.nn.dropout(k, x, 0.5) * x)  # noqa: E731
    for seed in (3, 4):
        k = rm.random.key(seed)
        mask = np.asarray(rm.random.bernoulli(k, 0.5, (16,)))
        expected = np.where(mask, 4 * np.asarray(x), 0.0)
        np.testing.assert_allclose(rm.grad(loss)(x, k), expected, rtol=1e-6)
        np.testing.assert_allclose(run(backend, rm.grad(loss), x, k), expected, rtol=1e-6)


def test_a_train_step_takes_and_returns_its_key(backend):
    """The key is carried through `rm.jit(train_step)` like the parameters."""
    w0 = rm.asarray(np.random.default_rng(0).normal(size=(8, 8)), "float32")
    x = rm.ones((4, 8))

    def train_step(w, key):
        key, drop = rm.random.split(key)
        loss = lambda w: rm.sum(rm.checkpoint(lambda h: rm.nn.dropout(drop, rm.tanh(h @ w), 0.5), x))  # noqa: E731
        return w - 0.1 * rm.grad(loss)(w), key

    step = rm.jit(train_step, backend=backend)
    w, key = w0, rm.random.key(0)
    ew, ekey = w0, rm.random.key(0)
    for _ in range(3):
        w, key = step(w, key)
        ew, ekey = train_step(ew, ekey)
        np.testing.assert_array_equal(key, ekey)
        np.testing.assert_allclose(w, ew, rtol=1e-5, atol=1e-6)
    assert step.trace_count == 1


def test_picking_a_split_key_inside_a_trace(backend):
    def f(x, key):
        keys = rm.random.split(key, 3)
        return x + rm.random.uniform(keys[1], (2,))

    np.testing.assert_array_equal(run(backend, f, rm.zeros((2,)), KEY),
                                  rm.random.uniform(rm.random.split(KEY, 3)[1], (2,)))


def test_fold_in_a_traced_step_counter(backend):
    f = rm.jit(lambda k, step: rm.random.uniform(rm.random.fold_in(k, step), (3,)), backend=backend)
    for step in (0, 7):
        np.testing.assert_array_equal(f(KEY, rm.asarray(step)), rm.random.uniform(rm.random.fold_in(KEY, step), (3,)))


# ---------------------------------------------------------------- vectorized keys


def test_vmap_over_keys_draws_per_key():
    keys = rm.random.split(KEY, 3)
    out = rm.vmap(lambda k: rm.random.uniform(k, (4,)))(keys)
    np.testing.assert_array_equal(out, np.stack([rm.random.uniform(k, (4,)) for k in keys]))
    split = rm.vmap(lambda k: rm.random.split(k, 2))(keys)
    np.testing.assert_array_equal(split, np.stack([rm.random.split(k, 2) for k in keys]))


def test_vmap_over_fold_in_data_and_keys():
    keys = rm.random.split(KEY, 3)
    np.testing.assert_array_equal(rm.vmap(lambda i: rm.random.fold_in(KEY, i))(rm.arange(4)), rm.random.split(KEY, 4))
    both = rm.vmap(lambda k: rm.vmap(lambda i: rm.random.fold_in(k, i))(rm.arange(4)))(keys)
    np.testing.assert_array_equal(both, np.stack([rm.random.split(k, 4) for k in keys]))
    same = rm.vmap(lambda k, i: rm.random.fold_in(k, i))(keys, rm.arange(3))
    np.testing.assert_array_equal(same, np.stack([rm.random.fold_in(k, i) for i, k in enumerate(keys)]))


def test_per_example_dropout_under_vmap(backend):
    x = rm.ones((3, 8))
    keys = rm.random.split(KEY, 3)
    out = run(backend, rm.vmap(lambda k, row: rm.nn.dropout(k, row, 0.5)), keys, x)
    np.testing.assert_array_equal(out, np.stack([rm.nn.dropout(k, x[0], 0.5) for k in keys]))


# ---------------------------------------------------------------- distributions

N = 100_000


def test_uniform_statistics():
    u = np.asarray(rm.random.uniform(KEY, (N,)), np.float64)
    assert 0.0 <= u.min() < 1e-4 and 1 - 1e-4 < u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.005 and abs(u.var() - 1 / 12) < 0.002
    np.testing.assert_array_equal(u * 2**24, np.round(u * 2**24))  # exact multiples of 2**-24
    counts = np.bincount((u * 10).astype(int), minlength=10)
    assert np.abs(counts - N / 10).max() < 5 * math.sqrt(N / 10)
    u2 = np.asarray(rm.random.uniform(KEY, (N,), minval=2.0, maxval=4.0))
    assert u2.dtype == np.float32 and u2.min() >= 2.0 and u2.max() <= 4.0 and abs(u2.mean() - 3.0) < 0.01


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_normal_statistics(dtype):
    z = np.asarray(rm.random.normal(KEY, (N,), dtype))
    assert z.dtype == np.dtype(dtype) and np.isfinite(z).all()
    assert abs(z.mean()) < 0.015 and abs(z.var() - 1.0) < 0.025
    assert abs((np.abs(z) < 1).mean() - 0.6827) < 0.006  # the shape, not only the moments
    assert abs(np.mean(z**3)) < 0.05 and abs(np.mean(z**4) - 3.0) < 0.1


def test_neighbouring_numbers_are_uncorrelated():
    u = np.asarray(rm.random.uniform(KEY, (N,)), np.float64)
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 0.015
    a, b = (np.asarray(rm.random.uniform(k, (N,)), np.float64) for k in rm.random.split(KEY))
    assert abs(np.corrcoef(a, b)[0, 1]) < 0.015


def test_uniform_bounds_may_be_tensors():
    lo = rm.asarray([0.0, 10.0])
    u = np.asarray(rm.random.uniform(KEY, (2,), minval=lo, maxval=lo + 1.0))
    assert 0.0 <= u[0] < 1.0 and 10.0 <= u[1] < 11.0


def test_integer_dtype_is_rejected():
    with pytest.raises(TypeError, match="random.normal: dtype must be a float dtype"):
        rm.random.normal(KEY, (2,), "int32")


def test_bernoulli_probability_and_shape():
    b = rm.random.bernoulli(KEY, 0.25, (N,))
    assert b.dtype == np.bool_
    assert abs(np.asarray(b).mean() - 0.25) < 0.007
    assert rm.random.bernoulli(KEY, rm.full((3, 2), 0.5)).shape == (3, 2)


def test_bernoulli_with_a_traced_probability(backend):
    f = rm.jit(lambda p: rm.random.bernoulli(KEY, p, (1000,)), backend=backend)
    np.testing.assert_array_equal(f(rm.asarray(0.0)), np.zeros(1000, bool))
    np.testing.assert_array_equal(f(rm.asarray(1.0)), np.ones(1000, bool))


# ---------------------------------------------------------------- dropout


def test_dropout_scales_the_kept_elements():
    y = np.asarray(rm.nn.dropout(KEY, rm.ones((10000,)), 0.2))
    assert set(np.unique(y).tolist()) == {0.0, 1.25}
    assert abs((y == 0).mean() - 0.2) < 0.02


def test_dropout_deterministic_and_rate_zero_are_the_identity():
    x = rm.asarray([1.0, 2.0])
    assert rm.nn.dropout(KEY, x, 0.5, deterministic=True) is x
    assert rm.nn.dropout(KEY, x, 0.0) is x


def test_dropout_rate_one_gives_zeros_and_finite_gradients():
    x = rm.asarray([1.0, 2.0])
    np.testing.assert_array_equal(rm.nn.dropout(KEY, x, 1.0), [0.0, 0.0])
    np.testing.assert_array_equal(rm.grad(lambda x: rm.sum(rm.nn.dropout(KEY, x, 1.0)))(x), [0.0, 0.0])


def test_dropout_rejects_a_bad_rate():
    with pytest.raises(ValueError, match="rate"):
        rm.nn.dropout(KEY, rm.ones((2,)), 1.5)


def test_dropout_gradient_is_the_scaled_mask_through_a_checkpoint():
    x = rm.asarray(np.linspace(1, 2, 16), "float32")
    mask = np.asarray(rm.random.bernoulli(KEY, 0.5, (16,)))
    loss = lambda x: rm.sum(rm.checkpoint(lambda h: rm.nn.dropout(KEY, h, 0.5) * h, x))  # noqa: E731
    np.testing.assert_allclose(rm.grad(loss)(x), np.where(mask, 4 * np.asarray(x), 0.0), rtol=1e-6)


@pytest.mark.parametrize("explicit", [True, False], ids=["key-explicit", "key-captured"])
def test_a_recomputed_dropout_mask_equals_the_original(explicit, backend):
    """A traced key through a checkpoint: the backward pass redraws the mask (the gradient graph
    holds the draw twice) and draws exactly the forward's, so the gradient is the scaled mask."""
    x = rm.asarray(np.linspace(1, 2, 64).reshape(8, 8), "float32")

    def loss(x, key):
        if explicit:
            y = rm.checkpoint(lambda h, k: rm.nn.dropout(k, h, 0.5) * h, x, key)
        else:
            y = rm.checkpoint(lambda h: rm.nn.dropout(key, h, 0.5) * h, x)
        return rm.sum(y)

    step = rm.value_and_grad(loss)
    assert nodes(rm.make_graph(step)(x, KEY)).count("random_uniform") == 2  # drawn, then redrawn
    value, grad = run(backend, step, x, KEY)
    mask = np.asarray(rm.random.bernoulli(KEY, 0.5, (8, 8)))
    np.testing.assert_allclose(value, np.sum(np.where(mask, 2 * np.asarray(x) ** 2, 0.0)), rtol=1e-5)
    np.testing.assert_allclose(grad, np.where(mask, 4 * np.asarray(x), 0.0), rtol=1e-6)


# ---------------------------------------------------------------- nn at the edges


def test_softmax_of_huge_logits_is_finite_and_normalised():
    p = np.asarray(rm.nn.softmax(rm.asarray([[1e4, 1e4 - 1.0, -1e4]]), axis=-1))
    np.testing.assert_allclose(p.sum(), 1.0, rtol=1e-6)
    np.testing.assert_allclose(p[0, :2], [1 / (1 + math.exp(-1)), 1 / (1 + math.e)], rtol=1e-5)


def test_log_softmax_and_its_gradient_stay_finite_for_huge_logits():
    x = rm.asarray([1e4, 0.0, -1e4])
    np.testing.assert_allclose(rm.nn.log_softmax(x), [0.0, -1e4, -2e4], rtol=1e-6)
    g = np.asarray(rm.grad(lambda x: rm.nn.log_softmax(x)[1])(x))
    assert np.isfinite(g).all()
    np.testing.assert_allclose(g, [-1.0, 1.0, 0.0], atol=1e-6)


@pytest.mark.filterwarnings("ignore:divide by zero encountered in log")
def test_logsumexp_of_minus_infinity():
    assert float(rm.nn.logsumexp(rm.asarray([-math.inf, -math.inf]))) == -math.inf
    np.testing.assert_allclose(rm.nn.logsumexp(rm.asarray([-math.inf, 0.0])), 0.0)
    g = rm.grad(lambda x: rm.nn.logsumexp(x))(rm.asarray([-math.inf, 0.0, 0.0]))
    np.testing.assert_allclose(g, [0.0, 0.5, 0.5])


def test_logsumexp_keepdims_and_axes():
    x = np.random.default_rng(0).normal(size=(2, 3, 4))
    out = rm.nn.logsumexp(rm.asarray(x), axis=(0, 2), keepdims=True)
    assert out.shape == (1, 3, 1)
    np.testing.assert_allclose(out, np.log(np.exp(x).sum(axis=(0, 2), keepdims=True)), rtol=1e-12)


def test_sigmoid_and_its_gradient_at_the_extremes():
    x = rm.asarray([-1000.0, -30.0, 0.0, 30.0, 1000.0])
    s = np.asarray(rm.nn.sigmoid(x))
    with np.errstate(over="ignore"):
        np.testing.assert_allclose(s, 1 / (1 + np.exp(-np.asarray(x, np.float64))), rtol=1e-6)
    g = np.asarray(rm.grad(lambda x: rm.sum(rm.nn.sigmoid(x)))(x))
    assert np.isfinite(g).all() and g[2] == 0.25 and g[0] == 0.0


def test_gelu_forms_agree_closely():
    x = rm.asarray(np.linspace(-6, 6, 101))
    exact = np.asarray(rm.nn.gelu(x, approximate=False))
    erf = np.vectorize(math.erf)(np.asarray(x) / math.sqrt(2))
    np.testing.assert_allclose(exact, np.asarray(x) * 0.5 * (1 + erf), rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(rm.nn.gelu(x), exact, atol=2e-3)


def test_layer_norm_without_scale_and_shift_standardises():
    x = rm.asarray(np.random.default_rng(0).normal(3.0, 2.0, size=(4, 64)), "float32")
    y = np.asarray(rm.nn.layer_norm(x))
    np.testing.assert_allclose(y.mean(axis=-1), 0.0, atol=1e-5)
    np.testing.assert_allclose(y.std(axis=-1), 1.0, rtol=1e-4)


def test_integer_inputs_are_promoted_to_float():
    assert rm.nn.relu(rm.asarray([1, -1])).dtype == np.int32  # relu keeps the dtype
    assert rm.nn.softmax(rm.asarray([1, 2])).dtype == np.float32
    assert rm.nn.sigmoid(rm.asarray([0])).dtype == np.float32


def test_one_hot():
    np.testing.assert_array_equal(rm.nn.one_hot(rm.asarray([0, 2, 5, -1]), 3),
                                  [[1, 0, 0], [0, 0, 1], [0, 0, 0], [0, 0, 0]])
    assert rm.nn.one_hot(rm.asarray([[1]]), 2, dtype="float64").dtype == np.float64
    traced = rm.jit(lambda y: rm.nn.one_hot(y, 3))(rm.asarray([1]))
    np.testing.assert_array_equal(traced, [[0, 1, 0]])


def test_one_hot_rejects_float_labels():
    with pytest.raises(TypeError, match="labels must be integers, got float32"):
        rm.nn.one_hot(rm.asarray([1.0]), 3)


def test_cross_entropy_matches_its_definition():
    rng = np.random.default_rng(0)
    logits, labels = rng.normal(size=(4, 5)), rng.integers(0, 5, 4)
    lp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    np.testing.assert_allclose(rm.nn.cross_entropy(rm.asarray(logits), rm.asarray(labels)),
                               -lp[np.arange(4), labels].mean(), rtol=1e-12)


def test_cross_entropy_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match=r"logits \(4, 5\) must be labels \(3,\)"):
        rm.nn.cross_entropy(rm.zeros((4, 5)), rm.asarray([0, 1, 2]))


def test_uniform_with_maxval_below_minval_gives_minval_as_jax(backend):
    import jax

    got = rm.jit(lambda k: rm.random.uniform(k, (64,), minval=2.0, maxval=1.0), backend=backend)(KEY)
    want = jax.random.uniform(jax.random.key(0), (64,), minval=2.0, maxval=1.0)
    np.testing.assert_array_equal(np.asarray(got), np.full(64, 2.0, np.float32))
    np.testing.assert_array_equal(np.asarray(want), np.full(64, 2.0, np.float32))
    inside = np.asarray(rm.random.uniform(KEY, (1000,), minval=-1.0, maxval=3.0))
    assert inside.min() >= -1.0 and inside.max() < 3.0
