"""The matrix products a chain block may save (`SavedProducts`), for the chain DP's third option
beside running a stage plainly and recomputing a block: a block that keeps some of its
products, so that its recomputation runs only the cheap operations between them.

On the residual MLP a layer is `h + tanh(h @ w + b)`: its gradient keeps h and the tanh, two
activations; a block of layers saving each `h @ w` keeps one per layer and recomputes only the
additions and the tanh. A transformer's products differ: the attention scores are large and
cheap (the contracted axis is a head's width), the MLP's down projection small and dear. So the
products are ranked by the cost saving one skips per byte it keeps (for a matrix product, the
length of its contracted axis), and a block of kind t saves those at or above the t-th of at
most `KINDS` thresholds among these ratios; the last kind saves all of them.

A product is worth saving only where the block's recomputation needs it: to remake a value the
gradient keeps, or a value the next stage of the block reads. The block's last stage has no next
stage in it, so a product that only leads to the block's output (the MLP's down projection,
read by the residual addition) is not recomputed there at all, saved or not. Figures are kept
per stage twice: as an inner stage of a block (`INNER`) and as its last (`LAST`).

>>> import remat as rm
>>> from remat.planner.chain import chain_model
>>> layer = lambda h, w: h + rm.tanh(h @ w)
>>> g = rm.make_graph(lambda x, w: rm.sum(layer(layer(x, w), w)))(rm.ones((4, 4)), rm.ones((4, 4)))
>>> model = chain_model(g)  # the first product is a stage of its own: a cut, not a saved value
>>> len(model.products), int(model.products.saved[0, 0, len(model)])  # one kind; 4 x 4 float32
(1, 64)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from remat.core import OPS
from remat.graph import Graph, Var
from remat.planner.cost import node_cost
from remat.planner.stages import Stage

KINDS = 4  # the most kinds of product-saving blocks (each costs the DP one more pass)
INNER, LAST = 0, 1


@dataclass(frozen=True, eq=False)  # arrays: compared by identity
class SavedProducts:
    """Per kind t, place (`INNER`, `LAST`) and stage i, of the products a block of kind t saves
    in stage i: `nbytes`, `cost` (what recomputing them would cost), `kept` (the bytes of those
    the plain gradient keeps anyway: a block holds them once) and `nodes` (node indices)."""

    nbytes: np.ndarray  # (kinds, 2, stages)
    cost: np.ndarray
    kept: np.ndarray
    nodes: tuple[tuple[tuple[frozenset[int], ...], ...], ...]  # [t][place][i]

    def __len__(self) -> int:
        return len(self.nbytes)

    @cached_property
    def saved(self) -> np.ndarray:
        """saved[t, a, m]: bytes a block of kind t over stages [a, m) keeps."""
        return _in_block(self.nbytes)

    @cached_property
    def skipped(self) -> np.ndarray:
        """skipped[t, a, m]: the cost its recomputation skips."""
        return _in_block(self.cost)

    def stagewise(self, values: np.ndarray, t: int, m: int) -> np.ndarray:
        """values[t] for the stages 0..m-1 of a block ending at m: inner, the last one last."""
        out = values[t, INNER, :m].copy()
        out[m - 1] = values[t, LAST, m - 1]
        return out

    def block_nodes(self, t: int, a: int, m: int) -> frozenset[int]:
        """The node indices a block of kind t over [a, m) saves."""
        return frozenset().union(*self.nodes[t][INNER][a : m - 1], self.nodes[t][LAST][m - 1])


def _in_block(per_stage: np.ndarray) -> np.ndarray:
    """[t, a, m]: per_stage's inner figures of stages a..m-2 and the last figure of stage m-1."""
    kinds, _, n = per_stage.shape
    inner = np.concatenate([np.zeros((kinds, 1), per_stage.dtype), np.cumsum(per_stage[:, INNER], axis=1)], axis=1)
    table = np.zeros((kinds, n + 1, n + 1), per_stage.dtype)
    for m in range(1, n + 1):
        table[:, :m, m] = inner[:, m - 1 : m] - inner[:, :m] + per_stage[:, LAST, m - 1 : m]
    return table


def saved_products(graph: Graph, chain: list[Stage], kept: set[Var]) -> SavedProducts | None:
    """The products of `graph` a chain block over `chain` may save (the module docstring), given
    the values the plain gradient `kept`; None when there are none."""
    last = {v: i for i, n in enumerate(graph.nodes) for v in n.inputs} | dict.fromkeys(graph.outputs, len(graph.nodes))
    found = []  # (stage, place, node, bytes, cost, bytes kept)
    for k, stage in enumerate(chain):
        nodes = graph.nodes[stage.start : stage.stop]
        made = {v for n in nodes for v in n.outputs}
        later = {v for v in made if last.get(v, -1) >= stage.stop}  # read after the stage
        own = made & kept
        for place, wanted in ((INNER, own | (made & later)), (LAST, own)):
            needed = _needed(nodes, wanted, made)
            for i, node in enumerate(nodes, stage.start):
                if ("dot" in OPS[node.op].traits and needed.intersection(node.outputs)
                        and not later.intersection(node.outputs)
                        and all(np.issubdtype(v.dtype, np.floating) for v in node.outputs)):
                    found.append((k, place, i, sum(v.nbytes for v in node.outputs), node_cost(node),
                                  sum(v.nbytes for v in node.outputs if v in kept)))
    if not found:
        return None
    ratio = {i: float(f"{c / max(b, 1):.2g}") for _, _, i, b, c, _ in found}
    ratios = sorted(set(ratio.values()), reverse=True)
    bars = [ratios[round(j * (len(ratios) - 1) / max(KINDS - 1, 1))] for j in range(min(KINDS, len(ratios)))]
    shape = (len(bars), 2, len(chain))
    nbytes, cost, held = np.zeros(shape, np.int64), np.zeros(shape), np.zeros(shape, np.int64)
    nodes = [[[set() for _ in chain] for _ in range(2)] for _ in bars]
    for t, bar in enumerate(bars):
        for k, place, i, b, c, h in found:
            if ratio[i] >= bar:
                nbytes[t, place, k] += b
                cost[t, place, k] += c
                held[t, place, k] += h
                nodes[t][place][k].add(i)
    frozen = tuple(tuple(tuple(map(frozenset, per)) for per in kind) for kind in nodes)
    return SavedProducts(nbytes, cost, held, frozen)


def tail_costs(graph: Graph, chain: list[Stage], kept: set[Var]) -> np.ndarray:
    """Per stage, the cost of its nodes a block ending with it does not run again: those that
    only lead to the block's outputs (the backward has their cotangents), not to what the
    gradient keeps."""
    out = np.zeros(len(chain))
    for k, stage in enumerate(chain):
        nodes = graph.nodes[stage.start : stage.stop]
        made = {v for n in nodes for v in n.outputs}
        needed = _needed(nodes, made & kept, made)
        out[k] = sum(node_cost(n) for n in nodes if not needed.intersection(n.outputs))
    return out


def _needed(nodes: list, wanted: set[Var], made: set[Var]) -> set[Var]:
    """The values of the stage its recomputation makes to remake `wanted`."""
    needed = set(wanted)
    for node in reversed(nodes):
        if needed.intersection(node.outputs):
            needed.update(v for v in node.inputs if v in made)
    return needed


__all__ = ["SavedProducts", "saved_products", "tail_costs", "KINDS"]
