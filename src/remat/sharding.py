"""Sharding as data: the `shard` op and the shardings `rm.jit` hands to `jax.jit`.

- `rm.shard(x, spec)` is a graph op: the identity on NumPy, `jax.lax.with_sharding_constraint`
  on XLA. Its gradient shards the cotangent the same way, its tangent likewise; under `vmap` the
  vectorized axes are not split (a `None` entry each).
- `rm.jit(fn, backend="xla", in_shardings=..., out_shardings=...)` takes what `jax.jit` takes:
  `NamedSharding`s or `PartitionSpec`s (None: unspecified), one entry per positional argument
  that is not static (a pytree prefix of it), or one for them all.

A spec is a `NamedSharding` or a bare `PartitionSpec`. A bare one is read on the mesh set with
`jax.set_mesh(mesh)` if there is one, else on the mesh of the jitted function's own shardings
(its NamedSharding in/out_shardings, then the shardings of its sharded arguments): a program runs
on one mesh. Meshes are used with Auto axes: XLA's partitioner propagates shardings from the
annotations, as `jax.jit` does with a `Mesh(devices, names)`; an array laid out on the same mesh
with Explicit axes (`jax.make_mesh`'s default) is taken as it is.

Specs are checked where they are given, against the array's shape: every axis named must be
one of the mesh's, used once, and its size (the product, for a tuple of axes) must divide the
dimension it splits; a spec has at most one entry per dimension.

Needs JAX only when a spec is given; `import remat` does not import it.
"""

from __future__ import annotations

import math
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from remat import argcheck, tree
from remat.core import declare
from remat.errors import ArgumentTypeError, ArgumentValueError, ShapeError
from remat.tensor import Tensor, is_device_array
from remat.trace import asarray, bind, linear_jvp

# ---------------------------------------------------------------- the spec, as op data


@dataclass(frozen=True)
class Spec:
    """A PartitionSpec as plain, hashable data (`entries`: per dimension None, an axis name or a
    tuple of names) and the mesh it is read on (None where none is known: NumPy needs none)."""

    entries: tuple
    mesh: Any = None

    def __str__(self) -> str:
        return "P(" + ", ".join(map(_entry_text, self.entries)) + ")"

    def named(self):
        """The `jax.sharding.NamedSharding` this spec stands for."""
        from jax.sharding import NamedSharding, PartitionSpec

        return NamedSharding(self.mesh, PartitionSpec(*self.entries))

    def leading(self, k: int) -> Spec:
        """The spec of the same array with `k` more leading axes, not split."""
        return Spec((None,) * k + self.entries, self.mesh)


def _entry_text(entry) -> str:
    if isinstance(entry, tuple):
        return "(" + ", ".join(map(repr, entry)) + ")"
    return repr(entry) if entry is None or isinstance(entry, str) else str(entry)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _axis_names(entry) -> tuple:
    """The mesh axes a spec entry splits its dimension over (none for None and UNCONSTRAINED)."""
    if isinstance(entry, tuple):
        return entry
    return (entry,) if isinstance(entry, str) else ()


def check(spec: Spec, shape: tuple, what: str) -> None:
    """Raise unless `spec` can lay out an array of `shape` (called `what` in messages)."""
    if len(spec.entries) > len(shape):
        raise ShapeError(
            f"{what}: spec {spec} has {len(spec.entries)} entries but the array has {_count(len(shape), 'dimension')} "
            f"(shape {tuple(shape)}); give at most one entry per dimension")
    if spec.mesh is None:
        return
    sizes = dict(spec.mesh.shape)
    seen: set = set()
    for dim, entry in enumerate(spec.entries):
        for name in _axis_names(entry):
            if name not in sizes:
                raise ArgumentValueError(
                    f"{what}: spec {spec} names mesh axis {name!r}, which the mesh lacks (its axes: "
                    f"{', '.join(map(repr, sizes))}); name one of those, or None to keep the dimension whole")
            if name in seen:
                raise ArgumentValueError(
                    f"{what}: spec {spec} uses mesh axis {name!r} twice (the mesh's axes: "
                    f"{', '.join(map(repr, sizes))}); an axis can split one dimension only, once: name it in "
                    "one entry, and another axis (or None) in the others")
            seen.add(name)
        names = _axis_names(entry)
        parts = math.prod(sizes[n] for n in names)
        if names and shape[dim] % parts:
            axes = f"mesh axis {names[0]!r}" if len(names) == 1 else f"mesh axes {names}"
            raise ShapeError(
                f"{what}: spec {spec} splits dimension {dim} (size {shape[dim]}, shape {tuple(shape)}) "
                f"over {axes} of size {parts}, which does not divide {shape[dim]}; make that dimension "
                f"a multiple of {parts}, or split another one")


