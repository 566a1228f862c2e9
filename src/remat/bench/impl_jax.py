"""The benchmark models written directly in JAX, checkpointed with `jax.checkpoint`."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from remat.bench.config import MLP
from remat.models import causal_mask, segment_length, segments


def _checkpointed(layer, layer_params: list, h, plan: str):
    """`layer(p, h)` for each `p` of `layer_params`, with the checkpoints of `plan`."""
    seg = segment_length(plan, len(layer_params))
    if seg == 0:
        for p in layer_params:
            h = layer(p, h)
        return h
    policy = jax.checkpoint_policies.dots_saveable if plan == "dots" else None

    def segment(ps, h):
        for p in ps:
            h = layer(p, h)
        return h

    for group in segments(len(layer_params), seg):
        h = jax.checkpoint(segment, policy=policy)([layer_params[i] for i in group], h)
    return h


def mlp_loss(params, x, plan: str):
    h = _checkpointed(lambda p, h: h + jnp.tanh(h @ p[0] + p[1]), params, x, plan)
    return jnp.mean(h * h)


def _layer_norm(x, g, b, eps=1e-5):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) / jnp.sqrt(var + eps) * g + b


def gpt_block(p: dict, h, heads: int, mask):
    b, t, d = h.shape
    dh = d // heads

    def split(z):
        return z.reshape(b, t, heads, dh).transpose(0, 2, 1, 3)

    qkv = _layer_norm(h, p["ln1_g"], p["ln1_b"]) @ p["qkv"]
    q, k, v = split(qkv[..., :d]), split(qkv[..., d : 2 * d]), split(qkv[..., 2 * d :])
    scores = (q @ jnp.swapaxes(k, -1, -2)) * (1.0 / math.sqrt(dh)) + mask
    att = (jax.nn.softmax(scores, axis=-1) @ v).transpose(0, 2, 1, 3).reshape(b, t, d)
    h = h + att @ p["proj"]
    m = _layer_norm(h, p["ln2_g"], p["ln2_b"]) @ p["fc"]
    return h + jax.nn.gelu(m, approximate=True) @ p["out"]


def gpt_loss(params: dict, data, plan: str, heads: int):
    tokens, targets = data
    mask = jnp.asarray(causal_mask(tokens.shape[1]))
    h = params["tok"][tokens] + params["pos"]
    h = _checkpointed(lambda p, h: gpt_block(p, h, heads, mask), params["blocks"], h, plan)
    logits = _layer_norm(h, params["lnf_g"], params["lnf_b"]) @ params["head"]
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, targets[..., None], axis=-1))


def build(size, plan: str, params, data):
    """`(step, finish)` as in `impl_remat.build`, compiled ahead of time with `jax.jit`."""
    if isinstance(size, MLP):
        fn = lambda p, x: mlp_loss(p, x, plan)  # noqa: E731
    else:
        fn = lambda p, x: gpt_loss(p, x, plan, size.heads)  # noqa: E731
    params, data = jax.device_put((params, data))
    compiled = jax.jit(jax.value_and_grad(fn)).lower(params, data).compile()

    def finish(out):
        jax.block_until_ready(out)
        return float(out[0])

    step = lambda: compiled(params, data)  # noqa: E731
    step.compiled = compiled
    return step, finish
