"""Values a checkpoint's derivative rules compute from primal values alone — the `cos` of a
`sin`, the `1 - y*y` of a `tanh` — which a policy may save as well as the body's own values, as
JAX's policies see the primal operations of a JVP (`policy=lambda op, *_: op == "cos"` saves
the cosines in the forward pass, and the backward pass computes neither sin nor cos).

- `gradient_view(body)` traces the body's VJP once and splits the backward pass into the nodes
  that read only primal values (derivable) and the rest; the policy is asked about both.
- `with_derived(body, view, residuals)` moves the derivable nodes a saved value needs into the
  forward body.
- `Numbering.reuse_saved` is the other half, in the backward block: a node computing the same
  value from the same values as a saved one (compared structurally) reads the saved one.

Layout ops (transposes, reshapes, broadcasts) are not offered: saving a transposed weight
would only copy it.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

import numpy as np

from remat import dtypes
from remat.autodiff import backward_pass, replay
from remat.core import OPS, pruned
from remat.graph import Graph, Node, Var, needed
from remat.trace import new_trace


class GradientView(NamedTuple):
    """The body's VJP as traced once. `graph` has the replayed body's nodes, then the derivable
    backward nodes; `read` is what the rest of the backward pass reads of them, `read_all` what
    all of it reads; `body_of` maps the replay's Vars to the body's."""

    graph: Graph
    read: set[Var]
    read_all: set[Var]
    body_of: dict[Var, Var]
    derivable: list[Node]

    def plain_reads(self) -> set[Var]:
        """The body Vars the body's own VJP reads: what it keeps without a checkpoint. For a value
        the replay has and the body does not (a loop's per-step residuals), the body Vars it is
        computed from: keeping those, the backward block recomputes it."""
        made = {v: n for n in self.graph.nodes for v in n.outputs}
        reads, stack, seen = set(), list(self.read_all), set()
        while stack:
            v = stack.pop()
            if v in seen:
                continue
            seen.add(v)
            if v in self.body_of:
                reads.add(self.body_of[v])
            elif v in made:
                stack += made[v].inputs
        return reads


def gradient_view(body: Graph) -> GradientView:
    with new_trace("checkpoint policy") as t:
        env = replay(body, [t.new_input(v.shape, v.dtype) for v in body.inputs])
        start = len(t.nodes)
        seeds = [t.new_input(v.shape, v.dtype) if dtypes.is_float(v.dtype) else None for v in body.outputs]
        backward_pass(body, env, seeds)
        nodes, constants, inputs = list(t.nodes), dict(t.constants), list(t.inputs[: len(body.inputs)])
    body_of = {x._var: v for v, x in env.items() if not x.is_concrete}
    primal = set(body_of) | set(constants)  # values a derivable node may read
    derivable, rest = [], []
    for n in nodes[start:]:
        ok = "layout" not in OPS[n.op].traits and not n.subgraphs() and all(v in primal for v in n.inputs)
        if ok and not all(v in constants for v in n.inputs):
            derivable.append(n)
            primal.update(n.outputs)
        else:
            rest.append(n)
    read = {v for n in rest for v in n.inputs}
    read_all = read | {v for n in derivable for v in n.inputs}
    graph = Graph(inputs, [], nodes[:start] + derivable, constants)
    return GradientView(graph, read, read_all, body_of, derivable)


def with_derived(body: Graph, view: GradientView, residuals: list[Var]) -> tuple[Graph, list[Var]]:
    """`body` computing the saved derivative values too, and the residuals as body Vars."""
    made = {v: n for n in view.derivable for v in n.outputs}
    wanted: set[int] = set()
    stack = [v for v in residuals if v in made]
    while stack:  # the derivable nodes the saved values are computed from
        n = made[stack.pop()]
        if id(n) not in wanted:
            wanted.add(id(n))
            stack += [v for v in n.inputs if v in made]
    if not wanted:
        return body, [view.body_of[v] for v in residuals]
    extra = [Node(n.op, [view.body_of.get(v, v) for v in n.inputs], n.outputs, n.params, n.source)
             for n in view.derivable if id(n) in wanted]
    constants = {**body.constants, **{v: view.graph.constants[v] for n in extra for v in n.inputs
                                      if v in view.graph.constants}}
    new = Graph(body.inputs, body.outputs, body.nodes + extra, constants)
    return new, [view.body_of.get(v, v) for v in residuals]


# ---------------------------------------------------------------- the backward block's side


class Numbering:
    """Structural keys for Vars: equal keys, equal values (deterministic ops on operands of
    equal keys). One numbering compares the forward body with its backward block."""

    def __init__(self):
        self._table: dict[tuple, int] = {}

    def keys(self, graph: Graph) -> dict[Var, object]:
        ids: dict[Var, object] = {v: ("in", i) for i, v in enumerate(graph.inputs)}
        ids.update((v, _constant_key(a)) for v, a in graph.constants.items())
        for n in graph.nodes:
            self._number(n, ids)
        return ids

    def reuse_saved(self, graph: Graph, start: dict[Var, object]) -> Graph:
        """`graph` (a backward block's body) with every node that recomputes a value of known
        key (`start`: the replayed and saved body values) replaced by that value."""
        defined = set(graph.inputs) | {v for n in graph.nodes for v in n.outputs}
        start = {v: k for v, k in start.items() if v in defined}  # a replay the graph dropped is no value
        ids = dict(start)
        ids.update((v, _constant_key(a)) for v, a in graph.constants.items())
        by_key = {k: v for v, k in start.items()}
        rename: dict[Var, Var] = {}
        nodes = []
        for n in graph.nodes:
            if any(v in rename for v in n.inputs):
                n = Node(n.op, [rename.get(v, v) for v in n.inputs], n.outputs, n.params, n.source)
            if all(v in start for v in n.outputs):  # the replay defines these: keep it
                nodes.append(n)
                continue
            self._number(n, ids)
            found = [by_key.get(ids[v]) for v in n.outputs]
            if all(f is not None for f in found):
                rename.update(zip(n.outputs, found))
            else:
                nodes.append(n)
        if not rename:
            return graph
        outputs = [rename.get(v, v) for v in graph.outputs]
        return needed(graph.inputs, outputs, nodes, graph.constants, pruned)

    def _number(self, n: Node, ids: dict[Var, object]) -> None:
        params = _params_key(n.params)
        if params is None or any(v not in ids for v in n.inputs):
            for v in n.outputs:
                ids[v] = ("own", id(v))  # equal to nothing else
            return
        head = (n.op, params, tuple(ids[v] for v in n.inputs))
        for k, v in enumerate(n.outputs):
            ids[v] = ("node", self._table.setdefault((head, k), len(self._table)))


def _params_key(params: dict):
    try:
        key = tuple(sorted((k, _frozen(v)) for k, v in params.items()))
        hash(key)
    except TypeError:
        return None  # a block (its params hold graphs): never merged
    return key


def _frozen(value):
    if isinstance(value, Graph):
        raise TypeError("a graph")
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, np.ndarray):
        return value.dtype.str, value.shape, value.tobytes()
    if isinstance(value, np.dtype):
        return value.str
    return value


def _constant_key(a: np.ndarray) -> tuple:
    a = np.asarray(a)
    return "const", a.shape, a.dtype.str, hashlib.sha1(np.ascontiguousarray(a).tobytes()).hexdigest()
