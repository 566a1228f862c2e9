"""Forward mode: `jvp` and `linearize`.

The function is traced into a Graph (as `vjp` traces it) and interpreted node by node into the
current trace: each node is emitted again on its primal inputs and, where some input has a
tangent, its op's JVP rule (declared with the op, next to its VJP) emits the output tangents.
A tangent of None is a zero one, so integer values, constants and `stop_gradient` cost nothing.
Blocks (checkpoint, loops, custom rules) have a `BlockJVP` rule that emits one block computing
both: the tangent of a checkpoint is the checkpointed JVP of its body.

Tangents have the primals' pytree, shapes and dtypes. An integer or bool value has no derivative:
its tangent is zeros of its own dtype (JAX's float0 zeros), given as such for an integer primal
and returned as such for an integer output. A tangent may carry vectorized axes its primal lacks
(`vmap` over tangents only, which is how `jacfwd` works): they stay vectorized throughout.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from remat import argcheck, backends, dtypes, tree
from remat.autodiff import check_aux_pair, vjp
from remat.backends.eager import call_traced
from remat.core import OPS, BlockJVP
from remat.errors import ArgumentTypeError, ArgumentValueError, DTypeError, ShapeError, callable_name, source_of
from remat.graph import Graph, Node, Var, needed
from remat.tensor import Tensor, is_device_array
from remat.trace import argument, asarray, bind, current_trace, trace_function
from remat.vaxes import align_to

# ---------------------------------------------------------------- the interpreter


def jvp_graph(graph: Graph, primals: list[Tensor], tangents: list[Tensor | None]):
    """Emit `graph` on `primals` with their `tangents` (None: zero); returns the outputs and
    their tangents (None where zero)."""
    env: dict[Var, Tensor] = dict(zip(graph.inputs, primals))
    tenv: dict[Var, Tensor] = {}
    for v, value in graph.constants.items():
        env[v] = Tensor._concrete(value)
    for v, t in zip(graph.inputs, tangents):
        if t is not None and dtypes.is_float(v.dtype):
            tenv[v] = t
    for node in graph.nodes:
        ins = [env[v] for v in node.inputs]
        ts = tuple(tenv.get(v) for v in node.inputs)
        with source_of(node.source):
            outs, touts = _jvp_node(OPS[node.op], ins, ts, node.params)
        env.update(zip(node.outputs, outs))
        for v, t in zip(node.outputs, touts):
            if t is not None and dtypes.is_float(v.dtype):
                tenv[v] = _checked_tangent(t, v, node.op)
    return [env[v] for v in graph.outputs], [tenv.get(v) for v in graph.outputs]


def _jvp_node(op, ins: list[Tensor], ts: tuple, params: dict) -> tuple[tuple, tuple]:
    if not op.differentiable or all(t is None for t in ts):
        outs = bind(op, *ins, **params)
        outs = outs if op.multiple_results else (outs,)
        return outs, (None,) * len(outs)
    if op.jvp is None:
        raise TypeError(f"jvp: the op {op.name} has no JVP rule (forward mode cannot differentiate it)")
    if isinstance(op.jvp, BlockJVP):
        outs, touts = op.jvp.rule(ts, *ins, **params)
        return tuple(outs), tuple(touts)
    outs = bind(op, *ins, **params)
    if op.multiple_results:
        return tuple(outs), tuple(op.jvp(ts, *ins, out=tuple(outs), **params))
    return (outs,), (op.jvp(ts, *ins, out=outs, **params),)


def _checked_tangent(t: Tensor, v: Var, op: str) -> Tensor:
    if t.shape != v.shape:
        raise ShapeError(f"JVP of {op} gave a tangent of shape {t.shape} for {v.shape}")
    return t if t.dtype == v.dtype else t.astype(v.dtype)


# ---------------------------------------------------------------- checking what the user gave


def check_tangents(where: str, primals, tangents, primal_name: str = "primals",
                   tangent_name: str = "tangents") -> tuple[list[Tensor], list[Tensor]]:
    """The leaves of `primals` and `tangents` as tensors, after checking that the tangents have
    the primals' structure, shapes and dtypes (integer primals: zero tangents of their dtype)."""
    p_leaves, p_tree = tree.flatten(primals)
    t_leaves, t_tree = tree.flatten(tangents)
    if p_tree != t_tree:
        raise ArgumentTypeError(
            f"{where}: {tangent_name} has structure {t_tree!r} but {primal_name} has structure {p_tree!r}; "
            "give one tangent per primal, in the same pytree"
        )
    paths = argcheck.leaf_paths(tangents, tangent_name)
    ps = [_leaf(where, x, p) for x, p in zip(p_leaves, argcheck.leaf_paths(primals, primal_name))]
    ts = [_leaf(where, t, path) for t, path in zip(t_leaves, paths)]
    for p, t, path in zip(ps, ts, paths):
        _check_pair(where, p, t, path)
    return ps, ts


