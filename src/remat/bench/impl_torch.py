"""The benchmark models in PyTorch, checkpointed with `torch.utils.checkpoint` (eager mode, CPU).
The loop models are Python loops over the stacked weights or the time steps, checkpointed per
step or per run of ⌈√T⌉ steps. PyTorch has no `dots_saveable` and no binomial schedule: those
plans are not run."""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from remat.bench.config import NotSupported, loss_of
from remat.models import causal_mask, segment_length, segments


def _checkpointed(layer, layer_params: list, h, plan: str):
    if plan == "dots":
        raise NotSupported("torch.utils.checkpoint has no dots_saveable policy")
    seg = segment_length(plan, len(layer_params))
    if seg == 0:
        for p in layer_params:
            h = layer(p, h)
        return h

    def segment(h, group):
        for i in group:
            h = layer(layer_params[i], h)
        return h

    for group in segments(len(layer_params), seg):
        h = checkpoint(segment, h, group, use_reentrant=False)
    return h


def mlp_loss(params, x, plan: str):
    h = _checkpointed(lambda p, h: h + torch.tanh(h @ p[0] + p[1]), params, x, plan)
    return torch.mean(h * h)


def gpt_block(p: dict, h, heads: int, mask):
    b, t, d = h.shape
    dh = d // heads

    def split(z):
        return z.reshape(b, t, heads, dh).transpose(1, 2)

    qkv = F.layer_norm(h, (d,), p["ln1_g"], p["ln1_b"], eps=1e-5) @ p["qkv"]
    q, k, v = split(qkv[..., :d]), split(qkv[..., d : 2 * d]), split(qkv[..., 2 * d :])
    scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(dh)) + mask
    att = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, t, d)
    h = h + att @ p["proj"]
    m = F.layer_norm(h, (d,), p["ln2_g"], p["ln2_b"], eps=1e-5) @ p["fc"]
    return h + F.gelu(m, approximate="tanh") @ p["out"]


def gpt_loss(params: dict, data, plan: str, heads: int):
    tokens, targets = data
    mask = torch.from_numpy(causal_mask(tokens.shape[1]))
    h = params["tok"][tokens] + params["pos"]
    h = _checkpointed(lambda p, h: gpt_block(p, h, heads, mask), params["blocks"], h, plan)
    return _next_token_loss(params, h, targets)


def loop(step, carry, xs: list, plan: str):
    """`step(carry, x) -> (carry, y or None)` over `xs` in a Python loop, checkpointed as `plan`
    says ("none", "step", "sqrt"); returns the last carry and the list of ys."""
    if plan == "binomial":
        raise NotSupported("torch.utils.checkpoint has no binomial schedule")
    size = {"none": 0, "step": 1, "sqrt": max(1, math.ceil(math.sqrt(len(xs))))}[plan]

    def run(c, *chunk):
        ys = []
        for x in chunk:
            c, y = step(c, x)
            ys += [] if y is None else [y]
        return (c, *ys)

    if not size:
        carry, *ys = run(carry, *xs)
        return carry, ys
    ys = []
    for group in segments(len(xs), size):
        carry, *out = checkpoint(run, carry, *[xs[i] for i in group], use_reentrant=False)
        ys += out
    return carry, ys


def scanned_mlp_loss(stacked, x, plan: str):
    W, B = stacked
    h, _ = loop(lambda h, wb: (h + torch.tanh(h @ wb[0] + wb[1]), None), x, list(zip(W, B)), plan)
    return torch.mean(h * h)


def scanned_gpt_loss(stacked: dict, data, plan: str, heads: int):
    tokens, targets = data
    mask = torch.from_numpy(causal_mask(tokens.shape[1]))
    blocks = stacked["blocks"]
    per_block = [{k: v[i] for k, v in blocks.items()} for i in range(len(blocks["qkv"]))]
    h = stacked["tok"][tokens] + stacked["pos"]
    h, _ = loop(lambda h, p: (gpt_block(p, h, heads, mask), None), h, per_block, plan)
    return _next_token_loss(stacked, h, targets)


def rnn_loss(params: dict, data, plan: str):
    h0, xs = data

    def cell(h, x):
        h = torch.tanh(h @ params["wh"] + x @ params["wx"] + params["b"])
        return h, torch.mean(h * h)

    _, per_step = loop(cell, h0, list(xs), plan)
    return torch.mean(torch.stack(per_step))


def _next_token_loss(params: dict, h, targets):
    d = h.shape[-1]
    logits = F.layer_norm(h, (d,), params["lnf_g"], params["lnf_b"], eps=1e-5) @ params["head"]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1).long())


LOSSES = {"mlp": mlp_loss, "gpt": gpt_loss, "scanned-mlp": scanned_mlp_loss, "scanned-gpt": scanned_gpt_loss,
          "rnn": rnn_loss}


def loss_fn(size, plan: str, params, data):
    """The loss of `size`'s model on `params` and `data` (tensors), as a function of nothing."""
    return functools.partial(loss_of(size, plan, LOSSES), params, data)


def _tensors(tree, grad: bool):
    if isinstance(tree, dict):
        return {k: _tensors(v, grad) for k, v in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_tensors(v, grad) for v in tree)
    t = torch.from_numpy(tree.copy())
    return t.requires_grad_(grad) if t.is_floating_point() else t


def _leaves(tree):
    if isinstance(tree, dict):
        return [x for v in tree.values() for x in _leaves(v)]
    if isinstance(tree, (list, tuple)):
        return [x for v in tree for x in _leaves(v)]
    return [tree]


def build(size, plan: str, params, data):
    """`(step, finish)` as in `impl_remat.build`: the loss and the gradients of the parameters,
    returned as the step's outputs like `value_and_grad`'s, so that no `.grad` buffer outlives
    the step (a baseline taken after a first step would hide them otherwise)."""
    if plan in ("dots", "binomial"):
        raise NotSupported(f"torch.utils.checkpoint has no {plan} schedule")
    params, data = _tensors(params, True), _tensors(data, False)
    leaves = _leaves(params)
    fn = loss_fn(size, plan, params, data)

    def step():
        loss = fn()
        return loss, torch.autograd.grad(loss, leaves)

    return step, lambda out: float(out[0].detach())
