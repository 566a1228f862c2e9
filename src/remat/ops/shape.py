"""Ops that move elements without arithmetic: reshape, permute_dims, broadcast_to, concat,
slice, pad, flip (primitives); transpose, expand_dims, squeeze, stack (composed)."""

from __future__ import annotations

import builtins
import math

from remat.core import Aval, declare
from remat.errors import ArgumentValueError, ShapeError
from remat.ops import creation as _creation  # modules, not names: an import cycle (ops/__init__.py)
from remat.ops import elementwise as _elementwise
from remat.ops.axes import (
    axis_index,
    check_rank,
    int_tuple,
    listed,
    normalize_axes,
    ordered_axes,
    permutation,
    shape_tuple,
    static_int,
)
from remat.tensor import Tensor
from remat.trace import asarray, bind, linear_jvp
from remat.vaxes import axes_shifted, lay_out, single, sizes, wrap

# ---------------------------------------------------------------- rules


def _reshape_rule(x: Aval, *, shape: tuple[int, ...]) -> Aval:
    if math.prod(shape) != math.prod(x.shape):
        raise ShapeError(f"cannot reshape {x.shape} ({math.prod(x.shape)} elements) to {shape}")
    return Aval(shape, x.dtype)


def _permute_rule(x: Aval, *, axes: tuple[int, ...]) -> Aval:
    if sorted(axes) != list(range(x.ndim)):
        raise ShapeError(f"axes {axes} are not a permutation of the {x.ndim} axes of {x.shape}")
    return Aval(tuple(x.shape[a] for a in axes), x.dtype)


def _broadcast_rule(x: Aval, *, shape: tuple[int, ...]) -> Aval:
    if len(shape) < x.ndim or _elementwise.broadcast_shapes(x.shape, shape) != tuple(shape):
        raise ShapeError(f"cannot broadcast {x.shape} to {shape}")
    return Aval(shape, x.dtype)


def _concat_rule(*xs: Aval, axis: int) -> Aval:
    first = xs[0]
    for x in xs:
        if x.dtype != first.dtype:
            raise ShapeError(f"operands must share a dtype, got {first.dtype} and {x.dtype}")
        if x.ndim != first.ndim or any(
            a != b for i, (a, b) in enumerate(zip(x.shape, first.shape)) if i != axis
        ):
            raise ShapeError(f"shapes {first.shape} and {x.shape} differ off axis {axis}")
    size = builtins.sum(x.shape[axis] for x in xs)
    return Aval(first.shape[:axis] + (size,) + first.shape[axis + 1 :], first.dtype)


