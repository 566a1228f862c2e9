"""How the first call of an XLA step grows with depth: a ratio of two depths, never times alone.

The step is `value_and_grad` of the residual MLP of `remat.models`, a checkpoint per layer, its
first call tracing, differentiating, lowering, compiling and running it. Identical layers should
not cost a compile each: the target is that 1,024 layers take at most twice as long as 64. The
model written three ways:

- `remat`: a Python loop over a list of weights, `rm.checkpoint` per layer, `rm.jit(...,
  backend="xla")`;
- `remat-scan`: one `rm.scan` over the stacked weights, `checkpoint="step"`;
- `jax`: the Python loop in JAX, `jax.checkpoint` per layer, `jax.jit(jax.value_and_grad(...))`:
  what XLA itself costs a layer when a model is a Python loop.

Each first call runs in a fresh process (JAX started and warmed up before the clock starts), the
variants and depths alternate, and the median of the pair ratios is compared with the target.
With `--peaks`, what the deep step's executable holds by XLA's buffer report, for the two remat
variants (a scan keeps its stacked residuals and gradients whole, the loop frees each layer's
input as it makes that layer's gradient).

    python benchmarks/xla_first_call.py [--shallow 64 --deep 1024 --repeats 3 --peaks]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

import remat as rm
from remat.bench import timing
from remat.models import residual_mlp_loss, residual_mlp_params, scanned_mlp_loss, stack_params

TARGET = 2.0  # deep / shallow
VARIANTS = ("remat", "remat-scan", "jax")


def step_of(variant: str, depth: int, width: int, batch: int) -> tuple:
    """(the step, its arguments) of `variant` (see the module docstring), not yet called."""
    params = residual_mlp_params(depth, width)
    x = np.random.default_rng(0).normal(size=(batch, width)).astype(np.float32)
    if variant == "remat":
        return rm.jit(rm.value_and_grad(lambda p, x: residual_mlp_loss(p, x, "layer")), backend="xla"), (params, x)
    if variant == "remat-scan":
        stacked = tuple(np.asarray(a) for a in stack_params(params))
        return rm.jit(rm.value_and_grad(lambda p, x: scanned_mlp_loss(p, x, "step")), backend="xla"), (stacked, x)
    layer = jax.checkpoint(lambda h, w, b: h + jnp.tanh(h @ w + b))

    def loss(params, x):
        for w, b in params:
            x = layer(x, w, b)
        return jnp.mean(x * x)

    params = [(jnp.asarray(w), jnp.asarray(b)) for w, b in params]
    return jax.jit(jax.value_and_grad(loss)), (params, jnp.asarray(x))


def first_call(variant: str, depth: int, width: int, batch: int) -> float:
    """Seconds of the first call of a fresh step, until its results are ready."""
    step, args = step_of(variant, depth, width, batch)
    jax.block_until_ready(jax.numpy.zeros(1) + 1)  # start the runtime outside the clock
    return timing.seconds(partial(step, *args))


def peak(variant: str, depth: int, width: int, batch: int) -> int:
    """Bytes a run of a remat variant's step holds beyond its arguments (XLA's buffer report)."""
    step, args = step_of(variant, depth, width, batch)
    compiled = step.lower(*args).compile()
    compiled(*args)
    return compiled.last_memory.peak


def in_child(what: str, variant: str, depth: int, width: int, batch: int) -> float:
    args = [sys.executable, os.path.abspath(__file__), "--child", what, "--variant", variant, "--depth", str(depth),
            "--width", str(width), "--batch", str(batch)]
    done = subprocess.run(args, capture_output=True, text=True, check=True)
    return float(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shallow", type=int, default=64)
    p.add_argument("--deep", type=int, default=1024)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated subset of " + ",".join(VARIANTS))
    p.add_argument("--peaks", action="store_true", help="also the deep steps' buffer reports (remat variants)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--child", choices=("first_call", "peak"), help=argparse.SUPPRESS)
    p.add_argument("--variant", help=argparse.SUPPRESS)
    p.add_argument("--depth", type=int, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        print({"first_call": first_call, "peak": peak}[a.child](a.variant, a.depth, a.width, a.batch))
        return 0
    variants = [v for v in a.variants.split(",") if v]
    if not variants or not set(variants) <= set(VARIANTS):
        p.error(f"--variants: a comma-separated subset of {','.join(VARIANTS)}, got {a.variants!r}")
    children = {(v, depth): partial(in_child, "first_call", v, depth, a.width, a.batch)
                for v in variants for depth in (a.shallow, a.deep)}
    times = timing.round_robin(children, a.repeats)
    ratios = {v: timing.ratios(times[v, a.deep], times[v, a.shallow]) for v in variants}
    medians = {v: statistics.median(r) for v, r in ratios.items()}
    peaks = {v: int(in_child("peak", v, a.deep, a.width, a.batch))
             for v in variants if a.peaks and v.startswith("remat")}
    met = {v: m <= TARGET for v, m in medians.items() if v.startswith("remat")}
    if a.json:
        print(json.dumps({"times": {f"{v}/{d}": ts for (v, d), ts in times.items()}, "ratios": ratios,
                          "medians": medians, "limit": TARGET, "peaks": peaks}))
        return 0
    for (v, depth), ts in times.items():
        runs = ", ".join(f"{t:.2f}" for t in ts)
        print(f"{v:>10} {depth:>5} layers: first call {statistics.median(ts):6.2f} s  (runs: {runs})")
    for v in variants:
        spread = f"{min(ratios[v]):.2f}-{max(ratios[v]):.2f}"
        verdict = f", target <= {TARGET:g}x  {'ok' if met[v] else 'NOT MET'}" if v in met else ""
        print(f"{v:>10} deep / shallow: {medians[v]:.2f}x median (pairs {spread}){verdict}")
    for v, b in peaks.items():
        print(f"{v:>10} {a.deep} layers holds {b / 2**20:.1f} MiB (XLA's buffer report)")
    return 0 if all(met.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
