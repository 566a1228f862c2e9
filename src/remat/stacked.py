"""The stacked-weights idiom in a graph: layers reading `W[i]` from one stacked tensor `W`.

Each layer's weights are a slice of `W` cutting one axis (the layers') and keeping every other
whole. Passes that make the idiom as cheap as a list of weights find these slices here: the XLA
backend reads one-element slices at run-time offsets (backends/xla_offsets.py) or slices the
arguments on the host (backends/host_slices.py), a checkpoint block takes the slices of what it
captures outside itself (checkpoint/block.py), and the backward pass lays the slices' cotangents side
by side (accumulate.py).
"""

from __future__ import annotations

from remat.graph import Graph, Node, Var


def readers(graph: Graph) -> dict[Var, list[Node]]:
    """Each var that nodes of `graph` read, with those nodes in order (a node once per input
    that is the var)."""
    out: dict[Var, list[Node]] = {}
    for node in graph.nodes:
        for v in node.inputs:
            out.setdefault(v, []).append(node)
    return out


def only_sliced(nodes: list[Node]) -> bool:
    """Whether `nodes`, the readers of a var, are one or more slices (of it: a slice reads one
    var) and nothing else, whatever they cut."""
    return bool(nodes) and all(n.op == "slice" for n in nodes)


def cut_axis(node: Node) -> int | None:
    """The one axis a slice node does not take whole (start 0, stop its size, step 1); None for
    another op, or for a slice that takes every axis whole or cuts several."""
    if node.op != "slice":
        return None
    p, shape = node.params, node.inputs[0].shape
    cut = [d for d, n in enumerate(shape) if (p["start"][d], p["stop"][d], p["step"][d]) != (0, n, 1)]
    return cut[0] if len(cut) == 1 else None


def unit_step_cut(node: Node) -> int | None:
    """`cut_axis` of a slice taking a run of one or more elements at step 1 (`W[i:j]`)."""
    axis, p = cut_axis(node), node.params
    return axis if axis is not None and p["step"][axis] == 1 and p["stop"][axis] > p["start"][axis] else None


def one_element_cut(node: Node) -> int | None:
    """`cut_axis` of a slice taking one element of that axis (`W[i]`, before the axis is dropped)."""
    axis, p = cut_axis(node), node.params
    return axis if axis is not None and p["stop"][axis] - p["start"][axis] == 1 else None


def shared_cut(nodes: list[Node]) -> int | None:
    """The axis all of `nodes` cut as `unit_step_cut` says; None when one of them is no such
    slice or two cut different axes."""
    axes = {unit_step_cut(n) for n in nodes}
    return axes.pop() if len(axes) == 1 and None not in axes else None
