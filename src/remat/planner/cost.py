"""What recomputing a node costs: its FLOPs counted from shapes, and its time as a backend runs it.

A node's work is counted in units of its class, each unit weighed by `Weights`:

- matmul: 2·m·n·k FLOPs per product, batch dimensions included (einsum and tensordot are
  composed from matmul, so they are counted through it); a batched product weighs its own;
- elementwise ops: one element per output element, transcendentals (exp, log, tanh, ...)
  their own class;
- reductions and cumulative ops: one per input element;
- gathers, scatters, pads, concats and sorts: one per element moved (a sort log₂ n times that);
- views and identities (reshape, transpose, broadcast, slice, barriers, names): no work;
- every node run: one `call`, what the NumPy evaluator spends around an op whatever its size;
- blocks: as their op's `cost` rule says (a scan: `length` times its body; a cond: its
  dearest branch), else one run of each sub-graph (a while loop: its body once, since its trip
  count is a run-time fact).

`FLOPS` weighs every unit one FLOP (transcendentals `_TRANSCENDENTAL`, as XLA's cost model
does, and calls nothing): `node_flops` and `flops`, the count reports give. The planner
minimises time instead (`node_cost`, `cost`), by the weights of the backend the step is
traced for (`remat.planner.target`): FLOPs alone undercount elementwise work by an order of
magnitude, and a plan that recomputes a chain of them in place of a matrix product saves FLOPs
but loses time (on the GPT-style model at half its memory, 1.07x the FLOPs took 1.33x the time).
`WEIGHTS` are `benchmarks/cost_weights.py`'s measurements on the development machine (2 cores),
fixed so that the same graph always gets the same plan; only their ratios matter to a plan.

Work is not all a step's time: holding memory costs time too (fresh pages to fault in and
zero, activations read back from memory rather than a cache), so on the CPU a step that holds
less often runs faster though it recomputes more (the 64-layer MLP with √L segments: 1.34x the
FLOPs, 0.96-0.97x the time on NumPy, 0.89-0.94x on XLA). `HELD` weighs it, on both backends: the
share of the unplanned step's time its peak costs, a plan's in proportion to its peak
(`step_time`). The planner takes the plan of least predicted time within a budget.

>>> import remat as rm
>>> g = rm.make_graph(lambda a, b: rm.tanh(a @ b))(rm.ones((4, 8)), rm.ones((8, 3)))
>>> [node_flops(n) for n in g.nodes], flops(g)
([192.0, 48.0], 240.0)
>>> cost(g, WEIGHTS["numpy"]) > 2 * WEIGHTS["numpy"].call  # on so small a graph the calls dominate
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from remat.core import OPS
from remat.graph import Graph, Node
from remat.planner.target import current

_TRANSCENDENTAL = 4.0  # FLOPs of exp, log, tanh, ...: a few multiply-adds each, as XLA's cost model weighs them


@dataclass(frozen=True)
class Weights:
    """Time per unit of work of each class (see the module docstring), or FLOPs per unit."""

    call: float  # per node run
    flop: float  # per FLOP of a 2-D matrix product
    batched_flop: float  # per FLOP of a batched one
    element: float  # per element an elementwise op makes
    transcendental: float  # per element exp, log, tanh, ... make
    reduced: float  # per element a reduction reads
    moved: float  # per element a gather, scatter, pad, concat or sort moves


FLOPS = Weights(call=0.0, flop=1.0, batched_flop=1.0, element=1.0, transcendental=_TRANSCENDENTAL, reduced=1.0,
                moved=1.0)
# Nanoseconds, rounded from five runs of `python benchmarks/cost_weights.py` on the development machine.
WEIGHTS = {
    "numpy": Weights(call=5600.0, flop=0.0100, batched_flop=0.0128, element=0.159, transcendental=0.544,
                     reduced=0.711, moved=0.348),
    "xla": Weights(call=0.0, flop=0.0065, batched_flop=0.0125, element=0.13, transcendental=1.8, reduced=0.55,
                   moved=0.022),
}


# The share of the unplanned step's time that holding its peak costs. Fitted to the 20-budget
# sweep of three models (`python benchmarks/planner.py --sweep 20`): on XLA measured step time
# less the work the model counts rose with the measured peak by 0.65 of the step's time, with
# XLA's steps without a plan slower still (the U-Net-like MLP: 1.03x, any plan of it
# 0.75-0.86x); 1.0 is the least with which choosing, at each budget of that sweep, the measured
# plan of least predicted time among those of smaller budgets gives step times that never rise
# with the budget beyond its noise. On NumPy the same fit gave 0.37-0.45 in one run, but the
# 64-layer MLP's plans holding 0.19-0.56x of its activation memory (predicted within 4% of each
# other at that weight) then measured in opposite orders from run to run (the allocator's state:
# which frees hand pages back to the system), and timed alone the larger ran slower
# (1.05-1.08x the unplanned step at 0.19x held, 1.10-1.12x at 0.40-0.56x); at 1.0 one plan
# serves it from 20% of its memory up, and two sweeps in a row met every check. The U-Net-like
# MLP is the counterexample: its plan holding 0.46x, predicted 0.90x, measured 1.16-1.21x on
# NumPy (0.85-0.89x on XLA); there holding less does not pay for the recomputation on NumPy,
# and no weight of the memory held fits both models.
HELD = 1.0


def step_time(extra: float, peak: int, step_cost: float, unplanned_peak: int, held: float = HELD) -> float:
    """A planned step's predicted time as a share of the unplanned one's: its work (the step's
    `step_cost` and the plan's `extra`) and its peak held (`HELD`), each over the unplanned
    step's.

    >>> step_time(0.0, 100, 10.0, 100, held=0.5)  # no plan
    1.0
    >>> round(step_time(3.0, 40, 10.0, 100, held=0.5), 3)  # 30% more work, 40% of the memory
    1.0
    """
    return (1.0 + extra / step_cost + held * peak / unplanned_peak) / (1.0 + held) if step_cost else 1.0


def _size(shape) -> int:
    return int(math.prod(shape))


def node_cost(node: Node, weights: Weights | None = None) -> float:
    """One run of `node` by `weights`; by default the time of the backend the step is traced
    for (see the module docstring)."""
    w = weights or current_weights()
    rule = OPS[node.op].cost
    if rule is not None:
        return rule(node, lambda g: cost(g, w))
    if node.subgraphs():
        return sum(cost(g, w) for g in node.subgraphs())
    return w.call + _work(node, w)


def _work(node: Node, w: Weights) -> float:
    op = node.op
    traits = OPS[op].traits
    if "layout" in traits and "copies" not in traits:  # a view, a cast or a relabelling: no work
        return 0.0
    if "dot" in traits:
        a, b = node.inputs
        count = 2.0 * _size(node.outputs[0].shape) * (a.shape[-1] if a.ndim else 1)
        return count * (w.batched_flop if max(a.ndim, b.ndim) > 2 else w.flop)
    if "reduction" in traits:
        return w.reduced * sum(_size(v.shape) for v in node.inputs)
    if op == "sort":
        n = _size(node.inputs[0].shape)
        return w.moved * n * max(1.0, math.log2(max(node.inputs[0].shape[node.params.get("axis", -1)], 2)))
    out = float(sum(_size(v.shape) for v in node.outputs))
    return out * (w.moved if "copies" in traits else w.transcendental if "transcendental" in traits else w.element)


def current_weights() -> Weights:
    """The weights of the backend the step is traced for."""
    return WEIGHTS.get(current().backend, WEIGHTS["numpy"])


def cost(graph: Graph, weights: Weights | None = None) -> float:
    """One run of `graph` by `weights`: the sum over its nodes."""
    return float(sum(node_cost(n, weights) for n in graph.nodes))


def node_flops(node: Node) -> float:
    """FLOPs of one run of `node` (see the module docstring)."""
    return node_cost(node, FLOPS)


def flops(graph: Graph) -> float:
    """FLOPs of one run of `graph`: the sum over its nodes."""
    return cost(graph, FLOPS)


__all__ = ["Weights", "FLOPS", "WEIGHTS", "HELD", "step_time", "current_weights", "node_cost", "cost",
           "node_flops", "flops"]
