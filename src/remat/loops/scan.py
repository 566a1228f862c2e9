"""`rm.scan`: a loop over the leading axis of `xs` that carries a state, as one block of the graph.

    c:f32[4] d:f32[10,4] = scan[length=10 num_carry=1 num_xs=1 reverse=False] a b e
      body(f:f32[4], g:f32[4], h:f32[4,4]) {
        ...
        return i, j
      }

The node's inputs are the initial carries, the stacked xs, then the loop-invariant tensors the
body read from enclosing scope (found by tracing, as a checkpoint finds its captures). Its body
Graph takes (carry..., x slice..., captures...) and returns (carry..., y...); the node returns
the last carries and the ys stacked along a new leading axis of `length`.

Vectorized tensors (`rm.vmap`, `rm.vectorize`) keep their vectorized axes: a vectorized `xs` is
scanned along its first inner axis, and a carry that becomes vectorized in the body (it meets a
vectorized x or capture) is vectorized from the start, as JAX's batching of scan does.
"""

from __future__ import annotations

from collections.abc import Callable

from remat import tree
from remat.argcheck import check_callable, is_int, leaf_paths, short_repr
from remat.core import Aval, BlockJVP, PerStep, declare
from remat.dtypes import is_float
from remat.errors import ArgumentTypeError, ArgumentValueError, ShapeError, callable_name
from remat.forward import instantiate, jvp_graph
from remat.graph import Graph, Node
from remat.loops import schedules
from remat.loops.body import Carry, template, tensor_leaves, weak_leaves
from remat.loops.checkpointed import segmented, step_checkpointed
from remat.loops.prune import prune_scan
from remat.ops.shape import permute_dims
from remat.ops.update import register_scan
from remat.tensor import Tensor
from remat.trace import bind, current_trace
from remat.vectorize import block_rule


def _scan_rule(*avals, body: Graph, length: int, reverse: bool, num_carry: int, num_xs: int, unroll: int = 1,
               checkpoint=None, snapshots: tuple[int, ...] | None = None, skip_last: bool = False):
    # `snapshots`, `skip_last`: a binomial gradient's forward sweep (scan_binomial.py)
    nc, nx = num_carry, num_xs
    ins = [Aval(v.shape, v.dtype) for v in body.inputs]
    stacked = [Aval((length, *a.shape), a.dtype) for a in ins[nc : nc + nx]]
    expected = ins[:nc] + stacked + ins[nc + nx :]
    if list(avals) != expected:
        raise ShapeError(f"operands {[tuple(a) for a in avals]} do not match the body's inputs {expected}")
    outs = [Aval(v.shape, v.dtype) for v in body.outputs]
    if outs[:nc] != ins[:nc]:
        raise ShapeError(f"the body turns carries {ins[:nc]} into {outs[:nc]}")
    # a buffer of the snapshots per carry, then the carries before the last step
    kept = [] if snapshots is None else [Aval((len(snapshots), *a.shape), a.dtype) for a in ins[:nc]] + ins[:nc]
    return ins[:nc] + [Aval((length, *a.shape), a.dtype) for a in outs[nc:]] + kept


def refuse_forward_mode(snapshots: int):
    raise ArgumentTypeError(
        f"scan: the gradient of a scan with checkpoint=binomial({snapshots}) cannot be differentiated in "
        "forward mode (jvp of grad, hessian); use checkpoint=\"step\" or rm.loops.segments(k), whose gradients "
        "are scans"
    )



def _scan_jvp(ts, *inputs, body: Graph, length, reverse, num_carry, num_xs, unroll=1, checkpoint=None,
              snapshots=None, skip_last=False):
    # A scan over (primal, tangent) carries and xs whose step is the JVP of the body. Every
    # float carry has a tangent carry: a zero one at the start may be nonzero after a step.
    if snapshots is not None:  # the forward sweep of a binomial gradient
        refuse_forward_mode(len(snapshots))

    nc, nx = num_carry, num_xs
    consts, t_consts = inputs[nc + nx :], ts[nc + nx :]
    moving = any(t is not None for t in ts)  # else this is vmap re-emitting the block (vectorize.py)
    fc = [i for i in range(nc) if moving and is_float(body.inputs[i].dtype)]
    fy = [k for k, v in enumerate(body.outputs[nc:]) if moving and is_float(v.dtype)]
    tx = [j for j in range(nx) if ts[nc + j] is not None]

    def step(c, x):
        tans = [None] * len(body.inputs)
        for i, t in [*zip(fc, c[1]), *((nc + j, t) for j, t in zip(tx, x[1]))]:
            tans[i] = t
        tans[nc + nx :] = t_consts
        outs, touts = jvp_graph(body, [*c[0], *x[0], *consts], tans)
        touts = instantiate(touts, body.outputs)
        return (outs[:nc], [touts[i] for i in fc]), (outs[nc:], [touts[nc + k] for k in fy])

    init = (list(inputs[:nc]), instantiate([ts[i] for i in fc], [body.inputs[i] for i in fc]))
    xs = (list(inputs[nc : nc + nx]), [ts[nc + j] for j in tx])
    (c, tc), (ys, tys) = scan(step, init, xs, length=length, reverse=reverse, unroll=unroll, checkpoint=checkpoint)
    touts: list = [None] * (nc + len(ys))
    for i, t in [*zip(fc, tc), *((nc + k, t) for k, t in zip(fy, tys))]:
        touts[i] = t
    return [*c, *ys], touts


