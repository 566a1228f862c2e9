"""A policy reaches into the scans and conds of its checkpoint block, as in JAX.

`rm.checkpoint(f, policy=rm.policies.dots_saveable)` where `f` runs a scan or a cond: a policy
is asked about the block's nodes, and a loop or a branch is one node, so alone it would save
nothing inside it and the block's backward pass would run the loop or branch forward again,
products included. JAX's partial evaluation applies the policy inside instead: a forward loop
stacks, per step, what the policy saves (and the carries), a cond outputs what its branch's
policy saves, and the backward pass recomputes only the rest from them.

Each loop and cond does that through its `under_policy` slot, which the checkpoint calls on the
block's body before it chooses residuals:

- a plain scan gets as its step a checkpoint block under the policy, cut at once into the forward
  half of its gradient (`scan_vjp.split`): the scan stacks that step's residuals as extra ys, and
  its VJP finds every value its backward step reads among its ys;
- each branch of a cond becomes a checkpoint block under the policy that also outputs the block's
  residuals, in slots of its own (zeros in the other branches' slots, as JAX's cond joins its
  branches' residuals); the cond's VJP reads those slots instead of recomputing them.

The block may then save the extra outputs: what the policy chose, inside.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from remat import dtypes
from remat.autodiff import emit
from remat.checkpoint import checkpoint
from remat.graph import Graph, Node, Var
from remat.loops.cond import cond_op
from remat.loops.scan import scan_op
from remat.loops.scan_vjp import split
from remat.ops.shape import broadcast_to
from remat.tensor import Tensor
from remat.trace import asarray, new_trace


def _stepped(node: Node, policy: Callable) -> Node:
    p = node.params
    if "checkpoint" in p or not (p["num_carry"] + p["num_xs"] and p["length"]):
        return node  # a checkpointed scan keeps its own schedule; an empty one has nothing inside
    step, nc, nx = p["body"], p["num_carry"], p["num_xs"]
    with new_trace("scan step under a checkpoint policy") as t:
        ins = [t.new_input(v.shape, v.dtype) for v in step.inputs]
        consts = ins[nc + nx :]
        outs = checkpoint(lambda *cx: emit(step, [*cx, *consts]), *ins[: nc + nx], policy=policy)
        blocked = t.to_graph(list(outs))
    fwd = split(blocked, nc, nx, [dtypes.is_float(v.dtype) for v in step.outputs[nc:]]).fwd
    stacked = [Var((p["length"], *v.shape), v.dtype) for v in fwd.outputs[len(step.outputs) :]]
    return Node("scan", node.inputs, tuple(node.outputs) + tuple(stacked), {**p, "body": fwd}, node.source)


def _branched(node: Node, policy: Callable) -> Node:
    if "num_residuals" in node.params:
        return node  # already outputs its branches' residuals
    graphs = node.subgraphs()  # branch0, branch1, ...
    residuals = [_blocked(g, policy) for g in graphs]
    if not any(residuals):
        return node
    slots = [a for r in residuals for a in r]
    new = {f"branch{k}": _blocked(g, policy, slots, sum(map(len, residuals[:k]))) for k, g in enumerate(graphs)}
    outputs = tuple(node.outputs) + tuple(Var(shape, dtype) for shape, dtype in slots)
    return Node("cond", node.inputs, outputs, {**node.params, **new, "num_residuals": len(slots)}, node.source)


def _blocked(branch: Graph, policy: Callable, slots: list[tuple] | None = None, first: int = 0):
    """`branch` as a checkpoint block under `policy` over all its inputs: the types of the block's
    residuals, or (given `slots`) the branch outputting them from slot `first` on, zeros in the
    other slots."""
    with new_trace("branch under a checkpoint policy") as t:
        ins = [t.new_input(v.shape, v.dtype) for v in branch.inputs]
        outs = checkpoint(lambda *xs: emit(branch, list(xs)), *ins, policy=policy)
        block = next(n for n in reversed(t.nodes) if n.op == "checkpoint")
        residuals = [Tensor._traced(t, v) for v in block.outputs[len(branch.outputs) :]]
        if slots is None:
            return [(r.shape, r.dtype) for r in residuals]
        filled = [broadcast_to(asarray(np.zeros((), dtype)), shape) for shape, dtype in slots]
        filled[first : first + len(residuals)] = residuals
        return t.to_graph(list(outs) + filled)


scan_op.under_policy = _stepped
cond_op.under_policy = _branched
