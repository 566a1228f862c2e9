"""The gradient of a scan with `checkpoint=binomial(s)`: one `scan_binomial` node that runs
Revolve's schedule (`revolve.actions`) from the loop's first carry, holding at most s snapshots.

    ct_c0 ct_xs ct_consts = scan_binomial[length=T snapshots=s ...] c0 xs consts inv ct_cT ct_ys
      advance(c, x, consts) { the body's carries only }
      step(c, x, consts, inv, ct_c, ct_y) { one step's VJP: the body replayed, then backward }

The node keeps nothing per step: an advance runs the body's carry part, a youturn runs one step's
VJP (split as in `scan_vjp`, so loop-invariant values come in as `inv`, computed once). Both
backends interpret the same action table, so their gradients agree. The node has no VJP of its
own: grad of grad through a binomial scan raises an error naming the other schedules.

The forward sweep. Until its first youturn the schedule only advances, from step 0 to the last
step, taking snapshots on the way (`revolve.first_descent`): that is the forward loop, which has
already run to give the value. So the rule makes the forward scan node take those snapshots and
keep the carry before the last step (extra outputs, `snapshots=` in its params), and the
backward node resumes the schedule from there (`resumed=True`: it takes them in place of c0):

    cT ys shots last = scan[snapshots=(0, p1, ...)] c0 xs consts
    ct_c0 ct_xs ct_consts = scan_binomial[resumed=True ...] shots last xs consts inv ct_cT ct_ys

`shots` is a buffer of the snapshots (one per carry leaf), which the backward node then owns and
overwrites as the schedule retakes its slots: the node's inputs stay alive while it runs, so
separate arrays would keep the sweep's s snapshots beside the s the schedule takes later.

The step then runs F(T, s) + 1 + T times in all (the +1: the last step, whose result is the value)
instead of F(T, s) + 2 T. When the value is not wanted, the forward node skips its last step
(`prune.py`), F(T, s) + T. Where the forward node is not in an open trace, the backward node
runs the whole schedule from c0.
"""

from __future__ import annotations

from remat.autodiff import replay
from remat.core import Aval, BlockJVP, declare
from remat.errors import ArgumentTypeError
from remat.graph import Graph, Node, Var, sub_graph
from remat.loops import revolve
from remat.loops.scan import refuse_forward_mode, scan, scan_op
from remat.loops.scan_vjp import _graph, _or_zeros, _outputs, _producer, scan_vjp, split
from remat.tensor import Tensor
from remat.trace import bind, current_trace, new_trace
from remat.vectorize import devectorize, vectorize


def _rule(*avals, advance: Graph, step: Graph, length: int, reverse: bool, snapshots: int, num_carry: int,
          num_xs: int, num_invariant: int, num_float: int, num_x_cts: int, resumed: bool = False):
    outs = [Aval(v.shape, v.dtype) for v in step.outputs]
    stacked = [Aval((length, *a.shape), a.dtype) for a in outs[num_float : num_float + num_x_cts]]
    return outs[:num_float] + stacked + outs[num_float + num_x_cts :]


def _no_second_order(gs, *inputs, out, snapshots, **params):
    raise ArgumentTypeError(
        f"scan: the gradient of a scan with checkpoint=binomial({snapshots}) cannot be differentiated "
        "again (grad of grad); use checkpoint=\"step\" or rm.loops.segments(k), whose gradients are scans"
    )


def _no_forward_mode(ts, *inputs, snapshots, **params):
    refuse_forward_mode(snapshots if isinstance(snapshots, int) else len(snapshots))


scan_binomial_op = declare("scan_binomial", _rule, _no_second_order, multiple_results=True,
                           jvp=BlockJVP(_no_forward_mode))


def binomial_vjp(gs, inputs, out, params: dict) -> tuple:
    body, nc, nx = params["body"], params["num_carry"], params["num_xs"]
    ny = len(body.outputs) - nc
    sp = split(body, nc, nx, [gs[nc + k] is not None for k in range(ny)])
    consts = list(inputs[nc + nx :])
    hoisted = _outputs(sp.hoist, consts) if sp.hoist.outputs else []
    outer = [Tensor._traced(current_trace(), v) for v in sp.outer]
    invariant = [{"const": consts, "hoist": hoisted, "outer": outer}[kind][i] for kind, i in sp.invariant]
    ct_carry = [_or_zeros(gs[i], out[i]) for i in sp.float_carries]
    ct_ys = [g for g in gs[nc:] if g is not None]
    swept = _sweep(out, params)
    state = list(inputs[:nc]) if swept is None else swept
    outs = bind(scan_binomial_op, *state, *inputs[nc:], *invariant, *ct_carry, *ct_ys,
                advance=_graph(body.inputs, body.outputs[:nc], body.nodes, body.constants),
                step=_step_graph(body, sp, nc, nx, invariant, ct_ys), length=params["length"],
                reverse=params["reverse"], snapshots=params["checkpoint"].snapshots, num_carry=nc, num_xs=nx,
                num_invariant=len(invariant), num_float=len(sp.float_carries), num_x_cts=len(sp.x_cts),
                **({} if swept is None else {"resumed": True}))
    result: list[Tensor | None] = [None] * len(inputs)
    slots = [*sp.float_carries, *(nc + j for j in sp.x_cts), *(nc + nx + k for k in sp.const_cts)]
    for i, ct in zip(slots, outs):
        result[i] = ct
    return tuple(result)


