"""`remat bench`'s step in remat: the models of `remat.models`, compiled ahead of time."""

from __future__ import annotations

import numpy as np

import remat as rm
from remat.bench.config import MLP
from remat.models import gpt_loss, residual_mlp_loss


def build(size, plan: str, params, data, backend: str, staged: bool | None = None):
    """`(step, finish)`: `step()` runs one training step (loss and gradients with respect to the
    parameters) compiled ahead of time; `finish(out)` waits for it and gives the loss. `staged`
    is `rm.jit`'s XLA execution mode."""
    if isinstance(size, MLP):
        fn = lambda p, x: residual_mlp_loss(p, x, plan)  # noqa: E731
    else:
        fn = lambda p, x: gpt_loss(p, x, plan, size.heads)  # noqa: E731
    to = (lambda a: a) if backend == "numpy" else _device
    params, data = rm.tree.map(to, params), rm.tree.map(to, data)
    compiled = rm.jit(rm.value_and_grad(fn), backend=backend, staged=staged).lower(params, data).compile()

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