def _describe_output(node: Node, k: int) -> str | PerStep | None:
    """The memory report's name for output `k`: the ys stacked one body value per step, and the
    extra outputs of a binomial gradient's forward sweep (scan_binomial.py)."""
    body, nc = node.params["body"], node.params["num_carry"]
    where = f" at {node.source}" if node.source else ""
    if k >= len(body.outputs):
        last = k - len(body.outputs) >= nc
        what = "the loop's carry before its last step" if last else "snapshots of the loop's carry"
        return f"{what}, for the binomial schedule of the scan{where}"
    if k < nc:
        return None
    steps = f"one per step of the scan{where}"
    if body.outputs[k] in body.inputs[:nc]:
        return f"the loop's carry, {steps}"
    return PerStep(body, body.outputs[k], steps)


# Its VJP is set by scan_binomial.py, which knows both schedules' rules (they import this module).
scan_op = declare("scan", _scan_rule, None, multiple_results=True, jvp=BlockJVP(_scan_jvp), batch=block_rule)
scan_op.prune = prune_scan
scan_op.cost = lambda node, cost_of: node.params["length"] * cost_of(node.params["body"])
scan_op.describe_output = _describe_output


def scan(fn: Callable, init, xs=None, length: int | None = None, reverse: bool = False, unroll: int = 1,
         checkpoint=None):
    """Loop `fn(carry, x) -> (carry, y)` over the leading axis of `xs` (a pytree of tensors),
    as `jax.lax.scan`: returns the last carry and the ys stacked along a new leading axis.
    Tensors `fn` reads from enclosing scope are loop-invariant inputs; their gradients are
    summed over the steps. With `xs=None`, `length` says how many steps to run; `reverse`
    runs from the last x to the first (ys stay in the order of xs); `unroll` is how many steps
    XLA puts in one iteration. `checkpoint` trades recomputation for memory in the gradient:
    `"step"` (each step a checkpoint block), `rm.loops.segments(k)` or `rm.loops.binomial(s)`
    (see `remat.loops.schedules`).

    >>> import remat as rm
    >>> w = rm.asarray(2.0)
    >>> rm.scan(lambda c, x: (c * w + x, c), rm.asarray(1.0), rm.asarray([1.0, 2.0, 3.0]))
    (Tensor(19., dtype=float32), Tensor([1., 3., 8.], dtype=float32))
    """
    check_callable(fn, "scan", "loop body fn(carry, x) -> (carry, y)")
    _check_options(reverse, unroll)
    carry, carry_tree = tensor_leaves(init, "scan", "init")
    x_leaves, x_tree = tensor_leaves(xs, "scan", "xs")
    n = _length(x_leaves, leaf_paths(xs, "xs"), length)
    schedules.check(checkpoint)
    x_slices = [template(x.shape[1:], x.dtype, x._vaxes) for x in x_leaves]
    if weak := weak_leaves(init):  # Python numbers take the dtypes the body gives them (JAX's weak types)
        resolve = _Body(fn, carry_tree, x_tree, carry, weak)
        resolve.trace(x_slices)
        carry, init = resolve.carry, tree.unflatten(carry_tree, resolve.carry)
    if isinstance(checkpoint, str):
        fn = step_checkpointed(fn)
    elif isinstance(checkpoint, schedules.Segments):
        return segmented(scan, fn, init, xs, n, checkpoint.steps(n), reverse, unroll)
    x_raw = [_scan_axis_first(x) for x in x_leaves]
    body = _Body(fn, carry_tree, x_tree, carry)
    traced = body.trace(x_slices)
    trace = current_trace()
    captured = [Tensor._traced(trace, v) for v in traced.captured]
    nc = len(carry)
    extra = {"unroll": int(unroll)} if unroll != 1 else {}  # absent when 1: graphs print short
    if isinstance(checkpoint, schedules.Binomial):
        extra["checkpoint"] = checkpoint.resolve(n)
    outs = bind(scan_op, *[c._raw() for c in body.carry], *x_raw, *captured, body=traced.graph, length=n,
                reverse=reverse, num_carry=nc, num_xs=len(x_raw), **extra)
    final = [o._relabel(c._vaxes) for o, c in zip(outs[:nc], body.carry)]
    ys = [_scan_axis_back(o, v) for o, v in zip(outs[nc:], traced.out_vaxes[nc:])]
    return tree.unflatten(carry_tree, final), tree.unflatten(body.y_tree, ys)


