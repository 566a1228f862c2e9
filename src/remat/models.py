"""Reference models shared by the demo, the benchmarks and the tests, written in remat.

A checkpoint plan says where the checkpoints go over a stack of L layers: "none", "layer" (one
per layer), "sqrt" (segments of about √L layers), "dots" (one per layer, saving the matrix
products: `dots_saveable`) — or an int, the segment length. Layers read their weights from
scope; the checkpoint captures them.

- `residual_mlp_loss(params, x, plan)`: L layers of `h + tanh(h @ w + b)`, loss `mean(h * h)`.
- `gpt_loss(params, data, plan, heads)`: a pre-norm transformer, next-token cross-entropy.
- `unet_loss(params, x, plan)`: a U-Net-like MLP, each up layer adding its mirror's output.
- `scanned_mlp_loss(stacked, x, checkpoint)`: the residual MLP as one `rm.scan` over stacked
  weights; `checkpoint` is `rm.scan`'s (None, "step", `rm.loops.segments(k)`, `rm.loops.binomial(s)`).
- `scanned_gpt_loss(stacked, data, checkpoint, heads)`: the GPT-style model with its blocks' weights
  stacked (`stack_gpt_params`) and one `rm.scan` over the blocks.
- `rnn_loss(params, h0, xs, checkpoint)`: a tanh RNN over the T steps of `xs`, as one `rm.scan`.

The same models in JAX and PyTorch are in `remat.bench.impl_jax` and `remat.bench.impl_torch`.
"""

from __future__ import annotations

import functools
import math

import numpy as np

import remat as rm
from remat.errors import ArgumentValueError

PLANS = ("none", "layer", "sqrt")


def segment_length(plan: str | int, depth: int) -> int:
    """Layers per checkpoint segment for `plan` (0: no checkpoint)."""
    if isinstance(plan, int):
        return plan
    lengths = {"none": 0, "layer": 1, "dots": 1, "sqrt": max(1, round(math.sqrt(depth)))}
    if not isinstance(plan, str) or plan not in lengths:
        raise ArgumentValueError(f"checkpoint plan: plan={plan!r} is not one of {', '.join(map(repr, lengths))} "
                                 "or an int (layers per checkpoint segment)")
    return lengths[plan]


def segments(n: int, seg: int) -> list[range]:
    """The layer indices of each checkpoint segment, `seg` layers at a time."""
    return [range(i, min(i + seg, n)) for i in range(0, n, seg)]


def checkpointed(layers: list, h, plan: str | int, policy=None):
    """Apply `layers` (callables of h) to `h`, with the checkpoints of `plan`."""
    seg = segment_length(plan, len(layers))
    if seg == 0:
        for layer in layers:
            h = layer(h)
        return h
    policy = rm.policies.dots_saveable if plan == "dots" else policy
    for group in segments(len(layers), seg):

        def segment(h, group=group):
            for i in group:
                h = layers[i](h)
            return h

        h = rm.checkpoint(segment, h, policy=policy)
    return h


# ---------------------------------------------------------------- residual MLP


def residual_mlp_params(depth: int, width: int, seed: int = 0, dtype="float32"):
    """[(w, b)] * depth, with small weights so the residual stream stays tame."""
    rng = np.random.default_rng(seed)
    scale = 1.0 / math.sqrt(width)
    return [
        (rm.asarray(rng.normal(0, scale, (width, width)), dtype), rm.asarray(np.zeros(width), dtype))
        for _ in range(depth)
    ]


def residual_mlp(params, x, plan: str | int = "none", policy=None):
    """The residual stream after every layer, checkpointed as `plan` says."""
    layers = [lambda h, w=w, b=b: h + rm.tanh(h @ w + b) for w, b in params]
    return checkpointed(layers, x, plan, policy)


def residual_mlp_loss(params, x, plan: str | int = "none", policy=None):
    h = residual_mlp(params, x, plan, policy)
    return rm.mean(h * h)