def _leaf(where: str, x, path: str) -> Tensor:
    if not (isinstance(x, Tensor) or argcheck.is_int(x) or isinstance(x, (float, np.ndarray, np.generic))
            or _is_device(x)):
        raise ArgumentTypeError(f"{where}: {path} is {argcheck.describe(x)}, not a tensor; primals and tangents "
                                "are pytrees of tensors")
    return argument(x)


def _is_device(x) -> bool:
    return is_device_array(x)


def _check_pair(where: str, p: Tensor, t: Tensor, path: str) -> None:
    if t.shape != p.shape:
        raise ShapeError(f"{where}: {path} has shape {t.shape} but its primal has shape {p.shape}; a tangent "
                         "has its primal's shape")
    if dtypes.is_float(p.dtype):
        if t.dtype != p.dtype:
            raise DTypeError(f"{where}: {path} has dtype {t.dtype} but its primal has dtype {p.dtype}; a tangent "
                             f"has its primal's dtype: cast it with .astype('{p.dtype}')")
        return
    if t.dtype != p.dtype:
        raise DTypeError(
            f"{where}: {path} has dtype {t.dtype} but its primal is {p.dtype}, which has no derivative; "
            f"give rm.zeros_like(primal) (zeros of dtype {p.dtype}, as JAX's float0 zeros) or close over the "
            "integer value instead of passing it"
        )
    if t.is_concrete and np.any(np.asarray(t._value)):
        raise ArgumentValueError(
            f"{where}: {path} is a nonzero tangent of an {p.dtype} primal, which has no derivative; its tangent "
            "must be zeros (rm.zeros_like(primal))"
        )


# ---------------------------------------------------------------- vectorized tangents


def aligned(ps: list[Tensor], ts: list[Tensor]) -> tuple[list[Tensor], list[Tensor]]:
    """Primals laid out over the vectorized axes their tangents share with any primal, and each
    tangent as its primal's raw layout with the axes no primal has (`extra`) still vectorized."""
    primal_names = {n for p in ps for n, _ in p._vaxes}
    out_p, out_t = [], []
    for p, t in zip(ps, ts):
        own = {n for n, _ in p._vaxes}
        shared = tuple((n, k) for n, k in t._vaxes if n in primal_names and n not in own)
        p = align_to(p, p._vaxes + shared) if shared else p
        extra = tuple((n, k) for n, k in t._vaxes if n not in primal_names)
        out_p.append(p)
        out_t.append(align_to(t, extra + p._vaxes)._relabel(extra))
    return out_p, out_t


def tangent_out(t: Tensor | None, out: Tensor) -> Tensor:
    """An output's tangent from the interpreter (raw layout, extra axes vectorized) with the
    output's vectorized axes; zeros (of the output's dtype) for None."""
    if t is None:
        return Tensor._concrete(np.zeros(out._full_shape, out.dtype), out._vaxes)
    return t._relabel(t._vaxes + out._vaxes)


# ---------------------------------------------------------------- jvp


