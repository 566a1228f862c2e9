"""The checkpoint block: one node holding its body Graph, which inputs are explicit, a policy.

Captures are found by tracing: whatever tensor of an enclosing trace the body reads becomes an
input of the block after the explicit ones. The gradient rule ties the explicit inputs and the
incoming cotangent together with a barrier, recomputes the body from the barrier's outputs (and
the captured tensors, read directly) and back-propagates through the recomputation.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable

import numpy as np

from remat import tree
from remat.graph import Graph
from remat.ops.core import Aval, declare
from remat.ops.identity import barrier
from remat.trace import Tensor, asarray, bind, current_trace, is_tensor_like, trace_function


def _checkpoint_rule(*avals, body: Graph, saved: tuple[int, ...], policy) -> list[Aval]:
    if [(a.shape, a.dtype) for a in avals] != [(v.shape, v.dtype) for v in body.inputs]:
        raise TypeError("checkpoint inputs do not match its body's inputs")
    return [Aval(v.shape, v.dtype) for v in body.outputs]


def _checkpoint_vjp(gs, *inputs, out, body: Graph, saved, policy):
    # With inputs (e..., c...) and cotangent g: (e'..., g') = barrier(e..., g); recompute the body
    # on (e'..., c...); back-propagate g' through the recomputation.
    from remat.autodiff import backward_pass, replay

    gs = [asarray(np.zeros(o.shape, o.dtype)) if g is None else g for g, o in zip(gs, out)]
    tied = barrier(*[inputs[i] for i in saved], *gs)
    recompute_inputs = list(inputs)
    for k, i in enumerate(saved):
        recompute_inputs[i] = tied[k]
    env = replay(body, recompute_inputs)
    return tuple(backward_pass(body, env, tied[len(saved) :]))


_checkpoint = declare("checkpoint", _checkpoint_rule, _checkpoint_vjp, multiple_results=True)


def _is_input(leaf) -> bool:
    return isinstance(leaf, (Tensor, np.ndarray))


def checkpoint(fn: Callable, *inputs, policy=None):
    """Run `fn(*inputs)` as a checkpoint block: its gradient recomputes the body instead of
    keeping its intermediate values. Tensors `fn` reads from enclosing scope are captured.

    >>> import remat as rm
    >>> w = rm.asarray([[2.0]])
    >>> f = lambda x: rm.sum(rm.checkpoint(lambda h: rm.tanh(h @ w), x))
    >>> rm.grad(f)(rm.asarray([[0.0]]))
    Tensor([[2.]], dtype=float32)
    """
    if not callable(fn):
        raise TypeError(f"checkpoint: expected a callable body, got {type(fn).__name__}")
    _check_arity(fn, inputs)
    if current_trace() is None:
        return fn(*inputs)
    leaves, in_tree = tree.flatten(inputs)
    positions = [i for i, x in enumerate(leaves) if _is_input(x)]
    explicit = [asarray(leaves[i]) for i in positions]

    def body(*xs):
        merged = list(leaves)
        for i, x in zip(positions, xs):
            merged[i] = x
        out = fn(*tree.unflatten(in_tree, merged))
        for leaf in tree.leaves(out):
            if not is_tensor_like(leaf):
                raise TypeError(
                    f"checkpoint: the body {_name(fn)} returned a {type(leaf).__name__}; "
                    "a checkpoint body must return a pytree of tensors"
                )
        return out

    graph, out_tree, captured = trace_function(body, explicit, name=f"checkpoint({_name(fn)})")
    trace = current_trace()
    captured_tensors = [Tensor._traced(trace, v) for v in captured]
    n = len(explicit)
    saved = tuple(range(n)) if n else tuple(range(len(captured)))
    outs = bind(_checkpoint, *explicit, *captured_tensors, body=graph, saved=saved, policy=policy)
    return tree.unflatten(out_tree, list(outs))


def remat(fn: Callable, policy=None) -> Callable:
    """Decorator form of `checkpoint`: positional arguments are the explicit inputs.

    >>> import remat as rm
    >>> @rm.remat
    ... def layer(h):
    ...     return rm.tanh(h)
    >>> layer(rm.asarray(0.0))
    Tensor(0., dtype=float32)
    """

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
        raise TypeError(f"checkpoint: {_name(fn)} cannot be called with {len(inputs)} inputs: {e}") from None


def _name(fn) -> str:
    if isinstance(fn, functools.partial):
        return _name(fn.func)
    return getattr(fn, "__name__", type(fn).__name__)
