"""`rm.cond` and `rm.switch`: one block that runs one of several branch Graphs, chosen at run time.

    c:f32[3] = cond a b d
      branch0(e:f32[3], f:f32[3]) { ... }
      branch1(g:f32[3], h:f32[3]) { ... }

The node's inputs are an int32 index, the operands, then every tensor some branch read from
enclosing scope (each branch Graph takes them all, used or not). An index out of range is clamped,
as in `jax.lax.switch`. The VJP is the same kind of block: the chosen branch's VJP, selected by
the same index, recomputing the branch's forward values from the operands (the forward block
keeps none of them, as a checkpoint does not). A vectorized predicate (under `vmap`) runs every
branch and selects the results with `where`, as JAX does.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence

import numpy as np

from remat import dtypes, tree
from remat.argcheck import check_callable, describe, leaf_paths
from remat.autodiff import backward_pass, replay_known
from remat.core import Aval, BlockJVP, declare
from remat.errors import ArgumentTypeError, ArgumentValueError, DTypeError, ShapeError, callable_name
from remat.forward import instantiate, jvp_graph
from remat.graph import Graph
from remat.loops.body import shared_captures, tensor_leaves, type_of, widen
from remat.loops.prune import prune_cond
from remat.ops.elementwise import astype, clip, equal, where
from remat.ops.identity import stop_gradient
from remat.tensor import Tensor, is_tensor_like
from remat.trace import asarray, bind, current_trace, new_trace, outer_reads, trace_function
from remat.vaxes import align_to, merge
from remat.vectorize import block_rule


def _ordered(branches: dict) -> list[Graph]:
    return [branches[f"branch{k}"] for k in range(len(branches))]


def _cond_rule(index, *avals, num_residuals=0, **branches):
    graphs = _ordered(branches)
    if index.shape != () or index.dtype != np.int32:
        raise DTypeError(f"the index must be an int32 scalar, got {index.dtype} {index.shape}")
    for k, g in enumerate(graphs):
        if [Aval(v.shape, v.dtype) for v in g.inputs] != list(avals):
            raise ShapeError(f"operands do not match the inputs of branch{k}")
    outs = [[Aval(v.shape, v.dtype) for v in g.outputs] for g in graphs]
    if any(o != outs[0] for o in outs):
        raise ShapeError(f"branches return different types: {outs}")
    return outs[0]


def _cond_vjp(gs, index, *operands, out, num_residuals=0, **branches):
    # x' = branch_i'(x, g) for the branch i that ran: one block, the same index. It recomputes
    # the branch's forward values from the operands, but those the cond outputs as residuals
    # (each branch its own slots, zeros in the others': see loops/policy_reach.py).

    n, k = len(operands), num_residuals
    n_user = len(out) - k
    diff = [i for i, x in enumerate(operands) if dtypes.is_float(x.dtype)]
    has = [g is not None for g in gs]  # a residual has a cotangent in a gradient of the gradient

    def bwd_of(graph: Graph) -> Callable:
        def bwd(*args):
            ops, res, given = list(args[:n]), args[n : n + k], iter(args[n + k :])
            env = replay_known(graph, ops, dict(zip(graph.outputs[n_user:], res)))
            cts = backward_pass(graph, env, [next(given) if h else None for h in has])
            return [asarray(np.zeros(ops[i].shape, ops[i].dtype)) if cts[i] is None else cts[i] for i in diff]

        return bwd

    graphs = _ordered(branches)
    given = [*operands, *out[n_user:], *(g for g in gs if g is not None)]
    if any(t._vaxes for t in given):  # vmap over the cotangents: the front end keeps their axes
        cts = switch(index, [bwd_of(g) for g in graphs], *given)
    else:
        cts = switch_flat(index, [bwd_of(g) for g in graphs], given,
                          [f"cond gradient (branch{k})" for k in range(len(graphs))])
    result: list[Tensor | None] = [None] * (1 + n)
    for i, ct in zip(diff, cts):
        result[1 + i] = ct
    return tuple(result)


def _cond_jvp(ts, index, *operands, num_residuals=0, **branches):  # residuals: outputs like the others
    # One block again: the JVP of the branch that runs, chosen by the same index.

    graphs = _ordered(branches)
    has = [i for i, t in enumerate(ts[1:]) if t is not None]

    def jvp_of(graph: Graph) -> Callable:
        def fn(prim, tans):
            full = [None] * len(prim)
            for i, t in zip(has, tans):
                full[i] = t
            outs, touts = jvp_graph(graph, prim, full)
            return outs, instantiate(touts, graph.outputs)

        return fn

    outs, touts = switch(index, [jvp_of(g) for g in graphs], list(operands), [ts[1 + i] for i in has])
    return outs, instantiate(touts, graphs[0].outputs, none=True)


cond_op = declare("cond", _cond_rule, _cond_vjp, multiple_results=True, jvp=BlockJVP(_cond_jvp), batch=block_rule)
cond_op.prune = prune_cond
cond_op.cost = lambda node, cost_of: max((cost_of(g) for g in node.subgraphs()), default=0.0)  # the dearest branch


def switch_flat(index: Tensor, fns: list[Callable], operands: list[Tensor], names: list[str]) -> list[Tensor]:
    """Bind a cond block over branches taking and returning flat lists of raw tensors."""
    traced = [trace_function(fn, operands, name=name) for fn, name in zip(fns, names)]
    return _bind(index, operands, traced)


def _bind(index: Tensor, operands: list[Tensor], traced) -> list[Tensor]:
    shared = shared_captures([t.captured for t in traced])
    graphs = {f"branch{k}": widen(t.graph, len(operands), t.captured, shared) for k, t in enumerate(traced)}
    trace = current_trace()
    captured = [Tensor._traced(trace, v) for v in shared]
    return list(bind(cond_op, index, *[o._raw() for o in operands], *captured, **graphs))


def cond(pred, true_fn: Callable, false_fn: Callable, *operands):
    """`true_fn(*operands)` if the boolean scalar `pred` is true, else `false_fn(*operands)`, as
    `jax.lax.cond`: one block whose branch is chosen when it runs. Both branches must return the
    same pytree of shapes and dtypes; tensors they read from enclosing scope are captured.

    >>> import remat as rm
    >>> x = rm.asarray([1.0, -2.0])
    >>> rm.cond(rm.sum(x) > 0, lambda v: v * 2.0, lambda v: -v, x)
    Tensor([-1.,  2.], dtype=float32)
    """
    check_callable(true_fn, "cond", "true_fn")
    check_callable(false_fn, "cond", "false_fn")
    p = _scalar("cond", "pred", pred)
    if p.dtype != np.bool_:
        raise DTypeError(f"cond: pred must be a boolean scalar, got a tensor of dtype {p.dtype}; compare it "
                         "(e.g. pred != 0), or use rm.switch for an integer index")
    labels = [f"false_fn {callable_name(false_fn)}", f"true_fn {callable_name(true_fn)}"]
    return _branch("cond", astype(p, "int32"), [false_fn, true_fn], labels, operands)


def switch(index, branches: Sequence[Callable], *operands):
    """`branches[index](*operands)`, as `jax.lax.switch`: `index` is an integer scalar, clamped
    into range; every branch must return the same pytree of shapes and dtypes.

    >>> import remat as rm
    >>> rm.switch(rm.asarray(1), [lambda v: v + 1.0, lambda v: v * 10.0], rm.asarray(2.0))
    Tensor(20., dtype=float32)
    """
    if not isinstance(branches, (list, tuple)):
        raise ArgumentTypeError(f"switch: branches must be a list or tuple of callables, got {describe(branches)}")
    if not branches:
        raise ArgumentValueError("switch: branches is empty; pass at least one callable")
    for k, fn in enumerate(branches):
        check_callable(fn, "switch", f"as branches[{k}]")
    i = _scalar("switch", "index", index)
    if not dtypes.is_int(i.dtype):
        raise DTypeError(f"switch: index must be an integer scalar, got a tensor of dtype {i.dtype}; "
                         "cast it with .astype('int32') (or use rm.cond for a boolean)")
    labels = [f"branches[{k}] {callable_name(fn)}" for k, fn in enumerate(branches)]
    return _branch("switch", astype(i, "int32"), list(branches), labels, operands)


def _takes(loop: str, fn: Callable, label: str, n: int) -> None:
    """A branch that cannot be called with the `n` operands is named before anything is traced."""
    try:
        inspect.signature(fn).bind(*range(n))
    except TypeError as e:
        given = f"{n} operand{'s' if n != 1 else ''}"
        raise ArgumentTypeError(f"{loop}: {label} cannot take the {given} passed ({e}); every branch takes the "
                                "operands, in order") from None
    except ValueError:  # no signature to read: the call will tell
        pass


def _scalar(loop: str, name: str, value) -> Tensor:
    if not is_tensor_like(value):
        raise ArgumentTypeError(f"{loop}: {name} must be a scalar tensor, got {describe(value)}")
    t = asarray(value)
    if t.shape != ():
        raise ShapeError(f"{loop}: {name} must be a scalar, got a tensor of shape {t.shape}; reduce it first "
                         "(e.g. rm.max, rm.sum), or use rm.where to choose element by element")
    return t


def _branch(loop: str, index: Tensor, fns: list[Callable], labels: list[str], operands: tuple):
    leaves, op_tree = tensor_leaves(operands, loop, "operands")
    for fn, label in zip(fns, labels):
        _takes(loop, fn, label, len(operands))
    if len(fns) == 1:
        return fns[0](*operands)
    if index._vaxes:
        return _select(loop, index, fns, labels, operands)
    branches = _Branches(loop, fns, labels, op_tree)
    traced = branches.trace(leaves)
    outs = _bind(index, leaves, traced)
    return tree.unflatten(branches.out_tree, [o._relabel(v) for o, v in zip(outs, branches.out_vaxes)])


class _Branches:
    """The branches as functions of flat tensors. Their results must agree in structure, shape and
    dtype; when they differ in vectorized axes, every branch is traced again and laid out on all."""

    def __init__(self, loop: str, fns: list[Callable], labels: list[str], op_tree: tree.TreeDef):
        self.loop, self.fns, self.labels, self.op_tree = loop, fns, labels, op_tree
        self.out_tree: tree.TreeDef | None = None
        self.out_vaxes: list[tuple] = []

    def trace(self, leaves: list[Tensor]) -> list:
        results: list = []
        traced = [trace_function(self._flat(k, results), leaves, name=f"{self.loop}({callable_name(fn)})")
                  for k, fn in enumerate(self.fns)]
        self.out_tree = check_agree(self.loop, self.labels, results)
        per_branch = [[t._vaxes for t in leaves] for _, leaves in results]
        self.out_vaxes = [merge(axes) for axes in zip(*per_branch)]
        if all(axes == self.out_vaxes for axes in per_branch):
            return traced
        aligned = [self._flat(k, [], self.out_vaxes) for k in range(len(self.fns))]
        return [trace_function(fn, leaves, name=f"{self.loop}({callable_name(f)})") for fn, f in zip(aligned, self.fns)]

    def _flat(self, k: int, results: list, vaxes=None) -> Callable:
        def fn(*flat):
            out = self.fns[k](*tree.unflatten(self.op_tree, flat))
            leaves, treedef = tree.flatten(out)
            _check_tensors(self.loop, self.labels[k], out, leaves)
            tensors = [asarray(x) for x in leaves]
            results.append((treedef, tensors))
            return tensors if vaxes is None else [align_to(t, v) for t, v in zip(tensors, vaxes)]

        return fn


def _check_tensors(loop: str, label: str, out, leaves) -> None:
    for leaf, path in zip(leaves, leaf_paths(out, "output")):
        if not is_tensor_like(leaf):
            raise ArgumentTypeError(f"{loop}: {label} returned {describe(leaf)} as {path}; branches return "
                                    "pytrees of tensors")


def check_agree(loop: str, labels: list[str], results: list) -> tree.TreeDef:
    """The common structure of the branches' results `[(treedef, tensors)]`, or an error naming
    the first branch that differs from the first one, and how."""
    first_tree, first = results[0]
    for label, (treedef, tensors) in zip(labels[1:], results[1:]):
        if treedef != first_tree:
            raise ArgumentTypeError(f"{loop}: {labels[0]} returned structure {first_tree!r} but {label} returned "
                                    f"{treedef!r}; every branch must return the same structure")
        for k, (a, b) in enumerate(zip(first, tensors)):
            error = ShapeError if a.shape != b.shape else DTypeError if a.dtype != b.dtype else None
            if error is not None:
                raise error(f"{loop}: {labels[0]} returned {type_of(a)} as output leaf {k} but {label} returned "
                            f"{type_of(b)}; every branch must return the same shapes and dtypes")
    return first_tree


def _for_own_entries(fn: Callable, operands: tuple, mine: Tensor):
    """`fn(*operands)` reading every float tensor from outside it, operands and captures alike,
    as `where(mine, x, stop_gradient(x))`: JAX passes a cond's captures as operands and masks
    them all. Captures are found by a first trace of `fn`, thrown away, then rebound for the
    second: the closure holds the very objects, so they stand in for their masks while it runs."""
    if current_trace() is None:  # eager: nothing is being differentiated
        return fn(*operands)
    with outer_reads() as reads, new_trace("probe"):
        fn(*operands)
    rebound = [(x, x._stand_in(where(mine, x, stop_gradient(x))))  # `mine`: one flag per entry
               for x in reads.seen.values() if dtypes.is_float(x.dtype)]
    try:
        return fn(*operands)
    finally:
        for x, state in reversed(rebound):
            x._restore(state)


def _select(loop: str, index: Tensor, fns, labels, operands):
    """Under vmap, each entry may take another branch: run them all and pick per entry. Each
    branch reads everything from outside it, operands and captures, through stop_gradient at the
    entries that do not take it (as JAX's batched cond does with its operands, captures among
    them): a branch that is NaN there (sqrt of a negative, log of zero) then sends back no
    gradient, where 0 * NaN would have been NaN."""
    chosen = clip(index, 0, len(fns) - 1)
    results = []
    for k, fn in enumerate(fns):
        out = _for_own_entries(fn, operands, equal(chosen, k))
        leaves, treedef = tree.flatten(out)
        _check_tensors(loop, labels[k], out, leaves)
        results.append((treedef, [asarray(x) for x in leaves]))
    treedef = check_agree(loop, labels, results)
    picked = results[-1][1]
    for k in reversed(range(len(fns) - 1)):
        picked = [where(equal(chosen, k), a, b) for a, b in zip(results[k][1], picked)]
    return tree.unflatten(treedef, picked)
