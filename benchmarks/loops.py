"""Loops: peak memory per checkpoint schedule, and trace + compile time against depth.

Models (`remat.models`): the residual MLP as one `rm.scan` over stacked weights (L layers, width D,
batch B, float32), beside the same MLP unrolled; a tanh RNN over T steps. A step is
`value_and_grad` with respect to the weights. Schedules (`rm.scan(..., checkpoint=...)`): plain,
a checkpointed body ("step"), √T segments, the binomial schedule with ceil(log2 T) snapshots.

Memory, as the project measures it: on NumPy the evaluator's live-byte count, checked against
tracemalloc; on XLA the peak RSS of a separate process started with `MALLOC_MMAP_THRESHOLD_=65536`
(sampled, and the kernel's high-water mark), above its level before the step, XLA's runtime set
up first by a small unrelated step as `remat bench` does (its thread pool and malloc arenas, about
11 MiB whatever the program, are no part of the step); beside it, the peak XLA's own buffer
assignment reports for the step's executables (live values plus temporaries).

Scale: trace + compile time (`rm.jit(...).lower(...).compile()`, XLA) of the scanned MLP at 1,024
layers over 16 layers, and over `jax.jit(jax.grad(...)).lower(...).compile()` of the same
`lax.scan` program; medians of interleaved rounds, fresh functions each time.

    python benchmarks/loops.py                  # everything
    python benchmarks/loops.py --only memory    # or: scale
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tracemalloc

import numpy as np

import remat as rm
from remat import models
from remat.bench.timing import ready, round_robin, seconds

MiB = 2**20
SCHEDULES = ("plain", "body", "sqrt", "binomial")


def schedule(name: str):
    """`rm.scan`'s `checkpoint=` for a row of the table ("unrolled" has none: it is no loop)."""
    return {"plain": None, "unrolled": None, "body": "step", "sqrt": rm.loops.segments(),
            "binomial": rm.loops.binomial()}[name]


# ---------------------------------------------------------------- the models' steps


def mlp_inputs(depth: int, width: int, batch: int):
    params = models.residual_mlp_params(depth, width)
    return params, rm.asarray(np.random.default_rng(1).normal(size=(batch, width)), "float32")


def rnn_inputs(steps: int, width: int, batch: int, inputs: int = 32):
    rng = np.random.default_rng(1)
    xs = rm.asarray(rng.normal(size=(steps, batch, inputs)), "float32")
    return models.rnn_params(width, inputs), rm.asarray(np.zeros((batch, width)), "float32"), xs


def step_and_args(model: str, name: str, size: dict):
    """`(fn, args)`: a training step of `model` with schedule `name`, and its arguments."""
    if model == "mlp":
        params, x = mlp_inputs(size["depth"], size["width"], size["batch"])
        if name == "unrolled":
            return rm.value_and_grad(lambda p, x: models.residual_mlp_loss(p, x)), (params, x)
        ck = schedule(name)
        return rm.value_and_grad(lambda s, x: models.scanned_mlp_loss(s, x, ck)), (models.stack_params(params), x)
    params, h0, xs = rnn_inputs(size["steps"], size["width"], size["batch"])
    ck = schedule(name)
    return rm.value_and_grad(lambda p, h0, xs: models.rnn_loss(p, h0, xs, ck)), (params, h0, xs)


def numpy_peak(model: str, name: str, size: dict) -> dict:
    """One step on NumPy: the evaluator's peak and tracemalloc's, in bytes."""
    fn, args = step_and_args(model, name, size)
    compiled = rm.jit(fn).lower(*args).compile()
    compiled(*args)  # warm up
    tracemalloc.start()
    tracemalloc.reset_peak()
    loss, _ = compiled(*args)
    _, seen = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {"model": model, "schedule": name, "evaluator": compiled.last_memory.peak, "tracemalloc": seen,
            "loss": float(loss)}


def xla_peak(model: str, name: str, size: dict) -> dict:
    """One step on XLA, measured in this process (run it in a child: see `xla_peak_in_child`):
    `rss`, the rise of resident memory, and `buffers`, what XLA's buffer assignment says the
    step's executables hold at their peak (`StageMemory`: live values and temporaries)."""
    import jax

    from remat.bench.rss import peak_during
    from remat.bench.worker import set_up_xla

    fn, args = step_and_args(model, name, size)
    compiled = rm.jit(fn, backend="xla").lower(*args).compile()
    device_args = rm.tree.map(lambda a: jax.device_put(np.asarray(a)), args)
    # As `remat bench` does: XLA's thread pool and its malloc arenas (about 11 MiB, the same for
    # every program) are set up by a small unrelated step before the baseline, not counted in it.
    set_up_xla()

    def step():
        loss, grads = compiled(*device_args)
        ready(grads)
        return float(loss)

    # No warm-up step: XLA:CPU may keep a large executable's temporaries resident after a run.
    loss, baseline, peak = peak_during(step, interval=0.001, high_water=True)
    return {"model": model, "schedule": name, "rss": peak - baseline, "loss": loss,
            "buffers": compiled.last_memory.peak}


