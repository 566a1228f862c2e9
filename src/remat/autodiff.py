"""Reverse mode: `vjp`, `grad`, `value_and_grad`.

The function is traced into a Graph in a child trace, replayed op by op into the current trace,
and then walked backwards, each node's VJP rule emitting ordinary ops. The gradient is thus
itself a traced program of differentiable ops, which is all higher order needs.

A `rewrite` given to these functions turns the traced forward graph into another that computes
the same values before it is replayed: the memory planner's checkpoints (`remat.gradients`, where
`rm.grad`'s `memory_budget=` is read).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from remat import argcheck, backends, dtypes, tree
from remat.accumulate import Cotangents
from remat.backends.eager import call_traced
from remat.core import OPS
from remat.errors import ArgumentTypeError, DTypeError, ShapeError, callable_name, source_of
from remat.graph import Graph, Node, Var, needed
from remat.tensor import Tensor
from remat.trace import argument, asarray, bind, current_trace, new_trace, trace_function
from remat.vaxes import align_to, cotangent_layout, from_raw_layout


def replay(graph: Graph, inputs: list[Tensor]) -> dict[Var, Tensor]:
    """Re-emit `graph`'s nodes as ops on `inputs`, as the forward half of its VJP; returns every
    Var's tensor. A custom_vjp node is emitted as its fwd's code (and so are those inside the
    blocks it binds): `backward_pass` applies the custom rule, which it reads from `graph`, while
    a derivative of the replay goes through fwd's code. That is JAX's rule: a custom VJP gives
    the derivative of the function's own output; higher orders differentiate fwd."""
    return _replay(graph, inputs, linearize=True)


def replay_known(graph: Graph, inputs: list[Tensor], known: dict[Var, Tensor]) -> dict[Var, Tensor]:
    """`replay`, skipping the nodes whose outputs are all `known` and reading those values: a
    block's backward pass recomputing only what it did not save."""
    if not known:
        return replay(graph, inputs)
    nodes = [n for n in graph.nodes if not all(v in known for v in n.outputs)]
    part = Graph(graph.inputs + list(known), [], nodes, graph.constants)
    # A node replayed for its other outputs (a custom_vjp's) must not replace a saved one.
    return {**replay(part, list(inputs) + list(known.values())), **known}


def emit(graph: Graph, inputs: list[Tensor]) -> list[Tensor]:
    """`graph`'s outputs, its nodes re-emitted as they are on `inputs` (custom rules kept)."""
    env = _replay(graph, inputs, linearize=False)
    return [env[v] for v in graph.outputs]


def _replay(graph: Graph, inputs: list[Tensor], linearize: bool) -> dict[Var, Tensor]:
    env: dict[Var, Tensor] = dict(zip(graph.inputs, inputs))
    for v, value in graph.constants.items():
        env[v] = Tensor._concrete(value)
    for node in graph.nodes:
        ins = [env[v] for v in node.inputs]
        if linearize and OPS[node.op].linearize is not None:
            outs = OPS[node.op].linearize(node, ins)
        else:
            params = _linearized_params(node.params) if linearize else node.params
            with source_of(node.source):
                outs = bind(OPS[node.op], *ins, **params)
        env.update(zip(node.outputs, outs if isinstance(outs, (tuple, list)) else (outs,)))
    return env


def _linearized_params(params: dict) -> dict:
    """A block's params with each sub-graph replayed: the blocks inside that have a `linearize`
    rule (custom_vjp: its fwd's code) are re-emitted too, so a second derivative of a checkpoint
    or a loop sees what it would unblocked."""
    subs = {k: g for k, g in params.items()
            if isinstance(g, Graph) and any(OPS[n.op].linearize is not None for n in g.walk())}
    return {**params, **{k: _linearized(g) for k, g in subs.items()}} if subs else params


def _linearized(graph: Graph) -> Graph:
    with new_trace("linearized block") as t:
        env = replay(graph, [t.new_input(v.shape, v.dtype) for v in graph.inputs])
        return t.to_graph([env[v] for v in graph.outputs])


