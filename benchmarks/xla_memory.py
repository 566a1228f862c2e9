"""Peak memory of one training step on XLA: remat beside `jax.checkpoint`.

The model: L layers of `h + tanh(h @ w + b)` (width D, batch B, float32), loss `mean(h * h)`, a
step is `value_and_grad` with respect to the parameters. Plans: no checkpoint, a checkpoint per
layer, and √L segments (a checkpoint over each group of ~√L layers).

remat runs as `rm.jit` runs it (on the CPU each backward block a conditional), and as
"remat-inline", its backward blocks inline behind their barriers as on accelerators, which
XLA:CPU drops: that row shows what the conditionals buy. Every (implementation, plan) runs in its
own process started with `MALLOC_MMAP_THRESHOLD_=65536`,
so freed buffers go back to the OS and resident memory follows live memory. The child compiles
first (`.lower(...).compile()`), creates its inputs on the device, takes its baseline RSS, then
measures one step: RSS sampled every ~1 ms by a thread and the kernel's
own high-water mark (VmHWM, reset at the baseline). Peaks are printed in MiB and in activations
(one activation is a B x D float32 array: 8 MiB at the default size).

    python benchmarks/xla_memory.py                 # the table, with the targets checked
    python benchmarks/xla_memory.py --json --impls remat
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

IMPLS = ("remat", "remat-inline", "jax")
PLANS = ("none", "layer", "sqrt")
TARGETS = {"layer": 0.55, "sqrt": 0.30}  # remat, peak relative to no checkpoint
MiB = 2**20


def compiled_step(impl: str, plan: str, size, params, x):
    """`(step, finish)` of `remat.bench`: `step()` runs one step on device-resident inputs,
    compiled ahead of time (`step.compiled`); `finish(out)` waits for it and gives the loss.
    The model: `remat.models.residual_mlp_loss`, or its twin `remat.bench.impl_jax.mlp_loss`."""
    if impl == "jax":
        from remat.bench import impl_jax

        return impl_jax.build(size, plan, params, x)
    from remat.backends import xla
    from remat.bench import impl_remat

    if impl == "remat-inline":  # as on accelerators, whatever this machine is
        xla.default_branches = lambda: False
    return impl_remat.build(size, plan, params, x, "xla")


# ---------------------------------------------------------------- measuring in the child


def measure(impl: str, plan: str, depth: int, width: int, batch: int) -> dict:
    from remat.bench.config import MLP, inputs
    from remat.bench.rss import peak_during
    from remat.bench.timing import seconds

    size = MLP(depth=depth, width=width, batch=batch)
    params, x = inputs(size)
    t0 = time.perf_counter()
    step, finish = compiled_step(impl, plan, size, params, x)
    compile_s = time.perf_counter() - t0
    del params, x
    # No warm-up step: XLA:CPU keeps a large executable's temporary buffer resident after its
    # second run, which would hide the very peak being measured inside the baseline.
    step_s, baseline, peak = peak_during(lambda: seconds(step, finish), interval=0.001, high_water=True)
    activation = batch * width * 4
    row = {
        "impl": impl, "plan": plan, "peak_mib": (peak - baseline) / MiB,
        "activations": (peak - baseline) / activation, "compile_s": compile_s, "step_s": step_s,
    }
    if impl == "jax":
        analysis = step.compiled.memory_analysis()
        row["xla_report_mib"] = (analysis.temp_size_in_bytes + analysis.output_size_in_bytes) / MiB
    else:
        row["xla_report_mib"] = step.compiled.last_memory.peak / MiB
    return row


# ---------------------------------------------------------------- the parent


def run_child(impl: str, plan: str, depth: int, width: int, batch: int) -> dict:
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    args = [sys.executable, os.path.abspath(__file__), "--child", impl, plan,
            "--layers", str(depth), "--width", str(width), "--batch", str(batch)]
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"{impl}/{plan} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(rows: list[dict]) -> str:
    base = {r["impl"]: r["peak_mib"] for r in rows if r["plan"] == "none"}
    lines = [f"{'impl':<14}{'plan':<7}{'peak MiB':>10}{'acts':>8}{'vs none':>9}{'step s':>8}{'compile s':>11}"]
    for r in rows:
        ratio = r["peak_mib"] / base[r["impl"]] if base.get(r["impl"]) else float("nan")
        lines.append(
            f"{r['impl']:<14}{r['plan']:<7}{r['peak_mib']:>10.1f}{r['activations']:>8.1f}{ratio:>9.2f}"
            f"{r['step_s']:>8.2f}{r['compile_s']:>11.2f}"
            + f"   (XLA's report: {r['xla_report_mib']:.1f} MiB)"
        )
    return "\n".join(lines)


def check(rows: list[dict]) -> list[str]:
    """The targets for remat; an empty list when all are met."""
    peak = {r["plan"]: r["peak_mib"] for r in rows if r["impl"] == "remat"}
    failures = []
    for plan, limit in TARGETS.items():
        if "none" in peak and plan in peak and peak[plan] > limit * peak["none"]:
            failures.append(f"remat {plan}: {peak[plan] / peak['none']:.2f} x none > {limit}")
    return failures


def size_arguments(p: argparse.ArgumentParser) -> None:
    """The model's size: `--layers`, `--width`, `--batch` (shared with xla_speed.py)."""
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--batch", type=int, default=8192)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    size_arguments(p)
    p.add_argument("--impls", nargs="+", default=list(IMPLS), choices=IMPLS)
    p.add_argument("--plans", nargs="+", default=list(PLANS), choices=PLANS)
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.add_argument("--child", nargs=2, metavar=("IMPL", "PLAN"), help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        print(json.dumps(measure(*a.child, a.layers, a.width, a.batch)))
        return 0
    rows = [run_child(i, pl, a.layers, a.width, a.batch) for i in a.impls for pl in a.plans]
    if a.json:
        print(json.dumps(rows))
        return 0
    mib = a.batch * a.width * 4 / MiB
    print(f"{a.layers} layers, width {a.width}, batch {a.batch}: one activation = {mib:g} MiB")
    print(table(rows))
    failures = check(rows)
    print("targets met" if not failures else "NOT MET: " + "; ".join(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
