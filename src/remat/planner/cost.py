"""What recomputing a node costs, in floating-point operations counted from shapes:

- matmul: 2·m·n·k per product, batch dimensions included (einsum and tensordot are composed
  from matmul, so they are counted through it);
- elementwise ops: one per output element, transcendentals (exp, log, tanh, ...) `_TRANSCENDENTAL`;
- reductions, cumulative ops and sorts: one per input element (a sort log₂ n times that);
- gathers, scatters, pads, concats, random bits: one per element moved or made;
- views and identities (reshape, transpose, broadcast, slice, barriers, names): free;
- blocks: their bodies (a scan: `length` times its body; a loop or a branch: its body once,
  since its trip count is a run-time fact).

>>> import remat as rm
>>> g = rm.make_graph(lambda a, b: rm.tanh(a @ b))(rm.ones((4, 8)), rm.ones((8, 3)))
>>> [node_flops(n) for n in g.nodes], flops(g)
([192.0, 48.0], 240.0)
"""

from __future__ import annotations

import math

import numpy as np

from remat.graph import Graph, Node

_FREE = frozenset({"reshape", "permute_dims", "broadcast_to", "slice", "flip", "stop_gradient",
                   "checkpoint_name", "barrier", "convert"})
_PER_INPUT = frozenset({"sum", "prod", "max", "min", "argmax", "argmin", "cumsum", "cumprod"})
_TRANSCENDENTAL = 4.0  # exp, log, tanh, ...: a few multiply-adds each, as XLA's cost model weighs them
_HEAVY = frozenset({"exp", "log", "log1p", "tanh", "sin", "cos", "sqrt", "pow", "random_normal"})


def _size(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def node_flops(node: Node) -> float:
    """FLOPs of one run of `node` (see the module docstring)."""
    op = node.op
    if op in _FREE:
        return 0.0
    if op == "matmul":
        a, b = node.inputs
        return 2.0 * _size(node.outputs[0].shape) * (a.shape[-1] if a.ndim else 1)
    if op == "scan":
        return node.params["length"] * flops(node.params["body"])
    if op == "cond":
        return max((flops(g) for g in node.subgraphs()), default=0.0)
    if node.subgraphs():
        return sum(flops(g) for g in node.subgraphs())
    if op in _PER_INPUT:
        return float(sum(_size(v.shape) for v in node.inputs))
    if op == "sort":
        n = _size(node.inputs[0].shape)
        return float(n * max(1.0, math.log2(max(node.inputs[0].shape[node.params.get("axis", -1)], 2))))
    out = float(sum(_size(v.shape) for v in node.outputs))
    return out * (_TRANSCENDENTAL if op in _HEAVY else 1.0)


def flops(graph: Graph) -> float:
    """FLOPs of one run of `graph`: the sum over its nodes."""
    return float(sum(node_flops(n) for n in graph.nodes))


__all__ = ["node_flops", "flops"]
