"""The schedules of `rm.scan(..., checkpoint=...)` that are compositions of blocks the graph has
already: a step as a checkpoint block, and a scan of checkpointed scans (segments). Their
gradients come from the rules of `scan` and `checkpoint`, so grad of grad works through them.
The binomial schedule needs its own backward loop (`scan_binomial`)."""

from __future__ import annotations

import functools
from collections.abc import Callable

from remat import tree
from remat.checkpoint import checkpoint as checkpoint_block
from remat.ops.shape import concat, reshape


def step_checkpointed(fn: Callable) -> Callable:
    """`fn(carry, x)` as a checkpoint block whose explicit inputs are the carry and x."""

    @functools.wraps(fn)  # errors about the body name the user's function
    def step(carry, x):
        return checkpoint_block(fn, carry, x)

    return step


def segmented(scan: Callable, fn: Callable, init, xs, length: int, size: int, reverse: bool, unroll: int):
    """`scan(fn, init, xs)` as a scan over segments of `size` steps, each a checkpointed scan,
    then one checkpointed scan over the steps left over (in the loop's order of steps)."""
    if not length:  # no step to checkpoint; the plain scan gives the ys their (0, ...) shapes
        return scan(fn, init, xs, length=0, reverse=reverse, unroll=unroll)
    q, r = divmod(length, size)
    full = q * size

    def inner(steps: int):
        def run(c, x):
            return scan(fn, c, x, length=steps, reverse=reverse, unroll=unroll)

        return lambda c, x: checkpoint_block(run, c, x)

    def main(c):
        if not q:
            return c, None
        seg_xs = tree.map(lambda x: reshape(x[:full], (q, size, *x.shape[1:])), xs)
        c, ys = scan(inner(size), c, seg_xs, length=q, reverse=reverse)
        return c, tree.map(lambda y: reshape(y, (full, *y.shape[2:])), ys)

    def rest(c):
        if not r:
            return c, None
        return inner(r)(c, tree.map(lambda x: x[full:], xs))

    if reverse:  # the steps left over are the last xs, so a reverse loop runs them first
        c, ys_rest = rest(init)
        c, ys_main = main(c)
    else:
        c, ys_main = main(init)
        c, ys_rest = rest(c)
    if ys_main is None or ys_rest is None:
        return c, ys_rest if ys_main is None else ys_main
    return c, tree.map(lambda a, b: concat([a, b]), ys_main, ys_rest)