def jvp(fn: Callable, primals, tangents, has_aux: bool = False):
    """`(fn(*primals), tangent)`: the value of `fn` and its directional derivative along
    `tangents` (one per primal: same pytree, shapes and dtypes), as `jax.jvp`. With `has_aux`,
    `fn` returns `(output, aux)` and the result is `(output, tangent, aux)`.

    >>> import remat as rm
    >>> rm.jvp(rm.sin, (rm.asarray(0.0),), (rm.asarray(2.0),))
    (Tensor(0., dtype=float32), Tensor(2., dtype=float32))
    """
    argcheck.check_callable(fn, "jvp")
    for name, value in (("primals", primals), ("tangents", tangents)):
        if not isinstance(value, (tuple, list)):
            raise ArgumentTypeError(f"jvp: {name} must be a tuple or list (one entry per positional argument "
                                    f"of {callable_name(fn)}), got {argcheck.describe(value)}; write "
                                    "rm.jvp(f, (x,), (t,)) for one argument")
    ps, ts = check_tangents("jvp", tuple(primals), tuple(tangents))
    if current_trace() is None:
        return call_traced(lambda p, t: _jvp_traced(fn, p, t, has_aux, tuple(primals)), (ps, ts))
    return _jvp_traced(fn, ps, ts, has_aux, tuple(primals))


def _jvp_traced(fn, ps: list[Tensor], ts: list[Tensor], has_aux: bool, like):
    ps, ts = aligned([asarray(p) for p in ps], [asarray(t) for t in ts])
    in_tree = tree.flatten(like)[1]

    def flat_fn(*xs):
        out = fn(*tree.unflatten(in_tree, xs))
        return check_aux_pair(out, "jvp", fn) if has_aux else (out, None)

    traced = trace_function(flat_fn, ps, name=f"jvp({callable_name(fn)})")
    trace = current_trace()
    captured = [Tensor._traced(trace, v) for v in traced.captured]
    outs, touts = jvp_graph(traced.graph, [p._raw() for p in ps] + captured,
                            list(ts) + [None] * len(captured))
    out, aux = traced.wrap_outputs(outs)
    n = traced.out_tree.children[0].num_leaves
    wrapped = tree.leaves(out)
    tangent = tree.unflatten(traced.out_tree.children[0], [tangent_out(t, o) for t, o in zip(touts[:n], wrapped)])
    return (out, tangent, aux) if has_aux else (out, tangent)


# ---------------------------------------------------------------- linearize


def linearize(fn: Callable, *primals):
    """`(fn(*primals), f_jvp)` where `f_jvp(*tangents)` is the JVP at `primals`, as
    `jax.linearize`: the primal values the tangent computation needs are computed once and
    kept, and `f_jvp` runs only the linear part. Inside a checkpoint only what its policy
    saves is kept; the rest is recomputed by `f_jvp`.

    >>> import remat as rm
    >>> y, f_jvp = rm.linearize(rm.sin, rm.asarray(0.0))
    >>> f_jvp(rm.asarray(3.0))
    Tensor(3., dtype=float32)
    """
    argcheck.check_callable(fn, "linearize")
    ps, _ = check_tangents("linearize", primals, primals)
    like = tuple(primals)
    zeros = [Tensor._concrete(np.zeros(p._full_shape, p.dtype), p._vaxes) for p in ps]
    n = len(ps)

    def both(*xs):
        return _jvp_traced(fn, list(xs[:n]), list(xs[n:]), False, like)

    traced = trace_function(both, ps + zeros, name=f"linearize({callable_name(fn)})")
    g = traced.graph
    n_out = traced.out_tree.children[0].num_leaves
    known, linear = partial_eval(g, set(g.inputs[:n] + g.inputs[2 * n :]), n_out)
    results = _evaluate(known, [p._raw() for p in ps] + [Tensor._traced(current_trace(), v) for v in traced.captured])
    out = tree.unflatten(traced.out_tree.children[0], [
        o._relabel(v) for o, v in zip(results[:n_out], traced.out_vaxes[:n_out])])
    residuals = results[n_out:]
    out_vaxes = traced.out_vaxes[n_out:]

    def f_jvp(*tangents):
        _, ts = check_tangents("linearize", like, tangents, "primals", "tangents")
        ts = [_beside(p, t) for p, t in zip(ps, ts)]
        if current_trace() is None:
            return call_traced(lambda r, t: _run_linear(linear, r, t, out_vaxes, traced.out_tree), (residuals, ts))
        return _run_linear(linear, residuals, ts, out_vaxes, traced.out_tree)

    return out, f_jvp


