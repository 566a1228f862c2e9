"""Dead-code elimination through loops: a loop whose outputs are not all read computes only those
that are, as JAX's DCE rule for scan does.

A node with one output either lives or dies whole (`Trace.to_graph`), but a loop is one node for
all its outputs. The backward scan of a gradient computes the cotangent of every xs and every
loop-invariant input; the caller often wants few of them (the xs of an RNN are data; a
`value_and_grad` differentiates some arguments only). Here such a node loses the outputs nobody
reads, its body the work and the per-step residuals only they needed, and the node the inputs
its body no longer reads, so the forward scan loses the stacked residuals in turn.

A carry goes only when neither its last value nor any kept output depends on it (a fixed point:
a carry read by a kept carry is kept). A scan that takes snapshots for a binomial gradient keeps
every carry; when only its snapshots are read it need not run its last step (`skip_last`).
"""

from __future__ import annotations

from remat.graph import Graph, Node, Var, sub_graph


def _unchanged(old: Graph, new: Graph) -> bool:
    return (len(old.inputs) == len(new.inputs) and len(old.outputs) == len(new.outputs)
            and len(old.nodes) == len(new.nodes) and all(a is b for a, b in zip(old.nodes, new.nodes)))


def prune_scan(node: Node, live: set[Var]) -> Node:
    p = node.params
    body, nc, nx = p["body"], p["num_carry"], p["num_xs"]
    n_body, outs = len(body.outputs), node.outputs
    snapshots = p.get("snapshots") is not None
    want = {k for k in range(n_body) if outs[k] in live or (snapshots and k < nc)}
    while True:  # the carries the wanted outputs read, until no new one is read
        _, read = sub_graph(body, [], sorted(want))
        more = {i for i in range(nc) if body.inputs[i] in read} - want
        if not more:
            break
        want |= more
    carries = [i for i in range(nc) if i in want]
    ins = carries + [i for i in range(nc, len(body.inputs)) if body.inputs[i] in read]
    kept = carries + [k for k in range(nc, n_body) if k in want]
    new, _ = sub_graph(body, ins, kept)
    skip_last = snapshots and not any(o in live for o in outs[:n_body])
    if _unchanged(body, new) and skip_last == p.get("skip_last", False):
        return node
    params = {**p, "body": new, "num_carry": len(carries), "num_xs": sum(1 for i in ins if nc <= i < nc + nx)}
    if skip_last:
        params["skip_last"] = True
    return Node(node.op, [node.inputs[i] for i in ins], [outs[k] for k in kept] + list(outs[n_body:]), params,
                node.source)


def prune_cond(node: Node, live: set[Var]) -> Node:
    """A cond computing only the outputs read, its branches reading only what those need."""
    branches = {k: g for k, g in node.params.items() if k.startswith("branch")}
    n_user = len(node.outputs) - node.params.get("num_residuals", 0)  # residuals stay, as a checkpoint's
    kept = [k for k, v in enumerate(node.outputs) if v in live or k >= n_user]
    reads = [sub_graph(g, [], kept)[1] for g in branches.values()]
    ins = [i for i in range(len(node.inputs) - 1) if any(g.inputs[i] in r for g, r in zip(branches.values(), reads))]
    new = {k: sub_graph(g, ins, kept)[0] for k, g in branches.items()}
    if all(_unchanged(branches[k], new[k]) for k in branches):
        return node
    return Node(node.op, [node.inputs[0], *(node.inputs[1 + i] for i in ins)], [node.outputs[k] for k in kept],
                {**node.params, **new}, node.source)


def prune_while(node: Node, live: set[Var]) -> Node:
    """A while loop carrying only what its condition and the outputs read, and what those carries
    read in turn (a fixed point); its forward-mode tangents go when only its values are read."""
    cond, body, nc = node.params["cond"], node.params["body"], node.params["num_carry"]
    n_cond = len(cond.inputs) - nc
    _, cond_read = sub_graph(cond, [], [0])
    want = {i for i in range(nc) if node.outputs[i] in live or cond.inputs[i] in cond_read}
    while True:
        _, read = sub_graph(body, [], sorted(want))
        more = {i for i in range(nc) if body.inputs[i] in read} - want
        if not more:
            break
        want |= more
    carries = sorted(want)
    cond_caps = [nc + j for j in range(n_cond) if cond.inputs[nc + j] in cond_read]
    body_caps = [i for i in range(nc, len(body.inputs)) if body.inputs[i] in read]
    new_body, _ = sub_graph(body, carries + body_caps, carries)
    new_cond, _ = sub_graph(cond, carries + cond_caps, [0])
    if _unchanged(body, new_body) and _unchanged(cond, new_cond):
        return node
    inputs = [node.inputs[i] for i in carries] + [node.inputs[i] for i in cond_caps]
    inputs += [node.inputs[n_cond + i] for i in body_caps]
    return Node(node.op, inputs, [node.outputs[i] for i in carries],
                {**node.params, "cond": new_cond, "body": new_body, "num_carry": len(carries)}, node.source)
