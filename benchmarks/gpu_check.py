"""remat on an accelerator, in one command that prints one JSON object (a few minutes on one GPU):

    python benchmarks/gpu_check.py            # the GPT-style model at GPU size
    python benchmarks/gpu_check.py --tiny     # seconds, on any machine (tests/test_precision.py runs it)

On the GPT-style model of `remat.models` (`remat.bench.config.GPT`), each checkpoint plan:

- `gradients`: the step's gradients here, at precision "highest", against the CPU's (a child
  process with `JAX_PLATFORMS=cpu`, "highest"): the largest relative error of a parameter's
  gradient, ||g - g_cpu|| / ||g_cpu||, must be under float32's `tolerance`. Beside it, the same
  error at the default precision (TF32 on recent NVIDIA GPUs): why the tests that compare
  backends ask for "highest".
- `memory`: what one step's executable holds as XLA's `memory_analysis()` reports it
  (temporaries + outputs), in MiB: remat as `rm.jit` lowers it here (`default_lowering`: on an
  accelerator backward blocks inline behind their optimization barriers), remat with the other
  lowering (backward blocks as conditionals, the CPU's), `jax.jit` with `jax.checkpoint`, and
  the CPU's remat from the child. `ratio` columns are relative to the plan without checkpoints.
- `speed`: remat ÷ JAX step time at the default precision (JAX's, so TF32 where JAX uses it),
  each lowering, the median over interleaved rounds of the per-round ratio, with its range;
  `dot_precisions` are the precisions in remat's lowered program. Together with `memory`, they
  say which lowering is best on this platform.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

from remat.bench.config import GPT, PLANS, inputs, size_from_dict, size_to_dict
from remat.bench.timing import rotated, seconds

SIZE = GPT(layers=8, d_model=512, heads=8, seq=256, batch=16, vocab=2048)
TINY = GPT(layers=2, d_model=32, heads=2, seq=16, batch=2, vocab=64)
TOLERANCE = 1e-4  # float32 gradients through 8 blocks, summed in another order: ~1e-6; TF32: ~1e-3
MiB = 2**20


def log(what: str) -> None:
    """Progress on stderr (stdout is the JSON)."""
    print(f"[gpu_check {time.strftime('%H:%M:%S')}] {what}", file=sys.stderr, flush=True)


def remat_step(size, plan: str, params, data, branches: bool | None = None):
    """remat's step, its backward blocks lowered as `rm.jit` lowers them here (None), as
    conditionals (True) or inline (False)."""
    from remat.backends import xla
    from remat.bench import impl_remat

    default = xla.default_branches
    if branches is not None:
        xla.default_branches = lambda: branches
    try:
        return impl_remat.build(size, plan, params, data, "xla")  # compiled now
    finally:
        xla.default_branches = default


def jax_step(size, plan: str, params, data):
    from remat.bench import impl_jax

    return impl_jax.build(size, plan, params, data)


def gradients(step) -> list[np.ndarray]:
    import remat as rm

    _, grads = step()
    return [np.asarray(g) for g in rm.tree.leaves(grads)]


def worst_error(got: list[np.ndarray], want: list[np.ndarray]) -> float:
    return max(float(np.linalg.norm(g - w) / max(np.linalg.norm(w), 1e-30)) for g, w in zip(got, want))


def remat_peak(step) -> float:
    step[1](step[0]())  # a run fills last_memory
    return step[0].compiled.last_memory.peak / MiB


# ---------------------------------------------------------------- the CPU child


def cpu_reference(size, plans, out: str) -> dict:
    """Gradients at "highest" (saved to `out`), and remat's peak of each plan."""
    import remat as rm

    params, data = inputs(size)
    with rm.default_matmul_precision("highest"):
        reference = gradients(remat_step(size, "none", params, data)[0])
    np.savez(out, *reference)
    return {plan: remat_peak(remat_step(size, plan, params, data)) for plan in plans}


def start_cpu_child(size, plans, out: str) -> subprocess.Popen:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    args = [sys.executable, __file__, "--cpu-reference", out, "--size", json.dumps(size_to_dict(size)),
            "--plans", *plans]
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, text=True)


# ---------------------------------------------------------------- here (the accelerator)


