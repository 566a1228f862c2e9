"""Properties over generated inputs (hypothesis): broadcasting agrees with NumPy, and where the
checkpoints go — and which policy they use — never changes a gradient."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import remat as rm
from remat.models import residual_mlp_loss, residual_mlp_params

SETTINGS = settings(max_examples=25, deadline=None)
BINARY = [rm.add, rm.subtract, rm.multiply, rm.maximum, rm.minimum]


@SETTINGS
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=4, max_side=4),
       op=st.sampled_from(BINARY), seed=st.integers(0, 2**16))
def test_binary_broadcasting_matches_numpy(shapes, op, seed):
    rng = np.random.default_rng(seed)
    a, b = (rng.normal(size=s).astype(np.float32) for s in shapes.input_shapes)
    want = getattr(np, op.__name__)(a, b)
    got = rm.jit(op)(a, b)
    assert got.shape == shapes.result_shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6)
    # The gradient of each operand keeps that operand's shape (un-broadcasting).
    ga, gb = rm.grad(lambda a, b: rm.sum(op(a, b) * 1.5), (0, 1))(a, b)
    assert ga.shape == a.shape and gb.shape == b.shape


POLICIES = [None, rm.policies.everything_saveable, rm.policies.dots_saveable]


@SETTINGS
@given(depth=st.integers(1, 6), segment=st.integers(1, 6), policy=st.sampled_from(POLICIES),
       seed=st.integers(0, 2**16))
def test_checkpoint_placement_and_policy_never_change_gradients(depth, segment, policy, seed):
    params = residual_mlp_params(depth, 8, seed=seed)
    x = rm.asarray(np.random.default_rng(seed).normal(size=(4, 8)), "float32")
    plain_value, plain = rm.value_and_grad(lambda p: residual_mlp_loss(p, x, "none"))(params)
    value, grads = rm.value_and_grad(lambda p: residual_mlp_loss(p, x, segment, policy))(params)
    np.testing.assert_allclose(value, plain_value, rtol=1e-6)
    for got, want in zip(rm.tree.leaves(grads), rm.tree.leaves(plain)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


@SETTINGS
@given(batch=st.integers(1, 5), width=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_vectorized_layer_equals_a_loop(batch, width, seed):
    rng = np.random.default_rng(seed)
    xs, w = rng.normal(size=(batch, width)).astype(np.float32), rng.normal(size=(width, width)).astype(np.float32)

    def layer(x):
        return rm.checkpoint(lambda h: rm.tanh(h @ w) + h, x)

    got = rm.devectorize(layer(rm.vectorize(rm.asarray(xs), "b")))
    want = np.stack([np.asarray(layer(rm.asarray(x))) for x in xs])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
