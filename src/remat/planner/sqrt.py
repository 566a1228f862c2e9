"""The "sqrt" strategy (Chen et al. 2016, "Training deep nets with sublinear memory cost"): the
stages cut into about √n segments of equal kept bytes, each but the last a checkpoint block.
The last segment runs plainly: the backward pass needs its values at once, so recomputing
them would cost time and save nothing.

Also the plain segment plans `segment_plans` that the auto strategy falls back on while no
better strategy is installed: segments of every size, and per-stage blocks keeping matrix
products (as `dots_saveable` keeps them).

>>> import remat as rm
>>> layer = lambda h: h + rm.tanh(h)
>>> g = rm.make_graph(lambda x: rm.sum(layer(layer(layer(layer(x))))))(rm.ones((8,)))
>>> [(b.start, b.stop) for b in plan_sqrt(g).blocks]
[(0, 6)]
"""

from __future__ import annotations

import math

from remat.core import OPS
from remat.graph import Graph
from remat.planner.peak import ALL, Step
from remat.planner.plan import Block, Plan
from remat.planner.stages import Stage, stages


def plan_sqrt(graph: Graph, step: Step = ALL, segments: int | None = None) -> Plan:
    """√n segments over the stages (or `segments` of them), by equal shares of kept bytes."""
    chain = stages(graph, step)
    count = segments or max(1, round(math.sqrt(len(_weighty(chain)))))
    return Plan(_blocks(chain, count), "sqrt")


def _weighty(chain: list[Stage]) -> list[Stage]:
    """Stages whose gradient keeps something: those a segment count should be about."""
    return [s for s in chain if s.kept_bytes] or chain


def _blocks(chain: list[Stage], count: int) -> tuple[Block, ...]:
    """`count` runs of consecutive stages of about equal kept bytes; all but the last as blocks."""
    total = sum(s.kept_bytes for s in chain) or 1
    runs, start, acc = [], 0, 0
    for k, s in enumerate(chain):
        acc += s.kept_bytes
        if acc * count >= total * (len(runs) + 1) and k + 1 < len(chain):
            runs.append((start, k + 1))
            start = k + 1
    runs.append((start, len(chain)))
    return tuple(Block(chain[a].start, chain[b - 1].stop) for a, b in runs[:-1])


def segment_plans(graph: Graph, step: Step = ALL) -> list[Plan]:
    """Candidate plans from cheap to thorough: per-stage blocks keeping matrix products, then
    segments of ever fewer stages — one block per stage last."""
    chain = stages(graph, step)
    n = len(_weighty(chain))
    counts = sorted({max(1, round(n / size)) for size in (n, 8, 6, 4, 3, 2, 1)} | {round(math.sqrt(n))})
    per_stage = [Block(s.start, s.stop) for s in chain[:-1]]
    dots = tuple(Block(b.start, b.stop, save=frozenset(i for i in b.nodes() if "dot" in OPS[graph.nodes[i].op].traits))
                 for b in per_stage)
    plans = [Plan(dots, "sqrt")] if any(b.save for b in dots) else []
    return plans + [Plan(_blocks(chain, c), "sqrt") for c in counts if c > 1] + [Plan(tuple(per_stage), "sqrt")]


__all__ = ["plan_sqrt", "segment_plans"]
