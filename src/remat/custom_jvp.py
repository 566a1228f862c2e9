"""`custom_jvp`: a function whose derivative is given by the user as a JVP rule, JAX-style.

`f = custom_jvp(fn); f.defjvp(rule)` with `rule(primals, tangents) -> (out, tangent_out)`.
Inside a trace, `fn` is traced into a body Graph bound as ONE node, `op == "custom_jvp"`:

- run, it is the body (the rule is not called);
- in forward mode, its JVP is the user's rule, called on the node's inputs and tangents;
- in reverse mode, its VJP is the transpose of the rule: the rule's tangent output is linear in
  the tangents, so the VJP of `t -> rule(x, t)[1]` at the cotangent g is Jᵀ g, exactly as JAX
  transposes a linearized custom JVP. The transposed ops are ordinary ops on x, so a second
  derivative differentiates the rule's code, as in JAX.

Under vmap the node takes its operands' vectorized axes as plain axes (as custom_vjp does) and
the rule sees the vectorized tensors.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from remat import argcheck, dtypes, tree
from remat.autodiff import vjp
from remat.backends import lowerings
from remat.backends import numpy as evaluator
from remat.core import Aval, BlockJVP, declare
from remat.errors import ArgumentTypeError, ShapeError, TracerError, callable_name
from remat.graph import Graph
from remat.tensor import Tensor, is_array
from remat.trace import asarray, bind, current_trace, trace_function
from remat.vaxes import align_to, cotangent_layout, from_raw_layout


class SymbolicZero:
    """A zero tangent, as JAX's `jax.custom_derivatives.SymbolicZero`: a rule set with
    `defjvp(rule, symbolic_zeros=True)` gets one in place of a tensor of zeros (with the primal's
    `shape` and `dtype`, so it can tell which arguments move), and may return one for an output
    whose tangent is zero. `instantiate()` makes the zeros.

    >>> import remat as rm
    >>> f = rm.custom_jvp(lambda x, y: x * y)
    >>> def rule(primals, tangents):
    ...     x, y = primals
    ...     tx, ty = tangents
    ...     moving = [t * o for t, o in ((tx, y), (ty, x)) if not isinstance(t, rm.SymbolicZero)]
    ...     return x * y, sum(moving) if moving else rm.SymbolicZero((), x.dtype)
    >>> _ = f.defjvp(rule, symbolic_zeros=True)
    >>> rm.jvp(lambda x: f(x, rm.asarray(3.0)), (rm.asarray(2.0),), (rm.asarray(1.0),))[1]
    Tensor(3., dtype=float32)
    """

    def __init__(self, shape: tuple[int, ...], dtype):
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def instantiate(self) -> Tensor:
        return Tensor._concrete(np.zeros(self.shape, self.dtype))

    def __repr__(self) -> str:
        return f"SymbolicZero({self.shape}, {self.dtype})"


@dataclass(frozen=True, eq=False)
class JVPRule:
    """What the node's rules need to call the user's JVP rule; prints as its name."""

    fn_name: str
    rule: Callable
    nondiff: tuple  # (position, value) of the nondiff_argnums arguments
    arrays: tree.Partition  # the other arguments: which leaves are the node's inputs
    n_args: int
    in_vaxes: tuple
    out_tree: tree.TreeDef
    out_vaxes: tuple
    symbolic_zeros: bool = False

    def __str__(self) -> str:
        return callable_name(self.rule)

    def call(self, inputs, tangents) -> tuple[list[Tensor], list[Tensor | None]]:
        """The rule on the node's raw inputs and tangents (None: zero); raw outputs, tangents."""
        prim = [x._relabel(v) for x, v in zip(inputs, self.in_vaxes)]
        zero = (lambda p: SymbolicZero(p.shape, p.dtype)) if self.symbolic_zeros else _zeros_like
        tans = [zero(p) if t is None else from_raw_layout(t, v) for p, t, v in zip(prim, tangents, self.in_vaxes)]
        out, tout = self.rule(*[v for _, v in self.nondiff], self._args(prim), self._args(tans))
        where = f"custom_jvp: the rule {callable_name(self.rule)} of {self.fn_name}"
        outs = _like(where, "primal output", out, self.out_tree)
        tout = tree.map(lambda t: t.instantiate() if isinstance(t, SymbolicZero) else t, tout)
        touts = _like(where, "tangent output", tout, self.out_tree)
        for o, t in zip(outs, touts):
            if t.shape != o.shape:
                raise ShapeError(f"{where} returned a tangent of shape {t.shape} for an output of shape {o.shape}")

        return ([align_to(o, v)._raw() for o, v in zip(outs, self.out_vaxes)],
                [cotangent_layout(t.astype(o.dtype), v) if dtypes.is_float(o.dtype) else None
                 for t, o, v in zip(touts, outs, self.out_vaxes)])

    def _args(self, leaves: list[Tensor]) -> tuple:
        """The differentiated arguments (nondiff ones left out), as the rule takes them."""
        return tuple(self.arrays.rebuild(leaves))


