"""Planning the regions of `with rm.memory_budget(...)` (`remat.regions`), before the step.

A region is planned as a gradient step of its own (`solve.plan_step`): its graph is its nodes,
its inputs the values they read from outside (the step's inputs, earlier values, captured
weights), its outputs those read after it. That step differentiates the inputs that depend on
what the whole step differentiates, and seeds the outputs that the step's seeded outputs depend
on; a region no gradient passes through has nothing to keep, and no plan. Inner regions are
planned first, and their blocks are single nodes to the outer plan, as a user's checkpoint is:
a plan may recompute one whole, never change it. Each region's nodes are then emitted as its
plan made them, so the values are the step's own.

>>> import remat as rm
>>> def loss(x):
...     with rm.memory_budget(0.8):
...         for _ in range(6):
...             x = x + rm.tanh(x)
...     return rm.sum(x)
>>> g = rm.make_graph(loss)(rm.ones((1024,)))
>>> planned = plan_regions(g, Step())
>>> g.count("checkpoint"), planned.count("checkpoint") > 0, planned.regions
(0, True, ())
"""

from __future__ import annotations

from remat import dtypes
from remat.autodiff import emit
from remat.errors import ArgumentValueError, BudgetTooSmall
from remat.graph import Graph, Region, Var
from remat.planner import solve
from remat.planner.peak import Step
from remat.planner.plan import emit_nodes
from remat.tensor import Tensor
from remat.trace import new_trace


def plan_regions(graph: Graph, step: Step) -> Graph:
    """`graph` with each of its regions planned within its budget (inner ones first); `graph`
    itself when it has none."""
    if not graph.regions:
        return graph
    _check_nesting(graph.regions)
    return _planned(graph, list(graph.regions), step)


def _planned(graph: Graph, regions: list[Region], step: Step) -> Graph:
    outermost = sorted((k for k in range(len(regions)) if not any(_holds(regions, j, k) for j in range(len(regions)))),
                       key=lambda k: regions[k].start)
    active, seeded = _active(graph, step), _seeded(graph, step)
    with new_trace("regions planned") as t:
        env: dict[Var, Tensor] = {v: t.new_input(v.shape, v.dtype) for v in graph.inputs}
        env.update({v: Tensor._concrete(a) for v, a in graph.constants.items()})
        done = 0
        for k in outermost:
            region = regions[k]
            emit_nodes(graph, range(done, region.start), env)
            part, part_step = _region_graph(graph, region, active, seeded)
            inputs, outputs = part.inputs, part.outputs
            inner = [_shifted(regions[q], -region.start) for q in range(len(regions)) if _holds(regions, k, q)]
            if inner:
                part = _planned(part, inner, part_step)
            if part_step.wrt and part_step.seeded:  # else no gradient passes through: nothing to keep
                part = _plan(part, region, part_step)
            env.update(zip(outputs, emit(part, [env[v] for v in inputs])))
            done = region.stop
        emit_nodes(graph, range(done, len(graph.nodes)), env)
        return t.to_graph([env[v] for v in graph.outputs])


def _holds(regions: list[Region], j: int, k: int) -> bool:
    """Whether region j holds region k: its nodes include k's, and where they are the same
    nodes, j closed later (it is the outer `with`)."""
    a, b = regions[j], regions[k]
    inside = a.start <= b.start and b.stop <= a.stop
    return j != k and inside and ((a.start, a.stop) != (b.start, b.stop) or j > k)


def _shifted(region: Region, by: int) -> Region:
    return Region(region.start + by, region.stop + by, region.budget, region.strategy, region.source)


def _region_graph(graph: Graph, region: Region, active: set[Var], seeded: set[Var]) -> tuple[Graph, Step]:
    """The region's nodes as a Graph, inputs that carry a gradient first and outputs that the
    step seeds first, and the Step that says how many of each."""
    nodes = graph.nodes[region.start : region.stop]
    made = {v for n in nodes for v in n.outputs}
    read = list(dict.fromkeys(v for n in nodes for v in n.inputs if v not in made))
    inputs = [v for v in read if v not in graph.constants]
    later = {v for n in graph.nodes[region.stop :] for v in n.inputs} | set(graph.outputs)
    outputs = [v for v in dict.fromkeys(v for n in nodes for v in n.outputs) if v in later]
    inputs.sort(key=lambda v: v not in active)  # stable: program order within each kind
    outputs.sort(key=lambda v: v not in seeded)
    constants = {v: graph.constants[v] for v in read if v in graph.constants}
    step = Step(wrt=sum(v in active for v in inputs), seeded=sum(v in seeded for v in outputs))
    return Graph(inputs, outputs, nodes, constants), step


def _active(graph: Graph, step: Step) -> set[Var]:
    """The float values that depend on an input the step differentiates."""
    wrt = len(graph.inputs) if step.wrt is None else step.wrt
    active = {v for v in graph.inputs[:wrt] if dtypes.is_float(v.dtype)}
    for node in graph.nodes:
        if not active.isdisjoint(node.inputs):
            active.update(v for v in node.outputs if dtypes.is_float(v.dtype))
    return active


def _seeded(graph: Graph, step: Step) -> set[Var]:
    """The values a seeded output of the step depends on."""
    count = len(graph.outputs) if step.seeded is None else step.seeded
    wanted = {v for v in graph.outputs[:count] if dtypes.is_float(v.dtype)}
    for node in reversed(graph.nodes):
        if not wanted.isdisjoint(node.outputs):
            wanted.update(node.inputs)
    return wanted


def _plan(part: Graph, region: Region, step: Step) -> Graph:
    """`part` planned within the region's budget; a budget it cannot meet is an error at the
    region's `with`."""
    try:
        return solve.plan_step(part, region.budget, region.strategy, step, region.source)[0]
    except BudgetTooSmall as e:
        raise BudgetTooSmall(_at_region(e, region), e.smallest_budget, region.source) from None
    except ArgumentValueError as e:
        raise ArgumentValueError(_at_region(e, region), region.source) from None


def _at_region(error: ArgumentValueError, region: Region) -> str:
    said = error.message.removeprefix("memory_budget: ")
    return f"rm.memory_budget: {said.replace('this step', 'this region')}"


def _check_nesting(regions: tuple[Region, ...]) -> None:
    for a in regions:
        for b in regions:
            if a.start < b.start < a.stop < b.stop:
                raise ArgumentValueError(
                    f"rm.memory_budget({a.budget!r}) and rm.memory_budget({b.budget!r}) overlap without one "
                    "inside the other; close regions in the reverse order of opening them (with `with`)",
                    b.source)


__all__ = ["plan_regions"]
