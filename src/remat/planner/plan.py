"""A Plan: which runs of a forward graph's top-level nodes become checkpoint blocks, and which
values inside a block it saves instead of recomputing. `apply` rewrites the graph with ordinary
checkpoint nodes, so the gradient rule, both backends, the printer and `rm.memory` treat a
planned block as they treat one a user wrote. User checkpoints, custom_vjp and loop nodes are
single top-level nodes here: a plan may put them inside its blocks, never change them.

>>> import remat as rm
>>> g = rm.make_graph(lambda x: rm.sum(rm.tanh(rm.tanh(x))))(rm.ones((4,)))
>>> planned = apply(g, Plan((Block(0, 2),), "sqrt"))
>>> [n.op for n in planned.nodes], planned.nodes[0].params["policy"]
(['checkpoint', 'sum'], planner)
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from dataclasses import dataclass

from remat.checkpoint.block import _checkpoint, _walk
from remat.checkpoint.derived import gradient_view
from remat.core import OPS
from remat.errors import source_of
from remat.graph import Graph, Var
from remat.tensor import Tensor
from remat.trace import bind, current_trace, new_trace, trace_function


@dataclass(frozen=True)
class Block:
    """Top-level nodes `[start, stop)` of the forward graph as one checkpoint block; `inner`
    are nested blocks (disjoint, sorted, inside the range); `save` are node indices in the range,
    outside every inner block, whose outputs the block keeps as residuals."""

    start: int
    stop: int
    inner: tuple[Block, ...] = ()
    save: frozenset[int] = frozenset()

    def nodes(self) -> range:
        return range(self.start, self.stop)

    def __repr__(self) -> str:
        # `save` sorted: a set prints in an order its history decides (a plan read back from the
        # plan cache printed otherwise than the same plan made, and named another plan).
        save = f"frozenset({{{', '.join(map(str, sorted(self.save)))}}})" if self.save else "frozenset()"
        return f"Block(start={self.start}, stop={self.stop}, inner={self.inner!r}, save={save})"


@dataclass(frozen=True)
class Plan:
    """Top-level blocks (disjoint, sorted); nodes outside every block run plainly."""

    blocks: tuple[Block, ...]
    strategy: str = "none"

    def replace(self, **changes) -> Plan:
        return dataclasses.replace(self, **changes)


NO_PLAN = Plan((), "none")


@dataclass(frozen=True)
class PlannedPolicy:
    """The policy a planned block records. Its residuals were chosen by the planner (node by
    node, which no (op, inputs, outputs, params) question can name), so asked again — by the
    block's forward-mode rule — it saves nothing: recomputing is always correct."""

    def __call__(self, op, inputs, outputs, params) -> bool:
        return False

    def __repr__(self) -> str:
        return "planner"


PLANNER = PlannedPolicy()


def apply(graph: Graph, plan: Plan) -> Graph:
    """`graph` with each of `plan`'s blocks a checkpoint node: the same inputs (positionally) and
    outputs, the same ops on the same values, so gradients are bit-identical."""
    if not plan.blocks:
        return graph
    check(graph, plan)
    with new_trace("planned") as t:
        env: dict[Var, Tensor] = {v: t.new_input(v.shape, v.dtype) for v in graph.inputs}
        env.update({v: Tensor._concrete(a) for v, a in graph.constants.items()})
        _emit_range(graph, range(len(graph.nodes)), plan.blocks, env, frozenset(), [])
        return t.to_graph([env[v] for v in graph.outputs])


def check(graph: Graph, plan: Plan) -> None:
    """A malformed plan is a planner bug: say which block is wrong."""
    _check_blocks(plan.blocks, 0, len(graph.nodes))


def _check_blocks(blocks: tuple[Block, ...], lo: int, hi: int) -> None:
    at = lo
    for b in blocks:
        if not at <= b.start < b.stop <= hi:
            raise ValueError(f"planner: block [{b.start}, {b.stop}) overlaps another or leaves [{lo}, {hi})")
        inner = {i for c in b.inner for i in c.nodes()}
        if not all(b.start <= i < b.stop and i not in inner for i in b.save):
            raise ValueError(f"planner: block [{b.start}, {b.stop}) saves nodes {sorted(b.save)} outside it")
        _check_blocks(b.inner, b.start, b.stop)
        at = b.stop


def _emit_range(graph: Graph, nodes: range, blocks: tuple[Block, ...], env: dict[Var, Tensor],
                save: frozenset[int], saved: list[Var]) -> None:
    """Emit `graph.nodes[i]` for i in `nodes` into the current trace, each block as a checkpoint
    node; the outputs of the nodes in `save` are appended to `saved` (as this trace's Vars)."""
    starts = {b.start: b for b in blocks}
    i = nodes.start
    while i < nodes.stop:
        if i in starts:
            _emit_block(graph, starts[i], env)
            i = starts[i].stop
            continue
        node = graph.nodes[i]
        with source_of(node.source):
            outs = bind(OPS[node.op], *[env[v] for v in node.inputs], **node.params)
        outs = outs if isinstance(outs, (tuple, list)) else (outs,)
        env.update(zip(node.outputs, outs))
        if i in save:
            saved += [o._var for o in outs if not o.is_concrete and o._trace is current_trace()]
        i += 1


