"""The gradient of a scan with `checkpoint=binomial(s)`: one `scan_binomial` node that runs
Revolve's schedule (`revolve.actions`) from the loop's first carry, holding at most s snapshots.

    ct_c0 ct_xs ct_consts = scan_binomial[length=T snapshots=s ...] c0 xs consts inv ct_cT ct_ys
      advance(c, x, consts) { the body's carries only }
      step(c, x, consts, inv, ct_c, ct_y) { one step's VJP: the body replayed, then backward }

The node keeps nothing per step: an advance runs the body's carry part, a youturn runs one step's
VJP (split as in `scan_vjp`, so loop-invariant values come in as `inv`, computed once). Both
backends interpret the same action table, so their gradients agree. The node has no VJP of its
own: grad of grad through a binomial scan raises an error naming the other schedules.
"""

from __future__ import annotations

from remat.autodiff import replay
from remat.errors import ArgumentTypeError
from remat.graph import Graph
from remat.loops.scan_vjp import _graph, _or_zeros, _outputs, split
from remat.ops.core import Aval, declare
from remat.trace import Tensor, bind, current_trace, new_trace


def _rule(*avals, advance: Graph, step: Graph, length: int, reverse: bool, snapshots: int, num_carry: int,
          num_xs: int, num_invariant: int, num_float: int, num_x_cts: int):
    outs = [Aval(v.shape, v.dtype) for v in step.outputs]
    stacked = [Aval((length, *a.shape), a.dtype) for a in outs[num_float : num_float + num_x_cts]]
    return outs[:num_float] + stacked + outs[num_float + num_x_cts :]


def _no_second_order(gs, *inputs, out, snapshots, **params):
    raise ArgumentTypeError(
        f"scan: the gradient of a scan with checkpoint=binomial({snapshots}) cannot be differentiated "
        "again (grad of grad); use checkpoint=\"step\" or rm.loops.segments(k), whose gradients are scans"
    )


scan_binomial_op = declare("scan_binomial", _rule, _no_second_order, multiple_results=True)


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
    outs = bind(scan_binomial_op, *inputs, *invariant, *ct_carry, *ct_ys,
                advance=_graph(body.inputs, body.outputs[:nc], body.nodes, body.constants),
                step=_step_graph(body, sp, nc, nx, invariant, ct_ys), length=params["length"],
                reverse=params["reverse"], snapshots=params["checkpoint"].snapshots, num_carry=nc, num_xs=nx,
                num_invariant=len(invariant), num_float=len(sp.float_carries), num_x_cts=len(sp.x_cts))
    result: list[Tensor | None] = [None] * len(inputs)
    slots = [*sp.float_carries, *(nc + j for j in sp.x_cts), *(nc + nx + k for k in sp.const_cts)]
    for i, ct in zip(slots, outs):
        result[i] = ct
    return tuple(result)


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