def _zeros_like(p: Tensor) -> Tensor:
    return Tensor._concrete(np.zeros(p._full_shape, p.dtype), p._vaxes)


def _like(where: str, what: str, value, out_tree: tree.TreeDef) -> list[Tensor]:
    leaves, treedef = tree.flatten(value)
    if treedef != out_tree:
        raise ArgumentTypeError(f"{where} returned a {what} of structure {treedef!r}, but the function returns "
                                f"{out_tree!r}")
    return [asarray(x) for x in leaves]


def _custom_jvp_rule(*avals, body: Graph, jvp: JVPRule) -> list[Aval]:
    if [(a.shape, a.dtype) for a in avals] != [(v.shape, v.dtype) for v in body.inputs]:
        raise TypeError("custom_jvp inputs do not match its body's inputs")
    return [Aval(v.shape, v.dtype) for v in body.outputs]


def _custom_jvp_jvp(ts, *inputs, body: Graph, jvp: JVPRule):
    return jvp.call(list(inputs), list(ts))


def _custom_jvp_vjp(gs, *inputs, out, body: Graph, jvp: JVPRule):
    # x' = Jᵀ g: the VJP of the rule's tangent, t -> rule(x, t)[1], which is linear in t.

    fi = [i for i, x in enumerate(inputs) if dtypes.is_float(x.dtype)]
    fo = [k for k, g in enumerate(gs) if g is not None]

    def tangent(*t):
        full = [None] * len(inputs)
        for i, x in zip(fi, t):
            full[i] = x
        touts = jvp.call(list(inputs), full)[1]
        return [_zeros_raw(out[k]) if touts[k] is None else touts[k] for k in fo]

    _, back = vjp(tangent, *[_zeros_raw(inputs[i]) for i in fi])
    cts: list[Tensor | None] = [None] * len(inputs)
    for i, ct in zip(fi, back([gs[k] for k in fo])):
        cts[i] = ct
    return tuple(cts)


def _zeros_raw(x: Tensor) -> Tensor:
    return Tensor._concrete(np.zeros(x._full_shape, x.dtype))


_custom_jvp = declare("custom_jvp", _custom_jvp_rule, _custom_jvp_vjp, multiple_results=True,
                      jvp=BlockJVP(_custom_jvp_jvp))
# Run, the block is the function (the rule is for derivatives).
evaluator.register("custom_jvp", evaluator.run_block, runs_graphs=True)
lowerings.register("custom_jvp", "remat.backends.xla:run_block")