# ---------------------------------------------------------------- U-Net-like MLP


def unet_loss(params, x, plan: str | int = "none", policy=None):
    """A U-Net-like MLP, the long skip connections a chain of layers lacks: the first half of
    the layers is a down path of `h + tanh(h @ w + b)`, each output kept for its mirror; the
    second half an up path of `h + tanh(h @ w + b) + skip`, the last up layer reading the first
    down layer's output. Loss `mean(h * h)`. Each path is checkpointed as `plan` says (its
    segments return or take their layers' skips)."""
    half = len(params) // 2
    seg = segment_length(plan, half)
    policy = rm.policies.dots_saveable if plan == "dots" else policy

    def down(h, *, layers):
        skips = []
        for w, b in layers:
            h = h + rm.tanh(h @ w + b)
            skips.append(h)
        return h, skips

    def up(h, skips, *, layers):
        for (w, b), s in zip(layers, skips):
            h = h + rm.tanh(h @ w + b) + s
        return h

    groups = segments(half, seg) if seg else [range(half)]
    h, skips = x, []
    for group in groups:
        layers = [params[i] for i in group]
        run = functools.partial(down, layers=layers)  # its weights captured, as a user's layer reads them
        h, made = rm.checkpoint(run, h, policy=policy) if seg else run(h)
        skips += list(made)
    mirror = skips[::-1]
    for group in groups:
        layers, skip = [params[half + i] for i in group], [mirror[i] for i in group]
        run = functools.partial(up, layers=layers)
        h = rm.checkpoint(run, h, skip, policy=policy) if seg else run(h, skip)
    return rm.mean(h * h)


# ---------------------------------------------------------------- GPT-style transformer


def causal_mask(seq: int) -> np.ndarray:
    """0 on and below the diagonal, a large negative number above it (added to the scores)."""
    return np.triu(np.full((seq, seq), -1e9, np.float32), k=1)


def gpt_block(p: dict, h, heads: int, mask, head_major: bool = False):
    """Causal multi-head self-attention and a GELU MLP (4x wide), each after a layer norm.
    `head_major`: the columns of `p["qkv"]` are ordered (head, q/k/v, dh) rather than (q/k/v,
    head, dh), so that a contiguous block of columns holds whole heads: the layout in which
    tensor parallelism splits attention by heads (`remat.parallel.to_head_major`)."""
    b, t, d = h.shape
    dh = d // heads

    def split(z):  # (b, t, d) -> (b, heads, t, dh)
        return rm.permute_dims(rm.reshape(z, (b, t, heads, dh)), (0, 2, 1, 3))

    qkv = rm.nn.layer_norm(h, p["ln1_g"], p["ln1_b"]) @ p["qkv"]
    if head_major:  # (b, t, heads * 3 * dh) -> (3, b, heads, t, dh)
        q, k, v = rm.permute_dims(rm.reshape(qkv, (b, t, heads, 3, dh)), (3, 0, 2, 1, 4))
    else:
        q, k, v = split(qkv[..., :d]), split(qkv[..., d : 2 * d]), split(qkv[..., 2 * d :])
    scores = (q @ rm.matrix_transpose(k)) * (1.0 / math.sqrt(dh)) + mask
    att = rm.reshape(rm.permute_dims(rm.nn.softmax(scores, axis=-1) @ v, (0, 2, 1, 3)), (b, t, d))
    h = h + att @ p["proj"]
    m = rm.nn.layer_norm(h, p["ln2_g"], p["ln2_b"]) @ p["fc"]
    return h + rm.nn.gelu(m) @ p["out"]


def gpt_loss(params: dict, data, plan: str | int, heads: int):
    """Token and position embeddings, the blocks, a final layer norm, next-token loss.
    `data` is `(tokens, targets)`; parameters as `remat.bench.config.inputs` makes them."""
    tokens, targets = data
    mask = causal_mask(tokens.shape[1])
    layers = [lambda h, p=p: gpt_block(p, h, heads, mask) for p in params["blocks"]]
    h = checkpointed(layers, _embed(params, tokens), plan)
    return _next_token_loss(params, h, targets)


