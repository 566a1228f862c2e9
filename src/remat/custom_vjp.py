"""`custom_vjp`: a function whose gradient is given by the user, JAX-style.

`f = custom_vjp(fn); f.defvjp(fwd, bwd)`. Inside a trace, `fwd(*args) -> (out, residuals)` is
traced into a body Graph bound as ONE node, `op == "custom_vjp"`, whose outputs are the leaves of
`out` and then those of `residuals` (`params["num_residuals"]` of them). Its VJP rule calls
`bwd(residuals, g)` on the node's residual outputs, emitting remat ops into the current trace, so
the gradient is differentiable again. Only what `bwd` reads stays alive for the backward pass:
that is how a composite (softmax, gelu) keeps one tensor instead of all its intermediates.

Cotangents reaching the residual outputs (only in higher order, where the first gradient read
them) go back through a replay of the body: the residuals are functions of the arguments too.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from remat import argcheck, dtypes, tree
from remat.errors import ArgumentTypeError, ShapeError, TracerError, callable_name
from remat.graph import Graph
from remat.ops.core import Aval, declare
from remat.ops.reduce import sum as _sum
from remat.trace import Tensor, asarray, bind, current_trace, is_array, trace_function


@dataclass(frozen=True)
class Rule:
    """What the VJP rule needs to call `bwd`: plain, hashable data (so identical layers share
    compiled stages). Prints as the name of `bwd`."""

    fn_name: str
    bwd: Callable
    arg_trees: tuple  # one TreeDef per positional argument
    positions: tuple  # which leaves of the arguments are the node's inputs (the others are static)
    in_vaxes: tuple  # the inputs' vectorized axes
    out_tree: tree.TreeDef
    res_tree: tree.TreeDef
    out_vaxes: tuple  # the body outputs' vectorized axes (outputs, then residuals)

    def __str__(self) -> str:
        return callable_name(self.bwd)


def _custom_vjp_rule(*avals, body: Graph, num_residuals: int, bwd: Rule) -> list[Aval]:
    if [(a.shape, a.dtype) for a in avals] != [(v.shape, v.dtype) for v in body.inputs]:
        raise TypeError("custom_vjp inputs do not match its body's inputs")
    return [Aval(v.shape, v.dtype) for v in body.outputs]


def _custom_vjp_vjp(gs, *inputs, out, body: Graph, num_residuals: int, bwd: Rule):
    # Outputs y = fwd(x)[0] get their cotangents from the user's rule: x' = bwd(r, y');
    # residuals r = fwd(x)[1] (read by a first gradient) back-propagate through a replay of fwd.
    n_out = len(body.outputs) - num_residuals
    cts: list[Tensor | None] = [None] * len(inputs)
    if any(g is not None for g in gs[:n_out]):
        cts = _call_bwd(bwd, inputs, out, gs, n_out)
    res_gs = list(gs[n_out:])
    if any(g is not None for g in res_gs):
        from remat.autodiff import backward_pass, replay

        env = replay(body, list(inputs))
        more = backward_pass(body, env, [None] * n_out + res_gs)
        cts = [b if a is None else a if b is None else a + b for a, b in zip(cts, more)]
    return tuple(cts)


def _call_bwd(rule: Rule, inputs, out, gs, n_out: int) -> list[Tensor | None]:
    """`rule.bwd` on vectorized residuals and cotangents; its answer as raw input cotangents."""
    vax = rule.out_vaxes
    res = [r._relabel(v) for r, v in zip(out[n_out:], vax[n_out:])]
    gs = [Tensor._concrete(np.zeros(o._full_shape, o.dtype)) if g is None else g for g, o in zip(gs[:n_out], out)]
    g = tree.unflatten(rule.out_tree, [g._relabel(v) for g, v in zip(gs, vax)])
    answer = rule.bwd(tree.unflatten(rule.res_tree, res), g)
    where = f"custom_vjp: the bwd rule {callable_name(rule.bwd)} of {rule.fn_name}"
    if not isinstance(answer, (tuple, list)) or len(answer) != len(rule.arg_trees):
        got = f"{len(answer)} cotangents" if isinstance(answer, (tuple, list)) else f"a {type(answer).__name__}"
        raise ArgumentTypeError(f"{where} returned {got}; it must return a tuple of one cotangent per positional "
                        f"argument ({len(rule.arg_trees)}), None for a zero one")
    leaves: list = []
    for i, (ct, arg_tree) in enumerate(zip(answer, rule.arg_trees)):
        if ct is None:
            leaves += [None] * arg_tree.num_leaves
            continue
        ct_leaves, ct_tree = tree.flatten(ct)
        if ct_tree != arg_tree:
            raise ArgumentTypeError(f"{where} returned a cotangent of structure {ct_tree!r} for argument {i}, "
                            f"which has structure {arg_tree!r}")
        leaves += ct_leaves
    picked = [leaves[p] for p in rule.positions]
    return [None if c is None else _raw_cotangent(c, x, v, where)
            for c, x, v in zip(picked, inputs, rule.in_vaxes)]


def _raw_cotangent(ct, x: Tensor, vaxes: tuple, where: str) -> Tensor | None:
    """`ct` as a cotangent of the raw input `x` (vectorized over `vaxes`): summed over the
    vectorized axes `x` lacks, laid out over the ones it has."""
    from remat.vectorize import align_to, devectorize

    ct = asarray(ct)
    inner = x._full_shape[len(vaxes) :]
    if ct.shape != inner:
        raise ShapeError(f"{where} returned a cotangent of shape {ct.shape} for an input of shape {inner}")
    if not dtypes.is_float(x.dtype):
        return None
    own = {n for n, _ in vaxes}
    for name, _ in ct._vaxes:
        if name not in own:  # x is broadcast over this axis: its cotangent sums over it
            ct = _sum(devectorize(ct, name), axis=0)
    return align_to(ct, vaxes)._raw()


_custom_vjp = declare("custom_vjp", _custom_vjp_rule, _custom_vjp_vjp, multiple_results=True)


class custom_vjp:
    """A function with a user-given VJP, as `jax.custom_vjp`: `f = custom_vjp(fn)` (or
    `@custom_vjp`), then `f.defvjp(fwd, bwd)` with `fwd(*args) -> (out, residuals)` and
    `bwd(residuals, g) -> (one cotangent per positional argument, None for zero)`. `out`,
    `residuals` and the cotangents are pytrees of tensors. Outside any trace `f` just runs `fn`.
    `fwd` may not read traced tensors from enclosing scope: pass them as arguments.

    >>> import remat as rm
    >>> @rm.custom_vjp
    ... def clip_gradient(x):
    ...     return x
    >>> clip_gradient.defvjp(lambda x: (x, None), lambda _, g: (rm.clip(g, -1.0, 1.0),))
    >>> rm.grad(lambda x: rm.sum(clip_gradient(x) * 5.0))(rm.asarray([1.0]))
    Tensor([1.], dtype=float32)
    """

    def __init__(self, fn: Callable):
        argcheck.check_callable(fn, "custom_vjp")
        self.fn = fn
        self.fwd: Callable | None = None
        self.bwd: Callable | None = None
        functools.update_wrapper(self, fn, updated=())  # not fn's __dict__: that would overwrite fwd/bwd

    def defvjp(self, fwd: Callable, bwd: Callable) -> None:
        if not callable(fwd) or not callable(bwd):
            raise ArgumentTypeError(f"custom_vjp: defvjp of {callable_name(self.fn)} takes two callables, fwd and bwd")
        self.fwd, self.bwd = fwd, bwd

    def __call__(self, *args):
        if self.fwd is None or self.bwd is None:
            raise ArgumentTypeError(f"custom_vjp: {callable_name(self.fn)} has no VJP; call "
                                    f"{callable_name(self.fn)}.defvjp(fwd, bwd) before calling it")
        if current_trace() is None:
            return self.fn(*args)
        return self._bind(args)

    def _bind(self, args: tuple):
        arrays = tree.partition(args, is_array)  # other leaves are fixed values: no cotangent
        inputs = [asarray(x) for x in arrays.picked]
        traced = trace_function(self._forward(arrays), inputs, name=f"custom_vjp({callable_name(self.fn)})")
        if traced.captured:
            v = traced.captured[0]
            raise TracerError(
                f"custom_vjp: fwd {callable_name(self.fwd)} of {callable_name(self.fn)} reads a traced tensor of shape "
                f"{v.shape} from an enclosing scope; its gradient would be lost: pass it to "
                f"{callable_name(self.fn)} as an argument instead"
            )
        out_tree, res_tree = traced.out_tree.children
        rule = Rule(callable_name(self.fn), self.bwd, tuple(tree.flatten(a)[1] for a in args), arrays.positions,
                    tuple(x._vaxes for x in inputs), out_tree, res_tree, tuple(traced.out_vaxes))
        outs = bind(_custom_vjp, *[x._raw() for x in inputs], body=traced.graph,
                    num_residuals=res_tree.num_leaves, bwd=rule)
        n_out = out_tree.num_leaves
        return tree.unflatten(out_tree, [o._relabel(v) for o, v in zip(outs[:n_out], traced.out_vaxes)])

    def _forward(self, arrays: tree.Partition) -> Callable:
        """`fwd` as a function of the input leaves, returning the pair `(out, residuals)`."""

        def forward(*xs):
            pair = self.fwd(*arrays.rebuild(xs))
            if not isinstance(pair, tuple) or len(pair) != 2:
                raise ArgumentTypeError(f"custom_vjp: fwd {callable_name(self.fwd)} of {callable_name(self.fn)} "
                                f"must return a pair (output, residuals), got {type(pair).__name__}")
            return pair

        return forward