# ---------------------------------------------------------------- reading what the user gave


def is_spec(x) -> bool:
    """A NamedSharding or a PartitionSpec (without importing JAX if the user has not)."""
    if "jax" not in sys.modules:
        return False
    from jax.sharding import NamedSharding, PartitionSpec

    return isinstance(x, (NamedSharding, PartitionSpec))


def auto_mesh(mesh):
    """`mesh` with Auto axes (see the module docstring); the same object if it has them."""
    from jax.sharding import AxisType, Mesh

    types = getattr(mesh, "axis_types", ())
    if all(t == AxisType.Auto for t in types):
        return mesh
    return Mesh(mesh.devices, mesh.axis_names, axis_types=(AxisType.Auto,) * len(mesh.axis_names))


def context_mesh():
    """The mesh set with `jax.set_mesh`, or None."""
    mesh = sys.modules["jax"].sharding.get_mesh()  # on XLA only: JAX is loaded
    return None if mesh is None or mesh.empty else mesh


def to_spec(x, mesh, what: str) -> Spec:
    """`x` (a NamedSharding or PartitionSpec) as a Spec; a bare PartitionSpec is read on `mesh`."""
    from jax.sharding import NamedSharding, PartitionSpec

    if isinstance(x, NamedSharding):
        return Spec(_entries(x.spec, what), auto_mesh(x.mesh))
    if isinstance(x, PartitionSpec):
        return Spec(_entries(x, what), None if mesh is None else auto_mesh(mesh))
    raise ArgumentTypeError(
        f"{what} must be a jax.sharding.NamedSharding or PartitionSpec, got {argcheck.describe(x)} "
        f"{argcheck.short_repr(x)}")


def _entries(p, what: str) -> tuple:
    out = []
    for entry in p:
        if isinstance(entry, (list, tuple)) and all(isinstance(n, str) for n in entry):
            out.append(tuple(entry))
        elif entry is None or isinstance(entry, str) or entry is type(p).UNCONSTRAINED:
            out.append(entry)
        else:
            raise ArgumentTypeError(f"{what}: a PartitionSpec entry must be None, a mesh axis name or a "
                                    f"tuple of names, got {argcheck.short_repr(entry)}")
    return tuple(out)


# ---------------------------------------------------------------- the mesh of the program being traced

_state = threading.local()  # what `rm.jit` tells rm.shard while tracing: its backend and mesh


@contextmanager
def tracing(backend: str, mesh):
    """Inside: `rm.shard` with a bare PartitionSpec reads it on `mesh`; on XLA it must have one."""
    before = getattr(_state, "current", None)
    _state.current = (backend, mesh)
    try:
        yield
    finally:
        _state.current = before


def _traced_for() -> tuple[str | None, Any]:
    return getattr(_state, "current", None) or (None, None)


# ---------------------------------------------------------------- the op


def _rule(x, *, spec: Spec):
    check(spec, x.shape, "x")
    return x


def _batch(op, tensors, params, names):
    """Under vmap the vectorized axes lead the raw array and are not split."""
    (t,) = tensors
    return bind(op, t._raw(), spec=params["spec"].leading(len(t._vaxes)))._relabel(t._vaxes)


