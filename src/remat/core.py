"""What an op is: a name, a shape/dtype rule, a VJP rule and a batch rule, declared together once.

Backends never compute shapes: they look the op up by name in their own table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from remat.graph import Graph, Node, Var


class Aval(NamedTuple):
    """The abstract value of a tensor: what the shape rule sees."""

    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)


class _NotDifferentiable:
    def __repr__(self) -> str:
        return "NOT_DIFFERENTIABLE"


#: The VJP of an op whose outputs carry no gradient (comparisons, argmax, integer results).
NOT_DIFFERENTIABLE: Any = _NotDifferentiable()


class BlockJVP(NamedTuple):
    """The JVP rule of a block (checkpoint, loops, custom rules), which computes its primal and
    tangent outputs together: `rule(tangents, *inputs, **params) -> (outputs, tangent outputs)`,
    so a checkpoint's tangent is one checkpointed block, not a second pass over the body."""

    rule: Callable


class PerStep(NamedTuple):
    """A block output holding one value of a sub-graph per step (a scan's stacked ys), as
    `Op.describe_output` gives it: the memory report names it as it names that `value` of
    `body`, followed by `steps` ("one per step of the scan at model.py:3")."""

    body: Graph
    value: Var
    steps: str


class Op:
    """A primitive. `rule(*avals, **params)` gives the output aval(s); `vjp(g, *inputs, out=...,
    **params)` gives one cotangent per input (None for none), built from differentiable ops;
    `jvp(tangents, *inputs, out=..., **params)` gives the output tangent(s) from one tangent per
    input (None for a zero one), or is a `BlockJVP`. A differentiable op must have both.
    `batch(op, tensors, params, names)` gives the output(s) of the op on operands some of which
    are vectorized (remat/vaxes.py), `names` the (name, size) of all their vectorized axes, in
    order; `ELEMENTWISE` for an op whose operands broadcast together; None for an op `vmap`
    cannot take."""

    def __init__(self, name: str, rule: Callable, vjp: Callable | Any, multiple_results: bool,
                 jvp: Callable | BlockJVP | None, batch: Callable | Any | None, traits: Iterable[str] = ()):
        self.name = name
        self.rule = rule
        self.vjp = vjp
        self.jvp = jvp
        self.batch = batch
        self.multiple_results = multiple_results
        # A block with several outputs may drop the work of those nobody reads (`Trace.to_graph`):
        # `prune(node, live Vars) -> node`; loops set it (remat/loops/prune.py).
        self.prune: Callable | None = None
        # A block whose body slices what it captures: `hoist_slices(node) -> (slice nodes, node)`,
        # the slices taken outside it, for the backward pass to join their cotangents.
        self.hoist_slices: Callable | None = None
        # Forward mode's partial evaluation of a block reading values and tangents both:
        # `partial_eval(node, unknown Vars) -> (known node, linear node)`; the checkpoint sets it.
        # Without it, forward.py splits a block with its `prune` (a loop, a cond).
        self.partial_eval: Callable | None = None
        # A block keeping residuals for a later gradient (the checkpoint), told to keep none and
        # recompute instead: `without_residuals(node, graph_reads) -> node`, where the residuals its
        # own graph reads (`graph_reads`) stay. forward.py asks it of the blocks inside a loop or a
        # cond it splits, whose primal part must not wait on tangents.
        self.without_residuals: Callable | None = None
        # A gradient replayed for a higher derivative (`autodiff.replay_known`) re-emits a block as
        # `linearize(node, input Tensors) -> output Tensors` rather than binding it; custom_vjp
        # sets it (its fwd as plain code, which can be differentiated again).
        self.linearize: Callable | None = None
        # Facts the planner, the policies and the memory model read, by name: "inline", a block
        # whose body runs once, where it stands (checkpoint, custom_vjp); "dot", a matrix product;
        # "layout", an op that computes no value, only moves, casts or relabels its operands'
        # elements ("copies" when it writes them into a new buffer: pad, concat, take, index_add);
        # "reduction", an op that folds an axis; "transcendental", exp, log, tanh and their kin.
        self.traits = frozenset(traits)
        # A block a checkpoint's policy reaches into, as in JAX (loops/policy_reach.py):
        # `under_policy(node, policy) -> node`, the node rewritten to output, after its own
        # outputs, the values its gradient reads that the policy saves inside it (or as it is).
        self.under_policy: Callable | None = None
        # What one run of a block costs the planner (`remat.planner.cost`): `cost(node, cost_of)
        # -> float`, `cost_of(graph)` being one run of a sub-graph as the planner weighs it; a scan
        # runs its body `length` times, a cond its dearest branch. Without it, a block costs one
        # run of each of its sub-graphs.
        self.cost: Callable | None = None
        # How the memory report (`rm.memory.saved_residuals`) names a block's output k other than
        # "output of <op>": `describe_output(node, k) -> text | PerStep | None` (None: that name);
        # the scan's, for its stacked ys and a binomial gradient's sweep.
        self.describe_output: Callable | None = None

    @property
    def differentiable(self) -> bool:
        return self.vjp is not NOT_DIFFERENTIABLE

    def abstract_eval(self, avals, params: dict) -> list[Aval]:
        out = self.rule(*(Aval(tuple(s), np.dtype(d)) for s, d in avals), **params)
        outs = list(out) if self.multiple_results else [out]
        return [Aval(tuple(int(n) for n in a.shape), np.dtype(a.dtype)) for a in outs]

    def __repr__(self) -> str:
        return f"Op({self.name})"


OPS: dict[str, Op] = {}


def pruned(node: Node, live: set) -> Node:
    """`node` narrowed to the outputs in `live` by its op's `prune` (a loop's), or as it is."""
    prune = OPS[node.op].prune
    return node if prune is None else prune(node, live)


class _Elementwise:
    def __repr__(self) -> str:
        return "ELEMENTWISE"


#: The batch rule of an op whose operands broadcast together, `declare`'s default: the op bound
#: once on its operands laid out with the vectorized axes leading (`vaxes.elementwise`, which
#: vmap applies; it binds ops, so it sits above this module).
ELEMENTWISE: Any = _Elementwise()


def declare(name: str, rule: Callable, vjp: Callable | Any, multiple_results: bool = False,
            jvp: Callable | BlockJVP | None = None, batch: Callable | Any | None = ELEMENTWISE,
            traits: Iterable[str] = ()) -> Op:
    """Register a primitive. Every primitive of remat is declared through this one function.
    `batch` defaults to `ELEMENTWISE`, the rule of an op whose operands broadcast together with
    the vectorized axes leading; None refuses `vmap`. `traits`: see `Op.traits`."""
    if name in OPS:
        raise ValueError(f"op {name!r} is declared twice")
    op = Op(name, rule, vjp, multiple_results, jvp, batch, traits)
    OPS[name] = op
    return op
