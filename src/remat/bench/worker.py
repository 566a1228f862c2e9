"""One measurement of `remat bench` in a process of its own:

    [MALLOC_MMAP_THRESHOLD_=65536 MALLOC_ARENA_MAX=1] python -m remat.bench.worker '<json job>'

Every framework's step is the same function: parameters and data in, the loss and the gradients
of the parameters out, nothing kept behind (see `remat.bench.impl_*`).

`memory` jobs build one (framework, model, plan) step and compile it; with the parameters, the
data and the compiled step resident, they take the resident set size (RSS) as the baseline and
find its peak during one step (the kernel's high-water mark, reset at the baseline, and samples
every 0.5 ms); the figure is the peak above the baseline, so the step's outputs, the gradients
among them, count in it. Memory jobs run under the malloc settings above: freed buffers go back
to the OS, so RSS follows live memory, and there is one malloc arena, so that the freed small
blocks of a runtime's pool threads do not stay resident in arenas of their own (on XLA that
was ~0.55 MiB per distinct executable on its first run). Each runtime sets itself up before
the baseline: eager frameworks by a first step; XLA by a small unrelated step (its thread
pool), and then the step is measured on its first run, because XLA:CPU may keep an
executable's temporary buffer resident after it ran once (the unplanned GPT-style step kept
102 of its 134 MiB), which would hide the peak inside the baseline.
remat on NumPy reports its evaluator's own count of live bytes during the step, with
tracemalloc's and RSS's beside it.

`time` jobs build several steps and time them round after round, the order rotated each round,
each step until all its outputs are ready, with glibc's default malloc settings (under the
memory jobs', each large allocation is fresh pages, and the time is partly the kernel's). Run
one at a time, nothing else measuring meanwhile.
"""

from __future__ import annotations

import gc
import json
import sys
import tracemalloc

from remat.bench.config import NotSupported, inputs, size_from_dict
from remat.bench.rss import peak_during
from remat.bench.timing import interleaved_pairs

FIRST_RUN = {"remat-xla", "jax"}  # measured on the first run after compiling (see above)


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
    """`{"peak", "baseline", "loss"}`: bytes above the baseline (see the module's docstring)."""
    framework = job["framework"]
    step, finish = build(framework, size_from_dict(job["size"]), job["plan"])
    return measure_memory(framework, step, finish)


def measure_memory(framework: str, step, finish) -> dict:
    """`memory_job`'s figures for a step already built."""
    if framework in FIRST_RUN:
        set_up_xla()
    else:
        finish(step())
    gc.collect()
    loss, baseline, peak = peak_during(lambda: finish(step()), high_water=True)
    out = {"peak": peak - baseline, "baseline": baseline, "loss": loss}
    if framework == "remat-numpy":  # the evaluator's count of the step just measured
        out.update(rss=out["peak"], peak=step.compiled.last_memory.peak)
        out["tracemalloc"] = _traced(step, finish)
    if framework == "remat-xla":  # what XLA's own buffer report says the executable holds
        out["xla_own"] = step.compiled.last_memory.peak
    return out


def set_up_xla() -> None:
    """Run a small step unrelated to the benchmark, with matrix products big enough for XLA to
    spread them over its thread pool, so that the runtime's one-time set-up happens now."""
    import jax
    import jax.numpy as jnp

    loss = lambda x, w: jnp.sum(jnp.tanh(x @ w) ** 2)  # noqa: E731
    x, w = jnp.ones((512, 256)), jnp.full((256, 256), 1 / 256)
    jax.block_until_ready(jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))(x, w))


def _traced(step, finish) -> int:
    """tracemalloc's peak during one step, above the level before it."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        finish(step())
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


def time_job(job: dict) -> dict:
    """`{"times": {"framework/plan": [seconds per round]}, "losses": {...}}` for every entry that
    the framework supports, all timed in each round, starting one entry later every round."""
    size = size_from_dict(job["size"])
    steps = {}
    for framework, plan in job["entries"]:
        key = f"{framework}/{plan}"
        while key in steps:  # the same step built again: a control that measures the noise
            key += "'"
        try:
            steps[key] = build(framework, size, plan)
        except NotSupported:
            continue
    losses = {k: finish(step()) for k, (step, finish) in steps.items()}  # warm up
    times = interleaved_pairs(steps, job["rounds"])
    return {"times": times, "losses": losses}


def main(argv: list[str]) -> int:
    job = json.loads(argv[0])
    try:
        if job["job"].startswith("planner-"):  # `remat bench --planner`'s jobs
            from remat.bench.planner import JOBS

            out = JOBS[job["job"]](job)
        else:
            out = memory_job(job) if job["job"] == "memory" else time_job(job)
    except NotSupported as e:
        out = {"unsupported": str(e)}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
