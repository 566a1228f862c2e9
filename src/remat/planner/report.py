"""`PlanReport`: what the planner chose for a step and what it predicts, printable like
`rm.memory.print_saved_residuals`, whose table (`residual_table`) it prints too, so that table
lives here. `rm.memory.plan_report(fn, *args, memory_budget=...)` makes one with the values the
planned step keeps (`kept`, with their provenance)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from remat.graph import Graph, type_str
from remat.planner.cost import cost, flops, node_flops, step_time
from remat.planner.peak import ALL, Step, once, step_graph
from remat.planner.plan import NO_PLAN, Plan, extra_runs


class PlanWarning(UserWarning):
    """A plan whose predicted peak is less certain than usual (the step has a loop)."""


@dataclasses.dataclass(frozen=True)
class Recomputed:
    """A value of the forward pass the planned gradient computes again (`runs` more times)."""

    shape: tuple[int, ...]
    dtype: np.dtype
    nbytes: int
    runs: int
    provenance: str  # "output of tanh at model.py:12"
    source: str | None


@dataclasses.dataclass(frozen=True)
class PlanReport:
    """The plan made for one gradient step. Bytes count as a memory budget does: the step's
    inputs and constants (`base_bytes`) plus what it allocates (see `remat.planner.peak`).

    >>> import remat as rm
    >>> layer = lambda h: h + rm.tanh(h)
    >>> loss = lambda x: rm.sum(layer(layer(layer(layer(layer(layer(x)))))))
    >>> report = rm.memory.plan_report(loss, rm.ones((1024,)), memory_budget=0.8, strategy="chain")
    >>> print(str(report).split(", predicted")[0])
    memory plan: strategy chain, budget 26.4 KiB (memory_budget=0.8)
    >>> report.predicted_peak <= report.budget_bytes
    True
    """

    strategy: str  # "none" (no plan needed), "sqrt", "chain", "milp"
    memory_budget: object  # as the caller wrote it
    budget_bytes: int
    predicted_peak: int
    base_bytes: int
    unplanned_peak: int
    recomputed: tuple[Recomputed, ...]
    extra_flops: float
    step_flops: float
    solver_status: str
    solver_time: float  # seconds, planning and checking together
    plan: Plan = NO_PLAN
    kept: tuple = ()  # rm.memory.Residual rows: what the planned step keeps for its backward pass
    counted_by: str = "the NumPy evaluator"  # whose count of memory the bytes are
    extra_cost: float = 0.0  # the recomputation's time by the cost model (with the memory held: `time_ratio`)
    step_cost: float = 0.0  # the unplanned step's, alike
    region: str | None = None  # the plan of a `with rm.memory_budget(...)` at this line, not of a whole step
    regions: tuple[PlanReport, ...] = ()  # the step's regions, planned before it (`rm.memory.plan_report`)

    @property
    def extra_flops_ratio(self) -> float:
        """Recomputation as a fraction of the unplanned step's FLOPs."""
        return self.extra_flops / self.step_flops if self.step_flops else 0.0

    @property
    def extra_time_ratio(self) -> float:
        """Recomputation as a fraction of the unplanned step's time, as the backend's cost model
        (`remat.planner.cost`) predicts it."""
        return self.extra_cost / self.step_cost if self.step_cost else 0.0

    @property
    def time_ratio(self) -> float:
        """The planned step's predicted time over the unplanned one's: the work it recomputes and
        the memory it holds (`remat.planner.cost.step_time`). "auto" chooses the least."""
        return step_time(self.extra_cost, self.predicted_peak, self.step_cost, self.unplanned_peak)

    def __str__(self) -> str:
        lines = [
            f"memory plan: strategy {self.strategy}, budget {format_bytes(self.budget_bytes)} "
            f"(memory_budget={self.memory_budget!r}), predicted peak {format_bytes(self.predicted_peak)} "
            f"({self.predicted_peak} bytes)",
            f"  inputs and constants {format_bytes(self.base_bytes)}; the step without a plan: "
            f"{format_bytes(self.unplanned_peak)}; counted by {self.counted_by}",
            f"  recomputes {_flops(self.extra_flops)}, {self.extra_flops_ratio:.2f} of the step's "
            f"{_flops(self.step_flops)} (predicted time: +{self.extra_time_ratio:.2f} of the step's); predicted "
            f"step time, the memory held counted: {self.time_ratio:.2f}x; "
            f"solver: {self.solver_status} in {self.solver_time:.2f} s",
        ]
        if self.regions:
            lines.append("regions planned first, each as a step of its own:")
            lines += [f"  {r.summary()}" for r in self.regions]
        if self.kept:
            lines += ["kept for the backward pass:", residual_table(list(self.kept))]
        lines += ["recomputed in the backward pass:", recomputed_table(list(self.recomputed))]
        return "\n".join(lines)

    __repr__ = __str__

    def summary(self) -> str:
        """One line: where, the budget, the peak and the recomputation."""
        where = f"rm.memory_budget at {self.region or 'an unknown line'}" if self.region else "the step"
        return (f"{where}: strategy {self.strategy}, budget {format_bytes(self.budget_bytes)} "
                f"(memory_budget={self.memory_budget!r}), predicted peak {format_bytes(self.predicted_peak)}, "
                f"recomputes +{self.extra_time_ratio:.2f} of its time, predicted time {self.time_ratio:.2f}x")