def _slice_len(start: int, stop: int, step: int) -> int:
    return builtins.max(0, (stop - start + step - 1) // step)


def _slice_rule(x: Aval, *, start: tuple, stop: tuple, step: tuple) -> Aval:
    if not len(start) == len(stop) == len(step) == x.ndim:
        raise ShapeError(f"slice needs one start/stop/step per axis of {x.shape}")
    for a, b, s, n in zip(start, stop, step, x.shape):
        if s < 1 or not 0 <= a <= n or not 0 <= b <= n:
            raise ShapeError(f"slice {a}:{b}:{s} is out of range for an axis of size {n}")
    return Aval(tuple(_slice_len(a, b, s) for a, b, s in zip(start, stop, step)), x.dtype)


def _padded(n: int, lo: int, hi: int, interior: int) -> int:
    return lo + hi + (n + (n - 1) * interior if n else 0)


def _pad_rule(x: Aval, *, lo: tuple, hi: tuple, interior: tuple) -> Aval:
    if not len(lo) == len(hi) == len(interior) == x.ndim or builtins.min((*lo, *hi, *interior, 0)) < 0:
        raise ShapeError(f"bad padding lo={lo} hi={hi} interior={interior} for {x.shape}")
    return Aval(tuple(_padded(*t) for t in zip(x.shape, lo, hi, interior)), x.dtype)


def _flip_rule(x: Aval, *, axes: tuple[int, ...]) -> Aval:
    normalize_axes(axes, x.ndim)
    return x


# ---------------------------------------------------------------- VJPs


def _concat_vjp(g, *xs, out, axis):
    # Each operand gets back its own stretch of the cotangent.
    cts, offset = [], 0
    for x in xs:
        n = x.shape[axis]
        cts.append(slice_axis(g, axis, offset, offset + n))
        offset += n
    return tuple(cts)


def _slice_vjp(g, x, out, *, start, stop, step):
    # Slicing picks elements; its transpose puts them back among zeros.
    if 0 in g.shape:
        return (_creation.zeros(x.shape, x.dtype),)
    hi = tuple(n - (a + (m - 1) * s + 1) for n, a, m, s in zip(x.shape, start, g.shape, step))
    return (pad(g, start, hi, tuple(s - 1 for s in step)),)


def _pad_vjp(g, x, out, *, lo, hi, interior):
    # Padding's transpose keeps the elements that came from x.
    stop = tuple(a + _padded(n, 0, 0, i) for a, n, i in zip(lo, x.shape, interior))
    return (slice(g, lo, stop, tuple(i + 1 for i in interior)),)


def _inverse(axes):
    inv = [0] * len(axes)
    for i, a in enumerate(axes):
        inv[a] = i
    return tuple(inv)


def _concat_jvp(ts, *xs, out, axis):
    # Linear: the tangents joined (zeros for the operands without one).
    return bind(_concat, *[_creation.zeros(x.shape, x.dtype) if t is None else t for t, x in zip(ts, xs)], axis=axis)


# ---------------------------------------------------------------- batch rules
# The vectorized axes lead the raw operand: they stay whole, ahead of the axes the op moves.


def _permute_batch(p, names):
    k = len(names)
    return {"axes": tuple(range(k)) + tuple(a + k for a in p["axes"])}


def _slice_batch(p, names):
    k = len(names)
    return {"start": (0,) * k + p["start"], "stop": sizes(names) + p["stop"], "step": (1,) * k + p["step"]}


def _broadcast_batch(op, tensors, params, names):
    (t,) = tensors
    raw = lay_out(t, names, len(params["shape"]), False)
    return wrap(bind(op, raw, shape=sizes(names) + params["shape"]), names)


def _concat_batch(op, tensors, params, names):
    rank = tensors[0].ndim
    raws = [lay_out(t, names, rank, True) for t in tensors]
    return wrap(bind(op, *raws, axis=params["axis"] + len(names)), names)


# Every op here only moves elements, so its JVP is the op applied to the tangent.
_reshape = declare("reshape", _reshape_rule, lambda g, x, out, shape: (reshape(g, x.shape),),
                   jvp=linear_jvp("reshape"), batch=single(lambda p, names: {"shape": sizes(names) + p["shape"]}),
                   traits={"layout"})
_permute = declare(
    "permute_dims", _permute_rule, lambda g, x, out, axes: (permute_dims(g, _inverse(axes)),),
    jvp=linear_jvp("permute_dims"), batch=single(_permute_batch), traits={"layout"})
_broadcast = declare(
    "broadcast_to", _broadcast_rule, lambda g, x, out, shape: (_elementwise.unbroadcast(g, x.shape),),
    jvp=linear_jvp("broadcast_to"), batch=_broadcast_batch, traits={"layout"})
_concat = declare("concat", _concat_rule, _concat_vjp, jvp=_concat_jvp, batch=_concat_batch,
                  traits={"layout", "copies"})
_slice = declare("slice", _slice_rule, _slice_vjp, jvp=linear_jvp("slice"), batch=single(_slice_batch),
                 traits={"layout"})
_pad = declare("pad", _pad_rule, _pad_vjp, jvp=linear_jvp("pad"),
               batch=single(lambda p, names: {k: (0,) * len(names) + v for k, v in p.items()}),
               traits={"layout", "copies"})
_flip = declare("flip", _flip_rule, lambda g, x, out, axes: (flip(g, axes),),  # its own transpose
                jvp=linear_jvp("flip"), batch=axes_shifted, traits={"layout"})

# ---------------------------------------------------------------- front end


def reshape(x, shape) -> Tensor:
    """`x` with a new shape of the same size; one entry may be -1 (inferred from the others).

    >>> import remat as rm
    >>> rm.reshape(rm.arange(6), (-1, 3)).shape
    (2, 3)
    """
    x = asarray(x)
    wanted = shape_tuple("reshape", shape, inferred=True)
    shape = _inferred(x.shape, wanted)
    if math.prod(shape) != x.size:
        raise ShapeError(f"reshape: cannot reshape {x.shape} ({x.size} elements) to {wanted}")
    if shape == x.shape:
        return x
    return bind(_reshape, x, shape=shape)


def _inferred(have: tuple[int, ...], shape: tuple[int, ...]) -> tuple[int, ...]:
    """`shape` with its -1 replaced by the size that makes it hold `have`'s elements."""
    if -1 not in shape:
        return shape
    known = math.prod(n for n in shape if n != -1)
    if known == 0 or math.prod(have) % known:
        raise ShapeError(f"reshape: cannot reshape {have} ({math.prod(have)} elements) to {shape}")
    return tuple(math.prod(have) // known if n == -1 else n for n in shape)


def permute_dims(x, axes) -> Tensor:
    """`x` with its axes reordered: output axis i is input axis `axes[i]` (negative axes count
    from the end)."""
    return _permuted("permute_dims", asarray(x), axes)


def _permuted(fn: str, x: Tensor, axes) -> Tensor:
    axes = permutation(fn, axes, x.shape)
    if axes == tuple(range(x.ndim)):
        return x
    return bind(_permute, x, axes=axes)


def transpose(x, axes=None) -> Tensor:
    """Reverse the axes (or reorder them as `axes`), as `np.transpose`."""
    x = asarray(x)
    return _permuted("transpose", x, tuple(reversed(range(x.ndim))) if axes is None else axes)


def matrix_transpose(x) -> Tensor:
    """Swap the last two axes."""
    x = asarray(x)
    if x.ndim < 2:
        raise ShapeError(f"matrix_transpose: needs a tensor of at least 2 axes, got shape {x.shape}")
    axes = list(range(x.ndim))
    axes[-2:] = axes[:-3:-1]
    return permute_dims(x, axes)


def broadcast_to(x, shape) -> Tensor:
    """`x` repeated along new leading axes and stretched along axes of size 1."""
    x = asarray(x)
    shape = shape_tuple("broadcast_to", shape)
    if shape == x.shape:
        return x
    return bind(_broadcast, x, shape=shape)


def expand_dims(x, axis) -> Tensor:
    """`x` with new axes of size 1 inserted at `axis` (an int or a tuple), each counted in the
    result: `expand_dims(x, -1)` adds a last axis."""
    return _expanded("expand_dims", asarray(x), axis)


def _expanded(fn: str, x: Tensor, axis) -> Tensor:
    entries = listed(fn, axis, "axis")
    ndim = x.ndim + (1 if entries is None else len(entries))
    check_rank(fn, ndim, "the result")
    axes = normalize_axes(axis, ndim, fn)
    dims = iter(x.shape)
    return reshape(x, tuple(1 if i in axes else next(dims) for i in range(ndim)))


def squeeze(x, axis=None) -> Tensor:
    """`x` without the axes of size 1 named by `axis` (all of them if None)."""
    x = asarray(x)
    if axis is None:
        axes = tuple(i for i, n in enumerate(x.shape) if n == 1)
    else:
        axes = ordered_axes("squeeze", axis, x.ndim)
    for a in axes:
        if x.shape[a] != 1:
            raise ShapeError(f"squeeze: axis {a} of {x.shape} has size {x.shape[a]}, not 1")
    return reshape(x, tuple(n for i, n in enumerate(x.shape) if i not in axes))


def concat(xs, axis: int = 0) -> Tensor:
    """Join tensors along an existing axis."""
    return _joined("concat", xs, axis)


def concatenate(xs, axis: int = 0) -> Tensor:
    """Join tensors along an existing axis: NumPy's name for `concat`.

    >>> import remat as rm
    >>> rm.concatenate([rm.zeros((1, 2)), rm.ones((2, 2))]).shape
    (3, 2)
    """
    return _joined("concatenate", xs, axis)


def _joined(fn: str, xs, axis) -> Tensor:
    xs = _elementwise.promote(*_nonempty(fn, xs))
    if xs[0].ndim == 0:
        raise ShapeError(f"{fn}: cannot join 0-d tensors; use stack")
    axis = axis_index(fn, axis, xs[0].ndim)
    if len(xs) == 1:
        return xs[0]
    return bind(_concat, *xs, axis=axis)


def split(x, indices_or_sections, axis: int = 0) -> list[Tensor]:
    """`x` cut along `axis` into a list, as `np.split`: an int `n` gives `n` equal parts (it
    must divide the axis), a sequence of ints the points to cut at (Python slice bounds:
    negative ones count from the end, and the parts may be empty).

    >>> import remat as rm
    >>> [p.shape for p in rm.split(rm.zeros((6, 2)), 3)]
    [(2, 2), (2, 2), (2, 2)]
    >>> [p.shape for p in rm.split(rm.zeros((6, 2)), [1, 4])]
    [(1, 2), (3, 2), (2, 2)]
    """
    x = asarray(x)
    if x.ndim == 0:
        raise ShapeError("split: cannot split a 0-d tensor; it has no axis")
    axis = axis_index("split", axis, x.ndim)
    n = x.shape[axis]
    points = listed("split", indices_or_sections, "indices_or_sections")
    if points is None:
        parts = static_int("split", indices_or_sections, "indices_or_sections", "an int or a sequence of ints")
        if parts <= 0 or n % parts:
            raise ArgumentValueError(
                f"split: indices_or_sections={parts} does not divide axis {axis} of size {n} (shape "
                f"{x.shape}) into equal parts; pass a number of parts that divides {n}, or the points "
                "to cut at (a list)"
            )
        points = [k * (n // parts) for k in range(1, parts)]
    else:
        points = [static_int("split", p, "indices_or_sections", written=indices_or_sections) for p in points]
    bounds = [0, *points, n]
    return [_part(x, axis, a, b) for a, b in zip(bounds, bounds[1:])]


def _part(x: Tensor, axis: int, start: int, stop: int) -> Tensor:
    a, b, _ = builtins.slice(start, stop).indices(x.shape[axis])
    return slice_axis(x, axis, a, builtins.max(a, b))


def stack(xs, axis: int = 0) -> Tensor:
    """Join tensors of one shape along a new axis (`axis` counts in the result)."""
    xs = [asarray(x) for x in _nonempty("stack", xs)]
    for x in xs:
        if x.shape != xs[0].shape:
            raise ShapeError(f"stack: tensors must share one shape, got {xs[0].shape} and {x.shape}")
    axis = axis_index("stack", axis, xs[0].ndim + 1)
    return concat([_expanded("stack", x, axis) for x in xs], axis=axis)


def _nonempty(fn: str, xs) -> list:
    xs = list(xs)
    if not xs:
        raise ArgumentValueError(f"{fn}: needs at least one tensor, got an empty sequence")
    return xs


def slice(x, start, stop, step=None) -> Tensor:
    """Elements `start[i]:stop[i]:step[i]` along every axis (non-negative, in range, step >= 1)."""
    x = asarray(x)
    step = (1,) * x.ndim if step is None else step
    start, stop, step = (int_tuple("slice", v, n) for v, n in ((start, "start"), (stop, "stop"), (step, "step")))
    if start == (0,) * x.ndim and stop == x.shape and step == (1,) * x.ndim:
        return x
    return bind(_slice, x, start=start, stop=stop, step=step)


def slice_axis(x, axis: int, start: int, stop: int, step: int = 1) -> Tensor:
    """Elements `start:stop:step` along one axis."""
    x = asarray(x)
    starts = [0] * x.ndim
    stops = list(x.shape)
    steps = [1] * x.ndim
    starts[axis], stops[axis], steps[axis] = start, stop, step
    return slice(x, starts, stops, steps)


def pad(x, lo, hi, interior=None) -> Tensor:
    """`x` with zeros added: `lo[i]` before, `hi[i]` after and `interior[i]` between elements."""
    x = asarray(x)
    interior = (0,) * x.ndim if interior is None else interior
    lo, hi, interior = (int_tuple("pad", v, n) for v, n in ((lo, "lo"), (hi, "hi"), (interior, "interior")))
    if not builtins.any((*lo, *hi, *interior)):
        return x
    return bind(_pad, x, lo=lo, hi=hi, interior=interior)


def flip(x, axis=None) -> Tensor:
    """`x` with the order of elements reversed along `axis` (all axes if None)."""
    x = asarray(x)
    axes = normalize_axes(axis, x.ndim, "flip")
    if not axes:
        return x
    return bind(_flip, x, axes=axes)