# d shard(x) = shard(dx): the cotangent and the tangent are laid out as the value is.
_shard = declare("shard", _rule, lambda g, x, out, spec: (bind(_shard, g, spec=spec),), jvp=linear_jvp("shard"),
                 batch=_batch)


def shard(x, spec):
    """`x` (a tensor, or a pytree of them) laid out over devices as `spec` says: a
    `jax.sharding.NamedSharding`, or a `PartitionSpec` read on the mesh of `jax.set_mesh` or of
    the jitted function's shardings. On XLA it is `jax.lax.with_sharding_constraint`, telling the
    SPMD partitioner where the value lives; on NumPy it changes nothing. Its gradient is laid out
    the same way.

    >>> import numpy as np, jax, remat as rm
    >>> from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    >>> mesh = Mesh(np.array(jax.devices()[:1]), ("data",))
    >>> f = rm.jit(lambda x: rm.shard(x * 2.0, NamedSharding(mesh, P("data"))), backend="xla")
    >>> np.asarray(f(rm.ones((4,))))
    array([2., 2., 2., 2.], dtype=float32)
    >>> print(rm.make_graph(lambda x: rm.shard(x, P("data", None)))(rm.ones((4, 2))))
    graph(a:f32[4,2]) {
      b:f32[4,2] = shard[spec=P('data', None)] a
      return b
    }
    """
    if not is_spec(spec):
        raise ArgumentTypeError(
            f"shard: spec must be a jax.sharding.NamedSharding or PartitionSpec, got {argcheck.describe(spec)} "
            f"{argcheck.short_repr(spec)}; e.g. PartitionSpec('data', None) splits the first axis over "
            "the mesh axis 'data'")
    backend, mesh = _traced_for()
    mesh = context_mesh() or mesh
    s = to_spec(spec, mesh, "shard: spec")
    if s.mesh is None and backend == "xla":
        raise ArgumentValueError(
            f"shard: spec {s} is a bare PartitionSpec and no mesh is known to read it on; pass "
            "NamedSharding(mesh, spec), give rm.jit in_shardings/out_shardings on a mesh, or call "
            "under `with jax.set_mesh(mesh):`")
    return tree.map(lambda leaf: bind(_shard, asarray(leaf), spec=s), x)


# ---------------------------------------------------------------- rm.jit's in_shardings and out_shardings


class _Slot:
    """A leaf of the argument or output structure, matched against a spec pytree."""


def _is_spec_leaf(x) -> bool:
    return x is None or is_spec(x)


def _check_spec_tree(value, name: str) -> None:
    """`value` is None, a spec, or a pytree of them (tuples, lists, dicts...)."""
    if _is_spec_leaf(value):
        return
    node = tree._children(value)
    if node is None:
        raise ArgumentTypeError(
            f"jit: {name} must be a jax.sharding.NamedSharding, a PartitionSpec, None or a pytree of them "
            f"(one entry per argument), got {argcheck.describe(value)} {argcheck.short_repr(value)}")
    for kid, path in zip(node[2], argcheck.leaf_paths(_slots(value), name)):
        _check_spec_tree(kid, path)


class _Mismatch(Exception):
    def __init__(self, spec_path: str, spec, path: str, target):
        super().__init__(f"{spec_path} is {_shape_of(spec)} where {path} is {_shape_of(target)}")


def _shape_of(x) -> str:
    if isinstance(x, _Slot):
        return "an array"
    if isinstance(x, dict):
        return f"a dict with keys {sorted(x, key=repr)}"
    if isinstance(x, (tuple, list)) and not is_spec(x):
        return f"a {type(x).__name__} of {len(x)}"
    return argcheck.describe(x)


