"""The gradient of a scan: a forward scan that stacks what each step's VJP needs, then a scan in
the opposite direction that runs each step's backward pass.

Splitting the body. One step's VJP is traced once: the body replayed on (carry, x, consts), then
`backward_pass` from cotangents of its outputs. The replayed nodes are the forward step, the rest
the backward step. What the backward step reads of the forward step is where the step's
residuals come from, and each kind goes to the backward loop its own way:

- a carry of the step: stacked (an extra output of the forward scan);
- a slice of xs: the backward loop slices xs itself; a loop-invariant input: passed as it is;
- a value the forward step computed: stacked, unless it is one of the step's ys (the forward scan
  stacks those already) or depends only on loop-invariant inputs (then it is computed once,
  outside the loop).

So a checkpoint inside the body (whose VJP reads only the block's inputs) leaves one carry per
step as the residual, and the backward step recomputes the rest.

The forward scan. The node being differentiated already ran forward; rather than run the loop a
second time to stack residuals, the rule gives that node the split body and the residuals as
extra outputs (what JAX's partial evaluation of scan does when it linearizes). Where the node
cannot be found in an open trace, a second forward scan makes them.

The backward scan carries the cotangents of the carries and the sums of the cotangents of the
loop-invariant inputs; its xs are the per-step residuals and the cotangents of the ys; its ys
are the cotangents of xs. It is built with `scan` itself, so it is differentiable in turn.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from remat import dtypes
from remat.autodiff import backward_pass, replay
from remat.core import pruned
from remat.graph import Graph, Node, Var, live_nodes
from remat.loops.scan import scan, scan_op
from remat.tensor import Tensor
from remat.trace import asarray, bind, current_trace, new_trace


@dataclass
class Split:
    """One step's VJP cut into a forward and a backward graph. `fwd` takes the body's inputs and
    returns its outputs, then the values to stack; `bwd` takes the residuals (`per_step` then
    `invariant`, each a `(kind, index)`), the carries' cotangents, then the ys' cotangents, and
    returns the cotangents of the float carries, of the xs in `x_cts` and of the consts in
    `const_cts`. `hoist` computes the invariant forward values from the consts."""

    fwd: Graph
    bwd: Graph
    per_step: list[tuple[str, int]]  # ("stack", m), ("y", k) or ("x", j)
    invariant: list[tuple[str, int]]  # ("const", k), ("hoist", m) or ("outer", m)
    hoist: Graph
    outer: list[Var]  # Vars of the enclosing trace the backward step read (a custom bwd's closure)
    float_carries: list[int]
    x_cts: list[int]
    const_cts: list[int]


def split(body: Graph, nc: int, nx: int, y_cts: list[bool]) -> Split:
    """Trace one step's VJP with cotangents for the float carries and the ys in `y_cts`."""
    floats = [i for i in range(nc) if dtypes.is_float(body.outputs[i].dtype)]
    with new_trace("scan gradient") as t:
        prim = [t.new_input(v.shape, v.dtype) for v in body.inputs]
        env = replay(body, prim)
        n_fwd = len(t.nodes)
        outs = [t.lift(env[v]) for v in body.outputs]
        ct_c = {i: t.new_input(body.outputs[i].shape, body.outputs[i].dtype) for i in floats}
        ct_y = {k: t.new_input(v.shape, v.dtype) for k, v in enumerate(body.outputs[nc:]) if y_cts[k]}
        cts = backward_pass(body, env, [ct_c.get(i) for i in range(nc)] + [ct_y.get(k) for k in range(len(y_cts))])
        zeros = [asarray(np.zeros(body.inputs[i].shape, body.inputs[i].dtype)) for i in floats]
        carry_cts = [t.lift(z if cts[i] is None else cts[i]) for i, z in zip(floats, zeros)]
        x_cts = [j for j in range(nx) if cts[nc + j] is not None]
        const_cts = [k for k in range(len(body.inputs) - nc - nx) if cts[nc + nx + k] is not None]
        wanted = carry_cts + [t.lift(cts[nc + j]) for j in x_cts] + [t.lift(cts[nc + nx + k]) for k in const_cts]
    fwd_nodes, bwd_nodes = t.nodes[:n_fwd], live_nodes(t.nodes[n_fwd:], wanted, pruned)[0]
    grad_inputs = [c._var for c in ct_c.values()] + [c._var for c in ct_y.values()]
    made = {v for n in bwd_nodes for v in n.outputs} | set(grad_inputs) | set(t.constants)
    read = [v for v in dict.fromkeys([*(v for n in bwd_nodes for v in n.inputs), *wanted]) if v not in made]
    return _Cut(t, prim, outs, nc, nx).split(fwd_nodes, bwd_nodes, read, grad_inputs, wanted,
                                              floats, x_cts, const_cts)


