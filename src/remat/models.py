"""Reference models shared by the demo, the benchmarks and the tests.

`residual_mlp_loss(params, x, plan)`: L layers of `h + tanh(h @ w + b)`; each layer reads its
weights from scope. `plan` says where the checkpoints go: "none", "layer" (one per layer),
"sqrt" (segments of about √L layers) — or an int, the segment length.
"""

from __future__ import annotations

import math

import numpy as np

import remat as rm

PLANS = ("none", "layer", "sqrt")


def segment_length(plan: str | int, depth: int) -> int:
    """Layers per checkpoint segment for `plan` (0: no checkpoint)."""
    if isinstance(plan, int):
        return plan
    return {"none": 0, "layer": 1, "sqrt": max(1, round(math.sqrt(depth)))}[plan]


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
    seg = segment_length(plan, len(params))
    h = x
    if seg == 0:
        for w, b in params:
            h = h + rm.tanh(h @ w + b)
        return h
    for start in range(0, len(params), seg):
        group = params[start : start + seg]

        def segment(h, group=group):
            for w, b in group:  # w and b are captured from scope
                h = h + rm.tanh(h @ w + b)
            return h

        h = rm.checkpoint(segment, h, policy=policy)
    return h


def residual_mlp_loss(params, x, plan: str | int = "none", policy=None):
    h = residual_mlp(params, x, plan, policy)
    return rm.mean(h * h)
