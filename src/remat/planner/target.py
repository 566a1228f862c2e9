"""Where a planned step will run, and so which count of its memory a budget bounds.

The NumPy evaluator frees each value after its last reader: `peak.total_peak` is its count, to
the byte. XLA counts differently. A staged step runs executable after executable
(`remat.backends.xla`): a stage's inputs live until it ends, its outputs are allocated at once,
and inside it XLA's buffer assignment decides what lives together (on the 8-block GPT-style
model, 135 MiB for the unplanned step against the evaluator's 103). So a step traced for XLA
is planned against XLA's own figure: its stages compiled, and their buffer reports added up as
a run holds them (`xla.StageMemory`).

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
    """A backend and, on XLA, `rm.jit`'s execution mode and matmul precision."""

    backend: str = "numpy"
    staged: bool | None = None
    precision: str | None = None

    def __str__(self) -> str:
        if self.backend != "xla":
            return "the NumPy evaluator"
        from remat.backends import xla

        staged = xla.default_staged() if self.staged is None else self.staged
        return f"XLA's buffer report of each {'stage' if staged else 'executable'}"


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