def _embed(params: dict, tokens):
    return rm.take(params["tok"], tokens, axis=0) + params["pos"]


def _next_token_loss(params: dict, h, targets):
    logits = rm.nn.layer_norm(h, params["lnf_g"], params["lnf_b"]) @ params["head"]
    return rm.nn.cross_entropy(logits, targets)


# ---------------------------------------------------------------- scanned: one loop over stacked weights


def stack_params(params) -> tuple:
    """[(w, b)] * depth -> (W of shape (depth, width, width), B of shape (depth, width))."""
    return rm.stack([w for w, _ in params]), rm.stack([b for _, b in params])


def scanned_mlp(stacked, x, checkpoint=None):
    """`residual_mlp` as a scan over the layers: the graph does not grow with depth."""

    def layer(h, wb):
        w, b = wb
        return h + rm.tanh(h @ w + b), None

    return rm.scan(layer, x, stacked, checkpoint=checkpoint)[0]


def scanned_mlp_loss(stacked, x, checkpoint=None):
    h = scanned_mlp(stacked, x, checkpoint)
    return rm.mean(h * h)


def stack_gpt_params(params: dict) -> dict:
    """`params` of `gpt_loss` with its list of blocks as one dict of weights stacked along a new
    leading axis (blocks), the form `scanned_gpt_loss` takes."""
    blocks = params["blocks"]
    return {**params, "blocks": {k: rm.stack([b[k] for b in blocks]) for k in blocks[0]}}


def scanned_gpt_loss(stacked: dict, data, checkpoint=None, heads: int = 4):
    """`gpt_loss` as one scan over the blocks, whose weights are stacked (`stack_gpt_params`):
    the graph holds one block whatever the depth. `checkpoint` is `rm.scan`'s.

    >>> import numpy as np, remat as rm
    >>> from remat.bench.config import GPT, inputs
    >>> params, data = inputs(GPT(layers=2, d_model=8, heads=2, seq=4, batch=1, vocab=5))
    >>> stacked = stack_gpt_params(params)
    >>> stacked["blocks"]["qkv"].shape
    (2, 8, 24)
    >>> a = rm.jit(scanned_gpt_loss, static_argnums=(2, 3))(stacked, data, "step", 2)
    >>> bool(np.isclose(a, gpt_loss(params, data, "none", 2)))
    True
    """
    tokens, targets = data
    mask = causal_mask(tokens.shape[1])

    def block(h, p):
        return gpt_block(p, h, heads, mask), None

    h, _ = rm.scan(block, _embed(stacked, tokens), stacked["blocks"], checkpoint=checkpoint)
    return _next_token_loss(stacked, h, targets)


def rnn_params(width: int, inputs: int, seed: int = 0, dtype="float32") -> dict:
    """Weights of `h' = tanh(h @ wh + x @ wx + b)`, scaled so the state neither dies nor saturates."""
    rng = np.random.default_rng(seed)
    return {"wh": rm.asarray(rng.normal(0, 0.9 / math.sqrt(width), (width, width)), dtype),
            "wx": rm.asarray(rng.normal(0, 1 / math.sqrt(inputs), (inputs, width)), dtype),
            "b": rm.asarray(np.zeros(width), dtype)}


def rnn_loss(params: dict, h0, xs, checkpoint=None):
    """A tanh RNN over the leading (time) axis of `xs`; the loss is the mean square of every state."""

    def cell(h, x):
        h = rm.tanh(h @ params["wh"] + x @ params["wx"] + params["b"])
        return h, rm.mean(h * h)

    _, per_step = rm.scan(cell, h0, xs, checkpoint=checkpoint)
    return rm.mean(per_step)