def xla_peak_in_child(model: str, name: str, size: dict) -> dict:
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    args = [sys.executable, os.path.abspath(__file__), "--child", model, name, json.dumps(size)]
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"{model}/{name} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------- scale: trace + compile time


def remat_compile_seconds(depth: int, width: int, batch: int) -> float:
    params, x = mlp_inputs(depth, width, batch)
    stacked = models.stack_params(params)
    return seconds(lambda: rm.jit(rm.grad(lambda s, x: models.scanned_mlp_loss(s, x)), backend="xla")
                   .lower(stacked, x).compile())


def jax_compile_seconds(depth: int, width: int, batch: int) -> float:
    import jax
    import jax.numpy as jnp

    params, x = mlp_inputs(depth, width, batch)
    W, b = (jnp.asarray(np.asarray(a)) for a in models.stack_params(params))

    def loss(wb, x):
        def layer(h, wb):
            return h + jnp.tanh(h @ wb[0] + wb[1]), None

        h = jax.lax.scan(layer, x, wb)[0]
        return jnp.mean(h * h)

    return seconds(lambda: jax.jit(jax.grad(loss)).lower((W, b), jnp.asarray(np.asarray(x))).compile())


def scale(width: int = 128, batch: int = 256, rounds: int = 5) -> dict:
    """Median seconds of each, rounds interleaved, and the two ratios."""
    jobs = {"remat-16": lambda: remat_compile_seconds(16, width, batch),
            "remat-1024": lambda: remat_compile_seconds(1024, width, batch),
            "jax-1024": lambda: jax_compile_seconds(1024, width, batch)}
    med = {k: statistics.median(v) for k, v in round_robin(jobs, rounds).items()}
    return {**med, "depth_ratio": med["remat-1024"] / med["remat-16"], "jax_ratio": med["remat-1024"] / med["jax-1024"]}


# ---------------------------------------------------------------- the tables

# Batch large beside width: the stacked weight gradient (depth x width², allocated whole by the
# backward loop) stays one activation, so the table shows what the schedules keep per step.
MLP_SIZE = {"depth": 64, "width": 64, "batch": 4096}
RNN_SIZE = {"steps": 1000, "width": 256, "batch": 32}


def memory_rows(xla: bool = True) -> list[dict]:
    rows = []
    for model, size, names in (("mlp", MLP_SIZE, ("unrolled", *SCHEDULES)), ("rnn", RNN_SIZE, SCHEDULES)):
        for name in names:
            row = numpy_peak(model, name, size)
            if xla:
                child = xla_peak_in_child(model, name, size)
                row["rss"], row["buffers"] = child["rss"], child["buffers"]
            rows.append(row)
    return rows


def memory_table(rows: list[dict]) -> str:
    lines = ["| model | schedule | NumPy peak (MiB) | vs first row | tracemalloc (MiB) | XLA peak RSS (MiB) "
             "| vs first row | XLA buffers (MiB) | vs first row |", "|---|---|---|---|---|---|---|---|---|"]
    first: dict[str, dict] = {}
    for r in rows:
        base = first.setdefault(r["model"], r)
        rss = r.get("rss")
        xla = "- | - | - | -"
        if rss is not None:
            xla = (f"{rss / MiB:.1f} | {rss / base['rss']:.2f} | {r['buffers'] / MiB:.1f} | "
                   f"{r['buffers'] / base['buffers']:.2f}")
        lines.append(f"| {r['model']} | {r['schedule']} | {r['evaluator'] / MiB:.1f} | "
                     f"{r['evaluator'] / base['evaluator']:.2f} | {r['tracemalloc'] / MiB:.1f} | {xla} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", choices=("memory", "scale"))
    p.add_argument("--no-xla", action="store_true", help="NumPy only (no RSS children)")
    p.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        model, name, size = a.child
        print(json.dumps(xla_peak(model, name, json.loads(size))))
        return 0
    if a.only != "scale":
        print(f"MLP {MLP_SIZE} (rows vs the unrolled MLP); RNN {RNN_SIZE} (rows vs the plain scan)")
        print(memory_table(memory_rows(xla=not a.no_xla)))
    if a.only != "memory":
        s = scale()
        print(f"trace+compile (XLA, grad): scanned MLP 16 layers {s['remat-16']:.2f} s, 1,024 layers "
              f"{s['remat-1024']:.2f} s (ratio {s['depth_ratio']:.2f}, target <= 1.5); jax.jit(jax.grad) of "
              f"the same lax.scan at 1,024 layers {s['jax-1024']:.2f} s (ratio {s['jax_ratio']:.2f}, target <= 2)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
