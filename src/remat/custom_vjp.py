"""`custom_vjp`: a function whose gradient is given by the user, JAX-style.

`f = custom_vjp(fn); f.defvjp(fwd, bwd)`. Inside a trace, `fwd(*args) -> (out, residuals)` is
traced into a body Graph bound as ONE node, `op == "custom_vjp"`, whose outputs are the leaves of
`out` and then those of `residuals` (`params["num_residuals"]` of them). Its VJP rule calls
`bwd(residuals, g)` on the node's residual outputs, emitting remat ops into the current trace, so
the gradient is differentiable again. Only what `bwd` reads stays alive for the backward pass:
that is how a composite (softmax, gelu) keeps one tensor instead of all its intermediates.

Higher orders follow JAX: the custom rule is the derivative of the function's own output only.
The forward half of a VJP (`autodiff.replay`) emits the node as fwd's code, so a derivative of
a gradient goes through fwd's ops, residuals included. Where a node survives into a gradient
program (a checkpoint that saved its outputs), cotangents of its residuals go back through a
replay of the body likewise.

Inside its own fwd, the function is its primal `fn` (fwd commonly computes `f(x)`); arguments at
`nondiff_argnums` reach bwd first and get no cotangent. A policy of an enclosing checkpoint may
save the outputs fwd named with `checkpoint_name` (`named_outputs`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass

import numpy as np

from remat import argcheck, dtypes, tree
from remat.autodiff import backward_pass, emit, replay
from remat.backends import lowerings
from remat.backends import numpy as evaluator
from remat.core import Aval, BlockJVP, declare
from remat.errors import ArgumentTypeError, DTypeError, ShapeError, TracerError, callable_name
from remat.forward import transposed_tangents
from remat.graph import Graph, Node, Var
from remat.ops.reduce import sum as _sum
from remat.tensor import Tensor, is_array
from remat.trace import asarray, bind, current_trace, trace_function
from remat.vaxes import cotangent_layout
from remat.vectorize import devectorize


@dataclass(frozen=True)
class Rule:
    """What the VJP rule needs to call `bwd`: plain, hashable data (so identical layers give
    identical graphs). Prints as the name of `bwd`."""

    fn_name: str
    bwd: Callable
    arg_trees: tuple  # one TreeDef per positional argument
    positions: tuple  # which leaves of the arguments are the node's inputs (the others are static)
    in_vaxes: tuple  # the inputs' vectorized axes
    out_tree: tree.TreeDef
    res_tree: tree.TreeDef
    out_vaxes: tuple  # the body outputs' vectorized axes (outputs, then residuals)
    nondiff: tuple = ()  # the positional arguments bwd takes first and gives no cotangent for
    statics: tuple = ()  # (leaf index, value) of the leaves of those arguments that are not inputs
    arg_names: tuple = ()  # each positional argument as the user named it: `x`, or `args[2]`
    leaf_names: tuple = ()  # every argument leaf likewise: `x`, `p['w']`

    def __str__(self) -> str:
        return callable_name(self.bwd)

    @property
    def owners(self) -> list[int]:
        """For each argument leaf, the positional argument it belongs to."""
        return [i for i, td in enumerate(self.arg_trees) for _ in range(td.num_leaves)]


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
        env = replay(body, list(inputs))
        more = backward_pass(body, env, [None] * n_out + res_gs)
        cts = [b if a is None else a if b is None else a + b for a, b in zip(cts, more)]
    owners = bwd.owners
    return tuple(None if owners[p] in bwd.nondiff else c for c, p in zip(cts, bwd.positions))


def _call_bwd(rule: Rule, inputs, out, gs, n_out: int) -> list[Tensor | None]:
    """`rule.bwd` on vectorized residuals and cotangents; its answer as raw input cotangents."""
    vax = rule.out_vaxes
    res = [r._relabel(v) for r, v in zip(out[n_out:], vax[n_out:])]
    gs = [Tensor._concrete(np.zeros(o._full_shape, o.dtype)) if g is None else g for g, o in zip(gs[:n_out], out)]
    g = tree.unflatten(rule.out_tree, [g._relabel(g._vaxes + v) for g, v in zip(gs, vax)])  # vmap of vjp: g's own
    where = f"custom_vjp: the bwd rule {callable_name(rule.bwd)} of {rule.fn_name}"
    answer = rule.bwd(*_nondiff_args(rule, inputs), tree.unflatten(rule.res_tree, res), g)
    leaves = _answer_leaves(rule, answer, where)
    names = {n for vaxes in (*rule.in_vaxes, *rule.out_vaxes) for n, _ in vaxes}
    return [None if leaves[p] is None else _raw_cotangent(leaves[p], x, v, where, names, rule.leaf_names[p])
            for p, x, v in zip(rule.positions, inputs, rule.in_vaxes)]


def _nondiff_args(rule: Rule, inputs) -> list:
    """The arguments at `nondiff_argnums` as bwd takes them: tensors (vectorized as the call
    saw them) from the node's inputs, other leaves as the call gave them."""
    leaves = dict(rule.statics)
    leaves.update((p, x._relabel(v)) for p, x, v in zip(rule.positions, inputs, rule.in_vaxes))
    owners = rule.owners
    return [tree.unflatten(rule.arg_trees[i], [leaves[k] for k, a in enumerate(owners) if a == i])
            for i in rule.nondiff]


