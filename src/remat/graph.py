"""The IR: a Graph of Nodes in SSA form over typed Vars, its printer and its checker.

    graph(a:f32[4,8], b:f32[8,3]) {
      c:f32[4,3] = matmul a b
      d:f32[4,3] = tanh c
      return d
    }

A Var is defined once: as a graph input, a constant, or the output of one node. Blocks (the
checkpoint) are nodes whose params hold sub-Graphs; the printer indents them. A Region marks the
nodes traced inside `with rm.memory_budget(...)`: the printer shows it as that `with`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from remat import dtypes
from remat.core import OPS, pruned


class Var:
    """A value in a Graph: only its shape and dtype are known."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return int(math.prod(self.shape)) * self.dtype.itemsize

    @property
    def type_str(self) -> str:
        return type_str(self.shape, self.dtype)

    def __repr__(self) -> str:
        return f"Var({self.type_str})"


def type_str(shape: tuple[int, ...], dtype) -> str:
    return f"{dtypes.short_name(dtype)}[{','.join(map(str, shape))}]"


class Node:
    """One operation: `outputs = op(*inputs, **params)`; `source` is the user's line that made it."""

    __slots__ = ("op", "inputs", "outputs", "params", "source")

    def __init__(self, op: str, inputs, outputs, params: dict[str, Any], source: str | None = None):
        self.op = op
        self.inputs = tuple(inputs)
        self.outputs = tuple(outputs)
        self.params = dict(params)
        self.source = source

    def subgraphs(self) -> list[Graph]:
        return [p for p in self.params.values() if isinstance(p, Graph)]

    def __repr__(self) -> str:
        return f"Node({self.op}, {len(self.inputs)} in, {len(self.outputs)} out)"


@dataclass(frozen=True)
class Region:
    """The top-level nodes `[start, stop)` of a graph, traced inside `with rm.memory_budget(budget,
    strategy)` at `source`: a gradient step plans them as a step of their own within `budget`
    (`remat.planner.regions`). Regions nest; they never overlap otherwise."""

    start: int
    stop: int
    budget: object  # as the user wrote it
    strategy: str | None = None
    source: str | None = None


class Graph:
    """A function in SSA form: `inputs` -> `nodes` -> `outputs`, with `constants` bound to arrays;
    `regions` are the budgeted parts of its nodes (none but where a trace recorded them)."""

    def __init__(self, inputs, outputs, nodes, constants: dict[Var, np.ndarray] | None = None,
                 regions: tuple[Region, ...] = ()):
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.nodes = list(nodes)
        self.constants = dict(constants or {})
        self.regions = tuple(regions)

    def __str__(self) -> str:
        return "\n".join(_Printer().graph(self, "graph", 0))

    __repr__ = __str__

    def walk(self) -> Iterator[Node]:
        """Every node, including those in sub-graphs, depth first in program order."""
        stack = [iter(self.nodes)]
        while stack:
            node = next(stack[-1], None)
            if node is None:
                stack.pop()
                continue
            yield node
            for sub in reversed(node.subgraphs()):
                stack.append(iter(sub.nodes))

    def count(self, op: str) -> int:
        """How many nodes run `op`, sub-graphs included."""
        return sum(1 for n in self.walk() if n.op == op)


class _Printer:
    """Names Vars a, b, ..., z, ba, ... in order of first appearance, across sub-graphs."""

    def __init__(self):
        self.names: dict[Var, str] = {}

    def name(self, v: Var) -> str:
        if v not in self.names:
            self.names[v] = _letters(len(self.names))
        return self.names[v]

    def decl(self, v: Var) -> str:
        return f"{self.name(v)}:{v.type_str}"

    def operand(self, v: Var, graph: Graph) -> str:
        if v in graph.constants and v.ndim == 0:
            return repr(graph.constants[v].item())
        return self.name(v)

    def graph(self, g: Graph, title: str, depth: int) -> list[str]:
        pad = "  " * depth
        lines = [f"{pad}{title}({', '.join(self.decl(v) for v in g.inputs)}) {{"]
        for v, value in g.constants.items():
            if v.ndim:
                lines.append(f"{pad}  {self.decl(v)} = const {_short_array(value)}")
        # Outer regions first: wider, or over the same nodes and closed later (listed later).
        order = sorted(range(len(g.regions)), key=lambda k: (g.regions[k].start, -g.regions[k].stop, -k))
        starts = [g.regions[k] for k in order]
        open_: list[Region] = []
        for i, node in enumerate(g.nodes):
            while open_ and open_[-1].stop <= i:
                open_.pop()
                lines.append(f"{pad}{'  ' * (len(open_) + 1)}}}")
            while starts and starts[0].start == i:
                r = starts.pop(0)
                strategy = f", strategy={r.strategy!r}" if r.strategy is not None else ""
                lines.append(f"{pad}{'  ' * (len(open_) + 1)}memory_budget({r.budget!r}{strategy}) {{")
                open_.append(r)
            lines.extend(self.node(node, g, depth + 1 + len(open_)))
        for k in reversed(range(len(open_))):
            lines.append(f"{pad}{'  ' * (k + 1)}}}")
        outs = ", ".join(self.operand(v, g) for v in g.outputs)
        lines.append(f"{pad}  return {outs}")
        lines.append(f"{pad}}}")
        return lines

    def node(self, node: Node, g: Graph, depth: int) -> list[str]:
        pad = "  " * depth
        outs = " ".join(self.decl(v) for v in node.outputs)
        plain = {k: v for k, v in sorted(node.params.items()) if v is not None and not isinstance(v, Graph)}
        params = ""
        if plain:
            params = "[" + " ".join(f"{k}={_param_str(v)}" for k, v in plain.items()) + "]"
        args = " ".join(self.operand(v, g) for v in node.inputs)
        lines = [f"{pad}{outs} = {node.op}{params} {args}".rstrip()]
        for key, sub in sorted(node.params.items()):
            if isinstance(sub, Graph):
                lines.extend(self.graph(sub, key, depth + 1))
        return lines


