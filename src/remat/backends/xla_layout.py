"""Where the values of a sharded XLA program live (issue 16; remat/sharding.py is the user's side).

A program is sharded when `rm.jit` gives it shardings or a `shard` node names a mesh; then every
value has a `NamedSharding` on that one mesh: the arguments as given (else replicated), the
constants replicated, and each stage's outputs as XLA's SPMD partitioner chose them when the
stage before was compiled (backends/xla.py, `Program.placed`). The caller's arrays go to the
devices once, laid out as the program takes them; nothing is gathered on the host.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from remat.errors import ArgumentValueError
from remat.graph import Graph, Var

if TYPE_CHECKING:
    from remat.backends.xla import Stage


def layout_of(graph: Graph, in_shardings, out_shardings) -> Layout | None:
    """Where a program's values live, or None for a program on one device (no sharding given
    and no `shard` node on a mesh)."""
    ins = list(in_shardings or [None] * len(graph.inputs))
    outs = list(out_shardings or [None] * len(graph.outputs))
    meshes = {s.mesh for s in ins + outs if s is not None}
    meshes |= {n.params["spec"].mesh for n in graph.walk() if n.op == "shard" and n.params["spec"].mesh is not None}
    if not meshes:
        return None
    if len(meshes) > 1:
        listed = "; ".join(sorted(map(repr, meshes)))
        raise ArgumentValueError(f"jit: the shardings of one program are on {len(meshes)} different meshes "
                                 f"({listed}); a program runs on one mesh: lay every array out on it")
    return Layout(graph, meshes.pop(), ins, outs)


class Layout:
    """A sharded program on `mesh`: `inputs`, each graph input's sharding (given, else
    replicated); `wanted`, the outputs' shardings asked for; `placed`, every value's sharding
    known so far (inputs, constants, and stage outputs as the stages are compiled)."""

    def __init__(self, graph: Graph, mesh, ins: list, outs: list):
        self.mesh = mesh
        self.replicated = NamedSharding(mesh, PartitionSpec())
        self.inputs = [s or self.replicated for s in ins]
        self.outputs = outs
        self.wanted = {v: s for v, s in zip(graph.outputs, outs) if s is not None}
        self.placed = dict(zip(graph.inputs, self.inputs))
        self.placed.update((v, self.replicated) for v in graph.constants)
        made = {v for n in graph.nodes for v in n.outputs}
        # Outputs no stage makes (arguments, constants), or one value asked for twice in two
        # layouts: moved once the stages have run.
        self._moved = [k for k, (v, s) in enumerate(zip(graph.outputs, outs))
                       if s is not None and (v not in made or self.wanted[v] != s)]

    def device_bytes(self, v: Var) -> int:
        """The bytes of one device's shard of `v` (its largest, where shards differ)."""
        return math.prod(self.placed[v].shard_shape(v.shape)) * v.dtype.itemsize

    def jit_options(self, stage: Stage) -> dict:
        g = stage.graph
        return {"in_shardings": tuple(self.placed[v] for v in g.inputs),
                "out_shardings": [self.wanted.get(v) for v in g.outputs]}  # a stage returns a list

    def arguments(self, arrays: list, returned: list[int]) -> list:
        """The caller's arrays on the devices as the program takes them, all moved in one call.
        A jax.Array already laid out so is taken as it is; one laid out otherwise is resharded
        (as `jax.device_put` does), never gathered on the host. Returned NumPy arrays are copied
        first, as in `Runner._arguments`."""
        moving = [k for k, a in enumerate(arrays) if not _laid_out(a, self.inputs[k])]
        if moving:
            sources = [np.array(arrays[k]) if k in returned and isinstance(arrays[k], np.ndarray) else arrays[k]
                       for k in moving]
            for k, a in zip(moving, jax.device_put(sources, [self.inputs[k] for k in moving])):
                arrays[k] = a
        return arrays

    def finish(self, outs: list) -> list:
        for k in self._moved:
            outs[k] = jax.device_put(outs[k], self.outputs[k])
        return outs


def _laid_out(a, sharding) -> bool:
    if not isinstance(a, jax.Array):
        return False
    return a.sharding == sharding or a.sharding.is_equivalent_to(sharding, a.ndim)