def _answer_leaves(rule: Rule, answer, where: str) -> list:
    """bwd's answer, one cotangent per differentiable argument, as one entry per argument leaf
    (None where no cotangent flows); a wrong count or structure is the user's error, named."""
    diff = [i for i in range(len(rule.arg_trees)) if i not in rule.nondiff]
    if not isinstance(answer, (tuple, list)) or len(answer) != len(diff):
        got = argcheck.describe(answer)
        if isinstance(answer, (tuple, list)):
            got += f" cotangent{'s' if len(answer) != 1 else ''}"
        raise ArgumentTypeError(f"{where} returned {got}, but {rule.fn_name} has {_arguments(rule, diff)}; "
                                "return a tuple of one cotangent per argument, in order, None for a zero one")
    by_arg = dict(zip(diff, answer))
    leaves: list = []
    for i, arg_tree in enumerate(rule.arg_trees):
        ct = by_arg.get(i)
        if ct is None:
            leaves += [None] * arg_tree.num_leaves
            continue
        ct_leaves, ct_tree = tree.flatten(ct)
        if ct_tree != arg_tree:
            raise ArgumentTypeError(f"{where} returned a cotangent of structure {ct_tree!r} for argument "
                                    f"{_arg_name(rule, i)}, which has structure {arg_tree!r}; return one of "
                                    "the argument's structure, or None for a zero cotangent")
        leaves += ct_leaves
    return leaves


def _arguments(rule: Rule, diff: list[int]) -> str:
    """`2 differentiable positional arguments (x, y; k is in nondiff_argnums)`."""
    names = ", ".join(_arg_name(rule, i) for i in diff)
    text = f"{len(diff)} differentiable positional argument{'s' if len(diff) != 1 else ''} ({names}"
    if rule.nondiff:
        fixed = ", ".join(_arg_name(rule, i) for i in rule.nondiff)
        text += f"{'; ' if diff else ''}{fixed} {'is' if len(rule.nondiff) == 1 else 'are'} in nondiff_argnums"
    return text + ")"


def _arg_name(rule: Rule, i: int) -> str:
    return rule.arg_names[i] if i < len(rule.arg_names) else f"args[{i}]"


