"""The benchmark models written directly in JAX, checkpointed with `jax.checkpoint`; the loop
models as `jax.lax.scan` over stacked weights or time steps, with `jax.checkpoint` around the step
("step") or around scans of ⌈√T⌉ steps ("sqrt"). JAX has no binomial schedule. And `kept`: a layer
checkpointed in the form whose savings XLA:CPU keeps, where `jax.checkpoint` keeps none."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from remat.bench.config import NotSupported, loss_of
from remat.errors import ArgumentValueError
from remat.models import causal_mask, segment_length, segments


def _checkpointed(layer, layer_params: list, h, plan: str, run=None):
    """`layer(p, h)` for each `p` of `layer_params`, with the checkpoints of `plan`; plan "kept":
    each layer as `kept` makes it, branching on `run`."""
    if plan == "kept":
        if run is None:
            raise ArgumentValueError('plan "kept" branches on `run`, a boolean argument of the step; pass it (true)')
        layer = kept(layer)
        for p in layer_params:
            h = layer(p, h, run)
        return h
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


def kept(layer):
    """`layer(p, h)` checkpointed in the form whose savings XLA:CPU keeps, as `f(p, h, run)`.

    On the CPU XLA drops `jax.checkpoint`'s optimization barriers and merges the recomputation
    with the forward pass: no memory saved, none recomputed. It does scope the buffers made inside
    a conditional's branch to that branch. So here the layer is a `jax.custom_vjp` that keeps its
    parameters and input, and whose backward recomputes it and takes its VJP inside `lax.cond` on
    `run`: a boolean the step takes as an argument and is passed true (a constant would let XLA
    inline the branch). Issue 25 measured this form; it is JAX's yardstick for remat's checkpoints
    that keep their savings (plan "kept": `benchmarks/jax_savings_kept.py`, the sharded
    collectives' tests)."""

    @jax.custom_vjp
    def layer_kept(p, h, run):
        return layer(p, h)

    def forward(p, h, run):
        return layer(p, h), (p, h, run)

    def backward(saved, g):
        p, h, run = saved
        gp, gh = jax.lax.cond(run, lambda p, h, g: jax.vjp(layer, p, h)[1](g),
                              lambda p, h, g: (jax.tree.map(jnp.zeros_like, p), jnp.zeros_like(h)), p, h, g)
        return gp, gh, None

    layer_kept.defvjp(forward, backward)
    return layer_kept


def mlp_layer(p, h):
    return h + jnp.tanh(h @ p[0] + p[1])


def mlp_loss(params, x, plan: str, run=None):
    h = _checkpointed(mlp_layer, params, x, plan, run)
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
    return _next_token_loss(params, h, targets)


def _next_token_loss(params: dict, h, targets):
    logits = _layer_norm(h, params["lnf_g"], params["lnf_b"]) @ params["head"]
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, targets[..., None], axis=-1))


# ---------------------------------------------------------------- the loop models


def scan(step, carry, xs, plan: str):
    """`jax.lax.scan(step, carry, xs)`, checkpointed as `plan` says ("none", "step", "sqrt")."""
    if plan == "binomial":
        raise NotSupported("JAX has no binomial (Revolve) schedule for lax.scan")
    if plan == "step":
        return jax.lax.scan(jax.checkpoint(step), carry, xs)
    if plan == "sqrt":
        return _segmented(step, carry, xs)
    return jax.lax.scan(step, carry, xs)


def _segmented(step, carry, xs):
    """A scan over segments of ⌈√T⌉ steps, each a checkpointed scan, then the steps left over."""
    length = jax.tree_util.tree_leaves(xs)[0].shape[0]
    size = max(1, math.ceil(math.sqrt(length)))
    q, r = divmod(length, size)
    run = jax.checkpoint(lambda c, xs: jax.lax.scan(step, c, xs))
    tree = jax.tree_util.tree_map
    carry, ys = jax.lax.scan(run, carry, tree(lambda x: x[: q * size].reshape(q, size, *x.shape[1:]), xs))
    ys = tree(lambda y: y.reshape(q * size, *y.shape[2:]), ys)
    if r:
        carry, rest = run(carry, tree(lambda x: x[q * size :], xs))
        ys = tree(lambda a, b: jnp.concatenate([a, b]), ys, rest)
    return carry, ys


def scanned_mlp_loss(stacked, x, plan: str):
    def layer(h, wb):
        return h + jnp.tanh(h @ wb[0] + wb[1]), None

    h, _ = scan(layer, x, stacked, plan)
    return jnp.mean(h * h)


def scanned_gpt_loss(stacked: dict, data, plan: str, heads: int):
    tokens, targets = data
    mask = jnp.asarray(causal_mask(tokens.shape[1]))

    def block(h, p):
        return gpt_block(p, h, heads, mask), None

    h, _ = scan(block, stacked["tok"][tokens] + stacked["pos"], stacked["blocks"], plan)
    return _next_token_loss(stacked, h, targets)


def rnn_loss(params: dict, data, plan: str):
    h0, xs = data

    def cell(h, x):
        h = jnp.tanh(h @ params["wh"] + x @ params["wx"] + params["b"])
        return h, jnp.mean(h * h)

    _, per_step = scan(cell, h0, xs, plan)
    return jnp.mean(per_step)


LOSSES = {"mlp": mlp_loss, "gpt": gpt_loss, "scanned-mlp": scanned_mlp_loss, "scanned-gpt": scanned_gpt_loss,
          "rnn": rnn_loss}


def loss_fn(size, plan: str):
    """The loss of `size`'s model as a function of (params, data)."""
    return loss_of(size, plan, LOSSES)


def build(size, plan: str, params, data):
    """`(step, finish)` as in `impl_remat.build`, compiled ahead of time with `jax.jit`."""
    fn = loss_fn(size, plan)
    params, data = jax.device_put((params, data))
    compiled = jax.jit(jax.value_and_grad(fn)).lower(params, data).compile()

    def finish(out):
        jax.block_until_ready(out)
        return float(out[0])

    step = lambda: compiled(params, data)  # noqa: E731
    step.compiled = compiled
    return step, finish
