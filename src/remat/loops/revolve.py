"""The binomial checkpointing schedule (Griewank and Walther's Revolve) as a list of actions.

To reverse T steps of a loop while holding at most `s` snapshots of its carry, Revolve advances
from a snapshot to a split point m, snapshots there, reverses the last T - m steps with one
snapshot fewer, then reverses the first m steps from the first snapshot again. With the best
split at every level the number of plain step evaluations ("advances") is the minimum

    F(T, s) = t*T - C(s + t, t - 1),   t the least integer with C(s + t, t) >= T,

and each step is also evaluated once more, with its VJP, when it is reversed ("youturn").
Both backends run the same action list: NumPy as a Python loop, XLA as one `fori_loop` over it.
"""

from __future__ import annotations

from functools import lru_cache
from math import comb

import numpy as np

ADVANCE, TAKESHOT, RESTORE, FETCH, YOUTURN = range(5)  # FETCH: restore and free the snapshot
NAMES = ("advance", "takeshot", "restore", "fetch", "youturn")


def advances(steps: int, snapshots: int) -> int:
    """F(steps, snapshots): the fewest plain step evaluations that reverse `steps` steps."""
    if steps <= 1:
        return 0
    if snapshots < 1:
        raise ValueError(f"{steps} steps cannot be reversed without a snapshot")
    t = 0
    while comb(snapshots + t, t) < steps:
        t += 1
    return t * steps - comb(snapshots + t, t - 1)


def _cost(steps: int, snapshots: int, m: int) -> int:
    return m + advances(m, snapshots) + advances(steps - m, snapshots - 1)


@lru_cache(maxsize=4096)
def split(steps: int, snapshots: int) -> int:
    """A best first advance m (1 <= m < steps). The cost is convex in m (a sum of convex
    piecewise-linear functions), so a binary search on its slope finds a minimum."""
    if snapshots == 1:  # the part after the split has no snapshot of its own: one step
        return steps - 1
    lo, hi = 1, steps - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if _cost(steps, snapshots, mid + 1) < _cost(steps, snapshots, mid):
            lo = mid + 1
        else:
            hi = mid
    return lo


@lru_cache(maxsize=64)
def actions(steps: int, snapshots: int) -> np.ndarray:
    """The schedule as an int32 array of (action, snapshot slot) rows. It starts with the carry
    of step 0 current and ends after the youturn of step 0; a youturn reverses the step from the
    current carry. Read-only: it is cached."""
    out: list[tuple[int, int]] = []

    def reverse(lo: int, hi: int, slot: int, free: int) -> None:
        # The current carry is the one before step `lo`; reverse steps lo..hi-1 with `free`
        # snapshots, the first in `slot`. Recursion only goes one snapshot deeper: <= s levels.
        if hi - lo > 1:
            out.append((TAKESHOT, slot))
        while hi - lo > 1:
            m = split(hi - lo, free)
            out.extend([(ADVANCE, 0)] * m)
            reverse(lo + m, hi, slot + 1, free - 1)
            hi = lo + m
            out.append((FETCH if hi - lo == 1 else RESTORE, slot))
        out.append((YOUTURN, 0))

    if steps:
        advances(steps, snapshots)  # raises when there are too few snapshots
        reverse(0, steps, 0, snapshots)
    table = np.asarray(out, np.int32).reshape(-1, 2)
    table.flags.writeable = False
    return table


@lru_cache(maxsize=64)
def first_descent(steps: int, snapshots: int) -> tuple[tuple[int, ...], int]:
    """`(positions, row)`: where the schedule's first descent takes its snapshots (slot i at
    step positions[i]) and the row of its first youturn, which reverses the last step. Until
    then the schedule only advances, from step 0 to step steps - 1: a forward sweep can take the
    snapshots itself, and the reversal start at that row (`steps` >= 1). The first descent
    fills every slot the schedule uses, min(snapshots, steps - 1): later ones only reuse them."""
    shots: list[int] = []
    pos = 0
    for row, (kind, _slot) in enumerate(actions(steps, snapshots).tolist()):
        if kind == TAKESHOT:  # the first descent fills slots 0, 1, ... in order
            shots.append(pos)
        elif kind == ADVANCE:
            pos += 1
        elif kind == YOUTURN:
            return tuple(shots), row
    raise ValueError(f"a schedule of {steps} steps has no youturn")