def _raw_cotangent(ct, x: Tensor, vaxes: tuple, where: str, names: set, arg: str) -> Tensor | None:
    """`ct` as a cotangent of the raw input `x` (vectorized over `vaxes`): summed over the
    vectorized axes of the call (`names`) `x` lacks, laid out over the ones it has; axes the
    call never had (a vmap over cotangents) stay vectorized."""
    python_number = isinstance(ct, (int, float)) and not isinstance(ct, bool)
    ct = asarray(ct, x.dtype if python_number and dtypes.is_float(x.dtype) else None)
    inner = x._full_shape[len(vaxes) :]
    if ct.shape != inner:
        raise ShapeError(f"{where} returned a cotangent of shape {ct.shape} for argument {arg} of shape {inner}; "
                         "return one of the argument's shape")
    if not dtypes.is_float(x.dtype):
        return None
    if ct.dtype != x.dtype and not dtypes.is_float(ct.dtype):
        raise DTypeError(f"{where} returned a cotangent of dtype {ct.dtype} for argument {arg} of dtype {x.dtype}; "
                         f"return one of the argument's dtype (.astype({str(x.dtype)!r}))")
    ct = ct if ct.dtype == x.dtype else ct.astype(x.dtype)  # a float of another width is cast, as JAX does
    own = {n for n, _ in vaxes}
    for name, _ in ct._vaxes:
        if name not in own and name in names:  # x is broadcast over this axis: its cotangent sums over it
            ct = _sum(devectorize(ct, name), axis=0)
    return cotangent_layout(ct, vaxes)


def _custom_vjp_jvp(ts, *inputs, body: Graph, num_residuals: int, bwd: Rule):
    # Forward mode follows the custom rule: bwd is linear in its cotangent, x' = Jᵀ g, so its
    # transpose gives the outputs' tangent J t. The residuals' tangents go through fwd's code.

    outs = bind(_custom_vjp, *inputs, body=body, num_residuals=num_residuals, bwd=bwd)
    n_out = len(body.outputs) - num_residuals
    return outs, transposed_tangents(ts, inputs, outs, body, n_out, lambda gs: _call_bwd(bwd, inputs, outs, gs, n_out))


def named_outputs(node: Node) -> dict[Var, Node]:
    """The outputs of a custom_vjp node that its fwd named with `checkpoint_name`, each with the
    node that named it (a checkpoint policy may save them by name); empty for any other node."""
    if node.op != "custom_vjp":
        return {}
    body = node.params["body"]
    namers = {n.outputs[0]: n for n in body.nodes if n.op == "checkpoint_name"}
    return {v: namers[b] for v, b in zip(node.outputs, body.outputs) if b in namers}


_custom_vjp = declare("custom_vjp", _custom_vjp_rule, _custom_vjp_vjp, multiple_results=True,
                      jvp=BlockJVP(_custom_vjp_jvp))
_custom_vjp.linearize = lambda node, ins: emit(node.params["body"], ins)  # fwd's code, differentiable again
_custom_vjp.traits = frozenset({"inline"})
# Run, the block is its `fwd`: the outputs, then the residuals.
evaluator.register("custom_vjp", evaluator.run_block, runs_graphs=True)
lowerings.register("custom_vjp", "remat.backends.xla:run_block")


