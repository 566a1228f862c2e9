"""`vmap` and the user's named vectorized axes (`vectorize`, `devectorize`), built on the
vectorized tensors of remat/vaxes.py: this module installs `bind_vectorized` in the IR core
(`trace.set_vectorizer`), which runs an op's batch rule (`Op.batch`) when it meets vectorized
operands.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable

from remat import argcheck, trace, tree
from remat.core import ELEMENTWISE
from remat.errors import ArgumentTypeError, ArgumentValueError, ShapeError, TracerError
from remat.ops.shape import permute_dims
from remat.tensor import Tensor
from remat.trace import asarray
from remat.vaxes import align_to, elementwise, merge

# ---------------------------------------------------------------- user API


def vectorize(t, name: str) -> Tensor:
    """`t` with its leading axis turned into a vectorized axis called `name`.

    >>> import remat as rm
    >>> v = rm.vectorize(rm.asarray([[1.0, 2.0], [3.0, 4.0]]), "batch")
    >>> v.shape, rm.sum(v).vectorized_axes
    ((2,), (('batch', 2),))
    """
    t = asarray(t)
    if not isinstance(name, str):
        raise ArgumentTypeError(f"vectorize: the axis name must be a str, got {type(name).__name__} "
                                f"{argcheck.short_repr(name)}")
    if t.ndim == 0:
        raise ShapeError("vectorize: a 0-d tensor has no leading axis to vectorize")
    if name in dict(t._vaxes):
        raise ArgumentValueError(f"vectorize: name={name!r}: the tensor is already vectorized over {name!r}; "
                                 "pick another name")
    return t._relabel(t._vaxes + ((name, t.shape[0]),))


def devectorize(t, name: str | None = None) -> Tensor:
    """`t` with its vectorized axes back as leading axes, in order; with `name`, only that axis
    (it becomes the leading axis of the inner shape; the others stay vectorized)."""
    t = asarray(t)
    if name is None:
        return t._raw()
    if not isinstance(name, str):
        raise ArgumentTypeError(f"devectorize: the axis name must be a str or None, got {type(name).__name__} "
                                f"{argcheck.short_repr(name)}")
    names = [n for n, _ in t._vaxes]
    if name not in names:
        raise ArgumentValueError(f"devectorize: name={name!r}: the tensor is not vectorized over {name!r} "
                                 f"(it has {names})")
    i, k = names.index(name), len(names)
    order = [j for j in range(k) if j != i] + [i] + list(range(k, k + t.ndim))

    return permute_dims(t._raw(), order)._relabel(tuple(a for a in t._vaxes if a[0] != name))


_fresh = itertools.count()


def vmap(fn: Callable, in_axes=0, out_axes=0) -> Callable:
    """Map `fn` over an axis of its arguments: `in_axes` (an int, None for an unmapped
    argument, or one entry per argument, each a pytree prefix) and `out_axes` likewise.
    Negative axes count from the end; an axis out of range is an error.

    >>> import remat as rm
    >>> rm.vmap(lambda row: rm.sum(row))(rm.asarray([[1.0, 2.0], [3.0, 4.0]]))
    Tensor([3., 7.], dtype=float32)
    """
    argcheck.check_callable(fn, "vmap")
    _check_spec(in_axes, "in_axes")
    _check_spec(out_axes, "out_axes")

    @functools.wraps(fn, updated=())
    def mapped(*args):
        name = f"vmap{next(_fresh)}"
        axes = _expand_spec(in_axes, args, "in_axes", "the arguments")
        where = _Paths(lambda: _argument_paths(fn, args))
        flat, flat_axes = tree.leaves(args), tree.leaves(axes)
        sizes = {k: _in_size(asarray(flat[k]), a, where(k)) for k, a in enumerate(flat_axes) if a is not _UNMAPPED}
        if not sizes:
            raise ArgumentValueError(f"vmap: no argument is mapped (every in_axes entry is None): "
                                     f"in_axes={argcheck.short_repr(in_axes)}")
        if len(set(sizes.values())) != 1:
            listed = ", ".join(f"{s} for {where(k)}" for k, s in sizes.items())
            raise ArgumentValueError(f"vmap: the mapped axes (in_axes={argcheck.short_repr(in_axes)}) must share "
                                     f"one size, got {listed}")
        size = next(iter(sizes.values()))
        out = fn(*tree.map(lambda x, a: x if a is _UNMAPPED else _to_vectorized(x, a, name), args, axes))
        oaxes = _expand_spec(out_axes, out, "out_axes", "the output")
        flat_out, out_tree = tree.flatten(out)
        out_where = _Paths(lambda: argcheck.leaf_paths(out, "output"))
        results = [_from_vectorized(asarray(y), a, name, size, out_where, k)
                   for k, (y, a) in enumerate(zip(flat_out, tree.leaves(oaxes)))]
        return tree.unflatten(out_tree, results)

    return mapped


# ---------------------------------------------------------------- vmap plumbing

_UNMAPPED = object()  # stands for None in in_axes/out_axes, which pytrees would drop


class _Paths:
    """The path of leaf k (`x[1]['w']`) for messages, worked out only when one is needed."""

    def __init__(self, make: Callable[[], list[str]]):
        self._make, self._paths = make, None

    def __call__(self, k: int) -> str:
        if self._paths is None:
            self._paths = self._make()
        return self._paths[k]


def _argument_paths(fn, args) -> list[str]:
    params = argcheck.positional_params(fn) or []
    names = [params[i] if i < len(params) else f"args[{i}]" for i in range(len(args))]
    return [p for a, name in zip(args, names) for p in argcheck.leaf_paths(a, name)]


def _check_spec(spec, what: str) -> None:
    """`in_axes`/`out_axes` hold ints and Nones only (a pytree of them)."""
    flat = tree.leaves(spec)
    for x, path in zip(flat, argcheck.leaf_paths(spec, what)):
        if not argcheck.is_int(x):
            raise ArgumentTypeError(f"vmap: {what} must be an int, None or a pytree of them, got "
                                    f"{argcheck.describe(x)} {argcheck.short_repr(x)} at {path}")


class _Mismatch(Exception):
    def __init__(self, spec_path: str, spec, path: str, target):
        self.where = f"{spec_path} is {_structure(spec)}, {path} {_structure(target)}"


def _structure(x) -> str:
    if isinstance(x, dict):
        return f"a dict with keys {sorted(x, key=repr)}"
    if isinstance(x, (tuple, list)):
        return f"a {type(x).__name__} of {len(x)}"
    return argcheck.describe(x)


def _expand_spec(spec, target, what: str, whole: str):
    """One axis per leaf of `target`, or an error naming where `spec` and `target` differ (by
    lengths, keys and the structure of `target`, never by printing its tensors)."""
    top = "args" if what == "in_axes" else "output"
    try:
        return _expand(spec, target, what, top)
    except _Mismatch as m:
        raise ArgumentValueError(
            f"vmap: {what}={argcheck.short_repr(spec)} does not match the structure of {whole}: {m.where} "
            f"({whole}: {tree.flatten(target)[1]!r}); give one entry per element, or one int or None "
            "for a whole subtree"
        ) from None


def _expand(spec, target, spec_path: str, path: str):
    """One axis per leaf of `target`: `spec` is an int, None, or a pytree prefix of `target`."""
    if spec is None or argcheck.is_int(spec):
        return tree.map(lambda _: _UNMAPPED if spec is None else int(spec), target)
    if isinstance(spec, dict) and isinstance(target, dict) and spec.keys() == target.keys():
        return {k: _expand(spec[k], target[k], f"{spec_path}[{k!r}]", f"{path}[{k!r}]") for k in target}
    if isinstance(spec, (list, tuple)) and isinstance(target, (list, tuple)) and len(spec) == len(target):
        items = [_expand(s, t, f"{spec_path}[{i}]", f"{path}[{i}]") for i, (s, t) in enumerate(zip(spec, target))]
        return type(target)(*items) if hasattr(target, "_fields") else type(target)(items)
    raise _Mismatch(spec_path, spec, path, target)


def _in_size(x: Tensor, axis: int, path: str) -> int:
    """The size of the axis `in_axes` maps over `x` (named `path`); checked, never wrapped."""
    if x.ndim == 0:
        raise ArgumentValueError(f"vmap: in_axes={axis} maps over {path}, a 0-d tensor, which has no axis to map; "
                                 "use None for it in in_axes")
    if not -x.ndim <= axis < x.ndim:
        raise ArgumentValueError(f"vmap: in_axes={axis} is out of range for {path} of shape {x.shape}: "
                                 f"axes go from {-x.ndim} to {x.ndim - 1}")
    return x.shape[axis]


def _to_vectorized(x, axis: int, name: str) -> Tensor:
    x = asarray(x)
    axis %= x.ndim  # in range: checked by _in_size
    order = [axis] + [i for i in range(x.ndim) if i != axis]
    return vectorize(permute_dims(x, order), name)


def _from_vectorized(y: Tensor, axis, name: str, size: int, where: _Paths, k: int) -> Tensor:
    if axis is _UNMAPPED:
        return y
    if name not in dict(y._vaxes):  # the result does not depend on the mapped arguments
        y = align_to(y, ((name, size),) + y._vaxes)
    y = devectorize(y, name)
    if not -y.ndim <= axis < y.ndim:
        raise ArgumentValueError(
            f"vmap: out_axes={axis} is out of range for {where(k)}, which has {y.ndim} axes with the mapped "
            f"one (shape {y.shape}): out_axes go from {-y.ndim} to {y.ndim - 1}")
    axis %= y.ndim
    order = list(range(1, y.ndim))
    order.insert(axis, 0)
    return permute_dims(y, order)


# ---------------------------------------------------------------- ops on vectorized operands


def block_rule(op, tensors, params, names):
    """The batch rule of a block (checkpoint, loop) met by vectorized operands, as when the
    function `vjp` returned runs under vmap: emitted again through its front end, which traces
    the body on the vectorized operands. Its forward-mode rule does exactly that when no operand
    has a tangent. The blocks' modules declare it as their op's `batch`."""
    outs, _ = op.jvp.rule((None,) * len(tensors), *tensors, **params)
    return tuple(outs)


def bind_vectorized(op, tensors: list[Tensor], params: dict):
    """Apply `op` to operands some of which are vectorized, by its batch rule."""
    names = merge([t._vaxes for t in tensors])
    if op.batch is None:
        raise TracerError(f"{op.name} has no batch rule, so it cannot take operands vectorized over "
                          f"{', '.join(repr(n) for n, _ in names)} (rm.vmap or rm.vectorize)")
    rule = elementwise if op.batch is ELEMENTWISE else op.batch
    return rule(op, tensors, params, names)


trace.set_vectorizer(bind_vectorized)
