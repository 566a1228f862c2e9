"""What every loop and branch does with the functions it is given: take their operands as a
flat list of tensors, check what they return against what they must return (the same pytree of
shapes and dtypes), keep a loop's state one type under vmap (`Carry`), and give several traced
bodies one shared list of captured inputs."""

from __future__ import annotations

import numpy as np

from remat import dtypes, tree
from remat.argcheck import describe, leaf_paths
from remat.errors import ArgumentTypeError, DTypeError, ShapeError, callable_name
from remat.graph import Graph, Var
from remat.tensor import Tensor, is_tensor_like, is_weak
from remat.trace import asarray, trace_function
from remat.vaxes import align_to, merge


def tensor_leaves(value, loop: str, what: str) -> tuple[list[Tensor], tree.TreeDef]:
    """The leaves of `value` as tensors; anything else is an error naming `loop` and the leaf."""
    leaves, treedef = tree.flatten(value)
    for leaf, path in zip(leaves, leaf_paths(value, what)):
        if not is_tensor_like(leaf):
            raise ArgumentTypeError(
                f"{loop}: {path} is {describe(leaf)}, not a tensor; loop state and operands are pytrees "
                "of tensors (pass other values through a closure)"
            )
    return [asarray(x) for x in leaves], treedef


def type_of(t: Tensor) -> str:
    return f"shape {t.shape} {t.dtype}"


def weak_leaves(value) -> dict[int, object]:
    """The leaves of `value` that are Python numbers (or weakly typed tensors: numbers passed to a
    traced function), by position. They are weakly typed, as in JAX: a loop started from `0.0`
    takes the dtype its body gives that carry (float64 inputs make a float64 carry) instead of
    failing on float32."""
    return {i: x for i, x in enumerate(tree.leaves(value)) if is_weak(x)}


def check_like(loop: str, fn, what: str, got, ref, ref_tree: tree.TreeDef, ref_name: str,
               weak: dict[int, object] | None = None) -> list[Tensor]:
    """The leaves of `got` (what `fn` returned as `what`), which must have the structure, shapes
    and dtypes of `ref` (the leaves of `ref_name`, structure `ref_tree`); a leaf of `weak` (a
    Python number) may come back of any dtype the number can take."""
    leaves, treedef = tree.flatten(got)
    name = callable_name(fn)
    if treedef != ref_tree:
        raise ArgumentTypeError(
            f"{loop}: {name} returned {what} of structure {treedef!r}, but {ref_name} has structure "
            f"{ref_tree!r}; it must return the same structure on every step"
        )
    paths = leaf_paths(got, what)
    out = []
    weak = weak or {}
    for i, (leaf, r, path) in enumerate(zip(leaves, ref, paths)):
        if not is_tensor_like(leaf):
            raise ArgumentTypeError(f"{loop}: {name} returned {describe(leaf)} as {path}; it must return tensors")
        t = asarray(leaf)
        if t.shape != r.shape:
            raise ShapeError(
                f"{loop}: {name} returned {path} of shape {t.shape}, but {ref_name} has shape {r.shape}; "
                "the loop state must keep its shape from step to step"
            )
        if t.dtype != r.dtype and not (i in weak and dtypes.weak_result_type(t.dtype, weak[i]) == t.dtype):
            raise DTypeError(
                f"{loop}: {name} returned {path} of dtype {t.dtype}, but {ref_name} has dtype {r.dtype}; "
                f"cast it with .astype('{r.dtype}') (or start from that dtype)"
            )
        out.append(t)
    return out


def template(shape: tuple[int, ...], dtype, vaxes: tuple = ()) -> Tensor:
    """A stand-in tensor of a type, to trace a body on: a broadcast zero, so it costs no memory."""
    sizes = tuple(n for _, n in vaxes)
    return Tensor._concrete(np.broadcast_to(np.zeros((), dtype), sizes + tuple(shape)), vaxes)


def widen(graph: Graph, n_explicit: int, own: list[Var], shared: list[Var]) -> Graph:
    """`graph` (inputs: explicit ones, then its captures `own`) taking all of `shared` as its
    captures instead, in that order; the ones it does not read are new, unused inputs."""
    mine = dict(zip(own, graph.inputs[n_explicit:]))
    captures = [mine[v] if v in mine else Var(v.shape, v.dtype) for v in shared]
    return Graph(graph.inputs[:n_explicit] + captures, graph.outputs, graph.nodes, graph.constants)


def shared_captures(captured: list[list[Var]]) -> list[Var]:
    """Every Var that one of several bodies captured, once, in order of first capture."""
    return list(dict.fromkeys(v for vs in captured for v in vs))


class Carry:
    """A loop's state, whose every leaf keeps one type from step to step. A body may make a carry
    vectorized over axes its start lacks (it met a vectorized x or capture); then the start is
    vectorized over them too and the body traced again, as JAX's batching of loops does."""

    def __init__(self, leaves: list[Tensor], weak: dict[int, object] | None = None):
        self.leaves = leaves
        self.weak = dict(weak or {})  # leaf -> the Python number it started as (see weak_leaves)
        self.wider: dict[int, tuple] = {}  # leaf -> the vectorized axes a body gave it
        self.recast: dict[int, np.dtype] = {}  # weak leaf -> the dtype a body gave it

    def returned(self, loop: str, fn, what: str, got, ref_tree: tree.TreeDef, ref_name: str) -> list[Tensor]:
        """The leaves of `got`, a body's new carry, checked against the carry (`check_like`),
        each with exactly its leaf's vectorized axes."""
        leaves = check_like(loop, fn, what, got, self.leaves, ref_tree, ref_name, self.weak)
        for i, t in enumerate(leaves):
            if t.dtype != self.leaves[i].dtype:
                self.recast[i] = t.dtype
        return [self.keep_axes(i, t) for i, t in enumerate(leaves)]

    def keep_axes(self, i: int, t: Tensor) -> Tensor:
        """`t`, the body's new value of leaf `i`, with exactly the leaf's vectorized axes."""
        own = self.leaves[i]._vaxes
        if {n for n, _ in t._vaxes} <= {n for n, _ in own}:
            return align_to(t, own)
        self.wider[i] = merge([self.wider.get(i, own), t._vaxes])
        return t

    def trace(self, fns_and_args, names: list[str]) -> list:
        """Trace each `(fn, args_of(carry_leaves))` until no body widens the carry."""
        while True:
            self.wider, self.recast = {}, {}
            traced = [trace_function(fn, args(self.leaves), name=name) for (fn, args), name in zip(fns_and_args, names)]
            if not self.wider and not self.recast:
                return traced
            for i, vaxes in self.wider.items():  # out here: inside, the new start would be a body tensor
                self.leaves[i] = align_to(self.leaves[i], vaxes)
            for i, dtype in self.recast.items():  # a weak start takes the body's dtype, once
                self.leaves[i] = self.leaves[i].astype(dtype)
                del self.weak[i]