class custom_vjp:
    """A function with a user-given VJP, as `jax.custom_vjp`: `f = custom_vjp(fn)` (or
    `@custom_vjp`), then `f.defvjp(fwd, bwd)` with `fwd(*args) -> (out, residuals)` and
    `bwd(residuals, g) -> (one cotangent per positional argument, None for zero)`. `out`,
    `residuals` and the cotangents are pytrees of tensors. Outside any trace `f` just runs `fn`,
    and so does a call of `f` inside its own `fwd`. `fwd` may not read traced tensors from
    enclosing scope: pass them as arguments.

    The arguments at `nondiff_argnums` (Python values or tensors) get no gradient: `bwd` takes
    them first, `bwd(*nondiff_args, residuals, g)`, and returns cotangents for the others only.
    Higher derivatives follow JAX: the custom rule is the derivative of `f`'s output; those of
    the residuals, and the second derivative of the output, go through `fwd`'s code.

    >>> import remat as rm
    >>> @rm.custom_vjp
    ... def clip_gradient(x):
    ...     return x
    >>> clip_gradient.defvjp(lambda x: (clip_gradient(x), None), lambda _, g: (rm.clip(g, -1.0, 1.0),))
    >>> rm.grad(lambda x: rm.sum(clip_gradient(x) * 5.0))(rm.asarray([1.0]))
    Tensor([1.], dtype=float32)
    >>> scale = rm.custom_vjp(lambda k, x: k * x, nondiff_argnums=(0,))
    >>> scale.defvjp(lambda k, x: (k * x, None), lambda k, _, g: (k * g,))
    >>> rm.grad(lambda x: rm.sum(scale(3.0, x)))(rm.asarray([1.0]))
    Tensor([3.], dtype=float32)
    """

    def __init__(self, fn: Callable, nondiff_argnums: int | tuple[int, ...] = ()):
        argcheck.check_callable(fn, "custom_vjp")
        self.nondiff_argnums = argcheck.argnums(nondiff_argnums, "custom_vjp", fn, "nondiff_argnums")
        self._nondiff_as_given = nondiff_argnums  # for messages: the value as the user wrote it
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
        if current_trace() is None or any(f is self for f in _IN_FWD.get()):
            return self.fn(*args)  # inside its own fwd, as in JAX: `fwd` may compute `f(x)`
        return self._bind(args)

    def _bind(self, args: tuple):
        nondiff = argcheck.resolve(self.nondiff_argnums, len(args), "custom_vjp", "nondiff_argnums",
                                   self._nondiff_as_given, self.fn)
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
        arg_trees = tuple(tree.flatten(a)[1] for a in args)
        owners = [i for i, td in enumerate(arg_trees) for _ in range(td.num_leaves)]
        statics = tuple((k, x) for k, x in enumerate(arrays.flat) if owners[k] in nondiff and k not in arrays.positions)
        names = _arg_names(self.fn, len(args))
        leaf_names = tuple(p for a, n in zip(args, names) for p in argcheck.leaf_paths(a, n))
        rule = Rule(callable_name(self.fn), self.bwd, arg_trees, arrays.positions, tuple(x._vaxes for x in inputs),
                    out_tree, res_tree, tuple(traced.out_vaxes), tuple(sorted(nondiff)), statics, names, leaf_names)
        outs = bind(_custom_vjp, *[x._raw() for x in inputs], body=traced.graph,
                    num_residuals=res_tree.num_leaves, bwd=rule)
        n_out = out_tree.num_leaves
        return tree.unflatten(out_tree, [o._relabel(v) for o, v in zip(outs[:n_out], traced.out_vaxes)])

    def _forward(self, arrays: tree.Partition) -> Callable:
        """`fwd` as a function of the input leaves, returning the pair `(out, residuals)`."""

        def forward(*xs):
            token = _IN_FWD.set((*_IN_FWD.get(), self))
            try:
                pair = self.fwd(*arrays.rebuild(xs))
            finally:
                _IN_FWD.reset(token)
            if not isinstance(pair, tuple) or len(pair) != 2:
                raise ArgumentTypeError(f"custom_vjp: fwd {callable_name(self.fwd)} of {callable_name(self.fn)} "
                                f"must return a pair (output, residuals), got {type(pair).__name__}")
            return pair

        return forward


# The custom_vjp functions whose fwd is being traced, in this thread or task: called there, they
# are their primal function (JAX's `fwd` commonly computes `f(x)`; binding it would recurse).
_IN_FWD: ContextVar[tuple[custom_vjp, ...]] = ContextVar("remat_custom_vjp_fwd", default=())


def _arg_names(fn: Callable, n: int) -> tuple[str, ...]:
    params = argcheck.positional_params(fn) or []
    return tuple(params[i] if i < len(params) else f"args[{i}]" for i in range(n))
