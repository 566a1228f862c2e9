"""`remat bench`: remat (NumPy and XLA) beside `jax.checkpoint` and `torch.utils.checkpoint`, on
a residual MLP and a GPT-style transformer, for each checkpoint plan, in one run.

Memory: remat on NumPy is measured in this process by the evaluator's own live-byte count,
cross-checked by tracemalloc. Every other (framework, plan) runs in a process of its own started
with `MALLOC_MMAP_THRESHOLD_=65536`, compiled first, then its resident memory is sampled during
one step (see `remat.bench.worker`); the figure is the peak above the level before the step.
Time: ratios to the same framework without checkpoints, from steps interleaved in one process
(the fastest of several rounds), and remat on XLA over the same model written in JAX. `--quick`
times each step in its memory process instead (one compilation per step).
Frameworks that are not installed are left out.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from remat.bench.config import MODELS, PLAN_NAMES, PLANS, NotSupported, size_of, size_to_dict

FRAMEWORKS = ("remat-numpy", "remat-xla", "jax", "torch")
LABELS = {
    "remat-numpy": "remat · NumPy", "remat-xla": "remat · XLA",
    "jax": "jax.checkpoint", "torch": "torch.utils.checkpoint",
}
MiB = 2**20


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


def _subprocess(job: dict) -> dict:
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    cmd = [sys.executable, "-m", "remat.bench.worker", json.dumps(job)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"bench job {job} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _numpy_memory(size, plan: str) -> dict:
    """The evaluator's peak for one step, and tracemalloc's over the same step."""
    from remat.bench.worker import build

    step, finish = build("remat-numpy", size, plan)
    finish(step())  # the first call may set things up; measure the second
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        loss = finish(step())
        traced = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    return {"peak": step.compiled.last_memory.peak, "tracemalloc": traced, "loss": loss}


def measure_model(model: str, quick: bool, frameworks: list[str], log) -> dict:
    """`{(framework, plan): {"peak", "time", ...}}` for one model."""
    from remat.bench.worker import time_job

    size = size_of(model, quick)
    rounds = 3 if quick else 5
    rows: dict[tuple[str, str], dict] = {}
    if "remat-numpy" in frameworks:
        for plan in PLANS:
            rows["remat-numpy", plan] = _numpy_memory(size, plan)
            log(f"{model} remat-numpy {plan}: memory")
        timed = time_job({"size": size_to_dict(size), "rounds": rounds,
                          "entries": [("remat-numpy", p) for p in PLANS]})
        _merge_times(rows, timed)
        log(f"{model} remat-numpy: time")
    others = [f for f in frameworks if f != "remat-numpy"]
    jobs = [{"job": "memory", "framework": f, "plan": p, "size": size_to_dict(size), "rounds": rounds if quick else 0}
            for f in others for p in PLANS]
    with ThreadPoolExecutor(max_workers=2) as pool:
        for job, res in zip(jobs, pool.map(_subprocess, jobs)):
            if "unsupported" not in res:
                rows.setdefault((job["framework"], job["plan"]), {}).update(res)
            log(f"{model} {job['framework']} {job['plan']}: memory")
    for group in (["remat-xla", "jax"], ["torch"]):  # remat and JAX interleaved in one process
        group = [f for f in group if f in others and not quick]
        if group:
            entries = [(f, p) for f in group for p in PLANS]
            _merge_times(rows, _subprocess({"job": "time", "size": size_to_dict(size), "rounds": rounds,
                                            "entries": entries}))
            log(f"{model} {'+'.join(group)}: time")
    return rows


def _merge_times(rows: dict, timed: dict) -> None:
    for key, times in timed["times"].items():
        framework, plan = key.split("/")
        rows.setdefault((framework, plan), {})["time"] = min(times)
        rows[framework, plan].setdefault("loss", timed["losses"][key])


# ---------------------------------------------------------------- the table


def table(model: str, quick: bool, rows: dict, frameworks: list[str]) -> str:
    size = size_of(model, quick)
    cols = [f for f in frameworks if any((f, p) in rows for p in PLANS)]
    head = ["plan"] + [h for f in cols for h in (f"{LABELS[f]} peak MiB", "time")]
    both = "remat-xla" in cols and "jax" in cols
    if both:
        head.append("remat · XLA ÷ JAX time")
    lines = [f"**{size.describe()}**", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for plan in PLANS:
        cells = [PLAN_NAMES[plan]]
        for f in cols:
            cells += _cells(rows.get((f, plan)), rows.get((f, "none")))
        if both:
            a, b = rows.get(("remat-xla", plan), {}), rows.get(("jax", plan), {})
            cells.append(f"{a['time'] / b['time']:.2f}x" if "time" in a and "time" in b else "n/a")
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", _notes(rows)]
    return "\n".join(lines)


def _cells(row: dict | None, base: dict | None) -> list[str]:
    if not row or "peak" not in row:
        return ["n/a", "n/a"]
    peak = f"{row['peak'] / MiB:.1f}"
    if base and base.get("peak"):
        peak += f" ({row['peak'] / base['peak']:.2f}x)"
    t = f"{row['time'] / base['time']:.2f}x" if base and "time" in row and "time" in base else "n/a"
    return [peak, t]


def _notes(rows: dict) -> str:
    notes = []
    checks = [(r["peak"], r["tracemalloc"]) for r in rows.values() if "tracemalloc" in r]
    if checks:
        worst = max(abs(a - b) / b for a, b in checks)
        notes.append(f"remat · NumPy peaks are the evaluator's count; tracemalloc agrees within {worst:.1%}.")
    losses = [r["loss"] for r in rows.values() if "loss" in r]
    if losses:
        spread = (max(losses) - min(losses)) / max(abs(min(losses)), 1e-30)
        notes.append(f"Loss of the step: {losses[0]:.6g} in every framework and plan "
                     f"(largest relative difference {spread:.1e}).")
    return " ".join(notes)


def run(quick: bool = False, out: str | None = None, frameworks=None, models=None) -> int:
    frameworks = list(frameworks or FRAMEWORKS)
    models = list(models or MODELS)
    for name, known, given in (("framework", FRAMEWORKS, frameworks), ("model", MODELS, models)):
        bad = [g for g in given if g not in known]
        if bad:
            raise ValueError(f"bench: unknown {name} {bad[0]!r}; known: {', '.join(known)}")
    skipped = {f: missing(f) for f in frameworks if missing(f)}
    frameworks = [f for f in frameworks if f not in skipped]
    start = time.perf_counter()
    log = lambda msg: print(f"  [{time.perf_counter() - start:6.1f} s] {msg}", file=sys.stderr)  # noqa: E731
    sections = []
    for model in models:
        rows = measure_model(model, quick, frameworks, log)
        sections.append(table(model, quick, rows, frameworks))
    header = [
        f"remat bench{' --quick' if quick else ''}: peak memory of one training step (MiB above the level "
        "before it; in parentheses: relative to no checkpoint) and step time relative to no checkpoint.",
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
