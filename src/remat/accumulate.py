"""Cotangents of a backward pass, with the cotangents of slices of one tensor combined.

The VJP of a slice puts the slice's cotangent back among zeros: a `pad` to the full shape. A
model that reads its layers' weights from one stacked tensor (`W[i]`, `W` of shape (L, D, D))
would then sum L full-size pads: L times the gradient's memory traffic, work that grows as L
squared (at 64 layers on XLA a step took 20.5 ms, against 7.9 ms with a list of weights).
Here the slices' cotangents wait until the tensor's own cotangent is needed; those that cut the
same single axis with step 1 are summed where they read the same range and laid side by side
with one `concat` (zeros in the gaps, one `pad` for the ends), which is the same gradient
written once into one buffer. Others (strided, cutting several axes, overlapping ranges) get
their usual VJP. A checkpoint body's slice of a captured tensor is taken outside the body
(`Op.hoist_slices`, checkpoint/block.py), so the slices of every layer meet here whether checkpointed or not.
"""

from __future__ import annotations

from remat import dtypes
from remat.core import OPS
from remat.errors import source_of
from remat.graph import Graph, Node, Var
from remat.ops.creation import zeros
from remat.ops.shape import concat, pad
from remat.stacked import unit_step_cut
from remat.tensor import Tensor


class Cotangents(dict):
    """`Var -> Tensor` cotangents of a backward pass over `graph`, as a dict; `defer_slice`
    keeps a slice's cotangent aside until `pop` or `get` asks for its operand's."""

    def __init__(self, graph: Graph, env: dict[Var, Tensor]):
        super().__init__()
        self._graph = graph
        self._env = env
        self._slices: dict[Var, list[tuple[Tensor, Node]]] = {}

    def defer_slice(self, node: Node, g: Tensor | None) -> bool:
        """Whether `node` is a slice whose VJP this object now owes (its operand's cotangent)."""
        if node.op != "slice" or g is None:
            return False
        x = node.inputs[0]
        if x not in self._graph.constants and dtypes.is_float(x.dtype):  # else no gradient is kept
            self._slices.setdefault(x, []).append((g, node))
        return True

    def pop(self, v: Var, default=None):
        self._settle(v)
        return super().pop(v, default)

    def get(self, v: Var, default=None):
        self._settle(v)
        return super().get(v, default)

    def _settle(self, v: Var) -> None:
        pieces = self._slices.pop(v, None)
        if pieces is None:
            return
        ct = _combined(v, pieces, self._env)
        self[v] = self[v] + ct if v in self else ct


def _combined(x: Var, pieces: list[tuple[Tensor, Node]], env: dict[Var, Tensor]) -> Tensor:
    axis = _shared_axis([node for _, node in pieces])
    joined = [(g, node) for g, node in pieces if axis is not None and unit_step_cut(node) == axis]
    if len(joined) < 2 or _overlapping(_ranges(joined, axis)):
        joined = []
    total = _laid_side_by_side(x, joined, axis) if joined else None
    for g, node in pieces:
        if not any(node is n for _, n in joined):
            ct = _vjp(g, node, env)
            total = ct if total is None else total + ct
    return total


def _vjp(g: Tensor, node: Node, env: dict[Var, Tensor]) -> Tensor:
    with source_of(node.source):
        (ct,) = OPS["slice"].vjp(g, env[node.inputs[0]], out=env[node.outputs[0]], **node.params)
    return ct


def _shared_axis(nodes: list[Node]) -> int | None:
    """The axis most of the slices cut as `unit_step_cut` says (None: none is such a slice);
    strided slices, empty ones and those cutting several axes are left to the usual VJP."""
    counts: dict[int, int] = {}
    for node in nodes:
        axis = unit_step_cut(node)
        if axis is not None:
            counts[axis] = counts.get(axis, 0) + 1
    return max(counts, key=counts.get) if counts else None


def _ranges(joined: list[tuple[Tensor, Node]], axis: int) -> list[tuple[int, int]]:
    return sorted({(node.params["start"][axis], node.params["stop"][axis]) for _, node in joined})


def _overlapping(ranges: list[tuple[int, int]]) -> bool:
    return any(b > c for (_, b), (c, _) in zip(ranges, ranges[1:]))


def _laid_side_by_side(x: Var, joined: list[tuple[Tensor, Node]], axis: int) -> Tensor:
    """The cotangent of `x` from slices that cut `axis` into disjoint ranges: the pieces of one
    range summed (in the order they came), then all ranges concatenated with zeros between them
    and padded to `x`'s extent."""

    sums: dict[tuple[int, int], Tensor] = {}
    for g, node in joined:
        key = (node.params["start"][axis], node.params["stop"][axis])
        sums[key] = sums[key] + g if key in sums else g
    ranges = sorted(sums)
    with source_of(joined[0][1].source):
        parts, at = [], ranges[0][0]
        for a, b in ranges:
            if a > at:  # a gap nothing read: its cotangent is zero
                shape = tuple(a - at if d == axis else n for d, n in enumerate(x.shape))
                parts.append(zeros(shape, x.dtype))
            parts.append(sums[(a, b)])
            at = b
        out = concat(parts, axis) if len(parts) > 1 else parts[0]
        lo = tuple(ranges[0][0] if d == axis else 0 for d in range(len(x.shape)))
        hi = tuple(x.shape[axis] - at if d == axis else 0 for d in range(len(x.shape)))
        return pad(out, lo, hi)