def _letters(i: int) -> str:
    s = ""
    while True:
        s = chr(ord("a") + i % 26) + s
        i //= 26
        if i == 0:
            return s


def _param_str(v) -> str:
    if isinstance(v, np.dtype):
        return dtypes.short_name(v)
    if isinstance(v, tuple):
        return "(" + ",".join(_param_str(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    if callable(v) and hasattr(v, "__name__"):
        return v.__name__
    return str(v)


def _short_array(a: np.ndarray) -> str:
    if a.size <= 6:
        return np.array2string(a, separator=",").replace("\n", "")
    return f"<{type_str(a.shape, a.dtype)}>"


def live_nodes(nodes, outputs, prune: Callable | None = None) -> tuple[list[Node], set[Var]]:
    """The nodes `outputs` depend on, in order, and the Vars those nodes and `outputs` read:
    dead-code elimination. `prune(node, live)` narrows a node to what is read of it (a loop drops
    the work of outputs nobody reads: `core.pruned`)."""
    live, kept = set(outputs), []
    for node in reversed(nodes):
        if any(v in live for v in node.outputs):
            node = node if prune is None else prune(node, live)
            kept.append(node)
            live.update(node.inputs)
    return kept[::-1], live


def sub_graph(graph: Graph, inputs: list[int], outputs: list[int]) -> tuple[Graph, set[Var]]:
    """`graph` restricted to some of its inputs and outputs (positions), each block in it pruned
    to what is read of it, and the Vars it reads."""
    outs = [graph.outputs[k] for k in outputs]
    nodes, read = live_nodes(graph.nodes, outs, pruned)
    constants = {v: a for v, a in graph.constants.items() if v in read}
    return Graph([graph.inputs[i] for i in inputs], outs, nodes, constants), read


def needed(inputs, outputs, nodes, constants: dict, prune: Callable | None = None) -> Graph:
    """The Graph of the `nodes` (and `constants`) that `outputs` depend on (see `live_nodes`)."""
    kept, live = live_nodes(nodes, outputs, prune)
    return Graph(inputs, outputs, kept, {v: a for v, a in constants.items() if v in live})


class GraphError(ValueError):
    """The IR broke one of its own invariants (a bug in a transformation, not in user code)."""


def check(graph: Graph) -> None:
    """Verify SSA: each Var defined once and before use, with the shapes its op's rule gives."""
    _check(graph, OPS, outer=set())


def _check(graph: Graph, ops, outer: set) -> None:
    defined: set[Var] = set()

    def define(v: Var, what: str) -> None:
        if v in defined:
            raise GraphError(f"{v.type_str} defined twice ({what})")
        defined.add(v)

    for v in graph.inputs:
        define(v, "input")
    for v in graph.constants:
        define(v, "constant")
    for i, node in enumerate(graph.nodes):
        for v in node.inputs:
            if v not in defined:
                raise GraphError(f"node {i} ({node.op}) uses a Var before it is defined")
        op = ops.get(node.op)
        if op is None:
            raise GraphError(f"node {i} has unknown op {node.op!r}")
        expected = op.abstract_eval([(v.shape, v.dtype) for v in node.inputs], node.params)
        got = [(v.shape, v.dtype) for v in node.outputs]
        if [(tuple(s), np.dtype(d)) for s, d in expected] != got:
            raise GraphError(f"node {i} ({node.op}): outputs {got} but its rule gives {expected}")
        for sub in node.subgraphs():
            _check(sub, ops, outer=set())
        for v in node.outputs:
            define(v, f"output of {node.op}")
    for v in graph.outputs:
        if v not in defined:
            raise GraphError(f"graph output {v.type_str} is never defined")
