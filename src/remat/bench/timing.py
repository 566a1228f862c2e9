"""How the benchmarks time a step: until its results are ready, in interleaved rounds, as ratios.

A step is timed from its call until its outputs exist (`ready`): XLA runs asynchronously, so a
returned array may still be being computed. Steps to be compared run in the same rounds, each
once a round, the order rotated every round (`round_robin`), so that drift in the machine's
load hits them all alike; a comparison is then taken round by round (`ratios`), and the median
of those ratios is the figure (`median_ratio`).

JAX is never imported here: it is optional on the NumPy path, and a JAX array waits for itself.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Hashable, Sequence
from functools import partial
from typing import Any, TypeVar

from remat.tensor import Tensor
from remat.tree import leaves

K = TypeVar("K", bound=Hashable)
T = TypeVar("T")
Step = Callable[[], Any]
Wait = Callable[[Any], Any]


def ready(out: T) -> T:
    """`out`, once every array in it is computed: remat Tensors, JAX arrays and NumPy arrays, in
    any pytree (NumPy's are computed when returned)."""
    for leaf in leaves(out):
        value = leaf._value if isinstance(leaf, Tensor) else leaf
        if hasattr(value, "block_until_ready"):
            value.block_until_ready()
    return out


def seconds(fn: Step, wait: Wait = ready) -> float:
    """Seconds from calling `fn` until `wait` has its result."""
    start = time.perf_counter()
    wait(fn())
    return time.perf_counter() - start


def rotated(keys: Sequence[K], r: int) -> list[K]:
    """Round `r`'s order of `keys`: starting one later every round (two keys alternate)."""
    r %= len(keys)
    return [*keys[r:], *keys[:r]]


def round_robin(runs: dict[K, Callable[[], T]], rounds: int) -> dict[K, list[T]]:
    """Each of `runs` called once a round for `rounds` rounds, in `rotated` order: what each
    returned, round by round."""
    out: dict[K, list[T]] = {k: [] for k in runs}
    for r in range(rounds if runs else 0):
        for k in rotated(list(runs), r):
            out[k].append(runs[k]())
    return out


def interleaved(steps: dict[K, Step], rounds: int, wait: Wait = ready) -> dict[K, list[float]]:
    """The `seconds` of each of `steps`, timed in `round_robin`: one list per step, round by round."""
    return interleaved_pairs({k: (step, wait) for k, step in steps.items()}, rounds)


def interleaved_pairs(steps: dict[K, tuple[Step, Wait]], rounds: int) -> dict[K, list[float]]:
    """`interleaved` for steps that each come with their own wait: `(step, finish)` pairs, as
    `remat bench` builds them (`remat.bench.impl_remat.build`)."""
    return round_robin({k: partial(seconds, step, finish) for k, (step, finish) in steps.items()}, rounds)


def ratios(times: Sequence[float], base: Sequence[float]) -> list[float]:
    """Round by round, `times` over `base`: each ratio of two steps that ran moments apart."""
    return [a / b for a, b in zip(times, base)]


def median_ratio(times: Sequence[float], base: Sequence[float]) -> float:
    """The median of the per-round `ratios` of `times` to `base`."""
    return statistics.median(ratios(times, base))


def best_and_median(pairs: dict[K, tuple[Sequence[float], Sequence[float]]]) -> dict[str, dict[K, float]]:
    """For each `(times, base)` of `pairs`, two ratios of the one to the other: `best`, of their
    fastest times (which other load on the machine disturbs least), and `median`, of their medians."""
    return {"best": {k: min(t) / min(b) for k, (t, b) in pairs.items()},
            "median": {k: statistics.median(t) / statistics.median(b) for k, (t, b) in pairs.items()}}