def check(size, plans, rounds: int) -> dict:
    import jax

    import remat as rm
    from remat.backends import xla
    from remat.bench.worker import set_up_xla

    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        child = start_cpu_child(size, plans, os.path.join(tmp, "cpu.npz"))
        params, data = inputs(size)
        set_up_xla()
        log(f"{jax.default_backend()}: {size.describe()}; gradients at 'highest'")
        with rm.default_matmul_precision("highest"):
            exact = {p: gradients(remat_step(size, p, params, data)[0]) for p in plans}
        log("compiling the steps at the default precision")
        here = xla.default_branches()
        with jax.default_matmul_precision(None):  # JAX's default for remat (nothing else set) and JAX alike
            remat = {p: remat_step(size, p, params, data) for p in plans}
            other = {p: remat_step(size, p, params, data, branches=not here) for p in plans}
            plain = {p: jax_step(size, p, params, data) for p in plans}
            text = rm.jit(lambda a, b: a @ b, backend="xla").lower(rm.ones((2, 2)), rm.ones((2, 2))).as_text()
        default = gradients(remat["none"][0])
        log("waiting for the CPU's gradients")
        cpu_out, _ = child.communicate(timeout=600)
        if child.returncode:
            raise RuntimeError(f"the CPU child failed with exit status {child.returncode}")
        with np.load(os.path.join(tmp, "cpu.npz")) as f:
            reference = [f[f"arr_{k}"] for k in range(len(f.files))]
    cpu_peak = json.loads(cpu_out)
    errors = {p: worst_error(g, reference) for p, g in exact.items()}
    device = jax.devices()[0]
    return {
        "platform": {"backend": jax.default_backend(), "device": device.device_kind, "jax": jax.__version__},
        "size": size_to_dict(size),
        "default_lowering": "conditionals" if here else "inline",
        "gradients": {"precision": "highest", "reference": "CPU, highest", "tolerance": TOLERANCE,
                      "worst_relative_error": errors, "ok": all(e <= TOLERANCE for e in errors.values()),
                      "default_precision_error": worst_error(default, reference)},
        "memory": memory(plans, remat, other, plain, cpu_peak),
        "speed": {"precision": "JAX's default", "dot_precisions": sorted(set(_dot_precisions(text))),
                  "remat_over_jax": speed(plans, remat, plain, rounds),
                  "other_lowering_over_jax": speed(plans, other, plain, rounds)},
        "seconds": round(time.perf_counter() - start, 1),
    }


def memory(plans, remat, other, plain, cpu_peak) -> dict:
    rows = {}
    for p in plans:
        jax_report = plain[p][0].compiled.memory_analysis()
        rows[p] = {"remat_peak": remat_peak(remat[p]), "other_lowering_peak": remat_peak(other[p]),
                   "jax_peak": (jax_report.temp_size_in_bytes + jax_report.output_size_in_bytes) / MiB,
                   "cpu_remat_peak": cpu_peak[p]}
    base = rows[plans[0]]
    for row in rows.values():
        row.update({f"{k}_ratio": row[k] / base[k] if base[k] else None for k in list(row)})
    return {"unit": "MiB", "plans": rows}


def speed(plans, ours, plain, rounds: int) -> dict:
    log(f"timing {rounds} rounds")
    ratios: dict[str, list[float]] = {p: [] for p in plans}
    for p in plans:  # JAX's first run sets up its executable: not a step's time
        seconds(*ours[p]), seconds(*plain[p])
    for r in range(rounds):
        for p in plans:
            pair = {"plain": plain[p], "ours": ours[p]}
            took = {k: seconds(*pair[k]) for k in rotated(list(pair), r)}  # each goes first half the time
            ratios[p].append(took["ours"] / took["plain"])
    return {"median": {p: statistics.median(v) for p, v in ratios.items()},
            "range": {p: [min(v), max(v)] for p, v in ratios.items()}, "rounds": rounds}


def _dot_precisions(text: str) -> list[str]:
    import re

    return re.findall(r"dot_general[^\n]*precision = \[(\w+),", text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tiny", action="store_true", help="a tiny model and two rounds: seconds, on any machine")
    parser.add_argument("--plans", nargs="+", default=list(PLANS), choices=PLANS)
    parser.add_argument("--rounds", type=int, default=None, help="timing rounds (default 20; 2 with --tiny)")
    parser.add_argument("--cpu-reference", help=argparse.SUPPRESS)  # the child: write the CPU's gradients here
    parser.add_argument("--size", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.cpu_reference:
        print(json.dumps(cpu_reference(size_from_dict(json.loads(args.size)), args.plans, args.cpu_reference)))
        return 0
    size, rounds = (TINY, 2) if args.tiny else (SIZE, 20)
    result = check(size, list(args.plans), rounds if args.rounds is None else args.rounds)
    print(json.dumps(result, indent=1))
    return 0 if result["gradients"]["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
