"""A scanned GPT-style training step, remat on XLA against JAX: the loop case of issue 25.

The model is `remat.bench`'s GPT-style transformer written as one scan over its blocks' stacked
weights (4 blocks, d_model 128, 4 heads, sequence 64, batch 16, vocabulary 256): in remat
`rm.scan`, in JAX `jax.lax.scan`. A step is the loss, its gradient and an AdamW update (lr 1e-3,
weight decay 0.01), one compiled program: `rm.jit(..., backend="xla")` with `rm.optim.adamw`,
and `jax.jit` with the same AdamW written in `jax.numpy`. Plans: "none" (a plain scan) and
"step" (a checkpointed body: `checkpoint="step"`, `jax.checkpoint` around JAX's body).

Each run is a fresh process (JAX started and warmed up before the clock): it compiles the step,
runs 5 steps to warm up, then times 30, each until its results are ready, and reports their
median. Runs of remat and JAX alternate, `--rounds` of each per plan; each ratio remat / JAX is
the median over the rounds' pairs. Target: at most 1.05 with and without checkpoints.

    python benchmarks/scanned_gpt_step.py [--rounds 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

import remat as rm
from remat.bench import impl_jax, impl_remat
from remat.bench.config import ScannedGPT, inputs
from remat.bench.timing import round_robin

SIZE = ScannedGPT(layers=4, d_model=128, heads=4, seq=64, batch=16, vocab=256)
PLANS = ("none", "step")
TARGET = 1.05
LR, DECAY = 1e-3, 0.01


def remat_step(plan: str):
    loss = impl_remat.loss_fn(SIZE, plan)
    opt = rm.optim.adamw(LR, weight_decay=DECAY)

    def step(params, state, data):
        value, grads = rm.value_and_grad(loss)(params, data)
        params, state = opt.update(grads, state, params)
        return params, state, value

    return rm.jit(step, backend="xla"), opt.init


def jax_step(plan: str):
    loss = impl_jax.loss_fn(SIZE, plan)
    b1, b2, eps = 0.9, 0.999, 1e-8

    def init(params):
        zeros = jax.tree.map(jnp.zeros_like, params)
        return jnp.zeros((), jnp.int32), zeros, zeros

    def step(params, state, data):  # AdamW as optax and rm.optim.adamw write it
        value, grads = jax.value_and_grad(loss)(params, data)
        count, mu, nu = state
        count = count + 1
        mu = jax.tree.map(lambda m, g: b1 * m + (1 - b1) * g, mu, grads)
        nu = jax.tree.map(lambda v, g: b2 * v + (1 - b2) * g * g, nu, grads)
        t = count.astype(jnp.float32)
        c1, c2 = 1 - b1**t, 1 - b2**t
        params = jax.tree.map(lambda p, m, v: p - LR * ((m / c1) / (jnp.sqrt(v / c2) + eps) + DECAY * p),
                              params, mu, nu)
        return params, (count, mu, nu), value

    return jax.jit(step), init


def run(framework: str, plan: str) -> dict:
    """In this process: the median seconds of a step, and the loss at the initial parameters."""
    jax.block_until_ready(jax.numpy.zeros(1) + 1)  # start the runtime outside the clock
    step, init = (remat_step if framework == "remat" else jax_step)(plan)
    params, data = inputs(SIZE)
    params, data = jax.device_put((params, data))
    state = init(params)
    params, state, first = step(params, state, data)  # the loss at the initial parameters
    for _ in range(4):
        params, state, value = step(params, state, data)
    times = []
    for _ in range(30):
        start = time.perf_counter()
        params, state, value = step(params, state, data)
        jax.block_until_ready(jax.tree.leaves((params, state, value)))
        times.append(time.perf_counter() - start)
    return {"step": float(np.median(times)), "loss": float(np.asarray(first))}


def in_child(framework: str, plan: str) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", framework, plan]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(rounds: int) -> dict:
    """Per plan: the median ratio remat / JAX of the step time, its range, and both losses."""
    out = {}
    for plan in PLANS:
        got = round_robin({fw: partial(in_child, fw, plan) for fw in ("remat", "jax")}, rounds)
        ratios = [r["step"] / j["step"] for r, j in zip(got["remat"], got["jax"])]
        out[plan] = {"ratio": statistics.median(ratios), "range": (min(ratios), max(ratios)),
                     "remat ms": statistics.median(r["step"] for r in got["remat"]) * 1e3,
                     "jax ms": statistics.median(j["step"] for j in got["jax"]) * 1e3,
                     "losses": (got["remat"][0]["loss"], got["jax"][0]["loss"])}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json", action="store_true")
    p.add_argument("--child", nargs=2, metavar=("FRAMEWORK", "PLAN"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        print(json.dumps(run(*a.child)))
        return 0
    got = measure(a.rounds)
    if a.json:
        print(json.dumps(got))
        return 0
    print(f"{SIZE.describe()}, an AdamW step; remat / JAX step time (median of {a.rounds} pairs of "
          f"processes, range in parentheses; target <= {TARGET})")
    for plan, r in got.items():
        lo, hi = r["range"]
        print(f"  plan {plan:<4}  {r['ratio']:.2f}  ({lo:.2f}-{hi:.2f})   remat {r['remat ms']:.1f} ms, "
              f"JAX {r['jax ms']:.1f} ms; first loss {r['losses'][0]:.6f} / {r['losses'][1]:.6f}")
    return 0 if all(r["ratio"] <= TARGET for r in got.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
