"""The benchmark models in remat. Layers read their weights from scope (captured by the
checkpoint); the plan says where the checkpoints go."""

from __future__ import annotations

import math

import numpy as np

import remat as rm
from remat.bench.config import MLP, causal_mask, segment_length, segments


def _checkpointed(layers: list, h, plan: str):
    """Apply `layers` (callables of h) to `h` with the checkpoints of `plan`."""
    seg = segment_length(plan, len(layers))
    if seg == 0:
        for layer in layers:
            h = layer(h)
        return h
    policy = rm.policies.dots_saveable if plan == "dots" else None
    for group in segments(len(layers), seg):

        def segment(h, group=group):
            for i in group:
                h = layers[i](h)
            return h

        h = rm.checkpoint(segment, h, policy=policy)
    return h


def mlp_loss(params, x, plan: str):
    layers = [lambda h, w=w, b=b: h + rm.tanh(h @ w + b) for w, b in params]
    h = _checkpointed(layers, x, plan)
    return rm.mean(h * h)


def gpt_block(p: dict, h, heads: int, mask):
    b, t, d = h.shape
    dh = d // heads

    def split(z):  # (b, t, d) -> (b, heads, t, dh)
        return rm.permute_dims(rm.reshape(z, (b, t, heads, dh)), (0, 2, 1, 3))

    qkv = rm.nn.layer_norm(h, p["ln1_g"], p["ln1_b"]) @ p["qkv"]
    q, k, v = split(qkv[..., :d]), split(qkv[..., d : 2 * d]), split(qkv[..., 2 * d :])
    scores = (q @ rm.matrix_transpose(k)) * (1.0 / math.sqrt(dh)) + mask
    att = rm.reshape(rm.permute_dims(rm.nn.softmax(scores, axis=-1) @ v, (0, 2, 1, 3)), (b, t, d))
    h = h + att @ p["proj"]
    m = rm.nn.layer_norm(h, p["ln2_g"], p["ln2_b"]) @ p["fc"]
    return h + rm.nn.gelu(m) @ p["out"]


def gpt_loss(params: dict, data, plan: str, heads: int):
    tokens, targets = data
    mask = causal_mask(tokens.shape[1])
    h = rm.take(params["tok"], tokens, axis=0) + params["pos"]
    layers = [lambda h, p=p: gpt_block(p, h, heads, mask) for p in params["blocks"]]
    h = _checkpointed(layers, h, plan)
    logits = rm.nn.layer_norm(h, params["lnf_g"], params["lnf_b"]) @ params["head"]
    return rm.nn.cross_entropy(logits, targets)


def build(size, plan: str, params, data, backend: str):
    """`(step, finish)`: `step()` runs one training step (loss and gradients with respect to the
    parameters) compiled ahead of time; `finish(out)` waits for it and gives the loss."""
    if isinstance(size, MLP):
        fn = lambda p, x: mlp_loss(p, x, plan)  # noqa: E731
    else:
        fn = lambda p, x: gpt_loss(p, x, plan, size.heads)  # noqa: E731
    to = (lambda a: a) if backend == "numpy" else _device
    params, data = rm.tree.map(to, params), rm.tree.map(to, data)
    compiled = rm.jit(rm.value_and_grad(fn), backend=backend).lower(params, data).compile()

    def finish(out):
        loss, grads = out
        if backend == "xla":
            import jax

            jax.block_until_ready([t._value for t in rm.tree.leaves(grads)])
        return float(loss)

    step = lambda: compiled(params, data)  # noqa: E731
    step.compiled = compiled
    return step, finish


def _device(a: np.ndarray):
    import jax

    return jax.device_put(a)
