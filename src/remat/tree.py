"""Pytrees: nested tuples, lists, dicts, namedtuples and dataclasses, flattened to leaves.

`None` is a tree with no leaves (as in JAX). Dict keys are visited in sorted order so that two
dicts with the same keys flatten alike whatever order they were built in.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple


class TreeDef(NamedTuple):
    """The structure of a pytree: a node kind, its static data and its children's structures."""

    kind: str  # "leaf", "none", "tuple", "list", "dict", "namedtuple", "dataclass"
    data: Any  # keys for dicts, the type for namedtuples/dataclasses
    children: tuple

    @property
    def num_leaves(self) -> int:
        if self.kind == "leaf":
            return 1
        return sum(c.num_leaves for c in self.children)

    def __repr__(self) -> str:
        if self.kind == "leaf":
            return "*"
        if self.kind == "none":
            return "None"
        inner = ", ".join(repr(c) for c in self.children)
        if self.kind == "dict":
            inner = ", ".join(f"{k!r}: {c!r}" for k, c in zip(self.data, self.children))
            return "{" + inner + "}"
        if self.kind == "list":
            return f"[{inner}]"
        if self.kind == "tuple":
            return f"({inner})"
        return f"{self.data.__name__}({inner})"


LEAF = TreeDef("leaf", None, ())


def _is_namedtuple(x) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def _is_dataclass_instance(x) -> bool:
    return dataclasses.is_dataclass(x) and not isinstance(x, type)


def _children(x):
    """(kind, data, children) of a container, or None for a leaf."""
    if x is None:
        return "none", None, ()
    if _is_namedtuple(x):
        return "namedtuple", type(x), tuple(x)
    if type(x) is tuple:
        return "tuple", None, x
    if type(x) is list:
        return "list", None, tuple(x)
    if type(x) is dict:
        keys = tuple(sorted(x))
        return "dict", keys, tuple(x[k] for k in keys)
    if _is_dataclass_instance(x):
        names = tuple(f.name for f in dataclasses.fields(x) if f.init)
        return "dataclass", (type(x), names), tuple(getattr(x, n) for n in names)
    return None


def flatten(tree) -> tuple[list, TreeDef]:
    """Leaves of `tree` in a fixed order, and the structure to rebuild it."""
    leaves: list = []
    return leaves, _flatten(tree, leaves)


def _flatten(x, leaves: list) -> TreeDef:
    node = _children(x)
    if node is None:
        leaves.append(x)
        return LEAF
    kind, data, kids = node
    return TreeDef(kind, data, tuple(_flatten(k, leaves) for k in kids))


def unflatten(treedef: TreeDef, leaves) -> Any:
    """Rebuild a tree of structure `treedef` from `leaves`."""
    it = iter(leaves)
    out = _unflatten(treedef, it)
    if next(it, _END) is not _END:
        raise ValueError(f"too many leaves for tree structure {treedef!r}")
    return out


_END = object()


def _unflatten(td: TreeDef, it) -> Any:
    if td.kind == "leaf":
        leaf = next(it, _END)
        if leaf is _END:
            raise ValueError("too few leaves for the tree structure")
        return leaf
    kids = [_unflatten(c, it) for c in td.children]
    if td.kind == "none":
        return None
    if td.kind == "tuple":
        return tuple(kids)
    if td.kind == "list":
        return kids
    if td.kind == "dict":
        return dict(zip(td.data, kids))
    if td.kind == "namedtuple":
        return td.data(*kids)
    cls, names = td.data
    return cls(**dict(zip(names, kids)))


class Partition(NamedTuple):
    """The leaves of a tree that a predicate picked (`picked`, found at `positions` among all
    its leaves), and the way back: `rebuild(new)` is the tree with `new` in their places."""

    picked: list
    positions: tuple[int, ...]
    flat: list
    treedef: TreeDef

    def rebuild(self, new) -> Any:
        merged = list(self.flat)
        for i, x in zip(self.positions, new):
            merged[i] = x
        return unflatten(self.treedef, merged)


def partition(tree, keep) -> Partition:
    """Split `tree`'s leaves into those `keep` picks and the rest, which stay as they are."""
    flat, treedef = flatten(tree)
    positions = tuple(i for i, x in enumerate(flat) if keep(x))
    return Partition([flat[i] for i in positions], positions, flat, treedef)


def leaves(tree) -> list:
    return flatten(tree)[0]


def map(fn, tree, *rest):
    """Apply `fn` to every leaf (and the matching leaves of `rest`), keeping the structure."""
    flat, td = flatten(tree)
    others = [flatten(r)[0] for r in rest]
    return unflatten(td, [fn(*xs) for xs in zip(flat, *others)])
