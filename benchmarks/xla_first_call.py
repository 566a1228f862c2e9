"""How the first call of an XLA step grows with depth: a ratio of two depths, never times alone.

The step is `value_and_grad` of the residual MLP of `remat.models` with a checkpoint per layer,
`rm.jit(..., backend="xla")`. Its first call traces, differentiates, lowers, compiles and runs.
Identical layers should not cost a compile each: the target is that 1,024 layers take at most
twice as long as 64. Each first call runs in a fresh process (JAX started and warmed up before
the clock starts), the depths alternate, and the median of the pair ratios is compared with it.

    python benchmarks/xla_first_call.py [--shallow 64 --deep 1024 --repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from functools import partial

from remat.bench import timing

TARGET = 2.0  # deep / shallow


def first_call(depth: int, width: int, batch: int) -> float:
    """Seconds of the first call of a fresh step, until its results are ready."""
    import jax
    import numpy as np

    import remat as rm
    from remat.models import residual_mlp_loss, residual_mlp_params

    params = residual_mlp_params(depth, width)
    x = rm.asarray(np.random.default_rng(0).normal(size=(batch, width)), "float32")
    jax.block_until_ready(jax.numpy.zeros(1) + 1)  # start the runtime outside the clock
    step = rm.jit(rm.value_and_grad(lambda p, x: residual_mlp_loss(p, x, "layer")), backend="xla")
    return timing.seconds(partial(step, params, x))


def in_child(depth: int, width: int, batch: int) -> float:
    args = [sys.executable, os.path.abspath(__file__), "--child", str(depth),
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
    p.add_argument("--json", action="store_true")
    p.add_argument("--child", type=int, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        print(first_call(a.child, a.width, a.batch))
        return 0
    children = {depth: partial(in_child, depth, a.width, a.batch) for depth in (a.shallow, a.deep)}
    times = timing.round_robin(children, a.repeats)
    ratios = timing.ratios(times[a.deep], times[a.shallow])
    ratio = statistics.median(ratios)
    limit = TARGET
    if a.json:
        print(json.dumps({"times": times, "ratios": ratios, "median": ratio, "limit": limit}))
        return 0
    for depth, ts in times.items():
        runs = ", ".join(f"{t:.2f}" for t in ts)
        print(f"{depth:>6} layers: first call {statistics.median(ts):6.2f} s  (runs: {runs})")
    spread = f"{min(ratios):.2f}-{max(ratios):.2f}"
    verdict = "ok" if ratio <= limit else "NOT MET"
    print(f"deep / shallow: {ratio:.2f}x median (pairs {spread}), target <= {limit:g}x  {verdict}")
    return 0 if ratio <= limit else 1


if __name__ == "__main__":
    sys.exit(main())
