"""How the first call of an XLA step grows with depth: a ratio of two depths, never times alone.

The step is `value_and_grad` of the residual MLP of `remat.models` with a checkpoint per layer,
`rm.jit(..., backend="xla")`. Its first call traces, differentiates, lowers, compiles and runs.
Identical layers should not cost a compile each: the target is that 1,024 layers take at most
twice as long as 64. Each first call runs in a fresh process (JAX started and warmed up before
the clock starts), the depths alternate, and the median of the pair ratios is compared with it.
Beside it, the same model written in JAX (`jax.jit(jax.value_and_grad(...))`, `jax.checkpoint`
per layer), timed alike: what XLA itself costs a layer when a model is a Python loop.

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


def jax_first_call(depth: int, width: int, batch: int) -> float:
    """`first_call` of the same model, step and checkpoints written in JAX."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from remat.models import residual_mlp_params

    params = [(jnp.asarray(w), jnp.asarray(b)) for w, b in residual_mlp_params(depth, width)]
    x = jnp.asarray(np.random.default_rng(0).normal(size=(batch, width)), jnp.float32)
    jax.block_until_ready(jnp.zeros(1) + 1)
    layer = jax.checkpoint(lambda h, w, b: h + jnp.tanh(h @ w + b))

    def loss(params, x):
        for w, b in params:
            x = layer(x, w, b)
        return jnp.mean(x * x)

    step = jax.jit(jax.value_and_grad(loss))
    return timing.seconds(partial(step, params, x))


def in_child(framework: str, depth: int, width: int, batch: int) -> float:
    args = [sys.executable, os.path.abspath(__file__), "--child", str(depth), "--framework", framework,
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
    p.add_argument("--no-jax", action="store_true", help="time remat alone")
    p.add_argument("--child", type=int, help=argparse.SUPPRESS)
    p.add_argument("--framework", default="remat", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        print((jax_first_call if a.framework == "jax" else first_call)(a.child, a.width, a.batch))
        return 0
    frameworks = ("remat",) if a.no_jax else ("remat", "jax")
    children = {(f, depth): partial(in_child, f, depth, a.width, a.batch)
                for f in frameworks for depth in (a.shallow, a.deep)}
    times = timing.round_robin(children, a.repeats)
    ratios = {f: timing.ratios(times[f, a.deep], times[f, a.shallow]) for f in frameworks}
    ratio = statistics.median(ratios["remat"])
    limit = TARGET
    if a.json:
        print(json.dumps({"times": {f"{f}/{d}": ts for (f, d), ts in times.items()}, "ratios": ratios,
                          "median": ratio, "limit": limit}))
        return 0
    for (f, depth), ts in times.items():
        runs = ", ".join(f"{t:.2f}" for t in ts)
        print(f"{f:>5} {depth:>5} layers: first call {statistics.median(ts):6.2f} s  (runs: {runs})")
    for f in frameworks:
        spread = f"{min(ratios[f]):.2f}-{max(ratios[f]):.2f}"
        verdict = f", target <= {limit:g}x  {'ok' if ratio <= limit else 'NOT MET'}" if f == "remat" else ""
        print(f"{f:>5} deep / shallow: {statistics.median(ratios[f]):.2f}x median (pairs {spread}){verdict}")
    return 0 if ratio <= limit else 1


if __name__ == "__main__":
    sys.exit(main())
