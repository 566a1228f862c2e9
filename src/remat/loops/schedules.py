"""How a scan checkpoints itself (`rm.scan(..., checkpoint=...)`), from least to most memory saved:

- `"step"`: each step is a checkpoint block; the gradient keeps one carry per step.
- `segments(k)`: a scan of checkpointed scans of k steps; the gradient keeps one carry per
  segment plus one segment's residuals: O(√T) for k ≈ √T (the default), one more forward pass.
- `binomial(s)`: Revolve's schedule with `s` snapshots of the carry: at most s + 2 carries at
  once and the fewest step re-evaluations any schedule with s snapshots can do, O(T log T) for
  s ≈ log₂ T (the default).

The values are plain, hashable data, so a scan node's params stay cacheable.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from remat.argcheck import is_int, short_repr
from remat.errors import ArgumentTypeError, ArgumentValueError


@dataclass(frozen=True)
class Segments:
    size: int | None  # steps per segment; None: ceil(sqrt(T))

    def __repr__(self) -> str:
        return f"segments({'' if self.size is None else self.size})"

    def steps(self, length: int) -> int:
        return self.size or max(1, math.ceil(math.sqrt(length)))


@dataclass(frozen=True)
class Binomial:
    snapshots: int | None  # None: ceil(log2 T)

    def __repr__(self) -> str:
        return f"binomial({'' if self.snapshots is None else self.snapshots})"

    def resolve(self, length: int) -> Binomial:
        """The schedule for a loop of `length` steps, with its number of snapshots settled."""
        if self.snapshots is not None:
            return self
        return Binomial(max(1, math.ceil(math.log2(max(length, 1)))))


def segments(size: int | None = None) -> Segments:
    """Checkpoint a scan in segments of `size` steps (default: ceil(√T)).

    >>> import remat as rm
    >>> rm.loops.segments(8)
    segments(8)
    """
    if size is not None:
        _positive("segments", "size", size)
    return Segments(None if size is None else int(size))


def binomial(snapshots: int | None = None) -> Binomial:
    """Checkpoint a scan with Revolve's binomial schedule and `snapshots` carries (default:
    ceil(log₂ T)).

    >>> import remat as rm
    >>> rm.loops.binomial(4)
    binomial(4)
    """
    if snapshots is not None:
        _positive("binomial", "snapshots", snapshots)
    return Binomial(None if snapshots is None else int(snapshots))


def _positive(fn: str, name: str, value) -> None:
    if not is_int(value):
        raise ArgumentTypeError(f"rm.loops.{fn}: {name} must be an int, got {short_repr(value)}")
    if value < 1:
        raise ArgumentValueError(f"rm.loops.{fn}: {name} must be >= 1, got {value}")


def check(checkpoint) -> None:
    """`checkpoint=` of `rm.scan` must be one of the schedules above."""
    if checkpoint is None or isinstance(checkpoint, (Segments, Binomial)) or (
        isinstance(checkpoint, str) and checkpoint == "step"
    ):
        return
    raise ArgumentTypeError(
        f"scan: checkpoint={short_repr(checkpoint)} is not a schedule; use None, \"step\", "
        "rm.loops.segments(k) or rm.loops.binomial(snapshots)"
    )
