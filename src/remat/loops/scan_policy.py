"""A policy reaches into the scans of its checkpoint block, as in JAX.

`rm.checkpoint(f, policy=rm.policies.dots_saveable)` where `f` runs a scan: a policy is asked
about the block's nodes, and a scan is one node, so alone it would save nothing of the loop and
the block's backward pass would run the whole loop forward again, products included. JAX's
partial evaluation of scan applies the policy inside the loop instead: the forward loop stacks,
per step, what the policy saves and the carries; the backward loop recomputes the rest of each
step from them.

`stepped(body, policy)` does that by rewriting: each plain scan of the block's body gets as its
step a checkpoint block under the same policy, cut at once into the forward half of its gradient
(`scan_vjp.split`), so the scan stacks that step's residuals as extra ys. The block may save
those ys (they are what the policy chose, per step, and the carries); the scan's VJP finds every
value its backward step reads among its ys, so the loop is not run forward again.
"""

from __future__ import annotations

from collections.abc import Callable

from remat import dtypes
from remat.graph import Graph, Node, Var
from remat.trace import new_trace


def stepped(body: Graph, policy: Callable) -> tuple[Graph, dict[int, int]]:
    """`body` with its plain scans rewritten as above, and for each rewritten scan's body (by id)
    how many outputs it had before: the ys after them are the stacked residuals."""
    nodes, steps = [], {}
    for node in body.nodes:
        p = node.params
        if node.op == "scan" and "checkpoint" not in p and p["num_carry"] + p["num_xs"] and p["length"]:
            node = _stepped(node, policy)
            steps[id(node.params["body"])] = len(p["body"].outputs)
        nodes.append(node)
    if not steps:
        return body, {}
    return Graph(body.inputs, body.outputs, nodes, body.constants), steps


def _stepped(node: Node, policy: Callable) -> Node:
    from remat.autodiff import emit
    from remat.checkpoint import checkpoint
    from remat.loops.scan_vjp import split

    p = node.params
    step, nc, nx = p["body"], p["num_carry"], p["num_xs"]
    with new_trace("scan step under a checkpoint policy") as t:
        ins = [t.new_input(v.shape, v.dtype) for v in step.inputs]
        consts = ins[nc + nx :]
        outs = checkpoint(lambda *cx: emit(step, [*cx, *consts]), *ins[: nc + nx], policy=policy)
        blocked = t.to_graph(list(outs))
    fwd = split(blocked, nc, nx, [dtypes.is_float(v.dtype) for v in step.outputs[nc:]]).fwd
    stacked = [Var((p["length"], *v.shape), v.dtype) for v in fwd.outputs[len(step.outputs) :]]
    return Node("scan", node.inputs, tuple(node.outputs) + tuple(stacked), {**p, "body": fwd}, node.source)
