"""`rm.grad`, `rm.value_and_grad`, `rm.vjp`: reverse mode (`remat.autodiff`), with the memory
planner (`remat.planner`) as the rewrite of the step's forward graph: the regions of
`rm.memory_budget` in it, and the whole step when a `memory_budget=` is given. The budget
settings are checked here, where the gradient is made, so that a bad one fails at once rather
than at the first call.
"""

from __future__ import annotations

from collections.abc import Callable

from remat import autodiff, budget
from remat.autodiff import Rewrite
from remat.graph import Graph
from remat.planner import regions, solve
from remat.planner.peak import Step


def vjp(fn: Callable, *primals, has_aux: bool = False, memory_budget=None, strategy: str | None = None):
    """`(fn(*primals), vjp_fn)`, where `vjp_fn(cotangent)` gives one cotangent per primal.

    `memory_budget` bounds the memory of the step (forward and backward): remat then places
    checkpoints itself (see docs/memory-budgets.md). It is bytes — an int or a string
    with a unit, `"300MiB"`, `"1.5GB"` — counting the step's inputs and constants and what it
    allocates, or a float fraction in (0, 1] of the activation memory: budget bytes = inputs
    and constants + fraction × what the step allocates without checkpoints. `strategy`: None
    (the plan predicted fastest that fits, the memory it holds counted), "sqrt", "chain" or "milp"
    (each its plan of least recomputation). The plan is made once per
    trace; `rm.memory.plan_report` shows it. Values are bit-identical to the unplanned step's.

    >>> import remat as rm
    >>> y, back = rm.vjp(rm.sin, rm.asarray(0.0))
    >>> back(rm.asarray(1.0))
    (Tensor(1., dtype=float32),)
    """
    return autodiff.vjp(fn, *primals, has_aux=has_aux, rewrite=_planner(memory_budget, strategy, "vjp"))


def value_and_grad(fn: Callable, argnums: int | tuple[int, ...] = 0, has_aux: bool = False, *,
                   memory_budget=None, strategy: str | None = None):
    """A function returning `(fn(*args), gradient)`; the gradient has the structure of the
    arguments named by `argnums` (negative positions count from the end). `fn` must return a
    float scalar (with `has_aux`, a pair `(scalar, aux)`, and the value is `(scalar, aux)`).
    `memory_budget` and `strategy` plan the checkpoints of the step, as in `vjp`.

    >>> import remat as rm
    >>> rm.value_and_grad(lambda x: rm.sum(x * x))(rm.asarray([1.0, 2.0]))
    (Tensor(5., dtype=float32), Tensor([2., 4.], dtype=float32))
    """
    rewrite = _planner(memory_budget, strategy, "value_and_grad")
    return autodiff.value_and_grad(fn, argnums, has_aux, rewrite=rewrite)


def grad(fn: Callable, argnums: int | tuple[int, ...] = 0, has_aux: bool = False, *, memory_budget=None,
         strategy: str | None = None):
    """The gradient of a scalar-valued `fn` with respect to the arguments `argnums`.
    `memory_budget` and `strategy` plan the checkpoints of the step, as in `vjp`.

    >>> import remat as rm
    >>> rm.grad(rm.grad(rm.sin))(rm.asarray(0.0))
    Tensor(-0., dtype=float32)
    >>> layer = lambda h: h + rm.tanh(h)
    >>> loss = lambda x: rm.sum(layer(layer(layer(layer(layer(layer(x)))))))
    >>> rm.grad(loss, memory_budget=0.8)(rm.ones((1024,))).shape  # remat places the checkpoints
    (1024,)
    """
    return autodiff.grad(fn, argnums, has_aux, rewrite=_planner(memory_budget, strategy, "grad"))


def _planner(memory_budget, strategy, where: str) -> Rewrite:
    """The planner as a rewrite of a step's forward graph: the regions of `rm.memory_budget`
    within their budgets, then the whole step within `memory_budget`, if given. A bad setting
    is an error naming `where`."""
    budget.check(memory_budget, strategy, where)

    def planned(graph: Graph, wrt: int, seeded: int) -> Graph:
        step = Step(wrt=wrt, seeded=seeded)
        graph = regions.plan_regions(graph, step)
        if memory_budget is None:
            return graph
        return solve.plan_step(graph, memory_budget, strategy, step)[0]

    return planned


__all__ = ["vjp", "value_and_grad", "grad"]
