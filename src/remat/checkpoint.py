"""The checkpoint block: one node holding its body Graph, which inputs are explicit, a policy.

Captures are found by tracing: whatever tensor of an enclosing trace the body reads becomes an
input of the block after the explicit ones. The gradient rule ties the explicit inputs and the
incoming cotangent together with a barrier, recomputes the body from the barrier's outputs (and
the captured tensors, read directly) and back-propagates through the recomputation.

A policy (`rm.policies`) picks body values to save: they become extra outputs of the block (its
residuals, `params["num_residuals"]` of them, after the user's outputs), and the recomputation
reads them instead of recomputing their producers.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable

import numpy as np

from remat import argcheck, dtypes, policies, tree
from remat.errors import ArgumentTypeError, at_source, callable_name, user_source
from remat.graph import Graph, Var
from remat.ops.core import Aval, declare
from remat.ops.identity import barrier
from remat.trace import (
    Tensor,
    asarray,
    bind,
    current_trace,
    is_array,
    is_tensor_like,
    new_trace,
    trace_function,
)


def _checkpoint_rule(*avals, body: Graph, saved: tuple[int, ...], policy, num_residuals=0) -> list[Aval]:
    if [(a.shape, a.dtype) for a in avals] != [(v.shape, v.dtype) for v in body.inputs]:
        raise TypeError("checkpoint inputs do not match its body's inputs")
    return [Aval(v.shape, v.dtype) for v in body.outputs]


def _checkpoint_vjp(gs, *inputs, out, body: Graph, saved, policy, num_residuals=0):
    # With inputs (e..., c...), residuals r... and cotangent g: (e'..., r'..., g') =
    # barrier(e..., r..., g); recompute the body on (e'..., c...) reading r' instead of
    # recomputing the saved values; back-propagate g' through the recomputation.
    from remat.autodiff import backward_pass

    n_out = len(body.outputs) - num_residuals
    user_gs = [asarray(np.zeros(o.shape, o.dtype)) if g is None else g for g, o in zip(gs, out[:n_out])]
    res_gs = list(gs[n_out:])  # non-None only in higher order, where the residuals were read
    present = [g for g in res_gs if g is not None]
    n_saved, n_res = len(saved), num_residuals
    tied = barrier(*[inputs[i] for i in saved], *out[n_out:], *user_gs, *present)
    recompute_inputs = list(inputs)
    for k, i in enumerate(saved):
        recompute_inputs[i] = tied[k]
    env = _replay(body, recompute_inputs, _known(body, tied[n_saved : n_saved + n_res], n_out))
    it = iter(tied[n_saved + n_res + n_out :])
    cts = list(tied[n_saved + n_res : n_saved + n_res + n_out]) + [None if g is None else next(it) for g in res_gs]
    return tuple(backward_pass(body, env, cts))


def _known(body: Graph, residuals, n_out: int) -> dict[Var, Tensor]:
    """Body Vars the recomputation need not compute: the residuals, and the values that
    `checkpoint_name` merely renamed into them."""
    renamed = {n.outputs[0]: n.inputs[0] for n in body.nodes if n.op == "checkpoint_name"}
    inputs = set(body.inputs)
    known: dict[Var, Tensor] = {}
    for v, t in zip(body.outputs[n_out:], residuals):
        while v is not None and v not in inputs:
            known[v] = t
            v = renamed.get(v)
    return known


def _replay(body: Graph, inputs, known: dict[Var, Tensor]) -> dict[Var, Tensor]:
    """`autodiff.replay`, skipping the nodes whose outputs are all known."""
    from remat.autodiff import replay

    if not known:
        return replay(body, inputs)
    nodes = [n for n in body.nodes if not all(v in known for v in n.outputs)]
    part = Graph(body.inputs + list(known), [], nodes, body.constants)
    return replay(part, list(inputs) + list(known.values()))


_checkpoint = declare("checkpoint", _checkpoint_rule, _checkpoint_vjp, multiple_results=True)


def checkpoint(fn: Callable, *inputs, policy=None):
    """Run `fn(*inputs)` as a checkpoint block: its gradient recomputes the body instead of
    keeping its intermediate values. Tensors `fn` reads from enclosing scope are captured.

    >>> import remat as rm
    >>> w = rm.asarray([[2.0]])
    >>> f = lambda x: rm.sum(rm.checkpoint(lambda h: rm.tanh(h @ w), x))
    >>> rm.grad(f)(rm.asarray([[0.0]]))
    Tensor([[2.]], dtype=float32)
    """
    argcheck.check_callable(fn, "checkpoint", "body")
    chooser = policies.resolve(policy)
    _check_arity(fn, inputs)
    if current_trace() is None:  # nothing to differentiate: just run it, by the same rules
        return _check_outputs(fn, fn(*inputs))
    arrays = tree.partition(inputs, is_array)  # the explicit inputs; other leaves pass through
    explicit = [asarray(x) for x in arrays.picked]

    def body(*xs):
        return _check_outputs(fn, fn(*arrays.rebuild(xs)))

    traced = trace_function(body, explicit, name=f"checkpoint({callable_name(fn)})")
    trace = current_trace()
    captured = [Tensor._traced(trace, v) for v in traced.captured]
    n = len(explicit)
    saved = tuple(range(n)) if n else tuple(range(len(captured)))
    raw_inputs = [e._raw() for e in explicit] + captured  # vectorized axes are plain axes in the block
    graph = traced.graph
    _warn_unknown_names(chooser, graph)
    residuals = _choose_residuals(graph, chooser)
    extra = {"num_residuals": len(residuals)} if residuals else {}  # absent when 0: graphs print short
    graph = Graph(graph.inputs, graph.outputs + residuals, graph.nodes, graph.constants)
    outs = bind(_checkpoint, *raw_inputs, body=graph, saved=saved, policy=policy, **extra)
    return traced.wrap_outputs(list(outs[: len(traced.out_vaxes)]))


def _check_outputs(fn: Callable, out):
    for leaf in tree.leaves(out):
        if not is_tensor_like(leaf):
            raise ArgumentTypeError(
                f"checkpoint: the body {callable_name(fn)} returned a {type(leaf).__name__}; "
                "a checkpoint body must return a pytree of tensors"
            )
    return out


def _warn_unknown_names(policy, body: Graph) -> None:
    """A policy naming values that the body never names (a typo, or a name given in another
    block) saves nothing it was meant to, or everything: say so rather than run silently."""
    if not isinstance(policy, (policies.SaveOnlyTheseNames, policies.SaveAnyNamesButThese)):
        return
    present = sorted({n.params["name"] for n in body.nodes if n.op == "checkpoint_name"})
    missing = [n for n in policy.names if n not in present]
    if missing:
        warnings.warn(policies.UnusedNameWarning(
            f"checkpoint: policy {policy!r} names {', '.join(map(repr, missing))}, but no value in the "
            f"checkpoint body has {'that name' if len(missing) == 1 else 'those names'} (names in the body: "
            f"{', '.join(map(repr, present)) or 'none'}); tag values with rm.checkpoint_name(x, name)"
            f"{at_source(user_source())}"
        ), stacklevel=3)


def _choose_residuals(body: Graph, policy) -> list[Var]:
    """The body values to save: those the policy picks that the gradient needs, directly or to
    recompute an unsaved value it needs. Walks backwards from what the body's VJP reads."""
    chosen = [policies.decide(policy, n) for n in body.nodes]
    if not any(chosen):
        return []
    needed = _read_by_gradient(body)
    inputs = set(body.inputs) | set(body.constants)
    provided: set[Var] = set()
    residuals: list[Var] = []
    for node, save in zip(reversed(body.nodes), reversed(chosen)):
        if node.op == "checkpoint_name":  # its input and its output are one value
            src, dst = node.inputs[0], node.outputs[0]
            if dst in provided or save and src not in inputs and (dst in needed or src in needed):
                residuals += [] if dst in provided else [dst]
                provided.update((src, dst))
                continue
        wanted = [v for v in node.outputs if v in needed and v not in provided]
        if wanted and save:
            residuals += wanted
            provided.update(wanted)
        elif wanted:
            needed.update(node.inputs)
    order = {v: i for i, v in enumerate(v for n in body.nodes for v in n.outputs)}
    return sorted(residuals, key=order.__getitem__)


