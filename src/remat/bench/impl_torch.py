"""The benchmark models in PyTorch, checkpointed with `torch.utils.checkpoint` (eager mode, CPU).
PyTorch has no `dots_saveable`: that plan is not run."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from remat.bench.config import MLP, NotSupported
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
    d = h.shape[-1]
    logits = F.layer_norm(h, (d,), params["lnf_g"], params["lnf_b"], eps=1e-5) @ params["head"]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1).long())


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
    if plan == "dots":
        raise NotSupported("torch.utils.checkpoint has no dots_saveable policy")
    params, data = _tensors(params, True), _tensors(data, False)
    leaves = _leaves(params)
    if isinstance(size, MLP):
        fn = lambda: mlp_loss(params, data, plan)  # noqa: E731
    else:
        fn = lambda: gpt_loss(params, data, plan, size.heads)  # noqa: E731

    def step():
        loss = fn()
        return loss, torch.autograd.grad(loss, leaves)

    return step, lambda out: float(out[0].detach())
