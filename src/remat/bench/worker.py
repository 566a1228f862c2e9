"""One measurement of `remat bench` in a process of its own:

    MALLOC_MMAP_THRESHOLD_=65536 python -m remat.bench.worker '<json job>'

`memory` jobs build one (framework, model, plan) step, compile it, take the resident set size
(RSS) as a baseline and sample it during one step; the answer is the peak above the baseline.
Freed buffers go back to the OS under that malloc setting, so RSS follows live memory. XLA
steps are measured on their first run after compiling: XLA:CPU keeps an executable's temporary
buffer resident after it ran once, which would hide the peak inside the baseline.
`time` jobs build several steps and time them interleaved, round after round. (Quick runs skip
them and time each step in its memory job instead: one compilation per step, not two.)
"""

from __future__ import annotations

import gc
import json
import sys
import time

from remat.bench.config import NotSupported, inputs, size_from_dict
from remat.bench.rss import peak_during

IN_PROCESS = {"remat-numpy"}  # measured in the parent process (evaluator count and tracemalloc)


def build(framework: str, size, plan: str):
    params, data = inputs(size)
    if framework in ("remat-numpy", "remat-xla"):
        from remat.bench import impl_remat

        return impl_remat.build(size, plan, params, data, framework.split("-")[1])
    if framework == "jax":
        from remat.bench import impl_jax

        return impl_jax.build(size, plan, params, data)
    if framework == "torch":
        from remat.bench import impl_torch

        return impl_torch.build(size, plan, params, data)
    raise ValueError(f"unknown framework {framework!r}")


def memory_job(job: dict) -> dict:
    size = size_from_dict(job["size"])
    step, finish = build(job["framework"], size, job["plan"])
    if job["framework"] == "torch":
        finish(step())  # eager: the first step also sets PyTorch up; measure the second
    gc.collect()
    loss, baseline, peak = peak_during(lambda: finish(step()))  # RSS sampled every 0.5 ms
    out = {"peak": peak - baseline, "baseline": baseline, "loss": loss}
    if job.get("rounds"):  # quick runs time the step here too, not interleaved with other plans
        out["time"] = min(timed(step, finish) for _ in range(job["rounds"]))
    return out


def timed(step, finish) -> float:
    """Seconds of one step, until its results are ready."""
    start = time.perf_counter()
    finish(step())
    return time.perf_counter() - start


def time_job(job: dict) -> dict:
    """Steps of every (framework, plan) entry, interleaved: the fastest of `rounds` per entry."""
    size = size_from_dict(job["size"])
    steps = {}
    for framework, plan in job["entries"]:
        try:
            steps[f"{framework}/{plan}"] = build(framework, size, plan)
        except NotSupported:
            continue
    times = {k: [] for k in steps}
    losses = {k: finish(step()) for k, (step, finish) in steps.items()}  # warm up
    for _ in range(job["rounds"]):
        for k, (step, finish) in steps.items():
            times[k].append(timed(step, finish))
    return {"times": times, "losses": losses}


def main(argv: list[str]) -> int:
    job = json.loads(argv[0])
    try:
        out = memory_job(job) if job["job"] == "memory" else time_job(job)
    except NotSupported as e:
        out = {"unsupported": str(e)}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
