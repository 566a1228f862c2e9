"""Named vectorized axes (as in Nx) and `vmap` built on them.

A vectorized tensor stores its vectorized axes as leading axes; ops see only the inner shape.
When an op meets vectorized operands, the operands are laid out on one common list of names
(missing names get size-1 axes, which broadcast) and the op's axis parameters are shifted past
the vectorized axes. Graphs never see names: their Vars have the full, laid-out shapes.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np

from remat import tree
from remat.errors import ShapeError
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
        raise TypeError(f"vectorize: the axis name must be a str, got {type(name).__name__}")
    if t.ndim == 0:
        raise ShapeError("vectorize: a 0-d tensor has no leading axis to vectorize")
    if name in dict(t._vaxes):
        raise ValueError(f"vectorize: the tensor is already vectorized over {name!r}")
    return t._relabel(t._vaxes + ((name, t.shape[0]),))


def devectorize(t, name: str | None = None) -> Tensor:
    """`t` with its vectorized axes back as leading axes, in order; with `name`, only that axis
    (it becomes the leading axis of the inner shape; the others stay vectorized)."""
    t = asarray(t)
    if name is None:
        return t._raw()
    names = [n for n, _ in t._vaxes]
    if name not in names:
        raise ValueError(f"devectorize: the tensor is not vectorized over {name!r} (it has {names})")
    i, k = names.index(name), len(names)
    order = [j for j in range(k) if j != i] + [i] + list(range(k, k + t.ndim))
    from remat.ops.shape import permute_dims

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


_fresh = itertools.count()


def vmap(fn: Callable, in_axes=0, out_axes=0) -> Callable:
    """Map `fn` over an axis of its arguments: `in_axes` (an int, None for an unmapped
    argument, or one entry per argument, each a pytree prefix) and `out_axes` likewise.

    >>> import remat as rm
    >>> rm.vmap(lambda row: rm.sum(row))(rm.asarray([[1.0, 2.0], [3.0, 4.0]]))
    Tensor([3., 7.], dtype=float32)
    """

    def mapped(*args):
        name = f"vmap{next(_fresh)}"
        axes = _expand(in_axes, args, "in_axes")
        sizes = {asarray(x).shape[a] for x, a in zip(tree.leaves(args), tree.leaves(axes)) if a is not _UNMAPPED}
        if len(sizes) != 1:
            raise ValueError(f"vmap: mapped axes must share one size, got {sorted(sizes)}" if sizes
                             else "vmap: no argument is mapped (every in_axes entry is None)")
        size = sizes.pop()
        out = fn(*tree.map(lambda x, a: x if a is _UNMAPPED else _to_vectorized(x, a, name), args, axes))
        oaxes = _expand(out_axes, out, "out_axes")
        return tree.map(lambda y, a: _from_vectorized(asarray(y), a, name, size), out, oaxes)

    return mapped


# ---------------------------------------------------------------- vmap plumbing

_UNMAPPED = object()  # stands for None in in_axes/out_axes, which pytrees would drop


def _expand(spec, target, what: str):
    """One axis per leaf of `target`: `spec` is an int, None, or a pytree prefix of `target`."""
    if spec is None or isinstance(spec, int):
        return tree.map(lambda _: _UNMAPPED if spec is None else spec, target)
    if isinstance(spec, dict) and isinstance(target, dict) and spec.keys() == target.keys():
        return {k: _expand(spec[k], target[k], what) for k in target}
    if isinstance(spec, (list, tuple)) and isinstance(target, (list, tuple)) and len(spec) == len(target):
        items = [_expand(s, t, what) for s, t in zip(spec, target)]
        return type(target)(*items) if hasattr(target, "_fields") else type(target)(items)
    raise ValueError(f"vmap: {what}={spec!r} does not match the structure of {target!r}")


def _to_vectorized(x, axis: int, name: str) -> Tensor:
    from remat.ops.shape import permute_dims

    x = asarray(x)
    axis %= max(x.ndim, 1)
    order = [axis] + [i for i in range(x.ndim) if i != axis]
    return vectorize(permute_dims(x, order), name)


def _from_vectorized(y: Tensor, axis, name: str, size: int) -> Tensor:
    from remat.ops.shape import permute_dims

    if axis is _UNMAPPED:
        return y
    if name not in dict(y._vaxes):  # the result does not depend on the mapped arguments
        y = align_to(y, ((name, size),) + y._vaxes)
    y = devectorize(y, name)
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
    from remat.ops.shape import broadcast_to, permute_dims, reshape

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
    from remat.ops.elementwise import where
    from remat.ops.shape import permute_dims, reshape

    p, n = math.prod(_sizes(names)), x.shape[axis]
    xf = reshape(_lay_out(x, names, x.ndim, True), (p,) + x.shape)
    xf = permute_dims(xf, [0, 1 + axis] + [1 + i for i in range(x.ndim) if i != axis])
    rest = x.shape[:axis] + x.shape[axis + 1 :]
    i2 = reshape(_lay_out(idx, names, idx.ndim, True), (p,) + idx.shape)
    i2 = where(i2 < 0, i2 + n, i2)
    offsets = asarray((np.arange(p) * n).astype(idx.dtype).reshape((p,) + (1,) * idx.ndim))
    return reshape(xf, (p * n,) + rest), i2 + offsets, p, n, rest


def _take(op, tensors, params, names):
    from remat.ops.shape import permute_dims, reshape

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
    from remat.ops.shape import permute_dims, reshape

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
    **{name: _single(lambda p, names: {**p, "axis": p["axis"] + len(names)}) for name in ("argmax", "argmin")},
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
    "random_fold_in": _random_fold_in,
}


def bind_vectorized(op, tensors: list[Tensor], params: dict):
    """Apply `op` to operands some of which are vectorized; elementwise unless a rule says."""
    names = _merge([t._vaxes for t in tensors])
    return RULES.get(op.name, _elementwise)(op, tensors, params, names)
