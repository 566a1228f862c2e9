"""`with rm.memory_budget(budget):` — a budget for part of a function.

The nodes traced inside the `with` (or the decorated function) form a Region of the graph being
traced (`remat.graph.Region`). A gradient step (`rm.grad`, `rm.value_and_grad`, `rm.vjp`,
`rm.jacrev`, with or without a `memory_budget=` of its own) plans each region as a step of its own within its
budget, inner regions first, before it plans the whole step with the regions' plans in place
(`remat.planner.regions`). Ops that run eagerly, outside any trace, are not recorded: there the
`with` does nothing, as a checkpoint does nothing outside a gradient.

>>> import remat as rm
>>> def loss(x):
...     with rm.memory_budget(0.5):
...         x = rm.tanh(rm.tanh(rm.tanh(x)))
...     return rm.sum(x)
>>> print(rm.make_graph(loss)(rm.ones((4,))))
graph(a:f32[4]) {
  memory_budget(0.5) {
    b:f32[4] = tanh a
    c:f32[4] = tanh b
    d:f32[4] = tanh c
  }
  e:f32[] = sum[axes=(0,)] d
  return e
}
"""

from __future__ import annotations

import contextlib
import threading

from remat import budget as budgets
from remat.errors import ArgumentValueError, user_source
from remat.graph import Region
from remat.trace import Trace, current_trace


class memory_budget(contextlib.ContextDecorator):
    """Plan the ops traced inside within `budget`: bytes (`"200MiB"`, an int) or a fraction in
    (0, 1] of what they allocate without checkpoints, as `rm.grad(f, memory_budget=...)` reads
    it, for the gradient of this part alone: its inputs (the values it reads from outside, the
    weights it captures), what it keeps for the backward pass and what that pass allocates.
    `strategy` as in `rm.grad`. A region inside another is planned first, and its plan kept
    when the outer one is planned; the step's own budget, if any, is planned last, around them.
    Usable as a decorator. Values are bit-identical to the step without the region."""

    def __init__(self, budget, strategy: str | None = None):
        budgets.parse_budget(budget, "memory_budget", "budget")
        budgets.parse_strategy(strategy, "memory_budget")
        self.budget, self.strategy = budget, strategy
        self._local = threading.local()  # each thread's open `with`s: one object serves many

    def _open(self) -> list[tuple[Trace | None, int, str | None]]:
        return self._local.__dict__.setdefault("open", [])

    def __enter__(self) -> memory_budget:
        trace, source = current_trace(), user_source()
        _check_planned(trace, source)
        self._open().append((trace, len(trace.nodes) if trace is not None else 0, source))
        return self

    def __exit__(self, *exc) -> None:
        trace, start, source = self._open().pop()
        if trace is not None and trace.active and len(trace.nodes) > start:
            trace.regions.append(Region(start, len(trace.nodes), self.budget, self.strategy, source))

    def __repr__(self) -> str:
        strategy = f", strategy={self.strategy!r}" if self.strategy is not None else ""
        return f"memory_budget({self.budget!r}{strategy})"


def _check_planned(trace: Trace | None, source: str | None) -> None:
    """A region a gradient would not plan is an error: one traced in a function of its own (a
    checkpoint's body, a loop's, a custom_vjp's) inside a differentiated one. Outside any
    gradient a region does nothing, and is no error."""
    inside = trace
    while inside is not None and not inside.plans_regions:
        inside = inside.parent
    if inside is not None and inside is not trace:
        raise ArgumentValueError(
            f"rm.memory_budget: this region is inside `{trace.name}`, a function traced on its own (a "
            f"checkpoint's body, a loop's, a custom_vjp's) within the gradient of `{inside.name}`; the "
            "planner plans the ops the differentiated function runs itself: put the `with` around the call",
            source)


__all__ = ["memory_budget"]
