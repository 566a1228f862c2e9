"""Named vectorized axes (as in Nx): how vectorized operands are laid out for an op, and the
pieces of the ops' batch rules.

A vectorized tensor stores its vectorized axes as leading axes; ops see only the inner shape.
When an op meets vectorized operands, the operands are laid out on one common list of names
(missing names get size-1 axes, which broadcast) and the op's axis parameters are shifted past
the vectorized axes. Graphs never see names: their Vars have the full, laid-out shapes.

How an op does that is its batch rule, `Op.batch(op, tensors, params, names) -> outputs`, with
`names` the (name, size) of every vectorized axis of the operands (`merge`); the transform that
calls it is remat/vectorize.py. This module sits in the IR core, below the ops that build their
rules from it, so the layout binds the shape primitives it needs by name.
"""

from __future__ import annotations

from collections.abc import Callable

from remat.core import OPS
from remat.errors import ShapeError
from remat.tensor import Tensor
from remat.trace import bind


def merge(all_vaxes) -> tuple:
    """One ordered list of (name, size) for several operands; sizes of a name must agree."""
    merged: dict[str, int] = {}
    for vaxes in all_vaxes:
        for name, size in vaxes:
            if merged.setdefault(name, size) != size:
                raise ShapeError(
                    f"vectorized axis {name!r} has size {merged[name]} in one operand and {size} in another"
                )
    return tuple(merged.items())


def sizes(names) -> tuple:
    return tuple(s for _, s in names)


def lay_out(t: Tensor, names: tuple, inner_rank: int, materialize: bool) -> Tensor:
    """The raw tensor of `t` with axes `names` (size 1 where `t` lacks one, or broadcast to the
    full size with `materialize`), then `inner_rank - t.ndim` axes of size 1, then `t`'s shape."""
    own = [n for n, _ in t._vaxes]
    inner = list(range(len(own), len(own) + t.ndim))
    axes = tuple([own.index(n) for n, _ in names if n in own] + inner)
    raw = t._raw()
    if axes != tuple(range(len(axes))):
        raw = bind(OPS["permute_dims"], raw, axes=axes)
    shape = tuple(s if n in own else 1 for n, s in names) + (1,) * (inner_rank - t.ndim) + t.shape
    if shape != raw.shape:
        raw = bind(OPS["reshape"], raw, shape=shape)
    full = sizes(names) + shape[len(names) :]
    if materialize and full != shape:
        raw = bind(OPS["broadcast_to"], raw, shape=full)
    return raw


def wrap(out, names: tuple):
    """The output(s) of an op bound on laid-out operands, vectorized over `names` again."""
    if isinstance(out, tuple):
        return tuple(o._relabel(names) for o in out)
    return out._relabel(names)


def elementwise(op, tensors: list[Tensor], params: dict, names: tuple):
    """The batch rule of an op whose operands broadcast together (`core.ELEMENTWISE`, `declare`'s default)."""
    rank = max(t.ndim for t in tensors)
    return wrap(bind(op, *[lay_out(t, names, rank, False) for t in tensors], **params), names)



def single(shift: Callable[[dict, tuple], dict]) -> Callable:
    """The batch rule of an op of one operand whose parameters `shift(params, names)` gives for
    its raw operand (axis parameters moved past the vectorized axes)."""

    def rule(op, tensors, params, names):
        (t,) = tensors
        return wrap(bind(op, t._raw(), **shift(params, names)), names)

    return rule


#: The batch rule of an op of one operand with an `axes` parameter (a reduction, flip).
axes_shifted = single(lambda p, names: {**p, "axes": tuple(a + len(names) for a in p["axes"])})
#: The batch rule of an op of one operand with an `axis` parameter (argmax, cumsum, sort).
axis_shifted = single(lambda p, names: {**p, "axis": p["axis"] + len(names)})


def align_to(t: Tensor, vaxes: tuple) -> Tensor:
    """`t` vectorized over exactly `vaxes` (in that order), broadcast over the names it lacks."""
    if t._vaxes == tuple(vaxes):
        return t
    extra = set(dict(t._vaxes)) - set(dict(vaxes))
    if extra:
        raise ValueError(f"cannot align a tensor vectorized over {sorted(extra)} to {list(vaxes)}")
    merge([t._vaxes, tuple(vaxes)])  # sizes must agree
    return lay_out(t, tuple(vaxes), t.ndim, materialize=True)._relabel(tuple(vaxes))


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
