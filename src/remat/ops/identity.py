"""Ops whose value is their input and whose point is what they do to gradients or schedules."""

from __future__ import annotations

from remat import tree
from remat.core import NOT_DIFFERENTIABLE, BlockJVP, declare
from remat.errors import ArgumentTypeError
from remat.tensor import Tensor
from remat.trace import asarray, bind

_stop_gradient = declare("stop_gradient", lambda x: x, NOT_DIFFERENTIABLE, traits={"layout"})

# Outputs equal inputs. In a gradient graph it ties the recomputation of a checkpoint to the
# incoming cotangent so that no scheduler can run it early or merge it with the forward pass.
# Its VJP is a barrier too, so the second-order recomputation stays ordered as well.
def _barrier_vjp(gs, *xs, out):
    present = [g for g in gs if g is not None]
    tied = iter(barrier(*present) if present else ())
    return tuple(None if g is None else next(tied) for g in gs)


def _barrier_jvp(ts, *xs):
    # One barrier over the values and their tangents: what waits for it waits for both.
    present = [t for t in ts if t is not None]
    tied = barrier(*xs, *present)
    rest = iter(tied[len(xs) :])
    return tied[: len(xs)], tuple(None if t is None else next(rest) for t in ts)


def _barrier_batch(op, tensors, params, names):
    # Each output keeps its own operand's vectorized axes: a barrier lays nothing out.
    outs = bind(op, *[t._raw() for t in tensors])
    return tuple(o._relabel(t._vaxes) for o, t in zip(outs, tensors))


_barrier = declare("barrier", lambda *xs: xs, _barrier_vjp, multiple_results=True, jvp=BlockJVP(_barrier_jvp),
                   batch=_barrier_batch, traits={"layout"})

_name = declare("checkpoint_name", lambda x, *, name: x, lambda g, x, out, name: (g,),
                jvp=lambda ts, x, out, name: ts[0], traits={"layout"})


def stop_gradient(x) -> Tensor:
    """`x`, through which no gradient flows."""
    return bind(_stop_gradient, asarray(x))


def barrier(*xs) -> tuple[Tensor, ...]:
    """The inputs unchanged, ordered after all of them are computed (an optimization barrier)."""
    return bind(_barrier, *xs)


def checkpoint_name(x, name: str):
    """`x` (a tensor, or a pytree of them, as in JAX) tagged with `name`, so checkpoint policies
    can choose to save it.

    >>> import remat as rm
    >>> rm.checkpoint_name({"k": rm.ones(2), "v": rm.zeros(2)}, "kv")["v"]
    Tensor([0., 0.], dtype=float32)
    """

    if not isinstance(name, str):
        raise ArgumentTypeError(f"checkpoint_name: name must be a str, got {type(name).__name__} {name!r:.60}")
    return tree.map(lambda leaf: bind(_name, asarray(leaf), name=name), x)
