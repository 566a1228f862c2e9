"""The reference models written twice — against remat and against jax.numpy — on the same
parameters: the same loss and the same gradients, in float32, with and without checkpoints."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import remat as rm
from remat.models import residual_mlp_params, unet_loss

RTOL, ATOL = 1e-4, 1e-5


def _assert_trees_close(actual, expected):
    a_leaves, a_tree = rm.tree.flatten(actual)
    e_leaves = jax.tree_util.tree_leaves(expected)
    assert len(a_leaves) == len(e_leaves), a_tree
    for a, e in zip(a_leaves, e_leaves):
        assert a.dtype == np.float32
        np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=RTOL, atol=ATOL)


def _to_remat(tree):
    return rm.tree.map(lambda a: rm.asarray(a, "float32"), tree)


def _to_jax(tree):
    return rm.tree.map(lambda a: jnp.asarray(a, jnp.float32), tree)


# ---------------------------------------------------------------- residual MLP

DEPTH, WIDTH, BATCH, CLASSES = 4, 16, 8, 5


def mlp_params(seed=0):
    rng = np.random.default_rng(seed)
    layers = [
        {"w": rng.normal(0, 1 / math.sqrt(WIDTH), (WIDTH, WIDTH)), "b": rng.normal(0, 0.1, WIDTH)}
        for _ in range(DEPTH)
    ]
    return {"layers": layers, "head": rng.normal(0, 1 / math.sqrt(WIDTH), (WIDTH, CLASSES))}


def mlp_data(seed=1):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(BATCH, WIDTH)).astype(np.float32), rng.integers(0, CLASSES, BATCH)


def rm_mlp_loss(params, x, labels, checkpoint=False, key=None):
    h = x
    for i, layer in enumerate(params["layers"]):

        def block(h, layer=layer, i=i):  # the weights are captured from scope
            out = h + rm.tanh(h @ layer["w"] + layer["b"])
            return out if key is None else rm.nn.dropout(rm.random.split(key, DEPTH)[i], out, 0.25)

        h = rm.checkpoint(block, h) if checkpoint else block(h)
    return rm.nn.cross_entropy(h @ params["head"], labels)


def jax_mlp_loss(params, x, labels, masks=None):
    h = x
    for i, layer in enumerate(params["layers"]):
        h = h + jnp.tanh(h @ layer["w"] + layer["b"])
        if masks is not None:
            h = jnp.where(masks[i], h / 0.75, 0.0)
    logp = jax.nn.log_softmax(h @ params["head"], axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=-1))


jax_mlp_step = jax.jit(jax.value_and_grad(jax_mlp_loss))  # compiled once for all the tests


@pytest.mark.parametrize("checkpoint", [False, True], ids=["plain", "checkpointed"])
def test_residual_mlp_matches_jax(checkpoint):
    params, (x, labels) = mlp_params(), mlp_data()
    loss, grads = rm.value_and_grad(rm_mlp_loss)(_to_remat(params), rm.asarray(x), rm.asarray(labels),
                                                 checkpoint)
    jloss, jgrads = jax_mlp_step(_to_jax(params), x, labels)
    np.testing.assert_allclose(float(loss), float(jloss), rtol=RTOL)
    _assert_trees_close(grads, jgrads)


@pytest.mark.parametrize("checkpoint", [False, True], ids=["plain", "checkpointed"])
def test_residual_mlp_with_dropout_matches_jax_on_the_same_masks(checkpoint):
    """The recomputation inside each checkpoint draws the same dropout mask as the forward."""
    params, (x, labels) = mlp_params(), mlp_data()
    key = rm.random.key(3)
    masks = [np.asarray(rm.random.bernoulli(k, 0.75, (BATCH, WIDTH))) for k in rm.random.split(key, DEPTH)]
    loss_fn = lambda p: rm_mlp_loss(p, rm.asarray(x), rm.asarray(labels), checkpoint, key)  # noqa: E731
    loss, grads = rm.value_and_grad(loss_fn)(_to_remat(params))
    jloss, jgrads = jax_mlp_step(_to_jax(params), x, labels, masks)
    np.testing.assert_allclose(float(loss), float(jloss), rtol=RTOL)
    _assert_trees_close(grads, jgrads)


# ---------------------------------------------------------------- GPT-style block

VOCAB, SEQ, DIM, HEADS, LAYERS = 11, 6, 16, 2, 2


def gpt_params(seed=0):
    rng = np.random.default_rng(seed)

    def w(*shape):
        return rng.normal(0, 1 / math.sqrt(shape[0]), shape)

    def block():
        return {
            "ln1": {"g": 1 + 0.1 * rng.normal(size=DIM), "b": 0.1 * rng.normal(size=DIM)},
            "qkv": w(DIM, 3 * DIM),
            "proj": w(DIM, DIM),
            "ln2": {"g": 1 + 0.1 * rng.normal(size=DIM), "b": 0.1 * rng.normal(size=DIM)},
            "up": w(DIM, 4 * DIM), "up_b": 0.1 * rng.normal(size=4 * DIM),
            "down": w(4 * DIM, DIM), "down_b": 0.1 * rng.normal(size=DIM),
        }

    return {
        "tok": rng.normal(0, 0.5, (VOCAB, DIM)),
        "pos": rng.normal(0, 0.5, (SEQ, DIM)),
        "blocks": [block() for _ in range(LAYERS)],
        "ln_f": {"g": np.ones(DIM), "b": np.zeros(DIM)},
        "unembed": w(DIM, VOCAB),
    }


def gpt_data(batch=3, seed=1):
    tokens = np.random.default_rng(seed).integers(0, VOCAB, (batch, SEQ + 1))
    return tokens[:, :-1], tokens[:, 1:]


CAUSAL = np.tril(np.ones((SEQ, SEQ), bool))


def rm_attention(h, p):
    b, t, d = h.shape
    qkv = rm.reshape(h @ p["qkv"], (b, t, 3, HEADS, d // HEADS))
    q, k, v = (rm.permute_dims(qkv[:, :, i], (0, 2, 1, 3)) for i in range(3))  # (b, heads, t, dh)
    scores = q @ rm.matrix_transpose(k) * (1.0 / math.sqrt(d // HEADS))
    att = rm.nn.softmax(rm.where(CAUSAL, scores, -math.inf), axis=-1)
    out = rm.reshape(rm.permute_dims(att @ v, (0, 2, 1, 3)), (b, t, d))
    return out @ p["proj"]


def rm_block(h, p):
    h = h + rm_attention(rm.nn.layer_norm(h, p["ln1"]["g"], p["ln1"]["b"]), p)
    u = rm.nn.gelu(rm.nn.layer_norm(h, p["ln2"]["g"], p["ln2"]["b"]) @ p["up"] + p["up_b"])
    return h + u @ p["down"] + p["down_b"]


def rm_gpt_loss(params, tokens, targets, checkpoint=False):
    h = rm.take(params["tok"], tokens, axis=0) + params["pos"]
    for p in params["blocks"]:
        h = rm.checkpoint(lambda h, p=p: rm_block(h, p), h) if checkpoint else rm_block(h, p)
    h = rm.nn.layer_norm(h, params["ln_f"]["g"], params["ln_f"]["b"])
    return rm.nn.cross_entropy(h @ params["unembed"], targets)


def jax_ln(x, g, b, eps=1e-5):
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - mu) ** 2, axis=-1, keepdims=True)
    return (x - mu) / jnp.sqrt(var + eps) * g + b


def jax_attention(h, p):
    b, t, d = h.shape
    qkv = (h @ p["qkv"]).reshape(b, t, 3, HEADS, d // HEADS)
    q, k, v = (jnp.transpose(qkv[:, :, i], (0, 2, 1, 3)) for i in range(3))
    scores = q @ jnp.swapaxes(k, -1, -2) / math.sqrt(d // HEADS)
    att = jax.nn.softmax(jnp.where(CAUSAL, scores, -jnp.inf), axis=-1)
    return jnp.transpose(att @ v, (0, 2, 1, 3)).reshape(b, t, d) @ p["proj"]


def jax_block(h, p):
    h = h + jax_attention(jax_ln(h, p["ln1"]["g"], p["ln1"]["b"]), p)
    u = jax.nn.gelu(jax_ln(h, p["ln2"]["g"], p["ln2"]["b"]) @ p["up"] + p["up_b"])
    return h + u @ p["down"] + p["down_b"]


def jax_gpt_loss(params, tokens, targets):
    h = jnp.take(params["tok"], tokens, axis=0) + params["pos"]
    for p in params["blocks"]:
        h = jax_block(h, p)
    h = jax_ln(h, params["ln_f"]["g"], params["ln_f"]["b"])
    logp = jax.nn.log_softmax(h @ params["unembed"], axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, targets[..., None], axis=-1))


jax_gpt_step = jax.jit(jax.value_and_grad(jax_gpt_loss))


@pytest.mark.parametrize("checkpoint", [False, True], ids=["plain", "checkpointed"])
def test_gpt_block_matches_jax(checkpoint):
    params, (tokens, targets) = gpt_params(), gpt_data()
    loss, grads = rm.value_and_grad(rm_gpt_loss)(
        _to_remat(params), rm.asarray(tokens), rm.asarray(targets), checkpoint
    )
    jloss, jgrads = jax_gpt_step(_to_jax(params), tokens, targets)
    np.testing.assert_allclose(float(loss), float(jloss), rtol=RTOL)
    _assert_trees_close(grads, jgrads)


def test_gpt_gradient_under_jit_equals_eager(backend):
    params, (tokens, targets) = _to_remat(gpt_params()), gpt_data()
    step = rm.jit(rm.value_and_grad(rm_gpt_loss), backend=backend, static_argnums=3)
    loss, grads = step(params, rm.asarray(tokens), rm.asarray(targets), True)
    eager_loss, eager_grads = rm.value_and_grad(rm_gpt_loss)(params, rm.asarray(tokens), rm.asarray(targets))
    np.testing.assert_allclose(float(loss), float(eager_loss), rtol=1e-6)
    for a, b in zip(rm.tree.leaves(grads), rm.tree.leaves(eager_grads)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def test_causal_mask_hides_the_future():
    """The loss at position t does not depend on tokens after t."""
    params, (tokens, _) = _to_remat(gpt_params()), gpt_data(batch=1)
    h = rm.take(params["tok"], rm.asarray(tokens), axis=0) + params["pos"]
    out = rm_block(h, params["blocks"][0])
    changed = h + rm.asarray(np.where(np.arange(SEQ)[None, :, None] >= 3, 5.0, 0.0), "float32")
    np.testing.assert_allclose(np.asarray(rm_block(changed, params["blocks"][0]))[:, :3],
                               np.asarray(out)[:, :3], rtol=1e-6)


# ---------------------------------------------------------------- U-Net-like MLP


def jax_unet_loss(params, x):
    half = len(params) // 2
    h, skips = x, []
    for w, b in params[:half]:
        h = h + jnp.tanh(h @ w + b)
        skips.append(h)
    for (w, b), s in zip(params[half:], reversed(skips)):
        h = h + jnp.tanh(h @ w + b) + s
    return jnp.mean(h * h)


@pytest.mark.parametrize("plan", ["none", "layer", "sqrt", "dots", 3])
def test_unet_matches_jax_under_every_hand_placed_plan(plan):
    """Each up layer reads its mirror's output: a down segment's checkpoint returns its skips,
    an up segment's takes them."""
    params = residual_mlp_params(8, WIDTH)
    x = np.random.default_rng(0).normal(size=(BATCH, WIDTH)).astype(np.float32)
    loss, grads = rm.value_and_grad(unet_loss)(params, rm.asarray(x), plan)
    jloss, jgrads = jax.value_and_grad(jax_unet_loss)(_to_jax(params), x)
    np.testing.assert_allclose(float(loss), float(jloss), rtol=RTOL)
    _assert_trees_close(grads, jgrads)
    graph = rm.make_graph(lambda p, x: unet_loss(p, x, plan))(params, rm.asarray(x))
    assert graph.count("checkpoint") == {"none": 0, "layer": 8, "sqrt": 4, "dots": 8, 3: 4}[plan]