class custom_jvp:
    """A function with a user-given JVP rule, as `jax.custom_jvp`: `f = custom_jvp(fn)` (or
    `@custom_jvp`), then `f.defjvp(rule)` with `rule(primals, tangents) -> (out, tangent_out)`
    (tuples of the arguments and of their tangents; a zero tangent is given as zeros), or
    `f.defjvps(*per_argument)` with `jvp_i(t_i, out, *primals)` each giving argument i's share
    (None: that argument's share is zero). Reverse mode transposes the rule, so `grad` works
    too. Arguments at `nondiff_argnums` are Python values passed first to the rule
    (`rule(*nondiff, primals, tangents)`), not differentiated.

    >>> import remat as rm
    >>> @rm.custom_jvp
    ... def log1pexp(x):
    ...     return rm.log1p(rm.exp(x))
    >>> log1pexp.defjvps(lambda t, out, x: t * (1.0 - 1.0 / (1.0 + rm.exp(x))))
    >>> rm.grad(log1pexp)(rm.asarray(100.0))
    Tensor(1., dtype=float32)
    """

    def __init__(self, fn: Callable, nondiff_argnums: tuple[int, ...] = ()):
        argcheck.check_callable(fn, "custom_jvp")
        self.fn = fn
        self.nondiff_argnums = argcheck.argnums(nondiff_argnums, "custom_jvp", fn, "nondiff_argnums")
        self.rule: Callable | None = None
        self.symbolic_zeros = False
        functools.update_wrapper(self, fn, updated=())

    def defjvp(self, rule: Callable, symbolic_zeros: bool = False) -> Callable:
        """Set the JVP rule `rule(primals, tangents) -> (out, tangent_out)`; returns it, so it
        can be used as a decorator. With `symbolic_zeros`, a zero tangent reaches the rule as a
        `SymbolicZero` (as in JAX), and the rule may return one."""
        argcheck.check_callable(rule, f"custom_jvp: defjvp of {callable_name(self.fn)}", "rule")
        if not isinstance(symbolic_zeros, (bool, np.bool_)):
            raise ArgumentTypeError(f"custom_jvp: defjvp of {callable_name(self.fn)}: symbolic_zeros must be True or "
                                    f"False, got {argcheck.short_repr(symbolic_zeros)}")
        self.rule, self.symbolic_zeros = rule, bool(symbolic_zeros)
        return rule

    def defjvps(self, *jvps: Callable | None) -> None:
        """Set the JVP rule from one function per differentiated argument: `jvp_i(t_i, out,
        *primals)` is the output tangent's share from argument i's tangent (None: no share)."""
        for k, f in enumerate(jvps):
            if f is not None:
                argcheck.check_callable(f, f"custom_jvp: defjvps of {callable_name(self.fn)}", f"as jvps[{k}]")
        fn = self.fn

        def rule(*args):
            nondiff, primals, tangents = args[:-2], args[-2], args[-1]
            if len(jvps) != len(primals):
                raise ArgumentTypeError(f"custom_jvp: defjvps of {callable_name(fn)} got {len(jvps)} functions for "
                                        f"{len(primals)} differentiated arguments; give one per argument (None for "
                                        "none)")
            out = self._call_fn(nondiff, primals)
            shares = [f(t, out, *primals) for f, t in zip(jvps, tangents) if f is not None]
            total = functools.reduce(lambda a, b: tree.map(lambda x, y: x + y, a, b), shares) if shares else \
                tree.map(lambda o: asarray(o) * 0.0, out)
            return out, total

        rule.__name__ = f"defjvps({callable_name(fn)})"
        self.rule, self.symbolic_zeros = rule, False

    def _call_fn(self, nondiff: tuple, primals: tuple):
        args: list = list(primals)
        for i, v in zip(sorted(self.nondiff_argnums), nondiff):
            args.insert(i, v)
        return self.fn(*args)

    def __call__(self, *args):
        if self.rule is None:
            raise ArgumentTypeError(f"custom_jvp: {callable_name(self.fn)} has no JVP rule; call "
                                    f"{callable_name(self.fn)}.defjvp(rule) before calling it")
        if current_trace() is None:
            return self.fn(*args)
        nums = argcheck.resolve(self.nondiff_argnums, len(args), "custom_jvp", "nondiff_argnums",
                                self.nondiff_argnums, self.fn)
        nondiff = tuple((i, args[i]) for i in sorted(nums))
        for i, v in nondiff:
            if isinstance(v, Tensor) and not v.is_concrete:
                raise TracerError(f"custom_jvp: argument {i} of {callable_name(self.fn)} is in nondiff_argnums but "
                                  f"is a traced tensor of shape {v.shape}; nondiff_argnums are for Python values: "
                                  "pass tensors as ordinary arguments")
        diff = tuple(a for i, a in enumerate(args) if i not in nums)
        return self._bind(diff, nondiff, len(args))

    def _bind(self, diff: tuple, nondiff: tuple, n_args: int):
        arrays = tree.partition(diff, is_array)
        inputs = [asarray(x) for x in arrays.picked]
        kept = set(arrays.positions)  # the rule keeps the static leaves only, no tracers
        static = arrays._replace(picked=[], flat=[None if i in kept else x for i, x in enumerate(arrays.flat)])
        values = tuple(v for _, v in nondiff)

        def body(*xs):
            return self._call_fn(values, tuple(arrays.rebuild(xs)))

        traced = trace_function(body, inputs, name=f"custom_jvp({callable_name(self.fn)})")
        if traced.captured:
            v = traced.captured[0]
            raise TracerError(
                f"custom_jvp: {callable_name(self.fn)} reads a traced tensor of shape {v.shape} from an enclosing "
                f"scope; its derivative would be lost: pass it to {callable_name(self.fn)} as an argument instead"
            )
        rule = JVPRule(callable_name(self.fn), self.rule, nondiff, static, n_args, tuple(x._vaxes for x in inputs),
                       traced.out_tree, tuple(traced.out_vaxes), self.symbolic_zeros)
        outs = bind(_custom_jvp, *[x._raw() for x in inputs], body=traced.graph, jvp=rule)
        return traced.wrap_outputs(list(outs))
