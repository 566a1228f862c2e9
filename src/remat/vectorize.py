"""Named vectorized axes (as in Nx) and `vmap` built on them.

A vectorized tensor stores its vectorized axes as leading axes; ops see only the inner shape.
When an op meets vectorized operands, the operands are laid out on one common list of names
(missing names get size-1 axes, which broadcast) and the op's axis parameters are shifted past
the vectorized axes. Graphs never see names: their Vars have the full, laid-out shapes.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable

import numpy as np

from remat import argcheck, tree
from remat.errors import ArgumentTypeError, ArgumentValueError, ShapeError
from remat.ops.elementwise import clip, where
from remat.ops.shape import broadcast_to, permute_dims, reshape
from remat.trace import Tensor, asarray, bind

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


def align_to(t: Tensor, vaxes: tuple) -> Tensor:
    """`t` vectorized over exactly `vaxes` (in that order), broadcast over the names it lacks."""
    if t._vaxes == tuple(vaxes):
        return t
    extra = set(dict(t._vaxes)) - set(dict(vaxes))
    if extra:
        raise ValueError(f"cannot align a tensor vectorized over {sorted(extra)} to {list(vaxes)}")
    _merge([t._vaxes, tuple(vaxes)])  # sizes must agree
    return _lay_out(t, tuple(vaxes), t.ndim, materialize=True)._relabel(tuple(vaxes))


def cotangent_layout(c: Tensor, vaxes: tuple) -> Tensor:
    """`c`, given for an output vectorized over `vaxes`, in the output's raw layout (`vaxes` as
    plain leading axes), keeping vectorized the axes the output lacks: those of a `vmap` over
    the function `vjp` returned, one cotangent per entry."""
    extra = tuple((n, k) for n, k in c._vaxes if n not in dict(vaxes))
    return align_to(c, extra + tuple(vaxes))._relabel(extra)


def from_raw_layout(g: Tensor, vaxes: tuple) -> Tensor:
    """The inverse of `cotangent_layout` for a value of raw layout over `vaxes`: its leading
    plain axes become `vaxes`, after the vectorized axes it has."""
    return g._relabel(g._vaxes + tuple(vaxes))


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


def _merge(all_vaxes) -> tuple:
    """One ordered list of (name, size) for several operands; sizes of a name must agree."""
    merged: dict[str, int] = {}
    for vaxes in all_vaxes:
        for name, size in vaxes:
            if merged.setdefault(name, size) != size:
                raise ShapeError(
                    f"vectorized axis {name!r} has size {merged[name]} in one operand and {size} in another"
                )
    return tuple(merged.items())


def _lay_out(t: Tensor, names: tuple, inner_rank: int, materialize: bool) -> Tensor:
    """The raw tensor of `t` with axes `names` (size 1 where `t` lacks one, or broadcast to the
    full size with `materialize`), then `inner_rank - t.ndim` axes of size 1, then `t`'s shape."""
    own = [n for n, _ in t._vaxes]
    inner = list(range(len(own), len(own) + t.ndim))
    raw = permute_dims(t._raw(), [own.index(n) for n, _ in names if n in own] + inner)
    sizes = tuple(s if n in own else 1 for n, s in names)
    shape = sizes + (1,) * (inner_rank - t.ndim) + t.shape
    raw = reshape(raw, shape)
    if materialize:
        raw = broadcast_to(raw, tuple(s for _, s in names) + shape[len(names) :])
    return raw


def _wrap(out, names: tuple):
    if isinstance(out, tuple):
        return tuple(o._relabel(names) for o in out)
    return out._relabel(names)


def _elementwise(op, tensors, params, names):
    rank = max(t.ndim for t in tensors)
    return _wrap(bind(op, *[_lay_out(t, names, rank, False) for t in tensors], **params), names)


def _single(shift: Callable[[dict, tuple], dict]):
    """An op of one operand whose axis parameters move past the vectorized axes."""

    def rule(op, tensors, params, names):
        (t,) = tensors
        return _wrap(bind(op, t._raw(), **shift(params, names)), names)

    return rule


def _sizes(names) -> tuple:
    return tuple(s for _, s in names)


def _concat(op, tensors, params, names):
    rank = tensors[0].ndim
    raws = [_lay_out(t, names, rank, True) for t in tensors]
    return _wrap(bind(op, *raws, axis=params["axis"] + len(names)), names)


def _matmul(op, tensors, params, names):
    rank = max(t.ndim for t in tensors)
    return _wrap(bind(op, *[_lay_out(t, names, rank, False) for t in tensors]), names)


def _broadcast_to(op, tensors, params, names):
    (t,) = tensors
    raw = _lay_out(t, names, len(params["shape"]), False)
    return _wrap(bind(op, raw, shape=_sizes(names) + params["shape"]), names)


def _barrier(op, tensors, params, names):
    outs = bind(op, *[t._raw() for t in tensors])
    return tuple(o._relabel(t._vaxes) for o, t in zip(outs, tensors))


