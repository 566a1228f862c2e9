"""The exact memory of a planned gradient step: the NumPy evaluator's count, worked out from
shapes by `remat.timeline.predict` on the whole step (forward, then backward) — the figure
`rm.memory.profile(...).peak_bytes` measures. Every strategy checks its plans against it.

The step built from a forward `graph` is what `rm.vjp` builds: the graph replayed, then its
backward pass seeded with ones for the first `seeded` outputs (default: every float output),
returning the outputs and the cotangents of the first `wrt` inputs (default: every float input).

Figures (bytes):

- `step_peak(graph, plan)`: the most the step allocates at once. Like `rm.memory.profile`, it
  leaves out the step's inputs and constants, which live whatever the plan;
- `base_bytes(graph)`: those inputs and constants;
- `total_peak(graph, plan) = base_bytes + step_peak`: what a `memory_budget` bounds;
- `activation_bytes(graph) = step_peak(graph)`: what the unplanned step allocates — the
  "activation memory" a fractional budget is a fraction of. (planner_api.md wrote
  `step_peak - base_bytes`; since `step_peak` leaves the base out already, it is `step_peak`.)

A step traced for XLA is counted by `xla_step_peak` instead (see `remat.planner.target`);
`StepCount` gives a target's count of any plan of one step.

>>> import remat as rm
>>> g = rm.make_graph(lambda x: rm.sum(rm.tanh(x) * 2.0))(rm.ones((256,)))
>>> step_peak(g) == rm.memory.profile(lambda x: rm.sum(rm.tanh(x) * 2.0), rm.ones((256,))).peak_bytes
True
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from remat import dtypes, timeline
from remat.autodiff import _replay, backward_pass
from remat.graph import Graph, Var
from remat.planner.plan import NO_PLAN, Plan, apply
from remat.planner.target import Target
from remat.tensor import Tensor
from remat.trace import new_trace


@dataclass(frozen=True)
class Step:
    """Which inputs the step differentiates (the first `wrt`) and which outputs it seeds (the
    first `seeded`); None: every float one."""

    wrt: int | None = None
    seeded: int | None = None


ALL = Step()

T = TypeVar("T")
_DONE: ContextVar[dict | None] = ContextVar("remat_planning_done", default=None)


@contextlib.contextmanager
def planning() -> Iterator[None]:
    """One plan's search: inside it, each exact peak and each chain of stages is worked out once
    (the strategies check many of the same plans: 17 distinct of 28 on a 64-layer MLP)."""
    token = _DONE.set({})
    try:
        yield
    finally:
        _DONE.reset(token)


def once(key: tuple, work: Callable[[], T]) -> T:
    """`work()`, done once per `key` inside `planning()` (outside it, every time). Keys hold
    their graphs, so a graph's identity is not reused while the search lasts."""
    done = _DONE.get()
    if done is None:
        return work()
    if key not in done:
        done[key] = work()
    return done[key]


def step_graph(graph: Graph, plan: Plan = NO_PLAN, step: Step = ALL) -> Graph:
    """The gradient step of `graph` with `plan` applied, as one Graph (forward nodes first)."""
    return once(("step_graph", graph, plan, step), lambda: traced_step(apply(graph, plan), step).graph)


@dataclass(frozen=True)
class TracedStep:
    """A step's Graph; `owner` maps each Var its forward nodes make to the index of the node of
    the forward graph that made it (a custom_vjp's forward is several nodes of the step)."""

    graph: Graph
    owner: dict[Var, int]

    def kept(self) -> dict[Var, int]:
        """The forward values the backward pass reads (what the gradient keeps), with owners."""
        made_back = {v for n in self.graph.nodes for v in n.outputs if v not in self.owner}
        reads = {v for n in self.graph.nodes if n.outputs and n.outputs[0] in made_back for v in n.inputs}
        reads |= set(self.graph.outputs)
        return {v: i for v, i in self.owner.items() if v in reads}