def _expand(spec, target, spec_path: str, path: str, out: list) -> None:
    """Append to `out` one (spec, path) per leaf of `target`: `spec` is a pytree prefix of it."""
    if _is_spec_leaf(spec):
        out.extend((spec, p) for p in argcheck.leaf_paths(target, path))
        return
    s, t = tree._children(spec), tree._children(target)
    if t is None or s[0] != t[0] or s[1] != t[1] or len(s[2]) != len(t[2]):
        raise _Mismatch(spec_path, spec, path, target)
    spec_paths = argcheck.leaf_paths(_slots(spec), spec_path)  # one path per child, as below
    paths = argcheck.leaf_paths(_slots(target), path)
    for sk, tk, sp, tp in zip(s[2], t[2], spec_paths, paths):
        _expand(sk, tk, sp, tp, out)


def _slots(x):
    """`x` one level deep, its children replaced by slots (for their paths)."""
    kind, data, kids = tree._children(x)
    return tree.unflatten(tree.TreeDef(kind, data, (tree.LEAF,) * len(kids)), [_Slot()] * len(kids))


class JitShardings:
    """`in_shardings` and `out_shardings` as `rm.jit` was given them, resolved per call into
    one NamedSharding (or None) per argument leaf and per output leaf."""

    def __init__(self, in_shardings, out_shardings):
        _check_spec_tree(in_shardings, "in_shardings")
        _check_spec_tree(out_shardings, "out_shardings")
        self.given_in = in_shardings
        self.given_out = out_shardings
        self._given_for: dict[tree.TreeDef, tuple[bool, ...]] = {}

    def placements(self, treedef: tree.TreeDef, leaves: list) -> tuple:
        """What of the arguments' own layouts keys the cache: those of the sharded jax.Arrays
        that in_shardings leaves unspecified (the others are laid out as in_shardings says)."""
        given = self._given_for.get(treedef)
        if given is None:
            dynamic, kwargs = tree.unflatten(treedef, [_Slot() for _ in leaves])
            try:
                given = tuple(s is not None for s, _ in self._expand_inputs([""] * len(dynamic), dynamic, kwargs))
            except ArgumentValueError:  # reported by the trace that follows, naming the arguments
                given = (False,) * len(leaves)
            self._given_for[treedef] = given
        return tuple(None if g else array_sharding(x) for g, x in zip(given, leaves))

    def mesh(self, arrays: list) -> Any:
        """The mesh a bare PartitionSpec is read on: `jax.set_mesh`'s, else the one of the given
        NamedShardings, else that of the sharded arguments; None if there is none. Several are
        an error."""
        from jax.sharding import NamedSharding

        ctx = context_mesh()
        if ctx is not None:
            return auto_mesh(ctx)
        given = [s for s in tree.leaves((self.given_in, self.given_out)) if isinstance(s, NamedSharding)]
        given += [s for s in map(array_sharding, arrays) if isinstance(s, NamedSharding)]
        meshes = list(dict.fromkeys(auto_mesh(s.mesh) for s in given))
        if len(meshes) > 1:
            raise ArgumentValueError(
                f"jit: the shardings given and those of the arguments are on {len(meshes)} different meshes "
                f"({'; '.join(map(repr, meshes))}); a program runs on one mesh: lay every array out on it")
        return meshes[0] if meshes else None

    def inputs(self, names: list[str], dynamic: tuple, kwargs: dict, shapes: list[tuple], arrays: list,
               mesh) -> list:
        """One NamedSharding or None per leaf of `(dynamic, kwargs)` (leaf k of shape `shapes[k]`,
        value `arrays[k]`): the spec given for it, else the layout of a sharded jax.Array."""
        specs = self._expand_inputs(names, dynamic, kwargs)
        out = []
        for (spec, path), shape, array in zip(specs, shapes, arrays):
            if spec is None:
                own = array_sharding(array)
                out.append(None if own is None else _checked(own, mesh, shape, f"jit: argument {path}"))
            else:
                out.append(_checked(spec, mesh, shape, f"jit: in_shardings for argument {path}"))
        return out

    def _expand_inputs(self, names: list[str], dynamic: tuple, kwargs: dict) -> list[tuple]:
        target = tree.map(lambda _: _Slot(), dynamic)  # every leaf an array: paths and structure only
        spec = self.given_in
        if _is_spec_leaf(spec):
            spec = (spec,) * len(dynamic)
        elif isinstance(spec, list):
            spec = tuple(spec)
        if not isinstance(spec, tuple) or is_spec(spec) or len(spec) != len(dynamic):
            raise ArgumentValueError(
                f"jit: in_shardings has {_shape_of(spec)} but the function takes "
                f"{_count(len(dynamic), 'positional argument')} that {'is' if len(dynamic) == 1 else 'are'} not "
                f"static ({', '.join(names) or 'none'}); give one entry per argument (a pytree prefix of it), "
                "or one sharding for them all")
        out: list = []
        try:
            for i, (s, t, name) in enumerate(zip(spec, target, names)):
                _expand(s, t, f"in_shardings[{i}]", name, out)
        except _Mismatch as m:
            raise ArgumentValueError(
                f"jit: in_shardings does not match the arguments: {m}; give one entry per element of the "
                "argument, or one sharding (or None) for a whole subtree") from None
        out += [(None, p) for p in argcheck.leaf_paths(kwargs, "kwargs")]  # keyword arguments: unspecified
        return out

    def outputs(self, out_tree: tree.TreeDef, shapes: list[tuple], mesh, fn_name: str) -> list:
        """One NamedSharding or None per output leaf."""
        if self.given_out is None:
            return [None] * len(shapes)
        target = tree.unflatten(out_tree, [_Slot() for _ in shapes])
        out: list = []
        try:
            _expand(self.given_out, target, "out_shardings", "the output", out)
        except _Mismatch as m:
            raise ArgumentValueError(
                f"jit: out_shardings does not match the output of {fn_name}: {m}; give one entry per "
                "element of the output, or one sharding (or None) for a whole subtree") from None
        return [None if s is None else _checked(s, mesh, shape, f"jit: out_shardings for {path}")
                for (s, path), shape in zip(out, shapes)]