def backward_pass(graph: Graph, env: dict[Var, Tensor], out_cts) -> list[Tensor | None]:
    """Cotangents of `graph.inputs` given those of its outputs (None where no gradient flows)."""
    graph, env = _slices_outside_blocks(graph, env)
    cts = Cotangents(graph, env)  # a dict that combines the cotangents of slices of one tensor

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
        if all(g is None for g in gs) or not op.differentiable or cts.defer_slice(node, gs[0]):
            continue
        if op.vjp is None:
            raise TypeError(f"grad: the op {op.name} has no VJP rule (reverse mode cannot differentiate it)")
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


def slices_outside_blocks(graph: Graph) -> tuple[Graph, list[Node]]:
    """`graph` with the slices its blocks take of what they capture (`W[i]` in each layer's
    checkpoint, W stacked) taken before the blocks, which capture the slices instead; and the
    slice nodes so added. The function's own graph keeps what a block captures whole (the
    seed's rule); the gradient and the XLA program see this one."""
    nodes, added = [], []
    for node in graph.nodes:
        hoist = OPS[node.op].hoist_slices
        slices, new = hoist(node) if hoist is not None else ([], node)
        nodes += [*slices, new]
        added += slices
    return (Graph(graph.inputs, graph.outputs, nodes, graph.constants) if added else graph), added


def _slices_outside_blocks(graph: Graph, env: dict[Var, Tensor]) -> tuple[Graph, dict[Var, Tensor]]:
    """`slices_outside_blocks`, and `env` with the slices' values: each block's gradient is then
    its slice's, which `Cotangents` joins with the other layers' into one buffer, rather than a
    full-size cotangent of W from every block."""
    graph, added = slices_outside_blocks(graph)
    for s in added:
        env[s.outputs[0]] = bind(OPS["slice"], env[s.inputs[0]], **s.params)
    return graph, env


#: `rewrite(graph, wrt, seeded) -> graph`: the forward graph of a step, whose first `wrt` inputs
#: are differentiated and whose first `seeded` outputs get cotangents (the rest are aux), as the
#: step replays it; the values it computes stay the same.
Rewrite = Callable[[Graph, int, int], Graph]


def _zeros_like(t: Tensor) -> Tensor:
    return Tensor._concrete(np.zeros(t._full_shape, t.dtype), t._vaxes)


def vjp(fn: Callable, *primals, has_aux: bool = False, rewrite: Rewrite | None = None):
    """`(fn(*primals), vjp_fn)`, where `vjp_fn(cotangent)` gives one cotangent per primal; the
    forward graph `rewrite` first, if given. `rm.vjp` (`remat.gradients`) is this with a budget."""
    argcheck.check_callable(fn, "vjp")
    if current_trace() is None:
        return _eager_vjp(fn, primals, has_aux, rewrite)
    flat, in_tree = tree.flatten(primals)
    inputs = [argument(x) for x in flat]
    for x in inputs:
        if not dtypes.is_float(x.dtype):
            raise DTypeError(f"vjp: cannot differentiate with respect to a {x.dtype} input; "
                             "only float inputs have gradients")

    def flat_fn(*xs):
        out = fn(*tree.unflatten(in_tree, xs))
        return check_aux_pair(out, "vjp", fn) if has_aux else (out, None)

    name, plans = f"vjp({callable_name(fn)})", rewrite is not None  # a rewrite plans the regions
    traced = trace_function(flat_fn, inputs, name=name, plans_regions=plans)
    if any(_missing_axes(x, traced.out_vaxes) for x in inputs):
        # Under vmap, each entry has its own VJP: an input the entries share gets the outputs'
        # vectorized axes, so entry i's cotangent reaches only entry i's gradient (not the sum).
        inputs = [align_to(x, _missing_axes(x, traced.out_vaxes) + x._vaxes) for x in inputs]
        traced = trace_function(flat_fn, inputs, name=name, plans_regions=plans)
    graph, trace = traced.graph, current_trace()
    if rewrite is not None:
        graph = rewrite(graph, len(inputs), traced.out_tree.children[0].num_leaves)
    # The graph sees vectorized axes as plain leading axes; so does the replay.
    env = replay(graph, [x._raw() for x in inputs] + [Tensor._traced(trace, v) for v in traced.captured])
    out, aux = traced.wrap_outputs([env[v] for v in graph.outputs])
    primal_tree = traced.out_tree.children[0]
    n_primal = primal_tree.num_leaves

    def vjp_fn(cotangent):
        cts = _cotangent_leaves(cotangent, primal_tree, traced.out_vaxes, graph.outputs[:n_primal])
        grads = backward_pass(graph, env, cts + [None] * (len(graph.outputs) - n_primal))[: len(inputs)]
        grads = [_zeros_like(x) if g is None else from_raw_layout(g, x._vaxes) for g, x in zip(grads, inputs)]
        return tree.unflatten(in_tree, grads)

    if has_aux:
        return out, vjp_fn, aux
    return out, vjp_fn


