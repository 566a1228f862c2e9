"""The forward graph seen as a chain: stages between the cuts where few bytes cross.

A cut at position `i` of the node order splits the nodes into `[0, i)` and `[i, n)`; the values
crossing it are those made before `i` and read at or after `i` (or returned), graph inputs and
constants left out (they live anyway). On a residual MLP or a transformer the cheapest cuts,
those only the residual stream crosses, are the layer boundaries. The cut candidates are the
positions whose crossing bytes are at most the least crossing found in the middle half of the
graph (so that the tiny values near the loss do not set the bar); the stages are the runs between
consecutive candidates. Long skip connections (a U-Net's) cross the middle of the graph, and
leave no candidate there. So a run of more than a quarter of the nodes whose ends of layers
(the local minima of the crossing bytes) are crossed by less than twice the bar somewhere (by
the residual stream and a few skips; a transformer's attention or an MLP's layer is crossed by
the stream and as much again inside) is cut again at them, and the graph is not a chain
(`is_chain`): its skips cross the cuts, which the chain's model of memory does not know.

Both the chain DP and the MILP plan over the stages and emit Blocks over their node ranges.

>>> import remat as rm
>>> layer = lambda h: h + rm.tanh(h)
>>> g = rm.make_graph(lambda x: rm.sum(layer(layer(layer(x)))))(rm.ones((8,)))
>>> [(s.start, s.stop, s.out_bytes, s.kept_bytes) for s in stages(g)]  # x is an input: free
[(0, 1, 32, 32), (1, 2, 32, 0), (2, 4, 32, 32), (4, 6, 32, 32), (6, 7, 4, 4)]
"""

from __future__ import annotations

from dataclasses import dataclass

from remat.graph import Graph, Var
from remat.planner.cost import node_cost
from remat.planner.peak import ALL, Step, once, traced_step


@dataclass(frozen=True)
class Stage:
    """Nodes `[start, stop)`: their cost (`remat.planner.cost`), the bytes crossing the cut at `stop` (`out_bytes`;
    the stage's output as a checkpoint would keep it), what the plain gradient keeps of the
    values the stage makes (`kept_bytes`) and the most bytes its nodes' outputs take at once
    while it runs forward (`internal_bytes`, a bound on its recomputation's working set)."""

    start: int
    stop: int
    cost: float
    out_bytes: int
    kept_bytes: int
    internal_bytes: int


def crossing_bytes(graph: Graph) -> list[int]:
    """Bytes crossing each cut position `0..n` (position 0 and n: nothing computed crosses / the outputs)."""
    n = len(graph.nodes)
    outer = set(graph.inputs) | set(graph.constants)
    born: dict[Var, int] = {}
    last: dict[Var, int] = {}
    for i, node in enumerate(graph.nodes):
        for v in node.inputs:
            last[v] = i
        for v in node.outputs:
            born.setdefault(v, i)
    for v in graph.outputs:
        last[v] = n
    delta = [0] * (n + 2)  # value v crosses cuts born+1 .. last
    for v, b in born.items():
        if v not in outer and last.get(v, -1) > b:
            delta[b + 1] += v.nbytes
            delta[last[v] + 1] -= v.nbytes
    out, running = [], 0
    for i in range(n + 1):
        running += delta[i]
        out.append(running)
    return out


def cuts(graph: Graph) -> list[int]:
    """The cut candidates, with 0 and n: positions crossed by no more bytes than the cheapest
    cut of the graph's middle half, and the ends of layers inside a run of more than a quarter
    of the nodes that long skips cross (see the module docstring)."""
    return _cuts(graph)[0]


def is_chain(graph: Graph) -> bool:
    """Whether no run of the graph was cut again at its layers' ends: no long skips cross it."""
    return not _cuts(graph)[1]


def _cuts(graph: Graph) -> tuple[list[int], bool]:
    """The cut candidates, and whether a run was cut again at its layers' ends."""
    return once(("cuts", graph), lambda: _cut(crossing_bytes(graph)))


def _cut(cross: list[int]) -> tuple[list[int], bool]:
    n = len(cross) - 1
    if not n:
        return [0], False
    middle = cross[max(1, n // 4) : max(2, 3 * n // 4 + 1)]
    bar = min(middle) if middle else 0
    coarse = [0] + [i for i in range(1, n) if cross[i] <= bar] + [n]
    out, refined = [], False
    for a, b in zip(coarse, coarse[1:]):
        out.append(a)
        ends = [i for i in range(a + 1, b) if cross[i] <= min(cross[i - 1], cross[i + 1])]
        if 4 * (b - a) > n and any(cross[i] < 2 * bar for i in ends):
            out += ends
            refined = True
    return out + [n], refined


def stages(graph: Graph, step: Step = ALL) -> list[Stage]:
    """The graph's stages, in order (see the module docstring); read them, do not change them
    (within one plan's search each caller gets the same list, `peak.once`)."""
    return once(("stages", graph, step), lambda: _stages(graph, step))


def _stages(graph: Graph, step: Step) -> list[Stage]:
    cross = crossing_bytes(graph)
    kept = traced_step(graph, step).kept()
    kept_of = [0] * len(graph.nodes)
    for v, i in kept.items():
        kept_of[i] += v.nbytes
    bounds = cuts(graph)
    return [Stage(a, b, sum(node_cost(graph.nodes[i]) for i in range(a, b)), cross[b],
                  sum(kept_of[a:b]), _working_set(graph, a, b)) for a, b in zip(bounds, bounds[1:])]


def merged(graph: Graph, chain: list[Stage], most: int) -> list[Stage]:
    """`chain` with runs of consecutive stages merged, so that there are at most `most`: a
    coarser chain on which a model that grows with the square of the stages stays small (a
    plan over it is a plan over `chain` too, with fewer places to cut)."""
    if len(chain) <= most:
        return chain
    k = -(-len(chain) // most)  # stages per group
    out = []
    for group in (chain[i : i + k] for i in range(0, len(chain), k)):
        a, b = group[0].start, group[-1].stop
        out.append(Stage(a, b, sum(s.cost for s in group), group[-1].out_bytes,
                         sum(s.kept_bytes for s in group), _working_set(graph, a, b)))
    return out


def _working_set(graph: Graph, start: int, stop: int) -> int:
    """The most bytes of the stage's own values live at once as its nodes run (each value from
    its node until its last reader in the stage, or the stage's end if read later)."""
    last: dict[Var, int] = {}
    for i in range(start, stop):
        for v in graph.nodes[i].inputs:
            last[v] = i
    later = {v for n in graph.nodes[stop:] for v in n.inputs} | set(graph.outputs)
    live, high, dies = 0, 0, {}
    for i in range(start, stop):
        for v in graph.nodes[i].outputs:
            live += v.nbytes
            end = stop if v in later else last.get(v, i)
            dies.setdefault(end, []).append(v)
        high = max(high, live)
        live -= sum(v.nbytes for v in dies.pop(i, []))
    return high


__all__ = ["Stage", "stages", "merged", "cuts", "is_chain", "crossing_bytes"]
