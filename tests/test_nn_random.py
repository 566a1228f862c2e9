"""rm.random (stateless keys: the same key, the same numbers, everywhere) and the numerical
behaviour of rm.nn at the edges. Their gradients are checked in test_grad_ops.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

import remat as rm

KEY = rm.random.key(0)

# ---------------------------------------------------------------- keys


def test_key_is_a_small_concrete_int_tensor():
    k = rm.random.key(2**40 + 5)
    assert k.shape == (2,) and k.dtype == np.int32 and k.is_concrete
    np.testing.assert_array_equal(k, [256, 5])
    np.testing.assert_array_equal(rm.random.key(-1), [-1, -1])  # the seed taken modulo 2**64


def test_key_rejects_a_non_integer_seed():
    with pytest.raises(TypeError, match="seed must be an int"):
        rm.random.key(1.5)


def test_split_gives_distinct_keys_deterministically():
    keys = rm.random.split(KEY, 4)
    assert isinstance(keys, tuple) and len(keys) == 4
    rows = {tuple(np.asarray(k)) for k in keys} | {tuple(np.asarray(KEY))}
    assert len(rows) == 5
    for a, b in zip(keys, rm.random.split(KEY, 4)):
        np.testing.assert_array_equal(a, b)


def test_a_split_key_draws_other_numbers_than_its_parent():
    (child, _) = rm.random.split(KEY)
    assert not np.array_equal(rm.random.normal(KEY, (8,)), rm.random.normal(child, (8,)))


def test_a_bad_key_is_a_clear_error():
    with pytest.raises(ValueError, match=r"key is an int32 tensor of shape \(2,\), got \(3,\)"):
        rm.random.normal(rm.asarray([1, 2, 3]), (2,))


@pytest.mark.parametrize(
    "draw",
    [
        lambda k: rm.random.normal(k, (3, 4)),
        lambda k: rm.random.uniform(k, (5,), "float64", -1.0, 3.0),
        lambda k: rm.random.bernoulli(k, 0.3, (6,)),
        lambda k: rm.nn.dropout(k, rm.ones((4, 4)), 0.5),
    ],
    ids=["normal", "uniform", "bernoulli", "dropout"],
)
def test_same_key_same_numbers_eagerly_and_in_traces(draw, backend):
    eager = np.asarray(draw(KEY))
    np.testing.assert_array_equal(draw(KEY), eager)
    jitted = rm.jit(lambda x: draw(KEY) + x, backend=backend)
    np.testing.assert_array_equal(jitted(rm.zeros((), eager.dtype)), eager)
    np.testing.assert_array_equal(jitted(rm.zeros((), eager.dtype)), eager)  # and from the cache
    in_checkpoint = rm.jit(lambda x: rm.checkpoint(lambda h: draw(KEY) + h, x), backend=backend)
    np.testing.assert_array_equal(in_checkpoint(rm.zeros((), eager.dtype)), eager)


def test_a_traced_key_is_a_clear_error():
    with pytest.raises(TypeError, match="key must be concrete.*close over it"):
        rm.jit(lambda k: rm.random.normal(k, (2,)))(KEY)


def test_picking_a_split_key_inside_a_trace_stays_concrete():
    def f(x):
        keys = rm.random.split(KEY, 3)
        return x + rm.random.normal(keys[1], (2,))

    np.testing.assert_array_equal(rm.jit(f)(rm.zeros((2,))), rm.random.normal(rm.random.split(KEY, 3)[1], (2,)))


def test_uniform_and_normal_statistics():
    u = np.asarray(rm.random.uniform(KEY, (20000,), minval=2.0, maxval=4.0))
    assert u.dtype == np.float32 and u.min() >= 2.0 and u.max() < 4.0
    assert abs(u.mean() - 3.0) < 0.02
    z = np.asarray(rm.random.normal(KEY, (20000,), "float64"))
    assert z.dtype == np.float64 and abs(z.mean()) < 0.03 and abs(z.std() - 1.0) < 0.03


def test_uniform_bounds_may_be_tensors():
    lo = rm.asarray([0.0, 10.0])
    u = np.asarray(rm.random.uniform(KEY, (2,), minval=lo, maxval=lo + 1.0))
    assert 0.0 <= u[0] < 1.0 and 10.0 <= u[1] < 11.0


def test_integer_dtype_is_rejected():
    with pytest.raises(TypeError, match="float dtype"):
        rm.random.normal(KEY, (2,), "int32")


def test_bernoulli_probability_and_shape():
    b = rm.random.bernoulli(KEY, 0.25, (20000,))
    assert b.dtype == np.bool_
    assert abs(np.asarray(b).mean() - 0.25) < 0.02
    assert rm.random.bernoulli(KEY, rm.full((3, 2), 0.5)).shape == (3, 2)


def test_bernoulli_with_a_traced_probability():
    f = rm.jit(lambda p: rm.random.bernoulli(KEY, p, (1000,)))
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
