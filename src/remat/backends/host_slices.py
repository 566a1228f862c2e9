"""Stacked arguments sliced, and stacked results joined, on the host rather than by XLA:CPU.

A model whose layers read `W[i]` from one stacked argument would have XLA slice `W` at L
offsets: on the CPU every slice is a kernel of its own, compiled and run apart, so an L-layer
model compiles L more kernels than the same model given a list of weights (at 256 layers its
first call took 3.9-5x the list model's, `benchmarks/stacked_weights.py`; sliced here, 0.9-1.2x).
Its gradient, the slices' cotangents laid side by side (remat/accumulate.py), is one `concat` of
L pieces, another costly kernel. On the host both are free or nearly: a slice of a NumPy array
(or of a JAX array on the CPU, seen through NumPy) is a view, and joining the pieces is one copy
of the gradient. So the program takes the slices as arguments and returns the pieces;
`HostSlices` slices the caller's arguments and joins the results, and the executables are those
of the list-of-weights model.

An argument is sliced here when two or more nodes read it through unit-step slices cutting the
same single axis; a result is joined here when it is a `concat` nothing else reads. An argument
also read whole (a weight decay term, an optimizer's update in the same step) reaches the program
whole as well, beside its slices, unless it is donated: XLA may write the buffer of a donated
argument, and the slices are views of it. Other slices keep their place in the program.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from remat.graph import Graph
from remat.stacked import readers, shared_cut, unit_step_cut


@dataclasses.dataclass(frozen=True)
class HostSlices:
    """How the program's arguments come from the caller's and its results make the caller's.
    `inputs`: per program input, (caller's position, axis, start, stop), axis None for the
    argument as it is. `outputs`: per caller's result, the program's output position, or
    (axis, positions) of the pieces to join."""

    inputs: tuple[tuple[int, int | None, int, int], ...]
    outputs: tuple[int | tuple[int, tuple[int, ...]], ...]

    def wrap(self, run):
        return _Run(run, self)


class _Run:
    """`run` (a backend's callable) taking the caller's arguments and giving the caller's results."""

    def __init__(self, run, plan: HostSlices):
        self._run = run
        self._plan = plan

    @property
    def last_memory(self):
        return getattr(self._run, "last_memory", None)

    def __call__(self, *args):
        host: dict[int, np.ndarray] = {}
        ins = []
        for pos, axis, start, stop in self._plan.inputs:
            if axis is None:
                ins.append(args[pos])
                continue
            if pos not in host:
                host[pos] = np.asarray(args[pos])  # a JAX array on the CPU: its own memory, uncopied
            ins.append(host[pos][(slice(None),) * axis + (slice(start, stop),)])
        outs = self._run(*ins)
        return [outs[o] if isinstance(o, int) else np.concatenate([np.asarray(outs[k]) for k in o[1]], o[0])
                for o in self._plan.outputs]


def host_slices(graph: Graph, donated: tuple[int, ...] = ()) -> tuple[Graph, HostSlices | None]:
    """`graph` with its stacked arguments' slices as inputs and its joined results as pieces,
    and the plan to call it with; `(graph, None)` when there is nothing to move, or when JAX
    runs on an accelerator, whose arrays are sliced on the device. `donated`: the positions of
    arguments the caller gives up, sliced here only if nothing reads them whole."""
    import jax

    if jax.default_backend() != "cpu":
        return graph, None
    read_by = readers(graph)
    results = set(graph.outputs)
    moved: set[int] = set()
    inputs, in_plan = [], []
    for pos, v in enumerate(graph.inputs):
        nodes = read_by.get(v, [])
        sliced = [n for n in nodes if unit_step_cut(n) is not None]
        whole = len(sliced) < len(nodes)
        # Not a donated argument also read whole: XLA may write its buffer, of which slices are views.
        cuttable = v not in results and len(sliced) > 1 and not (whole and pos in donated)
        axis = shared_cut(sliced) if cuttable else None
        if axis is None or whole:
            inputs.append(v)
            in_plan.append((pos, None, 0, 0))
        if axis is None:
            continue
        for node in sliced:
            moved.add(id(node))
            inputs.append(node.outputs[0])
            in_plan.append((pos, axis, node.params["start"][axis], node.params["stop"][axis]))
    producer = {o: node for node in graph.nodes for o in node.outputs}
    outputs, out_plan = [], []
    for v in graph.outputs:
        node = producer.get(v)
        if node is None or node.op != "concat" or v in read_by or graph.outputs.count(v) > 1:
            out_plan.append(len(outputs))
            outputs.append(v)
            continue
        moved.add(id(node))
        out_plan.append((node.params["axis"], tuple(range(len(outputs), len(outputs) + len(node.inputs)))))
        outputs.extend(node.inputs)
    if not moved:
        return graph, None
    nodes = [n for n in graph.nodes if id(n) not in moved]
    return Graph(inputs, outputs, nodes, graph.constants), HostSlices(tuple(in_plan), tuple(out_plan))