def _flat_gather_layout(x: Tensor, idx: Tensor, axis: int, names: tuple):
    """x as (P*n, *rest) and idx as (P, *idx.shape) offset into it, P the vectorized entries."""

    p, n = math.prod(_sizes(names)), x.shape[axis]
    xf = reshape(_lay_out(x, names, x.ndim, True), (p,) + x.shape)
    xf = permute_dims(xf, [0, 1 + axis] + [1 + i for i in range(x.ndim) if i != axis])
    rest = x.shape[:axis] + x.shape[axis + 1 :]
    i2 = reshape(_lay_out(idx, names, idx.ndim, True), (p,) + idx.shape)
    i2 = clip(where(i2 < 0, i2 + n, i2), 0, n - 1)  # take's clamp, before rows are merged
    offsets = asarray((np.arange(p) * n).astype(idx.dtype).reshape((p,) + (1,) * idx.ndim))
    return reshape(xf, (p * n,) + rest), i2 + offsets, p, n, rest


def _take(op, tensors, params, names):
    x, idx = tensors
    axis = params["axis"]
    if not idx._vaxes:
        return _wrap(bind(op, x._raw(), idx, axis=axis + len(names)), names)
    xf, i2, p, _, _ = _flat_gather_layout(x, idx, axis, names)
    flat = bind(op, xf, i2, axis=0)  # (P, *idx.shape, *rest)
    m = idx.ndim
    order = [0] + [1 + m + i for i in range(axis)] + [1 + i for i in range(m)]
    order += [1 + m + i for i in range(axis, x.ndim - 1)]
    out_shape = x.shape[:axis] + idx.shape + x.shape[axis + 1 :]
    return _wrap(reshape(permute_dims(flat, order), _sizes(names) + out_shape), names)


def _index_add(op, tensors, params, names):
    x, idx, upd = tensors
    axis = params["axis"]
    if not idx._vaxes:
        raws = [_lay_out(t, names, t.ndim, True) for t in (x, upd)]
        return _wrap(bind(op, raws[0], idx, raws[1], axis=axis + len(names)), names)
    xf, i2, p, n, rest = _flat_gather_layout(x, idx, axis, names)
    m = idx.ndim
    u = reshape(_lay_out(upd, names, upd.ndim, True), (p,) + upd.shape)
    u = permute_dims(u, [0] + [1 + axis + i for i in range(m)] + [1 + i for i in range(axis)]
                     + [1 + axis + m + i for i in range(x.ndim - 1 - axis)])
    added = bind(op, xf, reshape(i2, (-1,)), reshape(u, (-1,) + rest), axis=0)  # (P*n, *rest)
    back = reshape(added, (p, n) + rest)
    back = permute_dims(back, [0] + [2 + i for i in range(axis)] + [1] + [2 + i for i in range(axis, x.ndim - 1)])
    return _wrap(reshape(back, _sizes(names) + x.shape), names)


def _random_fold_in(op, tensors, params, names):
    """Random ops take batches of keys (`[*b, 2]`): the key's vectorized axes lead its batch
    axes, laid out against the data's so that one key meets each data entry of its own row."""
    key, data = tensors
    raw_key = _lay_out(key, names, data.ndim + 1, False)  # (*names, 1 per data axis, 2)
    return _wrap(bind(op, raw_key, _lay_out(data, names, data.ndim, False)), names)


def _shift_axes(key: str):
    return lambda p, names: {**p, key: tuple(a + len(names) for a in p[key])}


def _permute_rule(p, names):
    k = len(names)
    return {"axes": tuple(range(k)) + tuple(a + k for a in p["axes"])}


RULES: dict[str, Callable] = {
    **{name: _single(_shift_axes("axes")) for name in ("sum", "prod", "max", "min", "flip")},
    **{name: _single(lambda p, names: {**p, "axis": p["axis"] + len(names)})
       for name in ("argmax", "argmin", "cumsum", "cumprod", "sort")},
    "permute_dims": _single(_permute_rule),
    "reshape": _single(lambda p, names: {"shape": _sizes(names) + p["shape"]}),
    "slice": _single(lambda p, names: {"start": (0,) * len(names) + p["start"], "stop": _sizes(names) + p["stop"],
                                       "step": (1,) * len(names) + p["step"]}),
    "pad": _single(lambda p, names: {k: (0,) * len(names) + v for k, v in p.items()}),
    "broadcast_to": _broadcast_to,
    "concat": _concat,
    "matmul": _matmul,
    "take": _take,
    "index_add": _index_add,
    "barrier": _barrier,
    "random_uniform": _single(lambda p, names: p),  # a batch of keys draws a batch of arrays
    "random_normal": _single(lambda p, names: p),
    "random_fold_in": _random_fold_in,
}


def block_rule(op, tensors, params, names):
    """The rule of a block (checkpoint, loop) met by vectorized operands, as when the function
    `vjp` returned runs under vmap: emitted again through its front end, which traces the body on
    the vectorized operands. Its forward-mode rule does exactly that when no operand has a
    tangent. The blocks' modules put it in RULES."""
    outs, _ = op.jvp.rule((None,) * len(tensors), *tensors, **params)
    return tuple(outs)


def bind_vectorized(op, tensors: list[Tensor], params: dict):
    """Apply `op` to operands some of which are vectorized; elementwise unless a rule says."""
    names = _merge([t._vaxes for t in tensors])
    return RULES.get(op.name, _elementwise)(op, tensors, params, names)