def _eager_vjp(fn, primals, has_aux, rewrite: Rewrite | None):
    """vjp outside any trace, as JAX's: the forward runs now and keeps only what the backward
    reads (its residuals); `vjp_fn` runs the backward alone on them, so no forward op runs twice.
    Both halves come from one trace, made for cotangents shaped like the outputs."""
    flat, in_tree = tree.flatten(primals)
    tensors = [argument(x) for x in flat]
    with new_trace(f"vjp({callable_name(fn)})") as t:
        inputs = [t.new_input(x._full_shape, x.dtype)._alias(x._vaxes, x._weak) for x in tensors]
        out, back, *aux = vjp(fn, *tree.unflatten(in_tree, inputs), has_aux=has_aux, rewrite=rewrite)
        n_forward = len(t.nodes)
        out_leaves, out_tree = tree.flatten(out)
        cts = [t.new_input(o._full_shape, o.dtype)._relabel(o._vaxes) for o in out_leaves]
        back_leaves = tree.leaves(back(tree.unflatten(out_tree, cts)))
        grads = [t.lift(g) for g in back_leaves]
        aux_leaves = tree.leaves(aux)
        kept = [t.lift(x) for x in out_leaves + aux_leaves]
    forward, backward = _cut(t, n_forward, kept, grads, len(tensors))
    arrays = backends.get("numpy").compile(forward)(*[x._value for x in tensors])
    residuals = arrays[len(kept) :]
    # Not the tensors (nor the trace): vjp_fn keeps the residuals alone alive.
    # A gradient can be vectorized over more than its input (one per entry of a vmap; see vjp).
    in_vaxes, out_vaxes = [g._vaxes for g in back_leaves], [o._vaxes for o in out_leaves]
    wrap = [Tensor._concrete(a, x._vaxes) for a, x in zip(arrays, out_leaves + aux_leaves)]
    out = tree.unflatten(out_tree, wrap[: len(out_leaves)])

    def vjp_fn(cotangent):
        cts = _cotangent_leaves(cotangent, out_tree, out_vaxes, backward.inputs[len(residuals) :])
        if current_trace() is None and all(c.is_concrete and not c._vaxes for c in cts):
            run = backends.get("numpy").compile(backward)
            raw = [Tensor._concrete(g) for g in run(*residuals, *[c._value for c in cts])]
        else:  # traced, or vmapped over the cotangents: the backward's ops, bound as they come
            raw = emit(backward, [Tensor._concrete(r) for r in residuals] + cts)
        return tree.unflatten(in_tree, [from_raw_layout(g, v) for g, v in zip(raw, in_vaxes)])

    if has_aux:
        return out, vjp_fn, tree.unflatten(tree.flatten(aux[0])[1], wrap[len(out_leaves) :])
    return out, vjp_fn


