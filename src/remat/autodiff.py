"""Reverse mode: `vjp`, `grad`, `value_and_grad`.

The function is traced into a Graph in a child trace, replayed op by op into the current trace,
and then walked backwards, each node's VJP rule emitting ordinary ops. The gradient is thus
itself a traced program of differentiable ops, which is all higher order needs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from remat import argcheck, dtypes, tree
from remat.errors import ArgumentTypeError, DTypeError, ShapeError, callable_name, source_of
from remat.graph import Graph, Var
from remat.jit import call_traced
from remat.ops.core import OPS
from remat.trace import Tensor, asarray, bind, current_trace, trace_function
from remat.vectorize import align_to


def replay(graph: Graph, inputs: list[Tensor]) -> dict[Var, Tensor]:
    """Re-emit `graph`'s nodes as ops on `inputs`; returns every Var's tensor."""
    env: dict[Var, Tensor] = dict(zip(graph.inputs, inputs))
    for v, value in graph.constants.items():
        env[v] = Tensor._concrete(value)
    for node in graph.nodes:
        with source_of(node.source):
            outs = bind(OPS[node.op], *[env[v] for v in node.inputs], **node.params)
        env.update(zip(node.outputs, outs if isinstance(outs, tuple) else (outs,)))
    return env


def backward_pass(graph: Graph, env: dict[Var, Tensor], out_cts) -> list[Tensor | None]:
    """Cotangents of `graph.inputs` given those of its outputs (None where no gradient flows)."""
    cts: dict[Var, Tensor] = {}

    def accumulate(v: Var, ct: Tensor | None, op: str) -> None:
        if ct is None or v in graph.constants or not dtypes.is_float(v.dtype):
            return
        if ct.shape != v.shape:
            raise ShapeError(f"VJP of {op} gave a cotangent of shape {ct.shape} for {v.shape}")
        ct = ct if ct.dtype == v.dtype else ct.astype(v.dtype)
        cts[v] = cts[v] + ct if v in cts else ct

    for v, ct in zip(graph.outputs, out_cts):
        accumulate(v, ct, "the output")
    for node in reversed(graph.nodes):
        gs = [cts.pop(v, None) for v in node.outputs]
        op = OPS[node.op]
        if all(g is None for g in gs) or not op.differentiable:
            continue
        ins = [env[v] for v in node.inputs]
        outs = [env[v] for v in node.outputs]
        with source_of(node.source):
            if op.multiple_results:
                in_cts = op.vjp(tuple(gs), *ins, out=tuple(outs), **node.params)
            else:
                in_cts = op.vjp(gs[0], *ins, out=outs[0], **node.params)
        for v, ct in zip(node.inputs, in_cts):
            accumulate(v, ct, node.op)
    return [cts.get(v) for v in graph.inputs]


def _zeros_like(t: Tensor) -> Tensor:
    return Tensor._concrete(np.zeros(t._full_shape, t.dtype), t._vaxes)


def vjp(fn: Callable, *primals, has_aux: bool = False):
    """`(fn(*primals), vjp_fn)`, where `vjp_fn(cotangent)` gives one cotangent per primal.

    >>> import remat as rm
    >>> y, back = rm.vjp(rm.sin, rm.asarray(0.0))
    >>> back(rm.asarray(1.0))
    (Tensor(1., dtype=float32),)
    """
    argcheck.check_callable(fn, "vjp")
    if current_trace() is None:
        return _eager_vjp(fn, primals, has_aux)
    flat, in_tree = tree.flatten(primals)
    inputs = [asarray(x) for x in flat]
    for x in inputs:
        if not dtypes.is_float(x.dtype):
            raise DTypeError(f"vjp: cannot differentiate with respect to a {x.dtype} input; "
                             "only float inputs have gradients")

    def flat_fn(*xs):
        out = fn(*tree.unflatten(in_tree, xs))
        return check_aux_pair(out, "vjp", fn) if has_aux else (out, None)

    traced = trace_function(flat_fn, inputs, name=f"vjp({callable_name(fn)})")
    graph, trace = traced.graph, current_trace()
    # The graph sees vectorized axes as plain leading axes; so does the replay.
    env = replay(graph, [x._raw() for x in inputs] + [Tensor._traced(trace, v) for v in traced.captured])
    out, aux = traced.wrap_outputs([env[v] for v in graph.outputs])
    primal_tree = traced.out_tree.children[0]
    n_primal = primal_tree.num_leaves

    def vjp_fn(cotangent):
        ct_leaves, ct_tree = tree.flatten(cotangent)
        if ct_tree != primal_tree:
            raise ArgumentTypeError(f"vjp: cotangent structure {ct_tree!r} differs from the output's {primal_tree!r}")
        cts = [align_to(asarray(c), v)._raw() for c, v in zip(ct_leaves, traced.out_vaxes)]
        grads = backward_pass(graph, env, cts + [None] * (len(graph.outputs) - n_primal))[: len(inputs)]
        grads = [_zeros_like(x) if g is None else g._relabel(x._vaxes) for g, x in zip(grads, inputs)]
        return tree.unflatten(in_tree, grads)

    if has_aux:
        return out, vjp_fn, aux
    return out, vjp_fn


def _eager_vjp(fn, primals, has_aux):
    """vjp outside any trace: run the forward now and, when asked, forward and backward as one
    traced program."""

    def forward(*p):
        res = vjp(fn, *p, has_aux=has_aux)
        return (res[0], res[2]) if has_aux else res[0]

    result = call_traced(forward, primals)

    def vjp_fn(cotangent):
        return call_traced(lambda p, ct: vjp(fn, *p, has_aux=has_aux)[1](ct), (primals, cotangent))

    if has_aux:
        out, aux = result
        return out, vjp_fn, aux
    return result, vjp_fn


def value_and_grad(fn: Callable, argnums: int | tuple[int, ...] = 0, has_aux: bool = False):
    """A function returning `(fn(*args), gradient)`; the gradient has the structure of the
    arguments named by `argnums` (negative positions count from the end). `fn` must return a
    float scalar (with `has_aux`, a pair `(scalar, aux)`, and the value is `(scalar, aux)`).

    >>> import remat as rm
    >>> rm.value_and_grad(lambda x: rm.sum(x * x))(rm.asarray([1.0, 2.0]))
    (Tensor(5., dtype=float32), Tensor([2., 4.], dtype=float32))
    """
    return _value_and_grad(fn, argnums, has_aux, "value_and_grad")


def _value_and_grad(fn: Callable, argnums, has_aux: bool, where: str):
    argcheck.check_callable(fn, where)
    requested = argcheck.argnums(argnums, where, fn)

    @functools.wraps(fn, updated=())  # the signature stays readable: jit and memory use it
    def wrapped(*args, **kwargs):
        if current_trace() is None:
            return call_traced(lambda args, kwargs: wrapped(*args, **kwargs), (args, kwargs))
        nums = argcheck.resolve(requested, len(args), where, "argnums", argnums, fn)
        diff = [args[i] for i in nums]

        def partial(*xs):
            full = list(args)
            for i, x in zip(nums, xs):
                full[i] = x
            out = fn(*full, **kwargs)
            return check_aux_pair(out, where, fn) if has_aux else out

        def run_vjp(xs):
            result = vjp(partial, *xs, has_aux=has_aux)
            return result if has_aux else (*result, None)

        out, back, aux = run_vjp(diff)
        _check_scalar(out, where, fn)
        if _lacks_output_axes(diff, out):
            # A vectorized output asks for per-entry gradients: give every input the output's
            # vectorized axes it lacks, so entry i of the output only sees entry i of the input.
            diff = tree.map(lambda x: align_to(asarray(x), _axes_for(asarray(x), out)), diff)
            out, back, aux = run_vjp(diff)
        grads = back(Tensor._concrete(np.ones(out._full_shape, out.dtype), out._vaxes))
        grads = grads[0] if argcheck.is_int(argnums) else grads
        return ((out, aux) if has_aux else out), grads

    return wrapped


def _axes_for(x: Tensor, out: Tensor) -> tuple:
    own = dict(x._vaxes)
    return tuple((n, k) for n, k in out._vaxes if n not in own) + x._vaxes


def _lacks_output_axes(diff, out: Tensor) -> bool:
    names = {n for n, _ in out._vaxes}
    return any(names - {n for n, _ in asarray(x)._vaxes} for x in tree.leaves(diff))


def grad(fn: Callable, argnums: int | tuple[int, ...] = 0, has_aux: bool = False):
    """The gradient of a scalar-valued `fn` with respect to the arguments `argnums`.

    >>> import remat as rm
    >>> rm.grad(rm.grad(rm.sin))(rm.asarray(0.0))
    Tensor(-0., dtype=float32)
    """
    vg = _value_and_grad(fn, argnums, has_aux, "grad")

    @functools.wraps(fn, updated=())
    def wrapped(*args, **kwargs):
        value, g = vg(*args, **kwargs)
        return (g, value[1]) if has_aux else g

    return wrapped


def _check_scalar(out, where: str, fn) -> None:
    if not isinstance(out, Tensor) or out.shape != () or not dtypes.is_float(out.dtype):
        desc = f"shape {out.shape} {out.dtype}" if isinstance(out, Tensor) else type(out).__name__
        raise ArgumentTypeError(
            f"{where}: {callable_name(fn)} must return a float scalar tensor, got {desc}; "
            "use rm.vjp for other outputs"
        )


def check_aux_pair(out, where: str, fn):
    """With `has_aux=True`, `fn` returns `(output, aux)`: anything else is the user's mistake,
    named here rather than as an unpacking error further on."""
    if isinstance(out, (tuple, list)) and len(out) == 2:
        return tuple(out)
    raise ArgumentTypeError(
        f"{where}: has_aux=True needs {callable_name(fn)} to return a pair (output, aux), "
        f"but it returned {argcheck.describe(out)}; return a 2-tuple or drop has_aux"
    )