class _Cut:
    """Sorts the forward values the backward step reads by how the backward loop gets them."""

    def __init__(self, t, prim: list[Tensor], outs: list[Var], nc: int, nx: int):
        self.t, self.outs, self.nc = t, outs, nc
        self.role = {p._var: ("carry", i) for i, p in enumerate(prim[:nc])}
        self.role.update({p._var: ("x", j) for j, p in enumerate(prim[nc : nc + nx])})
        self.role.update({p._var: ("const", k) for k, p in enumerate(prim[nc + nx :])})
        self.role.update({v: ("outer", m) for m, v in enumerate(t.capture_vars)})
        self.inputs = [p._var for p in prim]
        self.consts = [p._var for p in prim[nc + nx :]]

    def split(self, fwd_nodes, bwd_nodes, read, grad_inputs, wanted, floats, x_cts, const_cts) -> Split:
        invariant_vars = _invariant(fwd_nodes, set(self.consts) | set(self.t.constants))
        ys = {v: k for k, v in reversed(list(enumerate(self.outs[self.nc :])))}
        stacked: list[Var] = []
        hoisted: list[Var] = []
        per_step, per_step_vars, inv, inv_vars = [], [], [], []
        for v in read:  # the cheapest way first: nothing stored, stored already, computed once
            kind = self.role.get(v, ("", 0))
            if kind[0] in ("const", "outer"):
                inv.append(kind), inv_vars.append(v)
            elif kind[0] == "x":
                per_step.append(kind), per_step_vars.append(v)
            elif v in ys:
                per_step.append(("y", ys[v])), per_step_vars.append(v)
            elif kind[0] != "carry" and v in invariant_vars:
                inv.append(("hoist", len(hoisted))), inv_vars.append(v)
                hoisted.append(v)
            else:  # a carry, or a value the step computed from the carry or x
                per_step.append(("stack", len(stacked))), per_step_vars.append(v)
                stacked.append(v)
        constants = self.t.constants
        fwd = _graph(self.inputs, self.outs + stacked, fwd_nodes, constants)
        hoist = _graph(self.consts, hoisted, fwd_nodes, constants)
        bwd = _graph(per_step_vars + inv_vars + grad_inputs, wanted, bwd_nodes, constants)
        return Split(fwd, bwd, per_step, inv, hoist, list(self.t.captured), floats, x_cts, const_cts)


def _invariant(nodes: list[Node], known: set[Var]) -> set[Var]:
    """The node outputs that depend only on `known` Vars: the same on every step."""
    inv = set(known)
    for node in nodes:
        if all(v in inv for v in node.inputs):
            inv.update(node.outputs)
    return inv


def _graph(inputs: list[Var], outputs: list[Var], nodes: list[Node], constants: dict) -> Graph:
    kept = live_nodes(nodes, outputs, pruned)[0]
    used = {v for n in kept for v in n.inputs} | set(outputs)
    return Graph(inputs, outputs, kept, {v: a for v, a in constants.items() if v in used})


# ---------------------------------------------------------------- the rule


def scan_vjp(gs, inputs, out, params: dict) -> tuple:
    body, nc, nx = params["body"], params["num_carry"], params["num_xs"]
    length, reverse = params["length"], params["reverse"]
    ny = len(body.outputs) - nc
    sp = split(body, nc, nx, [gs[nc + k] is not None for k in range(ny)])
    stacked = _residuals(out, inputs, sp, params)
    consts = list(inputs[nc + nx :])
    hoisted = _outputs(sp.hoist, consts) if sp.hoist.outputs else []
    outer = [Tensor._traced(current_trace(), v) for v in sp.outer]  # read where the split was traced
    sources = {"stack": stacked, "y": list(out[nc:]), "x": list(inputs[nc : nc + nx]),
               "const": consts, "hoist": hoisted, "outer": outer}
    per_step = [sources[kind][i] for kind, i in sp.per_step]
    invariant = [sources[kind][i] for kind, i in sp.invariant]
    ct_carry = [_or_zeros(gs[i], out[i]) for i in sp.float_carries]
    ct_ys = [g for g in gs[nc:] if g is not None]
    sums = [_zeros(consts[k]) for k in sp.const_cts]

    def step(carry, x):
        cts, acc = carry
        res, g_y = x
        got = _outputs(sp.bwd, [*res, *invariant, *cts, *g_y])
        n_c, n_x = len(cts), len(sp.x_cts)
        acc = [a + g for a, g in zip(acc, got[n_c + n_x :])]
        return (got[:n_c], acc), got[n_c : n_c + n_x]

    (ct_init, ct_consts), ct_xs = scan(step, (ct_carry, sums), (per_step, ct_ys), length=length,
                                       reverse=not reverse, unroll=params.get("unroll", 1))
    result: list[Tensor | None] = [None] * len(inputs)
    for i, ct in zip(sp.float_carries, ct_init):
        result[i] = ct
    for j, ct in zip(sp.x_cts, ct_xs):
        result[nc + j] = ct
    for k, ct in zip(sp.const_cts, ct_consts):
        result[nc + nx + k] = ct
    return tuple(result)


def _outputs(graph: Graph, inputs: list[Tensor]) -> list[Tensor]:
    env = replay(graph, inputs)
    return [env[v] for v in graph.outputs]


def _zeros(x: Tensor) -> Tensor:
    return asarray(np.zeros(x.shape, x.dtype))


def _or_zeros(g: Tensor | None, like: Tensor) -> Tensor:
    return _zeros(like) if g is None else g


def _residuals(out, inputs, sp: Split, params: dict) -> list[Tensor]:
    """The stacked residuals: extra outputs of the node that made `out`, or of a new forward scan."""

    n_old = len(params["body"].outputs)
    extra = sp.fwd.outputs[n_old:]
    if not extra:
        return []
    found = _producer(out, params["body"])
    if found is None:
        return list(bind(scan_op, *inputs, **{**params, "body": sp.fwd})[n_old:])
    node, trace = found
    new = [Var((params["length"], *v.shape), v.dtype) for v in extra]
    node.params = {**node.params, "body": sp.fwd}
    node.outputs = node.outputs + tuple(new)
    return [Tensor._traced(trace, v) for v in new]


def _producer(out, body: Graph):
    """The scan node of an open trace whose outputs are `out`, and that trace."""
    first = out[0] if out else None
    if first is None or first._trace is None or not first._trace.active:
        return None
    trace = first._trace
    for node in reversed(trace.nodes):
        if node.outputs and node.outputs[0] is first._var:
            ok = node.op == "scan" and node.params.get("body") is body and len(node.outputs) == len(out)
            return (node, trace) if ok else None
    return None
