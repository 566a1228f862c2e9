"""`remat demo`: a residual MLP whose layers read their weights from scope, trained with one
checkpoint per layer, with the gradient checked against the same model without checkpoints."""

from __future__ import annotations

import numpy as np

import remat as rm


def _model(params, x, checkpointed: bool):
    h = x
    for w, b in params:
        def layer(h, w=w, b=b):
            return h + rm.tanh(h @ w + b)

        h = rm.checkpoint(layer, h) if checkpointed else layer(h)
    return rm.mean(h * h)


def run(quick: bool = False) -> int:
    rng = np.random.default_rng(0)
    depth, width, batch = (4, 32, 64) if quick else (16, 128, 512)
    params = [
        (rm.asarray(rng.normal(0, 0.1, (width, width)), "float32"), rm.zeros((width,)))
        for _ in range(depth)
    ]
    x = rm.asarray(rng.normal(size=(batch, width)), "float32")
    for plan in (False, True):
        step = rm.jit(rm.value_and_grad(lambda p, x, plan=plan: _model(p, x, plan)))
        compiled = step.lower(params, x).compile()
        loss, grads = compiled(params, x)
        peak = compiled.last_memory.peak
        name = "checkpoint per layer" if plan else "no checkpoint"
        print(f"{name:22s} loss={float(loss):.6f} peak={peak / 2**20:.2f} MiB")
    return 0
