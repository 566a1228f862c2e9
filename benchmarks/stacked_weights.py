"""Stacked weights against a list of weights on XLA: two ratios, never times alone.

The model is the residual MLP of `remat.models` (L layers of `h + tanh(h @ w + b)`, loss
`mean(h * h)`), its step `rm.jit(rm.value_and_grad(loss), backend="xla")` (one executable),
written twice with the same values:

- list:    `params = [(w, b)] * L`, layer i reads `params[i]`;
- stacked: `W` of shape (L, D, D) and `b` of shape (L, D), layer i reads `W[i]`, `b[i]`.

For each checkpoint plan ("none"; "layer": a checkpoint per layer, the layer's weights sliced
outside it; "inside": the same, but each checkpoint's body slices the stacked weights it
captures, `rm.checkpoint(lambda h: h + rm.tanh(h @ W[i] + b[i]), h)`; "train": "layer" and an
SGD update in the same step, which reads the stacked weights whole too) it prints

    first call   stacked / list: tracing, differentiating, lowering, compiling, one run;
    step         stacked / list: a step of the compiled program, until its results are ready.

Each first call runs in a fresh process (JAX started and warmed up before the clock starts);
the idioms alternate, and each ratio is the median over `--repeats` pairs. Steps are timed in the
same child, 20 each after 3 warm-up steps, their median taken. Targets: both ratios at most 1.3.

    python benchmarks/stacked_weights.py [--layers 256 --width 64 --batch 32 --repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from functools import partial

from remat.bench.timing import round_robin, seconds

TARGET = 1.3
PLANS = ("none", "layer", "inside", "train")


def run(idiom: str, plan: str, depth: int, width: int, batch: int) -> dict[str, float]:
    """{"first": seconds of the first call, "step": median seconds of a step}, in this process."""
    import jax
    import numpy as np

    import remat as rm
    from remat import models

    params = models.residual_mlp_params(depth, width)
    x = rm.asarray(np.random.default_rng(0).normal(size=(batch, width)), "float32")
    args = (params if idiom == "list" else models.stack_params(params), x)
    jax.block_until_ready(jax.numpy.zeros(1) + 1)  # start the runtime outside the clock
    grad = rm.value_and_grad(lambda p, x: loss(p, x, idiom, plan))

    def train(p, x):
        value, g = grad(p, x)
        return value, rm.tree.map(lambda w, d: w - 0.01 * d, p, g)

    step = partial(rm.jit(train if plan == "train" else grad, backend="xla"), *args)
    first = seconds(step)
    for _ in range(3):
        seconds(step)
    return {"first": first, "step": statistics.median(seconds(step) for _ in range(20))}


def loss(p, x, idiom: str, plan: str):
    import remat as rm
    from remat import models

    plan = "layer" if plan == "train" else plan
    if idiom == "list":
        return models.residual_mlp_loss(p, x, "layer" if plan == "inside" else plan)
    w, b = p
    if plan == "inside":  # each block captures w and b whole and slices them
        layers = [lambda h, i=i: h + rm.tanh(h @ w[i] + b[i]) for i in range(w.shape[0])]
        return rm.mean(rm.square(models.checkpointed(layers, x, "layer")))
    # The slices are taken outside the checkpoints, where the layers of the list idiom get theirs.
    layers = [lambda h, wi=w[i], bi=b[i]: h + rm.tanh(h @ wi + bi) for i in range(w.shape[0])]
    return rm.mean(rm.square(models.checkpointed(layers, x, plan)))


def in_child(idiom: str, plan: str, depth: int, width: int, batch: int) -> dict[str, float]:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", idiom, plan,
           "--layers", str(depth), "--width", str(width), "--batch", str(batch)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(depth: int, width: int, batch: int, repeats: int) -> dict[str, dict[str, float]]:
    """Per plan, the median ratios stacked / list of the first call and of the step."""
    out = {}
    for plan in PLANS:
        got = round_robin({idiom: partial(in_child, idiom, plan, depth, width, batch) for idiom in ("list", "stacked")},
                          repeats)
        pairs = list(zip(got["stacked"], got["list"]))  # one pair of children a round
        firsts = [stacked["first"] / listed["first"] for stacked, listed in pairs]
        steps = [stacked["step"] / listed["step"] for stacked, listed in pairs]
        out[plan] = {"first call": statistics.median(firsts), "step": statistics.median(steps),
                     "first call range": (min(firsts), max(firsts)), "step range": (min(steps), max(steps))}
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=256)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", action="store_true")
    p.add_argument("--child", nargs=2, metavar=("IDIOM", "PLAN"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        print(json.dumps(run(*a.child, a.layers, a.width, a.batch)))
        return 0
    ratios = measure(a.layers, a.width, a.batch, a.repeats)
    if a.json:
        print(json.dumps(ratios))
        return 0
    print(f"stacked / list, {a.layers} layers, width {a.width}, batch {a.batch}, XLA "
          f"(median of {a.repeats}, range in parentheses; target <= {TARGET})")
    ok = True
    for plan, r in ratios.items():
        for what in ("first call", "step"):
            lo, hi = r[f"{what} range"]
            ok &= r[what] <= TARGET
            print(f"  plan {plan:<6} {what:<11} {r[what]:.2f}  ({lo:.2f}-{hi:.2f})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
