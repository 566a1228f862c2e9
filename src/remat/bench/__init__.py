"""`remat bench`: remat (NumPy and XLA) beside `jax.checkpoint` and `torch.utils.checkpoint`, on
a residual MLP and a GPT-style transformer, the same two as loops over stacked weights and a tanh
RNN (`jax.lax.scan`; a Python loop in PyTorch), for each checkpoint plan, in one run.

Every framework runs the same step (the loss and the gradients of the parameters, returned as
outputs) and every figure counts the same things. Memory: the peak during one step above the
level with the parameters, the data and the compiled step resident, so the gradients count; each
(framework, plan) is measured in a process of its own (see `remat.bench.worker`). Time: ratios
to the same framework without checkpoints, and remat on XLA over the same model written in JAX,
each the median over rounds with its spread; runtimes are timed apart (see `remat.bench.jobs`).
Frameworks that are not installed are left out.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from remat.bench.config import MODELS, NotSupported
from remat.bench.jobs import ROUNDS, phases
from remat.bench.report import LABELS, table
from remat.errors import ArgumentTypeError, ArgumentValueError

FRAMEWORKS = ("remat-numpy", "remat-xla", "jax", "torch")


def missing(framework: str) -> str | None:
    """Why `framework` cannot run here (None: it can)."""
    if framework == "remat-numpy":
        return None
    if framework in ("remat-xla", "jax") and importlib.util.find_spec("jax") is None:
        return "JAX is not installed"
    if framework == "remat-xla" and importlib.util.find_spec("remat.backends.xla") is None:
        return "remat has no XLA backend"
    if framework == "torch" and importlib.util.find_spec("torch") is None:
        return "PyTorch is not installed"
    return None


# ---------------------------------------------------------------- running the jobs


# Resident memory follows live memory only if freed buffers go back to the OS: every buffer of
# 64 KiB or more is mmapped (and unmapped when freed), and a memory job's allocations share one
# malloc arena. Without the latter, each thread of a runtime's pool that allocates gets an arena
# of its own, whose freed small blocks stay resident: on XLA a step's first run kept ~0.55 MiB
# per distinct executable that way (3.9 MiB for the planned 64-layer MLP, none with one arena).
# Timing jobs run with glibc's defaults, as programs usually run: under that threshold every
# allocation of 64 KiB or more is fresh pages, faulted in anew, which timed the kernel more than
# the step (the unplanned 64-layer MLP on NumPy: 155 ms against 114; a checkpoint block that
# recomputes elementwise ops, 1.19x against 1.09x).
MEMORY_JOB = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_ARENA_MAX": "1"}


def _subprocess(job: dict) -> dict:
    env = {**os.environ, **(MEMORY_JOB if job["job"].endswith("memory") else {})}
    cmd = [sys.executable, "-m", "remat.bench.worker", json.dumps(job)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"bench job {job} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure_model(model: str, quick: bool, frameworks: list[str], log) -> dict:
    """`{(framework, plan): {"peak", "times", "loss", ...}}` for one model, phase after phase."""
    rows: dict[tuple[str, str], dict] = {}
    for phase in phases(model, quick, frameworks):
        with ThreadPoolExecutor(max_workers=phase.processes) as pool:
            for job, res in zip(phase.jobs, pool.map(_subprocess, phase.jobs)):
                _merge(rows, job, res)
        log(f"{model}: {phase.name}")
    return rows


def _merge(rows: dict, job: dict, res: dict) -> None:
    if job["job"] == "memory":
        if "unsupported" not in res:
            rows.setdefault((job["framework"], job["plan"]), {}).update(res)
        return
    for key, times in res["times"].items():
        row = rows.setdefault(tuple(key.split("/")), {})
        row["times"] = times
        row.setdefault("loss", res["losses"][key])


def run(quick: bool = False, out: str | None = None, frameworks=None, models=None) -> int:
    """Measure, print the tables (and write them to `out`); `frameworks` and `models` are lists
    of names (all of them when None)."""
    for name, given in (("frameworks", frameworks), ("models", models)):
        if isinstance(given, str):
            raise ArgumentTypeError(f"bench: {name} must be a list of names, got {given!r}; use [{given!r}]")
    frameworks = list(frameworks or FRAMEWORKS)
    models = list(models or MODELS)
    for name, known, given in (("framework", FRAMEWORKS, frameworks), ("model", MODELS, models)):
        bad = [g for g in given if g not in known]
        if bad:
            raise ArgumentValueError(f"bench: unknown {name} {bad[0]!r}; known: {', '.join(known)}")
    skipped = {f: missing(f) for f in frameworks if missing(f)}
    frameworks = [f for f in frameworks if f not in skipped]
    start = time.perf_counter()
    log = lambda msg: print(f"  [{time.perf_counter() - start:6.1f} s] {msg}", file=sys.stderr)  # noqa: E731
    sections = []
    for model in models:
        rows = measure_model(model, quick, frameworks, log)
        sections.append(table(model, quick, rows, frameworks))
    header = [
        f"remat bench{' --quick' if quick else ''}: peak memory of one training step, in MiB above the level "
        "with the parameters, the data and the compiled step resident, the step's outputs (loss and "
        "gradients) included; in parentheses: relative to no checkpoint. Time: the step's time over the "
        f"same framework's step without checkpoints, median of {ROUNDS[quick]} rounds (min–max).",
    ]
    header += [f"Not run: {LABELS[f]} ({why})." for f, why in skipped.items()]
    text = "\n\n".join([" ".join(header), *sections])
    print(text)
    if out:
        Path(out).write_text(text + "\n")
        print(f"(written to {out})", file=sys.stderr)
    log("done")
    return 0


__all__ = ["run", "FRAMEWORKS", "NotSupported"]