def _checked(spec, mesh, shape: tuple, what: str):
    """`spec` as a NamedSharding on an Auto mesh, checked against `shape`."""
    from jax.sharding import NamedSharding

    if not isinstance(spec, NamedSharding) and not is_spec(spec):
        raise ArgumentValueError(
            f"{what} is laid out by a {type(spec).__name__}; remat takes NamedSharding layouts: give "
            "in_shardings for it, or jax.device_put it onto a NamedSharding first")
    s = to_spec(spec, mesh, what)
    if s.mesh is None:
        raise ArgumentValueError(
            f"{what}: {s} is a bare PartitionSpec and no mesh is known to read it on; use "
            "NamedSharding(mesh, spec), or call under `with jax.set_mesh(mesh):`")
    check(s, shape, what)
    return s.named()


_DEVICE_ARRAY_TYPES: set[type] = set()


def array_sharding(x):
    """The sharding of `x` (an array, or a tensor holding one) if it is a jax.Array laid out on a
    mesh or over several devices; None for anything else (a NumPy array, one device's array).
    Called on every argument of every XLA call (it keys the cache): no imports here."""
    value = x._value if type(x) is Tensor else x
    kind = type(value)
    if kind is np.ndarray:
        return None
    if kind not in _DEVICE_ARRAY_TYPES:  # isinstance against jax.Array, an ABC, is slow
        if not is_device_array(value):
            return None
        _DEVICE_ARRAY_TYPES.add(kind)
    s, kinds = value.sharding, sys.modules["jax"].sharding
    if type(s) is kinds.SingleDeviceSharding:  # the common case, first: num_devices costs microseconds
        return None
    return s if isinstance(s, kinds.NamedSharding) or s.num_devices > 1 else None
