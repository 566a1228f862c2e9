"""Slices of one tensor at many offsets, read at offsets XLA gets at run time.

A model whose layers read `W[i]` from one stacked tensor slices `W` at L offsets. XLA bakes a
static slice's offset into the kernel it fuses the slice into, so an L-layer model has L distinct
kernels where a list of weights has one kernel for all layers, each compiled: the forward pass of
a 256-layer MLP (width 64) compiles in 1.9 s with static slices, 0.4 s with each offset a scalar
argument, 0.2 s from a list (JAX 0.10, XLA:CPU). Here such slices become `take`s whose indices
are one-element array constants; the XLA backend hands those to its executables as arguments
(backends/xla.py), so every layer's kernel is the same and compiled once. The values are those
of the slices: the indices are the slices' own, in range.

On the CPU the stacked arguments' slices are mostly made on the host (backends/host_slices.py);
this is for the rest: accelerators, and donated arguments also read whole.
"""

from __future__ import annotations

import numpy as np

from remat.graph import Graph, Node, Var
from remat.stacked import one_element_cut


def offsets_at_run_time(graph: Graph) -> Graph:
    """`graph`, its top-level slices of one element along one axis (`W[i]`) of a tensor sliced so
    at two or more offsets, read as `take`s at array-constant indices. Longer slices stay: a
    gather of many indices costs more than a slice, and they are not the stacked idiom."""
    groups: dict[Var, dict[int, set[int]]] = {}  # operand -> axis -> distinct starts
    for node in graph.nodes:
        axis = one_element_cut(node)
        if axis is not None:
            groups.setdefault(node.inputs[0], {}).setdefault(axis, set()).add(node.params["start"][axis])
    wanted = {(x, axis) for x, by_axis in groups.items() for axis, starts in by_axis.items() if len(starts) > 1}
    if not wanted:
        return graph
    constants = dict(graph.constants)
    nodes = []
    for node in graph.nodes:
        axis = one_element_cut(node)
        if axis is None or (node.inputs[0], axis) not in wanted:
            nodes.append(node)
            continue
        index = np.array([node.params["start"][axis]], np.int32)
        index.flags.writeable = False
        v = Var(index.shape, index.dtype)
        constants[v] = index
        nodes.append(Node("take", (node.inputs[0], v), node.outputs, {"axis": axis}, node.source))
    return Graph(graph.inputs, graph.outputs, nodes, constants)
