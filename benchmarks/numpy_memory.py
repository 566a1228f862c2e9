"""Peak memory of a residual-MLP training step on the NumPy backend, per checkpoint plan.

    python benchmarks/numpy_memory.py [--depth 32 --width 128 --batch 1024]

Each plan is measured twice: by the evaluator's own live-byte count and by tracemalloc (NumPy
reports its buffers to it). Prints a markdown table with ratios to the plan without checkpoints.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc
from functools import partial

import numpy as np

import remat as rm
from remat.bench.report import ratio
from remat.bench.timing import interleaved
from remat.models import PLANS, residual_mlp_loss, residual_mlp_params


def _inputs(depth: int, width: int, batch: int):
    params = residual_mlp_params(depth, width)
    return params, rm.asarray(np.random.default_rng(1).normal(size=(batch, width)), "float32")


def _compiled_step(plan, params, x):
    """One training step (value and gradient w.r.t. the parameters), compiled and run once."""
    compiled = rm.jit(rm.value_and_grad(lambda p, x: residual_mlp_loss(p, x, plan))).lower(params, x).compile()
    compiled(params, x)  # warm up
    return compiled


def measure(plan, depth: int = 32, width: int = 128, batch: int = 1024) -> dict:
    """Peak bytes of one training step (value and gradient w.r.t. the parameters)."""
    params, x = _inputs(depth, width, batch)
    compiled = _compiled_step(plan, params, x)
    tracemalloc.start()
    tracemalloc.reset_peak()
    start = time.perf_counter()
    loss, grads = compiled(params, x)
    seconds = time.perf_counter() - start
    _, traced_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "plan": plan,
        "evaluator_peak": compiled.last_memory.peak,
        "tracemalloc_peak": traced_peak,
        "seconds": seconds,
        "loss": float(loss),
        "activation_bytes": batch * width * 4,
    }


def time_ratio(plan, depth: int = 32, width: int = 128, batch: int = 1024, repeats: int = 15) -> str:
    """Step time with `plan` over step time without checkpoints, round by round (both steps run
    in each round, the order alternating): the median ratio and its spread, as `remat bench`."""
    params, x = _inputs(depth, width, batch)
    steps = {p: partial(_compiled_step(p, params, x), params, x) for p in ("none", plan)}
    times = interleaved(steps, repeats)
    return ratio({"times": times[plan]}, {"times": times["none"]})


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--depth", type=int, default=32)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--batch", type=int, default=1024)
    args = parser.parse_args(argv)
    rows = [measure(p, args.depth, args.width, args.batch) for p in PLANS]
    base = rows[0]
    print("| plan | evaluator peak (MiB) | tracemalloc peak (MiB) | ratio vs none | activations |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['plan']} | {r['evaluator_peak'] / 2**20:.1f} | {r['tracemalloc_peak'] / 2**20:.1f} "
            f"| {r['evaluator_peak'] / base['evaluator_peak']:.2f} "
            f"| {r['evaluator_peak'] / r['activation_bytes']:.1f} |"
        )
    for plan in ("layer", "sqrt"):
        print(f"step time, {plan} / none (median of 15 interleaved rounds, min–max): "
              f"{time_ratio(plan, args.depth, args.width, args.batch)}")


if __name__ == "__main__":
    main()