def traced_step(graph: Graph, step: Step = ALL) -> TracedStep:
    """The gradient step of `graph` (no plan applied), with the owner of each forward value;
    traced once per search (the count of the step without a plan and the chain model's kept
    values read the same one)."""
    return once(("traced_step", graph, step), lambda: _traced_step(graph, step))


def _traced_step(graph: Graph, step: Step) -> TracedStep:
    wrt = len(graph.inputs) if step.wrt is None else step.wrt
    seeded = len(graph.outputs) if step.seeded is None else step.seeded
    owner: dict[Var, int] = {}
    with new_trace("step") as t:
        env = {v: t.new_input(v.shape, v.dtype) for v in graph.inputs}
        env.update({v: Tensor._concrete(a) for v, a in graph.constants.items()})
        for i, node in enumerate(graph.nodes):  # one node at a time, to know who made what
            before = len(t.nodes)
            one = Graph(node.inputs, node.outputs, [node])
            env.update(_replay(one, [env[v] for v in node.inputs], linearize=True))
            owner.update({v: i for n in t.nodes[before:] for v in n.outputs})
        seeds = [Tensor._concrete(np.ones(v.shape, v.dtype)) if k < seeded and dtypes.is_float(v.dtype) else None
                 for k, v in enumerate(graph.outputs)]
        grads = backward_pass(graph, env, seeds)[:wrt]
        out = t.to_graph([env[v] for v in graph.outputs] + [g for g in grads if g is not None])
    return TracedStep(out, owner)


def step_peak(graph: Graph, plan: Plan = NO_PLAN, step: Step = ALL) -> int:
    """The evaluator's peak count for the step (inputs and constants left out)."""
    points = timeline.predict(step_graph(graph, plan, step))
    return max((p.high for p in points), default=0)


def base_bytes(graph: Graph) -> int:
    """Bytes every plan holds for the whole step: its inputs and constants."""
    return sum(v.nbytes for v in dict.fromkeys([*graph.inputs, *graph.constants]))


def total_peak(graph: Graph, plan: Plan = NO_PLAN, step: Step = ALL) -> int:
    """`base_bytes + step_peak`: the figure a memory budget bounds."""
    return once(("total_peak", graph, plan, step), lambda: base_bytes(graph) + step_peak(graph, plan, step))


def activation_bytes(graph: Graph, step: Step = ALL) -> int:
    """What the unplanned step allocates beyond its inputs: the base of a fractional budget."""
    return step_peak(graph, NO_PLAN, step)


def xla_step_peak(graph: Graph, plan: Plan = NO_PLAN, step: Step = ALL, target: Target = Target("xla")) -> int:
    """XLA's count of the step (inputs and constants left out): its program compiled as `rm.jit`
    compiles it for `target`, and what a run holds by XLA's buffer report of the executable
    (`remat.backends.xla.ExecutableMemory`)."""
    from remat.backends import xla

    return xla.lower(step_graph(graph, plan, step), precision=target.precision).memory().peak


class StepCount:
    """`count(plan)`: the total peak of `graph`'s step planned so, as `target` counts it (see
    `remat.planner.target`); `count.activation` the unplanned step's allocation. On NumPy that is
    `total_peak`; on XLA each plan is compiled once."""

    def __init__(self, graph: Graph, step: Step, target: Target):
        self.graph, self.step, self.target = graph, step, target
        self.exact = target.backend != "xla"  # the strategies' own count
        self.base = base_bytes(graph)
        self._seen: dict[Plan, int] = {}
        self.activation = self(NO_PLAN) - self.base

    def __call__(self, plan: Plan) -> int:
        if plan not in self._seen:
            if self.exact:
                self._seen[plan] = total_peak(self.graph, plan, self.step)
            else:
                self._seen[plan] = self.base + xla_step_peak(self.graph, plan, self.step, self.target)
        return self._seen[plan]


__all__ = ["Step", "ALL", "planning", "once", "TracedStep", "traced_step", "step_graph", "step_peak", "base_bytes",
           "total_peak", "activation_bytes", "xla_step_peak", "StepCount"]