def _read_by_gradient(body: Graph) -> set[Var]:
    """The body Vars that its VJP (the replayed forward, then backward_pass) reads."""
    from remat.autodiff import backward_pass, replay

    with new_trace("checkpoint policy") as t:
        env = replay(body, [t.new_input(v.shape, v.dtype) for v in body.inputs])
        start = len(t.nodes)
        ones = [asarray(np.ones(v.shape, v.dtype)) if dtypes.is_float(v.dtype) else None for v in body.outputs]
        backward_pass(body, env, ones)
        read = {v for node in t.nodes[start:] for v in node.inputs}
    return {v for v, x in env.items() if not x.is_concrete and x._var in read}


def remat(fn: Callable, policy=None) -> Callable:
    """Decorator form of `checkpoint`: positional arguments are the explicit inputs.

    >>> import remat as rm
    >>> @rm.remat
    ... def layer(h):
    ...     return rm.tanh(h)
    >>> layer(rm.asarray(0.0))
    Tensor(0., dtype=float32)
    """
    argcheck.check_callable(fn, "remat", "body")
    policies.resolve(policy, "remat")  # a bad policy fails here, not at the first call

    @functools.wraps(fn)
    def wrapped(*args):
        return checkpoint(fn, *args, policy=policy)

    return wrapped


def _check_arity(fn: Callable, inputs: tuple) -> None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # builtins without a signature: let the call speak for itself
    try:
        sig.bind(*inputs)
    except TypeError as e:
        raise ArgumentTypeError(
            f"checkpoint: {callable_name(fn)} cannot be called with {len(inputs)} inputs: {e}") from None