def _cut(t, n_forward: int, kept: list[Var], grads: list[Var], n_primals: int) -> tuple[Graph, Graph]:
    """Trace `t` (primal inputs, then cotangent inputs; forward nodes, then backward ones) as a
    forward Graph returning `kept` and then the residuals, and a backward Graph from the
    residuals and the cotangents to `grads`."""
    cts = t.inputs[n_primals:]
    backward = needed(cts, grads, t.nodes[n_forward:], t.constants)
    made = {v for n in backward.nodes for v in n.outputs} | set(cts) | set(backward.constants)
    reads = [v for n in backward.nodes for v in n.inputs] + grads
    residuals = [v for v in dict.fromkeys(reads) if v not in made]
    forward = needed(t.inputs[:n_primals], kept + residuals, t.nodes[:n_forward], t.constants)
    return forward, Graph(residuals + cts, grads, backward.nodes, backward.constants)


def _cotangent_leaves(cotangent, out_tree: tree.TreeDef, out_vaxes: list, out_vars: list[Var]) -> list[Tensor]:
    """The leaves of a cotangent for outputs of structure `out_tree` (raw Vars `out_vars`), in
    the outputs' raw layout and dtypes, their structure and shapes checked."""
    leaves, ct_tree = tree.flatten(cotangent)
    if ct_tree != out_tree:
        raise ArgumentTypeError(f"vjp: cotangent structure {ct_tree!r} differs from the output's {out_tree!r}")
    paths = argcheck.leaf_paths(cotangent, "cotangent")
    cts = []
    for c, vaxes, v, path in zip(leaves, out_vaxes, out_vars, paths):
        raw = cotangent_layout(asarray(c), vaxes)
        if raw.shape != v.shape:
            raise ShapeError(f"vjp: {path} has shape {asarray(c).shape}, but its output has shape "
                             f"{v.shape[len(vaxes):]}; pass a cotangent of the output's shape")
        cts.append(raw if raw.dtype == v.dtype else raw.astype(v.dtype))
    return cts


def value_and_grad(fn: Callable, argnums: int | tuple[int, ...] = 0, has_aux: bool = False, *,
                   rewrite: Rewrite | None = None):
    """A function returning `(fn(*args), gradient)`, as `rm.value_and_grad` (`remat.gradients`)
    without a budget; the forward graph `rewrite` first, if given."""
    return _value_and_grad(fn, argnums, has_aux, "value_and_grad", rewrite)


def _value_and_grad(fn: Callable, argnums, has_aux: bool, where: str, rewrite: Rewrite | None):
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
            result = vjp(partial, *xs, has_aux=has_aux, rewrite=rewrite)
            return result if has_aux else (*result, None)

        out, back, aux = run_vjp(diff)
        _check_scalar(out, where, fn)
        grads = back(Tensor._concrete(np.ones(out._full_shape, out.dtype), out._vaxes))
        grads = grads[0] if argcheck.is_int(argnums) else grads
        return ((out, aux) if has_aux else out), grads

    return wrapped


def _missing_axes(x: Tensor, out_vaxes: list[tuple]) -> tuple:
    """The vectorized axes of the outputs that `x` lacks, in the order they are first met."""
    own = {n for n, _ in x._vaxes}
    missing = dict.fromkeys(a for vaxes in out_vaxes for a in vaxes if a[0] not in own)
    return tuple(missing)


def grad(fn: Callable, argnums: int | tuple[int, ...] = 0, has_aux: bool = False, *,
         rewrite: Rewrite | None = None):
    """The gradient of a scalar-valued `fn`, as `rm.grad` (`remat.gradients`) without a budget;
    the forward graph `rewrite` first, if given."""
    vg = _value_and_grad(fn, argnums, has_aux, "grad", rewrite)

    @functools.wraps(fn, updated=())
    def wrapped(*args, **kwargs):
        if current_trace() is None:  # the gradient alone is the program: the unused value is never computed
            return call_traced(lambda args, kwargs: wrapped(*args, **kwargs), (args, kwargs))
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
