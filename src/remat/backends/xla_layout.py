"""Where the values of a sharded XLA program live (issue 16; remat/sharding.py is the user's side).

A program is sharded when `rm.jit` gives it shardings or a `shard` node names a mesh; then it
runs on that one mesh: the arguments as given (else replicated), the outputs as asked (else as
XLA's SPMD partitioner chooses). The caller's arrays go to the devices once, laid out as the
program takes them; nothing is gathered on the host.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from remat.errors import ArgumentValueError
from remat.graph import Graph


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
    return Layout(meshes.pop(), ins, outs)


class Layout:
    """A sharded program on `mesh`: `inputs`, each graph input's sharding (given, else
    replicated); `outputs`, the outputs' shardings asked for (None: XLA's choice)."""

    def __init__(self, mesh, ins: list, outs: list):
        self.mesh = mesh
        self.replicated = NamedSharding(mesh, PartitionSpec())
        self.inputs = [s or self.replicated for s in ins]
        self.outputs = outs

    def jit_options(self, held: int) -> dict:
        """`jax.jit`'s shardings for the program, whose arguments are the backward blocks'
        predicate and `held` constants (replicated), then the graph's inputs; it returns a list."""
        return {"in_shardings": (self.replicated,) * (1 + held) + tuple(self.inputs),
                "out_shardings": list(self.outputs)}

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


def _laid_out(a, sharding) -> bool:
    if not isinstance(a, jax.Array):
        return False
    return a.sharding == sharding or a.sharding.is_equivalent_to(sharding, a.ndim)
