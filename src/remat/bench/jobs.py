"""What `remat bench` runs for one model, in phases run one after another.

Memory jobs (one per framework and plan) run two processes at a time: each measures its own
resident memory, which the other does not disturb. Time jobs each run alone, one process per
group of frameworks that share a runtime: remat on NumPy; remat on XLA with JAX (the same
runtime, so their ratio is fair); PyTorch. Steps of different runtimes never share a process or
the machine while timed, because one runtime's threads still spinning after its step (OpenBLAS's,
PyTorch's OpenMP pool) slow whatever runs next (issue 10 measured remat-on-XLA ÷ JAX at 0.57
timed among NumPy steps and 1.07 timed apart).
"""

from __future__ import annotations

from dataclasses import dataclass

from remat.bench.config import plans_of, size_of, size_to_dict

TIME_GROUPS = (("remat-numpy",), ("remat-xla", "jax"), ("torch",))
ROUNDS = {False: 7, True: 3}  # timed rounds: full, --quick
MEMORY_PROCESSES = 2


@dataclass(frozen=True)
class Phase:
    name: str
    jobs: tuple[dict, ...]
    processes: int  # how many of its jobs run at once


def phases(model: str, quick: bool, frameworks: list[str]) -> list[Phase]:
    """The memory phase, then one time phase per group of `TIME_GROUPS` that has a framework."""
    size, plans = size_to_dict(size_of(model, quick)), plans_of(model)
    memory = tuple({"job": "memory", "framework": f, "plan": p, "size": size} for f in frameworks for p in plans)
    out = [Phase("memory", memory, MEMORY_PROCESSES)]
    for group in TIME_GROUPS:
        present = [f for f in group if f in frameworks]
        if present:
            entries = [(f, p) for f in present for p in plans]
            job = {"job": "time", "size": size, "rounds": ROUNDS[quick], "entries": entries}
            out.append(Phase("time " + " + ".join(present), (job,), 1))
    return out