def recomputed_table(rows: list[Recomputed]) -> str:
    cells = [(type_str(r.shape, r.dtype), format_bytes(r.nbytes), f"{r.runs}x", r.provenance) for r in rows]
    head = ("value", "size", "again", "recomputed")
    widths = [max(len(c[i]) for c in [head, *cells]) for i in range(3)]
    lines = [f"{head[0]:<{widths[0]}}  {head[1]:>{widths[1]}}  {head[2]:>{widths[2]}}  {head[3]}"]
    lines += [f"{a:<{widths[0]}}  {b:>{widths[1]}}  {c:>{widths[2]}}  {d}" for a, b, c, d in cells]
    lines.append(f"{len(rows)} values recomputed, {format_bytes(sum(r.nbytes * r.runs for r in rows))} in all")
    return "\n".join(lines)


def residual_table(rows: list) -> str:
    """`rm.memory.Residual` rows (a value's shape, dtype, bytes and provenance) as a table, with
    the total: `rm.memory.print_saved_residuals`, and a plan's values kept."""
    cells = [(type_str(r.shape, r.dtype), format_bytes(r.nbytes), r.provenance) for r in rows]
    head = ("value", "size", "saved because")
    widths = [max(len(c[i]) for c in [head, *cells]) for i in range(2)]
    lines = [f"{head[0]:<{widths[0]}}  {head[1]:>{widths[1]}}  {head[2]}"]
    lines += [f"{a:<{widths[0]}}  {b:>{widths[1]}}  {c}" for a, b, c in cells]
    lines.append(f"{len(rows)} residuals, {format_bytes(sum(r.nbytes for r in rows))} in all")
    return "\n".join(lines)


def recomputed_values(graph: Graph, plan: Plan) -> tuple[Recomputed, ...]:
    """The values of `graph` that `plan` recomputes, in forward order. Views and identities are
    left out: recomputing them costs nothing and they are the values they look at."""
    runs = extra_runs(plan)
    rows = []
    for i, node in enumerate(graph.nodes):
        if i not in runs or node_flops(node) == 0 and not node.subgraphs():
            continue
        where = f" at {node.source}" if node.source else ""
        for v in node.outputs:
            rows.append(Recomputed(v.shape, v.dtype, v.nbytes, runs[i], f"output of {node.op}{where}", node.source))
    return tuple(rows)


def extra_flops(graph: Graph, plan: Plan, step: Step = ALL) -> float:
    """FLOPs the plan adds to the gradient step, as its program has them (`extra_cost`)."""
    return _added(graph, plan, step, flops)


def extra_cost(graph: Graph, plan: Plan, step: Step = ALL) -> float:
    """What the planner minimises: the cost (`remat.planner.cost`) the plan adds to the gradient
    step, counted on the step's programs with and without it, so what the recomputation leaves
    out is left out here too (a block's last values that only its outputs read: the backward
    has their cotangents and never makes them again)."""
    return _added(graph, plan, step, cost)


def _added(graph: Graph, plan: Plan, step: Step, count: Callable[[Graph], float]) -> float:
    if not plan.blocks:
        return 0.0
    # Once per search (`peak.once`): the planner compares each plan with many others.
    return once(("added", count, graph, plan, step),
                lambda: float(count(step_graph(graph, plan, step)) - count(step_graph(graph, NO_PLAN, step))))


def format_bytes(n: int) -> str:
    """`n` bytes in the largest binary unit it reaches: "26.4 KiB", "512 B"."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _flops(x: float) -> str:
    for unit, scale in (("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if x >= scale:
            return f"{x / scale:.1f} {unit}"
    return f"{x:g} FLOP"


__all__ = ["PlanReport", "PlanWarning", "Recomputed", "recomputed_values", "extra_flops", "extra_cost",
           "recomputed_table", "residual_table", "format_bytes"]