def _sweep(out, params: dict) -> list[Tensor] | None:
    """The snapshots of the schedule's first descent and the carry before the last step, as new
    outputs of the forward scan node that made `out`; None where that node is not in an open
    trace (or already gave them to another gradient) or the loop has no step."""
    found = _producer(out, params["body"])
    if found is None or not params["length"]:
        return None
    node, trace = found
    positions, _ = revolve.first_descent(params["length"], params["checkpoint"].snapshots)
    carries = params["body"].outputs[: params["num_carry"]]
    new = [Var((len(positions), *v.shape), v.dtype) for v in carries] + [Var(v.shape, v.dtype) for v in carries]
    node.params = {**node.params, "snapshots": positions}
    node.outputs = node.outputs + tuple(new)
    return [Tensor._traced(trace, v) for v in new]


def prune_binomial(node: Node, live: set[Var]) -> Node:
    """Without the cotangents of xs and consts nobody reads, nor the invariant values only they
    needed (see prune.py). The cotangents of the carries stay: every step needs them."""
    p = node.params
    step, nf, nxc, ni = p["step"], p["num_float"], p["num_x_cts"], p["num_invariant"]
    outs = node.outputs
    kept = [k for k in range(len(outs)) if k < nf or outs[k] in live]
    n_lead = len(p["advance"].inputs)  # the step's (carry, x, consts), then inv
    _, read = sub_graph(step, [], kept)
    inv = [k for k in range(ni) if step.inputs[n_lead + k] in read]
    if len(kept) == len(outs) and len(inv) == ni:
        return node
    ins = [*range(n_lead), *(n_lead + k for k in inv), *range(n_lead + ni, len(step.inputs))]
    new, _ = sub_graph(step, ins, kept)
    # The node's first inv input: after its state (c0, or the sweep's buffers and last carries).
    first = p["num_carry"] * (2 if p.get("resumed") else 1) + len(p["advance"].inputs) - p["num_carry"]
    node_ins = [*range(first), *(first + k for k in inv), *range(first + ni, len(node.inputs))]
    params = {**p, "step": new, "num_invariant": len(inv),
              "num_x_cts": sum(1 for k in kept if nf <= k < nf + nxc)}
    return Node(node.op, [node.inputs[i] for i in node_ins], [outs[k] for k in kept], params, node.source)


scan_binomial_op.prune = prune_binomial


def _one_entry_at_a_time(op, tensors: list[Tensor], params: dict, names: tuple) -> tuple:
    """The binomial gradient under vmap (`jacrev`, per-example gradients): its schedule holds
    carries in snapshot buffers and reads xs step by step, so it has no batched form; a scan over
    the first vectorized axis runs it once per entry (the others, if any, take this rule again
    inside), each entry in the memory of one."""

    if params.get("resumed"):  # from c0 again: the sweep's snapshot buffers, which it overwrites, are shared here
        nc = params["num_carry"]
        shots, last = tensors[:nc], tensors[nc : 2 * nc]
        c0 = [s[0] for s in shots] if shots and shots[0].shape[0] else list(last)
        tensors, params = [*c0, *tensors[2 * nc :]], {k: v for k, v in params.items() if k != "resumed"}
    name = names[0][0]
    batched = [i for i, t in enumerate(tensors) if name in dict(t._vaxes)]

    def one(carry, entry):
        args = list(tensors)
        for i, x in zip(batched, entry):
            args[i] = x
        return carry, tuple(bind(op, *args, **params))

    _, ys = scan(one, (), tuple(devectorize(tensors[i], name) for i in batched))
    return tuple(vectorize(y, name) for y in ys)


scan_binomial_op.batch = _one_entry_at_a_time


def _scan_vjp(gs, *inputs, out, **params):
    """The VJP of a scan: its steps' VJPs in a backward scan (scan_vjp.py), or Revolve's schedule
    under `checkpoint=binomial(s)`."""
    rule = binomial_vjp if "checkpoint" in params else scan_vjp
    return rule(gs, inputs, out, params)


scan_op.vjp = _scan_vjp  # here, where both schedules' rules are known


def _step_graph(body: Graph, sp, nc: int, nx: int, invariant: list[Tensor], ct_ys: list[Tensor]) -> Graph:
    """One step's VJP as a closed Graph: (carry, x, consts, inv, ct_carry, ct_y) -> the split's
    backward outputs, the forward part replayed from the carry."""
    ct_shapes = [body.outputs[i] for i in sp.float_carries]
    with new_trace("binomial scan step") as t:
        ins = [t.new_input(v.shape, v.dtype) for v in body.inputs]
        inv = [t.new_input(x.shape, x.dtype) for x in invariant]
        cts = [t.new_input(v.shape, v.dtype) for v in ct_shapes] + [t.new_input(g.shape[1:], g.dtype) for g in ct_ys]
        env = replay(sp.fwd, ins)
        fwd = [env[v] for v in sp.fwd.outputs]
        n_out = len(body.outputs)
        sources = {"stack": fwd[n_out:], "y": fwd[nc:n_out], "x": ins[nc : nc + nx]}
        per_step = [sources[kind][i] for kind, i in sp.per_step]
        # Closed: the split's graphs read outer values only through `inv`.
        return t.to_graph(_outputs(sp.bwd, [*per_step, *inv, *cts]))