def _beside(p: Tensor, t: Tensor) -> Tensor:
    """`t` in `p`'s raw layout, its own other vectorized axes kept vectorized."""
    own = {n for n, _ in p._vaxes}
    extra = tuple((n, k) for n, k in t._vaxes if n not in own)
    return align_to(t, extra + p._vaxes)._relabel(extra)


def _evaluate(known: Graph, inputs: list[Tensor]) -> list[Tensor]:
    """The known part's outputs: run now on the NumPy evaluator, or emitted into the trace."""
    if current_trace() is None:
        return [Tensor._concrete(a) for a in backends.get("numpy").compile(known)(*[np.asarray(x) for x in inputs])]
    return _emit(known, inputs)


def _emit(graph: Graph, inputs: list[Tensor]) -> list[Tensor]:
    return jvp_graph(graph, inputs, [None] * len(inputs))[0]


def _run_linear(linear: Graph, residuals, ts, out_vaxes, out_tree):
    outs = _emit(linear, [*residuals, *ts])
    return tree.unflatten(out_tree.children[1], [t._relabel(t._vaxes + v) for t, v in zip(outs, out_vaxes)])


# ---------------------------------------------------------------- partial evaluation


def partial_eval(g: Graph, known_inputs: set, n_out: int) -> tuple[Graph, Graph]:
    """Split `g` (inputs: primals, tangents, captures; outputs: n_out primal outputs, then
    tangents) into a known Graph (primals and captures -> primal outputs, residuals) and a
    linear Graph (residuals, tangents -> tangent outputs): a node joins the linear Graph when it
    reads a tangent. A checkpoint that reads one is split as JAX's partial evaluation of remat
    splits it: its primal part is computed now, and the linear part recomputes the body from its
    inputs and the values its policy saves."""
    tangent_inputs = [v for v in g.inputs if v not in known_inputs]
    unknown: set[Var] = set(tangent_inputs)
    known_nodes, linear_nodes = split_nodes(g.nodes, unknown)
    read = [v for n in linear_nodes for v in n.inputs] + list(g.outputs[n_out:])
    residuals = [v for v in dict.fromkeys(read) if v not in unknown and v not in g.constants]
    known_in = [v for v in g.inputs if v in known_inputs]
    known = needed(known_in, list(g.outputs[:n_out]) + residuals, known_nodes, g.constants)
    linear = needed(residuals + tangent_inputs, list(g.outputs[n_out:]), linear_nodes, g.constants)
    return known, linear


def split_nodes(nodes: list[Node], unknown: set) -> tuple[list[Node], list[Node]]:
    """(known nodes, linear nodes) of `nodes`, whose inputs in `unknown` are tangents; `unknown`
    gains every tangent they make. A block reading both is split: by its `partial_eval` (a
    checkpoint: into a primal and a linear checkpoint), or a loop or cond into its primal part
    (known) and itself (linear)."""
    known, linear = [], []
    for node in nodes:
        if not any(v in unknown for v in node.inputs):
            known.append(node)
        elif OPS[node.op].partial_eval is not None and not all(v in unknown for v in node.inputs):
            k, lin = OPS[node.op].partial_eval(node, unknown)
            known.append(k)
            linear.append(lin)
            unknown.update(lin.outputs)
        else:
            primal = _primal_part(node, unknown)
            if primal is not None:
                known.append(primal)
            linear.append(node)
            unknown.update(v for v in node.outputs if primal is None or v not in primal.outputs)
    return known, linear


