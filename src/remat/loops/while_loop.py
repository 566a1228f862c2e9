"""`rm.while_loop` (a block running its body while its condition holds) and `rm.fori_loop`.

    b:i32[] c:f32[3] = while a d
      body(e:i32[], f:f32[3]) { ... }
      cond(g:i32[], h:f32[3]) { ... }

The node's inputs are the carries, then the captures of `cond`, then those of `body`. The trip
count is known only at run time, so a while loop has no reverse-mode gradient: its VJP rule
says so. `fori_loop` with Python int bounds is a `scan` instead, and differentiable.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from remat import dtypes, tree
from remat.argcheck import check_callable, is_int, short_repr
from remat.core import NOT_DIFFERENTIABLE, Aval, BlockJVP, declare
from remat.errors import ArgumentTypeError, DTypeError, ShapeError, callable_name, user_source
from remat.forward import instantiate, jvp_graph
from remat.graph import Graph
from remat.loops.body import Carry, check_like, tensor_leaves, weak_leaves
from remat.loops.prune import prune_while
from remat.loops.scan import scan
from remat.ops.elementwise import astype, where
from remat.ops.reduce import sum as sum_
from remat.tensor import Tensor, is_tensor_like
from remat.trace import asarray, bind, current_trace
from remat.vaxes import align_to, merge
from remat.vectorize import block_rule


def _while_rule(*avals, cond: Graph, body: Graph, num_carry: int):
    nc, n_cond = num_carry, len(cond.inputs) - num_carry
    carry = list(avals[:nc])
    if [Aval(v.shape, v.dtype) for v in cond.inputs] != list(avals[: nc + n_cond]):
        raise ShapeError("operands do not match the inputs of cond")
    if [Aval(v.shape, v.dtype) for v in body.inputs] != carry + list(avals[nc + n_cond :]):
        raise ShapeError("operands do not match the inputs of body")
    if [Aval(v.shape, v.dtype) for v in cond.outputs] != [Aval((), np.dtype(bool))]:
        raise DTypeError("cond must return one boolean scalar")
    if [Aval(v.shape, v.dtype) for v in body.outputs] != carry:
        raise ShapeError("the body changes the carries' types")
    return carry


NO_GRADIENT = (
    "while_loop: reverse-mode differentiation (grad, vjp) through a while_loop is not supported: "
    "its number of steps is known only at run time, so there is nothing to store the steps' values "
    "in; use rm.scan, or rm.fori_loop with Python int bounds, which run a static number of steps"
)


def _while_vjp(gs, *inputs, out, cond, body, num_carry):
    # Not an error yet: a gradient often reaches a loop whose inputs no differentiated argument
    # reaches (a loop over data, under stop_gradient), and then its cotangents are never used.
    # The ones the gradient does use die when they run, on the while loop's own line.
    floats = [i for i, x in enumerate(inputs) if dtypes.is_float(x.dtype)]
    # It reads the cotangents too: what reads only primal values, a checkpoint's policy may
    # compute in the forward pass (checkpoint/derived.py), and this one must not run there.
    given = [g for g in gs if g is not None]
    cts = bind(_refused, *[inputs[i] for i in floats], *given, source=user_source(), outputs=len(floats))
    result: list[Tensor | None] = [None] * len(inputs)
    for i, ct in zip(floats, cts):
        result[i] = ct
    return tuple(result)


def refuse(*_, source: str | None, **__):
    """What a backend runs for `while_gradient`: the error, pointing at the while loop."""
    raise ArgumentTypeError(NO_GRADIENT, source)


# The cotangents of a while loop's inputs: computing one is the error above.
_refused = declare("while_gradient", lambda *avals, source, outputs: list(avals[:outputs]), NOT_DIFFERENTIABLE,
                   multiple_results=True)


def _while_jvp(ts, *inputs, cond: Graph, body: Graph, num_carry: int):
    # Forward mode needs no stored steps: a while loop over (carry, tangent carry), the body's
    # JVP as its body (every float carry has a tangent: a zero one may become nonzero).

    nc, n_cond = num_carry, len(cond.inputs) - num_carry
    cond_caps, body_caps = inputs[nc : nc + n_cond], inputs[nc + n_cond :]
    moving = any(t is not None for t in ts)  # else this is vmap re-emitting the block (vectorize.py)
    fc = [i for i in range(nc) if moving and dtypes.is_float(inputs[i].dtype)]

    def body_fun(c):
        tans = [None] * len(body.inputs)
        for i, t in zip(fc, c[1]):
            tans[i] = t
        tans[nc:] = ts[nc + n_cond :]
        outs, touts = jvp_graph(body, [*c[0], *body_caps], tans)
        return list(outs), [instantiate(touts, body.outputs)[i] for i in fc]

    init = (list(inputs[:nc]), instantiate([ts[i] for i in fc], [body.inputs[i] for i in fc]))
    c, tc = while_loop(lambda c: jvp_graph(cond, [*c[0], *cond_caps], [None] * len(cond.inputs))[0][0], body_fun,
                       init)
    touts: list = [None] * nc
    for i, t in zip(fc, tc):
        touts[i] = t
    return c, touts


while_op = declare("while", _while_rule, _while_vjp, multiple_results=True, jvp=BlockJVP(_while_jvp),
                   batch=block_rule)
while_op.prune = prune_while


def while_loop(cond_fun: Callable, body_fun: Callable, init):
    """Run `carry = body_fun(carry)` while `cond_fun(carry)` (a boolean scalar) is true, from
    `init` (a pytree of tensors); returns the last carry, as `jax.lax.while_loop`. Forward only:
    for gradients use `rm.scan` or `rm.fori_loop` with static bounds.

    >>> import remat as rm
    >>> rm.while_loop(lambda c: c < 10.0, lambda c: c * 2.0, rm.asarray(1.0))
    Tensor(16., dtype=float32)
    """
    check_callable(cond_fun, "while_loop", "cond_fun(carry) -> bool scalar")
    check_callable(body_fun, "while_loop", "body_fun(carry) -> carry")
    leaves, carry_tree = tensor_leaves(init, "while_loop", "init")
    state = Carry(leaves, weak_leaves(init))

    def cond_flat(*flat):
        return _predicate(cond_fun(tree.unflatten(carry_tree, flat)), cond_fun)

    def body_flat(*flat):
        new = body_fun(tree.unflatten(carry_tree, flat))
        return state.returned("while_loop", body_fun, "carry", new, carry_tree, "init")

    names = [f"while_loop({callable_name(f)})" for f in (body_fun, cond_fun)]
    body, cond = state.trace([(body_flat, list), (cond_flat, list)], names)
    if cond.out_vaxes[0]:
        return _batched(cond_fun, body_fun, tree.unflatten(carry_tree, state.leaves), cond.out_vaxes[0])
    trace = current_trace()
    captured = [Tensor._traced(trace, v) for v in cond.captured + body.captured]
    carry = state.leaves
    outs = bind(while_op, *[c._raw() for c in carry], *captured, cond=cond.graph, body=body.graph,
                num_carry=len(carry))
    return tree.unflatten(carry_tree, [o._relabel(c._vaxes) for o, c in zip(outs, carry)])


def _batched(cond_fun: Callable, body_fun: Callable, init, vaxes: tuple):
    """Under vmap each entry may stop at another step: loop while any entry's condition holds,
    and leave the entries whose condition fails as they are (as JAX batches a while loop)."""
    init = tree.map(lambda t: align_to(t, merge([t._vaxes, vaxes])), init)

    def any_holds(c):
        return sum_(astype(asarray(cond_fun(c))._raw(), "int32")) > 0

    def masked(c):
        pred = cond_fun(c)
        return tree.map(lambda new, old: where(pred, new, old), body_fun(c), c)

    return while_loop(any_holds, masked, init)


def _predicate(pred, fn) -> Tensor:
    name = callable_name(fn)
    if not is_tensor_like(pred):
        raise ArgumentTypeError(f"while_loop: {name} returned {short_repr(pred)}; it must return a boolean scalar")
    p = asarray(pred)
    if p.dtype != np.bool_:
        raise DTypeError(f"while_loop: {name} returned a tensor of dtype {p.dtype} and shape {p.shape}; it must "
                         "return a boolean scalar (a comparison such as i < n)")
    if p.shape != ():
        raise ShapeError(f"while_loop: {name} returned a boolean tensor of shape {p.shape}; it must return a "
                         "scalar (reduce it, e.g. with rm.max(...) or rm.min(...))")
    return p


def fori_loop(lower, upper, body_fun: Callable, init):
    """`val = body_fun(i, val)` for `i` from `lower` to `upper - 1`, starting from `init`, as
    `jax.lax.fori_loop`. With Python int bounds the loop is a `scan` (differentiable); with
    traced bounds it is a `while_loop` (forward only).

    >>> import remat as rm
    >>> rm.fori_loop(0, 4, lambda i, v: v + i.astype("float32"), rm.asarray(0.5))
    Tensor(6.5, dtype=float32)
    """
    check_callable(body_fun, "fori_loop", "body_fun(i, val) -> val")
    leaves, val_tree = tensor_leaves(init, "fori_loop", "init")
    lo, hi = _bound(lower, "lower"), _bound(upper, "upper")

    def step(i, val):
        new = body_fun(i, val)
        # the loop below checks the dtypes of weak leaves (and recasts them) again
        return tree.unflatten(val_tree, check_like("fori_loop", body_fun, "val", new, leaves, val_tree, "init",
                                                   weak_leaves(init)))

    if isinstance(lo, int) and isinstance(hi, int):
        first = asarray(np.int32(lo))
        (_, val), _ = scan(lambda c, _: ((c[0] + 1, step(*c)), None), (first, init), length=max(hi - lo, 0))
        return val
    lo_t, hi_t = _same_int_type(lo, hi)
    _, val = while_loop(lambda c: c[0] < hi_t, lambda c: (c[0] + 1, step(*c)), (lo_t, init))
    return val


def _bound(b, name: str) -> int | Tensor:
    """A Python int (a concrete integer scalar counts as one), or a traced integer scalar."""
    if is_int(b):
        return int(b)
    if not isinstance(b, Tensor) and not isinstance(b, np.ndarray):
        raise ArgumentTypeError(f"fori_loop: {name} must be an int or an integer scalar tensor, got {short_repr(b)}")
    t = asarray(b)
    if not dtypes.is_int(t.dtype) or t.shape != ():
        raise ArgumentTypeError(f"fori_loop: {name} must be an integer scalar, got a {t.dtype} tensor of shape "
                                f"{t.shape}")
    return int(t.item()) if t.is_concrete and not t._vaxes else t


def _same_int_type(lo, hi) -> tuple[Tensor, Tensor]:
    dtype = next(asarray(b).dtype for b in (lo, hi) if isinstance(b, Tensor))
    return asarray(lo, dtype), asarray(hi, dtype)
