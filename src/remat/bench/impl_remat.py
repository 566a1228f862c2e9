"""`remat bench`'s step in remat: the models of `remat.models`, compiled ahead of time."""

from __future__ import annotations

import numpy as np

import remat as rm
from remat.bench.config import loss_of
from remat.bench.timing import ready
from remat.models import gpt_loss, residual_mlp_loss, rnn_loss, scanned_gpt_loss, scanned_mlp_loss, unet_loss

# A loop model's plan as `rm.scan`'s checkpoint= (made when asked: the schedules are values).
SCHEDULES = {"none": lambda: None, "step": lambda: "step", "sqrt": rm.loops.segments, "binomial": rm.loops.binomial}


# Each model's loss, taking (params, data, plan or a loop model's schedule, a GPT's heads).
LOSSES = {"mlp": residual_mlp_loss, "gpt": gpt_loss, "scanned-mlp": scanned_mlp_loss,
          "scanned-gpt": scanned_gpt_loss, "rnn": lambda p, d, ck: rnn_loss(p, d[0], d[1], ck),
          "unet": unet_loss}


def loss_fn(size, plan: str):
    """The loss of `size`'s model as a function of (params, data), checkpointed as `plan` says."""
    return loss_of(size, SCHEDULES[plan]() if size.scanned else plan, LOSSES)


def build(size, plan: str | float, params, data, backend: str):
    """`(step, finish)`: `step()` runs one training step (loss and gradients with respect to the
    parameters) compiled ahead of time; `finish(out)` waits for it and gives the loss. A float
    `plan` is no hand-placed checkpoint and that `memory_budget=` (a fraction of the activation
    memory): the planner places them."""
    to = (lambda a: a) if backend == "numpy" else _device
    params, data = rm.tree.map(to, params), rm.tree.map(to, data)
    step_fn = step_function(size, plan)
    compiled = rm.jit(step_fn, backend=backend).lower(params, data).compile()

    step = lambda: compiled(params, data)  # noqa: E731
    step.compiled = compiled
    return step, lambda out: float(ready(out)[0])


def step_function(size, plan: str | float):
    """`value_and_grad` of `size`'s loss: hand-placed checkpoints (`plan` a name) or planned
    ones (`plan` a float, the `memory_budget=`)."""
    if isinstance(plan, float):
        return rm.value_and_grad(loss_fn(size, "none"), memory_budget=plan)
    return rm.value_and_grad(loss_fn(size, plan))


def _device(a: np.ndarray):
    import jax

    return jax.device_put(a)
