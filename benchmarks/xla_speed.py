"""Speed of remat on XLA: step-time ratios and a compile-time ratio, never absolute times.

Step time (one process, variants interleaved, each timed `--repeats` times; the best times are
compared, which other load on the machine disturbs least; medians are shown beside them):
  remat-on-XLA without checkpoints / the same model written in JAX (`jax.jit(jax.value_and_grad)`)
  remat with a checkpoint per layer / remat-on-XLA without checkpoints
Compile time (each compile in a fresh process, interleaved; best times compared):
  remat, 64 layers with a checkpoint per layer / JAX with `jax.checkpoint` per layer on the same
  model — tracing, lowering and compiling.

The model is the one of `xla_memory.py`: L layers of `h + tanh(h @ w + b)`, loss `mean(h * h)`.

    python benchmarks/xla_speed.py [--layers 32 --width 256 --batch 8192 --repeats 7]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from functools import partial

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from xla_memory import compiled_step, size_arguments  # noqa: E402

from remat.bench.timing import best_and_median, interleaved_pairs, round_robin, seconds  # noqa: E402

TARGETS = {"remat none / jax none": 1.05, "remat layer / remat none": 1.40, "compile remat / jax": 2.0}

# (name, implementation, plan)
VARIANTS = [
    ("jax none", "jax", "none"),
    ("remat none", "remat", "none"),
    ("remat layer", "remat", "layer"),
    ("jax layer", "jax", "layer"),
]


def step_times(depth: int, width: int, batch: int, repeats: int) -> dict[str, list[float]]:
    from remat.bench.config import MLP, inputs

    size = MLP(depth=depth, width=width, batch=batch)
    params, x = inputs(size)
    steps = {name: compiled_step(impl, plan, size, params, x) for name, impl, plan in VARIANTS}
    for step, finish in steps.values():
        finish(step())  # warm up
    return interleaved_pairs(steps, repeats)


def compile_once(impl: str, depth: int, width: int, batch: int) -> float:
    """Seconds from a fresh function to a compiled step (tracing, lowering, compiling)."""
    import jax

    import remat as rm
    from remat.bench.config import MLP, inputs
    from remat.bench.impl_jax import mlp_loss
    from remat.models import residual_mlp_loss

    params, x = jax.device_put(inputs(MLP(depth=depth, width=width, batch=batch)))

    def fresh():
        if impl == "jax":
            return jax.jit(jax.value_and_grad(lambda p, x: mlp_loss(p, x, "layer")))
        return rm.jit(rm.value_and_grad(lambda p, x: residual_mlp_loss(p, x, "layer")), backend="xla")

    return seconds(lambda: fresh().lower(params, x).compile())


def compile_times(depth: int, width: int, batch: int, repeats: int) -> dict[str, list[float]]:
    def compile_in_child(impl: str) -> float:
        args = [sys.executable, os.path.abspath(__file__), "--compile-child", impl,
                "--layers", str(depth), "--width", str(width), "--batch", str(batch)]
        done = subprocess.run(args, capture_output=True, text=True, check=True)
        return float(done.stdout.strip().splitlines()[-1])

    return round_robin({impl: partial(compile_in_child, impl) for impl in ("remat", "jax")}, repeats)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    size_arguments(p)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--compile-layers", type=int, default=64)
    p.add_argument("--compile-repeats", type=int, default=3)
    p.add_argument("--json", action="store_true")
    p.add_argument("--compile-child", choices=("remat", "jax"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.compile_child:
        print(compile_once(a.compile_child, a.layers, a.width, a.batch))
        return 0

    steps = step_times(a.layers, a.width, a.batch, a.repeats)
    compiles = compile_times(a.compile_layers, a.width, a.batch, a.compile_repeats)
    pairs = {
        "remat none / jax none": (steps["remat none"], steps["jax none"]),
        "remat layer / remat none": (steps["remat layer"], steps["remat none"]),
        "jax layer / jax none": (steps["jax layer"], steps["jax none"]),
        "compile remat / jax": (compiles["remat"], compiles["jax"]),
    }
    found = best_and_median(pairs)
    if a.json:
        print(json.dumps(found))
        return 0
    ratios, medians = found["best"], found["median"]
    print(f"step: {a.layers} layers, width {a.width}, batch {a.batch}, best of {a.repeats}, interleaved")
    print(f"compile: {a.compile_layers} layers, a checkpoint per layer, best of {a.compile_repeats} fresh processes")
    failures = []
    for name, ratio in ratios.items():
        limit = TARGETS.get(name)
        verdict = "" if limit is None else (f"<= {limit}  ok" if ratio <= limit else f"> {limit}  NOT MET")
        failures += [name] if limit is not None and ratio > limit else []
        print(f"  {name:<26}{ratio:6.2f}x  (median {medians[name]:.2f}x)  {verdict}")
    print("targets met" if not failures else "NOT MET: " + ", ".join(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
