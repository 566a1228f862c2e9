"""Where a planned step will run, and so which count of its memory a budget bounds.

The NumPy evaluator frees each value after its last reader: `peak.total_peak` is its count, to
the byte. XLA counts differently: its buffer assignment decides what lives together, and a step's
outputs are allocated apart from its temporaries. So a step traced for XLA is planned against
XLA's own figure: its executable compiled, and its buffer report read (`xla.ExecutableMemory`).

`rm.jit(backend="xla")` traces its function under `running_on`, so a `memory_budget` inside it
knows; an eager step, or one jitted for NumPy, is counted as the evaluator counts. A sharded
step is counted unsharded, as one device holding every array whole: a bound on what each
device holds, not its share.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    """A backend and, on XLA, `rm.jit`'s matmul precision."""

    backend: str = "numpy"
    precision: str | None = None

    def __str__(self) -> str:
        return "the NumPy evaluator" if self.backend != "xla" else "XLA's buffer report of the executable"


NUMPY = Target()
_TARGET: ContextVar[Target] = ContextVar("remat_plan_target", default=NUMPY)


@contextlib.contextmanager
def running_on(target: Target) -> Iterator[None]:
    """Steps planned inside will run on `target`."""
    token = _TARGET.set(target)
    try:
        yield
    finally:
        _TARGET.reset(token)


def current() -> Target:
    return _TARGET.get()


__all__ = ["Target", "NUMPY", "running_on", "current"]