def _primal_part(node: Node, unknown: set) -> Node | None:
    """A block computing values and tangents together (a loop or a cond under forward mode)
    reduced by its prune rule to the outputs that read no tangent, or None (no such output, or
    no prune rule). The linear side computes those values again, as a checkpoint does; JAX keeps
    per-step residuals instead."""
    prune = OPS[node.op].prune
    if prune is None:
        return None
    node = _without_residuals(node)
    primal = {v for v in node.outputs if not any(u in unknown for u in prune(node, {v}).inputs)}
    return prune(node, primal) if primal else None


def _without_residuals(node: Node, graph_reads: frozenset | set = frozenset()) -> Node:
    """`node` with the blocks in its sub-graphs keeping no residuals (`Op.without_residuals`: a
    checkpoint then saves nothing and reads only the inputs its body reads). A checkpoint's
    residuals are for a later gradient and a pruned block keeps them; inside a forward-mode block
    they can be tangents (what the never-more-than-plain guarantee keeps of a JVP body), and a JVP
    body may ignore the tangent of an input: either would tie the primal part to the tangents.
    Saving nothing, such a checkpoint recomputes. Residuals its own graph reads (`graph_reads`: a
    loop stacking them, a branch outputting them, where a policy reached in) are values of that
    graph, and stay."""
    subs = {k: g for k, g in node.params.items() if isinstance(g, Graph)}
    if not subs:
        return node
    params = {**node.params, **{k: _graph_without_residuals(g) for k, g in subs.items()}}
    node = Node(node.op, node.inputs, node.outputs, params, node.source)
    keep_none = OPS[node.op].without_residuals
    return node if keep_none is None else keep_none(node, graph_reads)


def _graph_without_residuals(g: Graph) -> Graph:
    read = {v for n in g.nodes for v in n.inputs} | set(g.outputs)
    return Graph(g.inputs, g.outputs, [_without_residuals(n, read) for n in g.nodes], g.constants)


# ---------------------------------------------------------------- helpers for block rules


def instantiate(ts, like: list[Var], none: bool = False) -> list:
    """Tangents with zeros (of the Var's shape and dtype) for None, as a block's body must
    return tensors; with `none`, the other way: None for the tangents of integer Vars."""
    if none:
        return [t if dtypes.is_float(v.dtype) else None for t, v in zip(ts, like)]
    return [Tensor._concrete(np.zeros(v.shape, v.dtype)) if t is None else t for t, v in zip(ts, like)]


def transposed_tangents(ts, inputs: list[Tensor], outs, body: Graph, n_out: int, cotangents_of: Callable) -> list:
    """The tangents of a custom_vjp node's outputs: its outputs' from the transpose of the
    rule `cotangents_of(gs) -> input cotangents` (linear in `gs`, so its VJP at the input
    tangents is J t, exactly), and its residuals' from the JVP of fwd's code."""
    touts: list = [None] * len(outs)
    fo = [k for k in range(n_out) if dtypes.is_float(outs[k].dtype)]
    fi = [i for i, x in enumerate(inputs) if dtypes.is_float(x.dtype) and ts[i] is not None]
    if fo and fi:
        def linear(*g):
            gs = [None] * n_out
            for k, x in zip(fo, g):
                gs[k] = x
            cts = cotangents_of(gs)
            return [_zeros_of(inputs[i]) if cts[i] is None else cts[i] for i in fi]

        _, back = vjp(linear, *[_zeros_of(outs[k]) for k in fo])
        for k, t in zip(fo, back([ts[i] for i in fi])):
            touts[k] = t
    if n_out < len(outs):
        residuals = Graph(body.inputs, body.outputs[n_out:], body.nodes, body.constants)
        touts[n_out:] = jvp_graph(residuals, list(inputs), list(ts))[1]
    return touts


def _zeros_of(x: Tensor) -> Tensor:
    return Tensor._concrete(np.zeros(x._full_shape, x.dtype))
