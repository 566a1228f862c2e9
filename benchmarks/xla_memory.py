"""Peak memory of one training step on XLA: remat (staged, fused) beside `jax.checkpoint`.

The model: L layers of `h + tanh(h @ w + b)` (width D, batch B, float32), loss `mean(h * h)`, a
step is `value_and_grad` with respect to the parameters. Plans: no checkpoint, a checkpoint per
layer, and √L segments (a checkpoint over each group of ~√L layers).

Every (implementation, plan) runs in its own process started with `MALLOC_MMAP_THRESHOLD_=65536`,
so freed buffers go back to the OS and resident memory follows live memory. The child compiles
first (`.lower(...).compile()`), creates its inputs on the device, takes its baseline RSS, then
measures one step: RSS sampled every ~1 ms by a thread and the kernel's
own high-water mark (VmHWM, reset at the baseline). Peaks are printed in MiB and in activations
(one activation is a B x D float32 array: 8 MiB at the default size).

    python benchmarks/xla_memory.py                 # the table, with the targets checked
    python benchmarks/xla_memory.py --json --impls remat-staged
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import threading
import time

IMPLS = ("remat-staged", "remat-fused", "jax")
PLANS = ("none", "layer", "sqrt")
TARGETS = {"layer": 0.60, "sqrt": 0.35}  # remat staged, peak relative to no checkpoint
MiB = 2**20


def segment_length(plan: str, depth: int) -> int:
    return {"none": 0, "layer": 1, "sqrt": max(1, round(math.sqrt(depth)))}[plan]


def groups(params: list, seg: int) -> list[list]:
    return [params[i : i + seg] for i in range(0, len(params), seg)]


# ---------------------------------------------------------------- the model, twice


def remat_loss(params, x, plan: str):
    import remat as rm

    seg = segment_length(plan, len(params))
    h = x
    if seg == 0:
        for w, b in params:
            h = h + rm.tanh(h @ w + b)
        return rm.mean(h * h)
    for group in groups(params, seg):

        def segment(h, group=group):
            for w, b in group:  # w, b captured from scope
                h = h + rm.tanh(h @ w + b)
            return h

        h = rm.checkpoint(segment, h)
    return rm.mean(h * h)


def jax_loss(params, x, plan: str):
    import jax
    import jax.numpy as jnp

    seg = segment_length(plan, len(params))
    h = x
    if seg == 0:
        for w, b in params:
            h = h + jnp.tanh(h @ w + b)
        return jnp.mean(h * h)
    for group in groups(params, seg):

        def segment(h, group):
            for w, b in group:
                h = h + jnp.tanh(h @ w + b)
            return h

        h = jax.checkpoint(segment)(h, group)
    return jnp.mean(h * h)


def make_inputs(depth: int, width: int, batch: int, seed: int = 0):
    import numpy as np

    rng = np.random.default_rng(seed)
    scale = 1.0 / math.sqrt(width)
    params = [
        (rng.normal(0, scale, (width, width)).astype(np.float32), np.zeros(width, np.float32))
        for _ in range(depth)
    ]
    return params, rng.normal(size=(batch, width)).astype(np.float32)


def compiled_step(impl: str, plan: str, params, x):
    """`(step, compiled)`: a zero-argument callable running one step on device-resident inputs,
    and the executable(s) it uses, compiled ahead of time."""
    import jax

    params, x = jax.device_put((params, x))
    if impl == "jax":
        compiled = jax.jit(jax.value_and_grad(jax_loss), static_argnums=2).lower(params, x, plan).compile()
        return (lambda: compiled(params, x)), compiled
    import remat as rm

    staged = impl == "remat-staged"
    jitted = rm.jit(rm.value_and_grad(lambda p, x: remat_loss(p, x, plan)), backend="xla", staged=staged)
    compiled = jitted.lower(params, x).compile()
    return (lambda: compiled(params, x)), compiled


# ---------------------------------------------------------------- measuring in the child


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _hwm() -> int | None:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return None


def _reset_hwm() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class Sampler(threading.Thread):
    """Reads resident memory every ~1 ms until stopped; `peak` is the largest reading."""

    def __init__(self):
        super().__init__(daemon=True)
        self.peak = rss()
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            self.peak = max(self.peak, rss())
            time.sleep(0.001)

    def stop(self) -> int:
        self._done.set()
        self.join()
        return max(self.peak, rss())


def _block(out) -> None:
    import jax

    import remat as rm

    leaves = [getattr(t, "_value", t) for t in rm.tree.leaves(out)]  # remat Tensors hold jax arrays
    jax.block_until_ready(leaves)


def measure(impl: str, plan: str, depth: int, width: int, batch: int) -> dict:
    params, x = make_inputs(depth, width, batch)
    t0 = time.perf_counter()
    step, compiled = compiled_step(impl, plan, params, x)
    compile_s = time.perf_counter() - t0
    del params, x
    # No warm-up step: XLA:CPU keeps a large executable's temporary buffer resident after its
    # second run, which would hide the very peak being measured inside the baseline.
    baseline = rss()
    exact = _reset_hwm()
    sampler = Sampler()
    sampler.start()
    t0 = time.perf_counter()
    out = step()
    _block(out)
    step_s = time.perf_counter() - t0
    peak = sampler.stop()
    if exact:
        peak = max(peak, _hwm() or 0)
    activation = batch * width * 4
    row = {
        "impl": impl, "plan": plan, "peak_mib": (peak - baseline) / MiB,
        "activations": (peak - baseline) / activation, "compile_s": compile_s, "step_s": step_s,
    }
    if impl == "jax":
        analysis = compiled.memory_analysis()
        row["xla_temp_mib"] = getattr(analysis, "temp_size_in_bytes", 0) / MiB
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
            + (f"   (XLA temp buffer {r['xla_temp_mib']:.0f} MiB)" if "xla_temp_mib" in r else "")
        )
    return "\n".join(lines)


def check(rows: list[dict]) -> list[str]:
    """The targets for remat staged; an empty list when all are met."""
    staged = {r["plan"]: r["peak_mib"] for r in rows if r["impl"] == "remat-staged"}
    failures = []
    for plan, limit in TARGETS.items():
        if "none" in staged and plan in staged and staged[plan] > limit * staged["none"]:
            failures.append(f"remat-staged {plan}: {staged[plan] / staged['none']:.2f} x none > {limit}")
    return failures


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--batch", type=int, default=8192)
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