def emit_nodes(graph: Graph, nodes: range, env: dict[Var, Tensor]) -> None:
    """Emit `graph.nodes[i]` for i in `nodes` into the current trace as they are, their inputs
    read from `env` and their outputs added to it."""
    _emit_range(graph, nodes, (), env, frozenset(), [])


def _emit_block(graph: Graph, block: Block, env: dict[Var, Tensor]) -> None:
    nodes = graph.nodes[block.start : block.stop]
    made = {v for n in nodes for v in n.outputs}
    outer = set(graph.inputs) | set(graph.constants)
    # Values the block reads that the step computed are its explicit inputs (tied by the barrier
    # to the cotangent); the step's inputs are captured, as a user's block captures its weights.
    explicit = list(dict.fromkeys(v for n in nodes for v in n.inputs if v not in made and v not in outer))
    later = {v for n in graph.nodes[block.stop :] for v in n.inputs} | set(graph.outputs)
    results = [v for v in dict.fromkeys(v for n in nodes for v in n.outputs) if v in later]
    if not results:
        return
    saved: list[Var] = []

    def body(*xs):
        local = {**env, **dict(zip(explicit, xs))}
        _emit_range(graph, block.nodes(), block.inner, local, block.save, saved)
        return [local[v] for v in results]

    traced = trace_function(body, [env[v] for v in explicit], name=f"planned block [{block.start}, {block.stop})")
    trace = current_trace()
    captured = [Tensor._traced(trace, v) for v in traced.captured]
    outs = _bind(traced.graph, [env[v] for v in explicit], captured, set(saved))
    env.update(zip(results, outs))


def _bind(body: Graph, explicit: list[Tensor], captured: list[Tensor], save: set[Var]) -> list[Tensor]:
    """A checkpoint node over `body` keeping, of the values in `save`, those its gradient reads
    (directly or to recompute another), as `checkpoint._bind_block` keeps a policy's picks."""
    residuals: list[Var] = []
    if save & {v for n in body.nodes for v in n.outputs}:
        chosen = [save.intersection(n.outputs) for n in body.nodes]
        residuals = _walk(body, chosen, plain_reads(body))[0]
    saved = tuple(range(len(explicit))) if explicit else tuple(range(len(captured)))
    extra = {"num_residuals": len(residuals)} if residuals else {}
    full = Graph(body.inputs, body.outputs + residuals, body.nodes, body.constants)
    outs = bind(_checkpoint, *explicit, *captured, body=full, saved=saved, policy=PLANNER, **extra)
    return list(outs[: len(body.outputs)])


def plain_reads(body: Graph) -> set[Var]:
    """`gradient_view(body).plain_reads()`, traced once per program: a plan's blocks over
    identical layers print alike, and read alike by position (a node's output or an input)."""
    key = hashlib.sha256(str(body).encode()).digest()
    where = _positions(body)
    with _LOCK:
        positions = _READS.pop(key, None)
    if positions is None:
        positions = frozenset(where[v] for v in gradient_view(body).plain_reads())
    with _LOCK:
        _READS[key] = positions  # the most recent last
        while len(_READS) > READS_KEPT:
            _READS.pop(next(iter(_READS)))
    return {v for v, at in where.items() if at in positions}


def _positions(body: Graph) -> dict[Var, tuple[int, int]]:
    where = {v: (-1, i) for i, v in enumerate(body.inputs)}
    where.update((v, (j, k)) for j, n in enumerate(body.nodes) for k, v in enumerate(n.outputs))
    return where


READS_KEPT = 256  # programs whose reads are kept, the least recently used dropped first
_READS: dict[bytes, frozenset[tuple[int, int]]] = {}  # by the digest of the program
_LOCK = threading.Lock()


def block_nodes(plan: Plan) -> dict[int, tuple[Block, ...]]:
    """For each node inside some block, the blocks around it, outermost first."""
    out: dict[int, tuple[Block, ...]] = {}

    def visit(blocks: tuple[Block, ...], around: tuple[Block, ...]) -> None:
        for b in blocks:
            for i in b.nodes():
                out[i] = (*around, b)
            visit(b.inner, (*around, b))

    visit(plan.blocks, ())
    return out


def extra_runs(plan: Plan) -> dict[int, int]:
    """How many more times than once the gradient step runs each node: once per block around
    it (each recomputes its body, inner blocks included), less one where the innermost block
    saves it."""
    out = {}
    for i, around in block_nodes(plan).items():
        runs = len(around) - (i in around[-1].save)
        if runs:
            out[i] = runs
    return out


__all__ = ["Block", "Plan", "NO_PLAN", "PLANNER", "apply", "check", "emit_nodes", "block_nodes", "extra_runs"]