register_scan(scan)  # `x.at[idx].apply(fn)` loops with it where idx is traced


def _check_options(reverse, unroll) -> None:
    if not isinstance(reverse, bool):
        raise ArgumentTypeError(f"scan: reverse must be a bool, got {short_repr(reverse)}")
    _count("unroll", unroll, 1)


def _count(name: str, value, least: int) -> None:
    if not is_int(value):
        raise ArgumentTypeError(f"scan: {name} must be an int, got {short_repr(value)}")
    if value < least:
        raise ArgumentValueError(f"scan: {name} must be >= {least}, got {value}")


def _length(xs: list[Tensor], paths: list[str], length) -> int:
    """The number of steps: `length`, or the leading axis every leaf of `xs` shares."""
    if length is not None:
        _count("length", length, 0)
    for x, path in zip(xs, paths):
        if x.ndim == 0:
            raise ShapeError(f"scan: {path} is a 0-d tensor; every leaf of xs needs a leading axis to scan over")
    leading = {x.shape[0] for x in xs}
    if len(leading) > 1:
        shapes = ", ".join(f"{p} {x.shape}" for p, x in zip(paths, xs))
        raise ShapeError(f"scan: the leaves of xs have different leading axes ({shapes}); "
                         "each step takes one slice of every leaf, so they must agree")
    if not xs:
        if length is None:
            raise ArgumentValueError("scan: xs is None (or has no tensors), so pass length= (the number of steps)")
        return int(length)
    (n,) = leading
    if length is not None and length != n:
        raise ArgumentValueError(
            f"scan: length={length} but xs has leading axis {n} ({paths[0]} has shape {xs[0].shape}); "
            "drop length or make them agree"
        )
    return n


def _scan_axis_first(x: Tensor) -> Tensor:
    """The raw tensor of `x` with its first inner axis (the one scanned) leading."""
    k = len(x._vaxes)
    raw = x._raw()
    if not k:
        return raw
    return permute_dims(raw, [k, *range(k), *range(k + 1, raw.ndim)])


def _scan_axis_back(y: Tensor, vaxes: tuple) -> Tensor:
    """Stacked ys (steps first, then `vaxes`, then the inner shape) with `vaxes` vectorized."""
    k = len(vaxes)
    if not k:
        return y
    return permute_dims(y, [*range(1, k + 1), 0, *range(k + 1, y.ndim)])._relabel(vaxes)


class _Body:
    """The user's `fn` as a function of flat tensors, its results checked on every trace."""

    def __init__(self, fn: Callable, carry_tree: tree.TreeDef, x_tree: tree.TreeDef, init: list[Tensor],
                 weak: dict[int, object] | None = None):
        self.fn, self.carry_tree, self.x_tree = fn, carry_tree, x_tree
        self.state = Carry(init, weak)
        self.y_tree: tree.TreeDef | None = None

    @property
    def carry(self) -> list[Tensor]:
        return self.state.leaves

    def trace(self, x_slices: list[Tensor]):
        (traced,) = self.state.trace([(self, lambda c: [*c, *x_slices])], [f"scan({callable_name(self.fn)})"])
        return traced

    def __call__(self, *flat):
        nc = len(self.carry)
        out = self.fn(tree.unflatten(self.carry_tree, flat[:nc]), tree.unflatten(self.x_tree, flat[nc:]))
        if not isinstance(out, tuple) or len(out) != 2:
            raise ArgumentTypeError(f"scan: {callable_name(self.fn)} returned {short_repr(out)}; "
                                    "a scan body must return a pair (carry, y)")
        new, y = out
        carry = self.state.returned("scan", self.fn, "carry", new, self.carry_tree, "init")
        ys, self.y_tree = tree.flatten(y)
        return carry, ys
