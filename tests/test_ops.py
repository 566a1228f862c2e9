"""Every public op against NumPy: eagerly on concrete tensors and traced inside `rm.jit`.

One spec row per op (a few ops have a row per variant, e.g. `astype` per target dtype). A row
names the remat call, the NumPy reference, the dtypes it takes, the result dtype and a list of
variants: argument shapes (or fixed arrays) with keyword arguments for both calls.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pytest
from scipy import special

import remat as rm
from remat import ops

F32, F64, I32, I64, BOOL = (np.dtype(d) for d in ("float32", "float64", "int32", "int64", "bool"))
FLOATS = (F32, F64)
INTS = (I32, I64)
NUMERIC = FLOATS + INTS
ALL = NUMERIC + (BOOL,)

DT = object()  # a keyword value replaced by the dtype under test


def same(d):
    return d


@dataclass(frozen=True)
class Arg:
    """An argument drawn at random: `shape`, a fixed `dtype` (else the one under test), `domain`."""

    shape: tuple[int, ...]
    dtype: np.dtype | None = None
    domain: str | None = None


@dataclass
class Spec:
    op: str  # the public name in remat.ops.__all__
    fn: Callable  # remat call: fn(*tensors, **kwargs)
    ref: Callable  # NumPy reference: ref(*arrays, **kwargs)
    variants: list  # [(args, kwargs)]; an arg is a shape tuple, an Arg or a fixed np.ndarray
    dtypes: tuple = ALL
    out: Callable = same  # the result dtype, from the dtype under test
    domain: str = "any"
    id: str = field(default="")

    def __post_init__(self):
        self.id = self.id or self.op


def to_float(d):
    return d if d.kind == "f" else F32


def to_bool(d):
    return BOOL


def to_i32(d):
    return I32


def sum_dtype(d):
    return I32 if d == BOOL else d


UNARY = [((),), ((5,),), ((3, 4),), ((2, 3, 4),)]
BINARY = [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 4)), ((), (2, 3)), ((5,), ())]
TERNARY = [((3, 4), (3, 4), (3, 4)), ((3, 1), (4,), ()), ((), (2, 3), (3,))]


def unary(op, ref, dtypes=NUMERIC, out=same, domain="any"):
    return Spec(op, getattr(ops, op), ref, [(a, {}) for a in UNARY], dtypes, out, domain)


def binary(op, ref, dtypes=ALL, out=same, domain="any"):
    variants = [((a, b), {}) for a, b in BINARY]
    return Spec(op, getattr(ops, op), ref, variants, dtypes, out, domain)


def _np_pad(x, lo, hi, interior):
    spans = [n + (n - 1) * i if n else 0 for n, i in zip(x.shape, interior)]
    out = np.zeros([a + s + b for a, s, b in zip(lo, spans, hi)], x.dtype)
    out[tuple(slice(a, a + s, i + 1) for a, s, i in zip(lo, spans, interior))] = x
    return out


def _np_index_add(x, idx, upd, axis):
    out = x.copy()
    np.add.at(out, (slice(None),) * axis + (idx,), upd)
    return out


def _red(axis_variants):
    return [((s,), kw) for s, kw in axis_variants]


REDUCE = _red([
    ((3, 4), {}),
    ((3, 4), {"axis": 0}),
    ((2, 3, 4), {"axis": (0, 2)}),
    ((2, 3, 4), {"axis": -1, "keepdims": True}),
    ((5,), {"axis": 0, "keepdims": True}),
])
ARG_REDUCE = _red([
    ((3, 4), {}),
    ((3, 4), {"axis": 1}),
    ((2, 3, 4), {"axis": -2}),
    ((2, 3, 4), {"axis": 0, "keepdims": True}),
    ((3, 4), {"keepdims": True}),
])
IDX = np.array([2, 0, 2, 1])
CUMULATIVE = _red([((3, 4), {}), ((3, 4), {"axis": 1}), ((2, 3, 4), {"axis": -3}), ((5,), {"axis": 0})])
SORTS = _red([((3, 4), {}), ((3, 4), {"axis": 0}), ((2, 3, 4), {"axis": None}), ((7,), {"descending": True}),
              ((2, 5), {"axis": 0, "descending": True})])


def _np_argsort(x, axis=-1, descending=False):
    """NumPy's stable argsort; descending as jnp.argsort does it (equal elements keep their order)."""
    if not descending:
        return np.argsort(x, axis=axis, kind="stable")
    n = x.size if axis is None else x.shape[axis]
    return n - 1 - np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)


def _np_sort(x, axis=-1, descending=False):
    flat = x.reshape(-1) if axis is None else x
    return np.take_along_axis(flat, _np_argsort(x, axis, descending), axis=0 if axis is None else axis)

SPECS = [
    # ---- unary math
    unary("negative", np.negative),
    unary("abs", np.abs, dtypes=ALL),
    unary("sign", np.sign),
    unary("square", np.square),
    unary("exp", np.exp, out=to_float),
    unary("log", np.log, out=to_float, domain="positive"),
    unary("log1p", np.log1p, out=to_float, domain="above-1"),
    unary("sqrt", np.sqrt, out=to_float, domain="positive"),
    unary("sin", np.sin, out=to_float),
    unary("cos", np.cos, out=to_float),
    unary("tanh", np.tanh, out=to_float),
    unary("logical_not", np.logical_not, dtypes=ALL, out=to_bool),
    # ---- binary arithmetic, broadcasting
    binary("add", np.add),
    binary("subtract", np.subtract, dtypes=NUMERIC),
    binary("multiply", np.multiply),
    binary("divide", np.divide, dtypes=NUMERIC, out=to_float, domain="nonzero"),
    binary("pow", np.power, dtypes=NUMERIC, out=to_float, domain="positive"),
    binary("maximum", np.maximum),
    binary("minimum", np.minimum),
    # ---- comparisons and logic
    binary("equal", np.equal, out=to_bool),
    binary("not_equal", np.not_equal, out=to_bool),
    binary("less", np.less, out=to_bool),
    binary("less_equal", np.less_equal, out=to_bool),
    binary("greater", np.greater, out=to_bool),
    binary("greater_equal", np.greater_equal, out=to_bool),
    binary("logical_and", np.logical_and, out=to_bool),
    binary("logical_or", np.logical_or, out=to_bool),
    Spec("where", rm.where, np.where, [((Arg(c, BOOL), x, y), {}) for c, x, y in TERNARY]),
    Spec("clip", rm.clip, np.clip, [
        (((3, 4),), {"min": -1, "max": 2}),
        (((5,),), {"min": 0}),
        (((2, 3),), {"max": 1}),
    ], dtypes=NUMERIC, id="clip"),
    *(
        Spec("astype", rm.astype, lambda x, dtype: x.astype(dtype),
             [(((3, 4),), {"dtype": t}), (((),), {"dtype": t})], out=lambda d, t=t: t,
             id=f"astype-{t}")
        for t in ALL
    ),
    # ---- linear algebra
    Spec("matmul", rm.matmul, np.matmul, [
        (((3, 4), (4, 5)), {}),
        (((4,), (4, 5)), {}),
        (((3, 4), (4,)), {}),
        (((4,), (4,)), {}),
        (((2, 1, 3, 4), (5, 4, 2)), {}),
    ], dtypes=NUMERIC),
    Spec("tensordot", rm.tensordot, np.tensordot, [
        (((2, 3, 4), (3, 4, 5)), {"axes": 2}),
        (((2, 3), (3, 4)), {"axes": 1}),
        (((2,), (3,)), {"axes": 0}),
        (((3, 2), (4, 3)), {"axes": ([0], [1])}),
        (((2, 3, 4), (4, 2, 5)), {"axes": ((0, 2), (1, 0))}),
    ], dtypes=NUMERIC),
    # ---- reductions
    Spec("sum", rm.sum, np.sum, REDUCE, out=sum_dtype),
    Spec("prod", rm.prod, np.prod, REDUCE, out=sum_dtype, domain="small"),
    Spec("max", rm.max, np.max, REDUCE),
    Spec("min", rm.min, np.min, REDUCE),
    Spec("mean", rm.mean, np.mean, REDUCE, dtypes=NUMERIC, out=to_float),
    Spec("argmax", rm.argmax, np.argmax, ARG_REDUCE, dtypes=NUMERIC, out=to_i32),
    Spec("argmin", rm.argmin, np.argmin, ARG_REDUCE, dtypes=NUMERIC, out=to_i32),
    # ---- shape
    Spec("reshape", rm.reshape, lambda x, shape: np.reshape(x, shape), [
        (((2, 3, 4),), {"shape": (6, 4)}),
        (((2, 3, 4),), {"shape": (-1,)}),
        (((6,),), {"shape": (2, -1)}),
        (((),), {"shape": (1, 1)}),
        (((3, 4),), {"shape": 12}),
    ]),
    Spec("permute_dims", rm.permute_dims, np.transpose, [
        (((2, 3, 4),), {"axes": (1, 2, 0)}),
        (((2, 3, 4),), {"axes": (0, -1, 1)}),
        (((3, 4),), {"axes": (1, 0)}),
    ]),
    Spec("transpose", rm.transpose, np.transpose, [
        (((2, 3, 4),), {}),
        (((3, 4),), {}),
        (((2, 3, 4),), {"axes": (2, 0, 1)}),
        (((5,),), {}),
    ]),
    Spec("matrix_transpose", rm.matrix_transpose, lambda x: np.swapaxes(x, -1, -2),
         [(((3, 4),), {}), (((2, 3, 4),), {})]),
    Spec("expand_dims", rm.expand_dims, np.expand_dims, [
        (((3, 4),), {"axis": 0}),
        (((3, 4),), {"axis": -1}),
        (((3, 4),), {"axis": (0, 2)}),
        (((),), {"axis": 0}),
    ]),
    Spec("squeeze", rm.squeeze, np.squeeze, [
        (((1, 3, 1, 4),), {}),
        (((1, 3, 1, 4),), {"axis": 0}),
        (((1, 3, 1, 4),), {"axis": (0, -2)}),
        (((1,),), {}),
    ]),
    Spec("broadcast_to", rm.broadcast_to, np.broadcast_to, [
        (((3,),), {"shape": (2, 3)}),
        (((3, 1),), {"shape": (2, 3, 4)}),
        (((),), {"shape": (2, 2)}),
        (((2, 3),), {"shape": (2, 3)}),
    ]),
    Spec("concat", lambda *xs, **kw: rm.concat(list(xs), **kw),
         lambda *xs, **kw: np.concatenate(xs, **kw), [
             (((2, 3), (4, 3)), {}),
             (((2, 3), (2, 1), (2, 2)), {"axis": 1}),
             (((2, 3, 1), (2, 3, 2)), {"axis": -1}),
             (((3,),), {}),
         ]),
    Spec("stack", lambda *xs, **kw: rm.stack(list(xs), **kw),
         lambda *xs, **kw: np.stack(xs, **kw), [
             (((2, 3), (2, 3)), {}),
             (((2, 3), (2, 3), (2, 3)), {"axis": 1}),
             (((4,), (4,)), {"axis": -1}),
             (((), ()), {}),
         ]),
    Spec("flip", rm.flip, np.flip, [
        (((3, 4),), {}),
        (((3, 4),), {"axis": 0}),
        (((2, 3, 4),), {"axis": (0, -1)}),
    ]),
    Spec("slice", rm.slice, lambda x, start, stop, step=None: x[tuple(
        slice(a, b, s) for a, b, s in zip(start, stop, step or (1,) * x.ndim))], [
        (((5, 6),), {"start": (1, 0), "stop": (4, 6)}),
        (((5, 6),), {"start": (0, 1), "stop": (5, 6), "step": (2, 3)}),
        (((7,),), {"start": (2,), "stop": (2,)}),
    ]),
    Spec("pad", rm.pad, _np_pad, [
        (((3,),), {"lo": (1,), "hi": (2,), "interior": (0,)}),
        (((2, 3),), {"lo": (0, 1), "hi": (1, 0), "interior": (1, 2)}),
        (((2, 3),), {"lo": (0, 0), "hi": (0, 0), "interior": (0, 0)}),
    ]),
    # ---- indexing
    Spec("take", rm.take, np.take, [
        (((5,), IDX), {}),
        (((3, 4), IDX), {"axis": 1}),
        (((3, 4), np.array([[0, -1], [2, 1]])), {"axis": 0}),
        (((3, 4), np.array([11, 0, 5])), {}),
        (((2, 3, 4), np.array(1)), {"axis": -2}),
    ]),
    Spec("index_add", ops.index_add, _np_index_add, [
        (((5,), IDX, (4,)), {"axis": 0}),
        (((3, 4), IDX, (3, 4)), {"axis": 1}),
        (((3, 2), np.array([[0, 0], [2, 1]]), (2, 2, 2)), {"axis": 0}),
    ], dtypes=NUMERIC),
    Spec("getitem", ops.getitem, lambda x, index: x[index], [
        (((4, 5),), {"index": 1}),
        (((4, 5),), {"index": (slice(None), -2)}),
        (((4, 5, 6),), {"index": (slice(3, None, -2), None, Ellipsis, 4)}),
        (((4, 5),), {"index": (np.array([3, 0, 0]), slice(1, 4))}),
        (((4, 5),), {"index": ()}),
    ]),
    # ---- issue 11: the names NumPy and JAX users type
    Spec("floor_divide", rm.floor_divide, np.floor_divide, [((a, b), {}) for a, b in BINARY],
         dtypes=NUMERIC, domain="nonzero"),
    Spec("remainder", rm.remainder, np.remainder, [((a, b), {}) for a, b in BINARY],
         dtypes=NUMERIC, domain="nonzero"),
    Spec("var", rm.var, np.var, [*REDUCE, (((3, 4),), {"axis": 1, "ddof": 1})], dtypes=NUMERIC, out=to_float),
    Spec("std", rm.std, np.std, [*REDUCE, (((2, 3, 4),), {"axis": (0, 1), "ddof": 2})], dtypes=NUMERIC,
         out=to_float),
    Spec("cumsum", rm.cumsum, np.cumsum, CUMULATIVE, out=sum_dtype),
    Spec("cumprod", rm.cumprod, np.cumprod, CUMULATIVE, out=sum_dtype, domain="small"),
    Spec("sort", rm.sort, _np_sort, SORTS),
    Spec("argsort", rm.argsort, _np_argsort, SORTS, out=to_i32),
    Spec("einsum", lambda *xs, subscripts: rm.einsum(subscripts, *xs),
         lambda *xs, subscripts: np.einsum(subscripts, *xs), [
             (((3, 4), (4, 5)), {"subscripts": "ij,jk->ik"}),
             (((2, 3, 4), (2, 4, 5)), {"subscripts": "bij,bjk->bik"}),
             (((3, 3),), {"subscripts": "ii"}),
             (((2, 3, 3),), {"subscripts": "bii->bi"}),
             (((3, 4),), {"subscripts": "ij"}),
             (((3, 4),), {"subscripts": "ba"}),
             (((4,), (4,)), {"subscripts": "i,i"}),
             (((3,), (4,)), {"subscripts": "i,j->ij"}),
             (((2, 3), (3, 4), (4, 2)), {"subscripts": "ij,jk,kl->il"}),
             (((5, 1, 3, 4), (2, 4, 2)), {"subscripts": "...ij,...jk->...ik"}),
             (((2, 3, 4),), {"subscripts": "i...->...i"}),
             (((1, 3), (4, 3)), {"subscripts": "ij,ij->i"}),
         ], dtypes=NUMERIC),
    Spec("outer", rm.outer, np.outer, [(((3,), (4,)), {}), (((2, 2), (3,)), {}), (((), (2,)), {})]),
    Spec("concatenate", lambda *xs, **kw: rm.concatenate(list(xs), **kw),
         lambda *xs, **kw: np.concatenate(xs, **kw), [(((2, 3), (4, 3)), {}), (((2, 3), (2, 1)), {"axis": -1})]),
    Spec("split", lambda x, **kw: rm.concat([rm.sum(p, axis=0, keepdims=True) for p in rm.split(x, **kw)]),
         lambda x, **kw: np.concatenate([np.sum(p, axis=0, keepdims=True) for p in np.split(x, **kw)]), [
             (((6, 2),), {"indices_or_sections": 3}),
             (((6, 2),), {"indices_or_sections": [1, 4]}),
             (((6, 2),), {"indices_or_sections": [-2, 8]}),
             (((2, 6),), {"indices_or_sections": 2, "axis": 1}),
         ], out=sum_dtype),
    Spec("linspace", rm.linspace, np.linspace, [
        ((), {"start": 0.0, "stop": 1.0, "num": 5, "dtype": DT}),
        ((), {"start": -3, "stop": 7, "num": 4, "endpoint": False, "dtype": DT}),
        ((), {"start": 2.5, "stop": -1.5, "num": 1, "dtype": DT}),
    ], dtypes=NUMERIC),
    # ---- more of NumPy's names: elementwise
    unary("expm1", np.expm1, out=to_float),
    unary("sinh", np.sinh, out=to_float),
    unary("cosh", np.cosh, out=to_float),
    unary("tan", np.tan, out=to_float, domain="unit"),
    unary("arcsin", np.arcsin, out=to_float, domain="unit"),
    unary("arccos", np.arccos, out=to_float, domain="unit"),
    unary("arctan", np.arctan, out=to_float),
    unary("arcsinh", np.arcsinh, out=to_float),
    unary("arctanh", np.arctanh, out=to_float, domain="unit"),
    unary("log2", np.log2, out=to_float, domain="positive"),
    unary("log10", np.log10, out=to_float, domain="positive"),
    unary("exp2", np.exp2, out=to_float),
    unary("reciprocal", lambda x: 1.0 / x, out=to_float, domain="nonzero"),
    unary("sinc", np.sinc, out=to_float),
    unary("floor", np.floor),
    unary("ceil", np.ceil),
    unary("trunc", np.trunc),
    Spec("round", rm.round, np.round, [*[(a, {}) for a in UNARY], (((3, 4),), {"decimals": 0})], dtypes=NUMERIC),
    Spec("round", lambda x, decimals: rm.round(x * 7.0, decimals), lambda x, decimals: np.round(x * 7.0, decimals), [
        (((3, 4),), {"decimals": 2}),
        (((3, 4),), {"decimals": -1}),
        (((5,),), {"decimals": 5}),
    ], dtypes=FLOATS, id="round-decimals"),
    unary("isnan", np.isnan, dtypes=ALL, out=to_bool, domain="nonfinite"),
    unary("isinf", np.isinf, dtypes=ALL, out=to_bool, domain="nonfinite"),
    unary("isfinite", np.isfinite, dtypes=ALL, out=to_bool, domain="nonfinite"),
    Spec("nan_to_num", rm.nan_to_num, np.nan_to_num, [
        (((3, 5),), {}),
        (((3, 5),), {"nan": 1.5, "posinf": 9, "neginf": -9}),
    ], dtypes=NUMERIC, domain="nonfinite"),
    binary("arctan2", np.arctan2, dtypes=NUMERIC, out=to_float),
    binary("hypot", np.hypot, dtypes=NUMERIC, out=to_float),
    binary("logaddexp", np.logaddexp, dtypes=NUMERIC, out=to_float),
    binary("fmax", np.fmax, dtypes=NUMERIC, domain="nonfinite"),
    binary("fmin", np.fmin, dtypes=NUMERIC, domain="nonfinite"),
    # ---- reductions
    Spec("all", rm.all, np.all, [*REDUCE, (((0, 3),), {"axis": 0})], out=to_bool),
    Spec("any", rm.any, np.any, [*REDUCE, (((2, 0),), {"axis": 1, "keepdims": True})], out=to_bool),
    Spec("count_nonzero", rm.count_nonzero, np.count_nonzero, REDUCE, out=to_i32),
    Spec("nansum", rm.nansum, np.nansum, REDUCE, out=sum_dtype, domain="nonfinite"),
    Spec("average", lambda a, w=None, **kw: rm.average(a, weights=w, **kw),
         lambda a, w=None, **kw: np.average(a, weights=w, **kw), [
             *REDUCE[:3],
             (((3, 4), (3, 4)), {"axis": None}),
             (((3, 4), (4,)), {"axis": 1}),
         ], dtypes=NUMERIC, out=to_float, domain="positive"),
    # ---- arrays
    Spec("swapaxes", rm.swapaxes, np.swapaxes, [
        (((2, 3, 4),), {"axis1": 0, "axis2": 2}),
        (((3, 4),), {"axis1": -1, "axis2": -1}),
    ]),
    Spec("moveaxis", rm.moveaxis, np.moveaxis, [
        (((2, 3, 4),), {"source": 0, "destination": -1}),
        (((2, 3, 4, 5),), {"source": (3, 0), "destination": [0, 1]}),
    ]),
    Spec("ravel", rm.ravel, np.ravel, [(((2, 3),), {}), (((2, 3, 2),), {"order": "F"}), (((),), {})]),
    Spec("atleast_1d", rm.atleast_1d, np.atleast_1d, [(((),), {}), (((2, 3),), {})]),
    Spec("atleast_2d", rm.atleast_2d, np.atleast_2d, [(((),), {}), (((3,),), {}), (((2, 3, 4),), {})]),
    Spec("atleast_3d", rm.atleast_3d, np.atleast_3d, [(((),), {}), (((3,),), {}), (((2, 3),), {})]),
    Spec("tril", rm.tril, np.tril, [(((3, 4),), {}), (((2, 4, 3),), {"k": 1}), (((3, 3),), {"k": -5})]),
    Spec("triu", rm.triu, np.triu, [(((3, 4),), {}), (((2, 4, 3),), {"k": -1}), (((3, 3),), {"k": 5})]),
    Spec("diag", rm.diag, np.diag, [
        (((3,),), {}), (((3,),), {"k": 2}), (((3,),), {"k": -1}),
        (((3, 4),), {}), (((3, 4),), {"k": 2}), (((3, 4),), {"k": -2}), (((3, 4),), {"k": 9}),
    ]),
    Spec("diagonal", rm.diagonal, np.diagonal, [
        (((3, 4),), {}),
        (((2, 3, 4),), {"offset": 1, "axis1": 1, "axis2": 2}),
        (((2, 3, 4),), {"offset": -1, "axis1": 2, "axis2": 0}),
        (((4, 3),), {"offset": -7}),
    ]),
    Spec("roll", rm.roll, np.roll, [
        (((7,),), {"shift": 3}),
        (((3, 4),), {"shift": -5}),
        (((3, 4),), {"shift": 1, "axis": 0}),
        (((2, 3, 4),), {"shift": (1, 2, 3), "axis": (0, -1, 0)}),
        (((2, 3),), {"shift": (1, 1), "axis": 1}),
    ]),
    Spec("repeat", rm.repeat, np.repeat, [
        (((3,),), {"repeats": 2}),
        (((2, 3),), {"repeats": 2, "axis": 1}),
        (((2, 3),), {"repeats": [0, 2, 1], "axis": -1}),
        (((2, 3),), {"repeats": 0}),
    ]),
    Spec("tile", rm.tile, np.tile, [
        (((3,),), {"reps": 2}),
        (((2, 3),), {"reps": (2, 1, 2)}),
        (((2, 3, 2),), {"reps": (3,)}),
        (((2, 3),), {"reps": (0, 1)}),
    ]),
    Spec("meshgrid", lambda *xs, **kw: rm.concat([rm.ravel(g) for g in rm.meshgrid(*xs, **kw)]),
         lambda *xs, **kw: np.concatenate([np.ravel(g) for g in np.meshgrid(*xs, **kw)]), [
             (((3,), (2,)), {}),
             (((3,), (2,), (4,)), {"indexing": "ij"}),
             (((3,), (2,), (4,)), {"sparse": True}),
             (((3,),), {}),
         ]),
    Spec("take_along_axis", rm.take_along_axis, np.take_along_axis, [
        (((3, 4), np.array([[0, 3], [-1, 2], [1, 1]])), {"axis": 1}),
        (((3, 4), np.array([[2, 0, 1, -3]])), {"axis": 0}),
        (((2, 3), np.array([5, 0, -6])), {"axis": None}),
        (((2, 1, 4), np.array([[[0], [2], [1]]])), {"axis": 2}),
    ]),
    Spec("full_like", rm.full_like, np.full_like, [
        (((2, 3),), {"fill_value": 1}),
        (((),), {"fill_value": 0}),
        (((2, 3),), {"fill_value": np.array([1, 0, 1])}),
    ]),
    Spec("full_like", rm.full_like, np.full_like, [(((2, 3),), {"fill_value": 2.5, "dtype": F64})],
         out=lambda d: F64, id="full_like-to-f64"),
    # ---- scipy.special's (rm.special)
    unary("erf", special.erf, out=to_float),
    unary("erfc", special.erfc, out=to_float),
    unary("gammaln", special.gammaln, out=to_float, domain="positive"),
    unary("digamma", special.digamma, out=to_float, domain="positive"),
    Spec("polygamma", lambda x, n: rm.special.polygamma(n, x), lambda x, n: special.polygamma(n, x), [
        (((3, 4),), {"n": 1}),
        (((5,),), {"n": 3}),
        (((),), {"n": 0}),
    ], dtypes=NUMERIC, out=to_float, domain="positive"),
    # ---- identities
    Spec("stop_gradient", rm.stop_gradient, lambda x: x, [(a, {}) for a in UNARY]),
    Spec("checkpoint_name", rm.checkpoint_name, lambda x, name: x, [(((3, 4),), {"name": "h"})]),
    # ---- creation: no tensor inputs (constants inside jit) or only a shape to copy
    Spec("zeros", rm.zeros, np.zeros, [((), {"shape": (2, 3), "dtype": DT}), ((), {"shape": 4, "dtype": DT})]),
    Spec("ones", rm.ones, np.ones, [((), {"shape": (2, 3), "dtype": DT}), ((), {"shape": (), "dtype": DT})]),
    Spec("full", rm.full, np.full, [
        ((), {"shape": (2, 3), "fill_value": 1, "dtype": DT}),
        ((), {"shape": (4,), "fill_value": 0, "dtype": DT}),
    ]),
    Spec("arange", rm.arange, lambda start, stop=None, step=1, dtype=None: (
        np.arange(start, dtype=dtype) if stop is None else np.arange(start, stop, step, dtype=dtype)), [
        ((), {"start": 5, "dtype": DT}),
        ((), {"start": 1, "stop": 9, "step": 3, "dtype": DT}),
    ], dtypes=NUMERIC),
    Spec("eye", rm.eye, lambda N, M=None, k=0, dtype=None: np.eye(N, M, k, dtype=dtype), [
        ((), {"N": 3, "dtype": DT}),
        ((), {"N": 2, "M": 4, "k": 1, "dtype": DT}),
        ((), {"N": 3, "M": 2, "k": -1, "dtype": DT}),
    ]),
    Spec("zeros_like", rm.zeros_like, np.zeros_like, [(((2, 3),), {}), (((),), {})]),
    Spec("ones_like", rm.ones_like, np.ones_like, [(((2, 3),), {}), (((),), {})]),
    Spec("zeros_like", rm.zeros_like, np.zeros_like, [(((2, 3),), {"dtype": F64})],
         out=lambda d: F64, id="zeros_like-to-f64"),
]
SPEC_IDS = [s.id for s in SPECS]
assert len(set(SPEC_IDS)) == len(SPEC_IDS), "duplicate spec ids"

NOT_OPS = {"OPS", "NOT_DIFFERENTIABLE", "Op", "declare", "barrier"}


def test_every_public_op_has_a_spec_row():
    public = set(ops.__all__) - NOT_OPS
    assert public - {s.op for s in SPECS} == set()
    assert {s.op for s in SPECS} - public == set()


# ---------------------------------------------------------------- inputs


def draw(rng, shape, dtype, domain):
    dtype = np.dtype(dtype)
    if dtype == BOOL:
        return rng.random(shape) < 0.5
    if domain == "positive":
        lo, hi = (0.5, 3.0) if dtype.kind == "f" else (1, 4)
    elif domain == "above-1":
        lo, hi = (-0.9, 3.0) if dtype.kind == "f" else (0, 5)
    elif domain == "small":
        lo, hi = (-1.5, 1.5) if dtype.kind == "f" else (-3, 4)
    elif domain == "unit":
        lo, hi = (-0.95, 0.95) if dtype.kind == "f" else (0, 1)
    else:
        lo, hi = (-3.0, 3.0) if dtype.kind == "f" else (-5, 6)
    if dtype.kind == "f":
        out = rng.uniform(lo, hi, shape)
        if domain == "nonzero":
            out = np.where(np.abs(out) < 0.5, 1.0, out)
        if domain == "nonfinite" and out.size:  # nan, inf and -inf among the values
            flat = out.reshape(-1)
            flat[::3], flat[1::5], flat[2::7] = np.nan, np.inf, -np.inf
    else:
        out = rng.integers(lo, hi, shape)
        if domain == "nonzero":
            out = np.where(out == 0, 1, out)
    return np.asarray(out, dtype)


def make_args(spec, args, dtype, rng):
    arrays = []
    for a in args:
        if isinstance(a, np.ndarray):
            arrays.append(a)
            continue
        a = a if isinstance(a, Arg) else Arg(a)
        arrays.append(draw(rng, a.shape, a.dtype or dtype, a.domain or spec.domain))
    return arrays


def resolve(kwargs, dtype):
    return {k: dtype if v is DT else v for k, v in kwargs.items()}


def assert_matches(out, expected, dtype):
    assert isinstance(out, rm.Tensor)
    got = np.asarray(out)
    assert got.dtype == np.dtype(dtype), f"dtype {got.dtype}, expected {dtype}"
    assert got.shape == expected.shape
    if np.dtype(dtype).kind == "f":
        tol = 1e-5 if np.dtype(dtype) == F32 else 1e-12
        np.testing.assert_allclose(got, expected.astype(dtype), rtol=tol, atol=tol)
    else:
        np.testing.assert_array_equal(got, expected.astype(dtype))


CASES = [pytest.param(s, d, id=f"{s.id}-{d}") for s in SPECS for d in s.dtypes]


@pytest.mark.parametrize("mode", ["eager", "jit"])
@pytest.mark.parametrize("spec,dtype", CASES)
def test_op_matches_numpy(spec, dtype, mode):
    rng = np.random.default_rng(0)
    out_dtype = spec.out(dtype)
    for args, kwargs in spec.variants:
        arrays = make_args(spec, args, dtype, rng)
        kw = resolve(kwargs, dtype)
        expected = np.asarray(spec.ref(*arrays, **kw))
        tensors = [rm.asarray(a) for a in arrays]
        if mode == "eager":
            out = spec.fn(*tensors, **kw)
        else:
            out = rm.jit(lambda *xs, kw=kw: spec.fn(*xs, **kw))(*tensors)
        assert_matches(out, expected, out_dtype)


def test_jit_records_the_op_as_a_node_not_a_constant():
    """Guards the jit mode above: traced calls really go through the graph."""
    g = rm.make_graph(lambda x, y: rm.maximum(rm.exp(x), y))(rm.ones((2,)), rm.ones((2,)))
    assert [n.op for n in g.nodes] == ["exp", "maximum"]
    assert not g.constants


def test_creation_ops_default_dtypes():
    assert rm.zeros((2,)).dtype == F32
    assert rm.ones(3).dtype == F32
    assert rm.full((2,), 7).dtype == I32
    assert rm.full((2,), 7.5).dtype == F32
    assert rm.full((2,), True).dtype == BOOL
    assert rm.arange(4).dtype == I32
    assert rm.arange(0.0, 1.0, 0.25).dtype == F32
    np.testing.assert_array_equal(rm.arange(0.0, 1.0, 0.25), [0.0, 0.25, 0.5, 0.75])
    assert rm.eye(2).dtype == F32
    assert rm.zeros_like(rm.asarray([1, 2])).dtype == I32


def test_full_broadcasts_a_tensor_fill_value_inside_jit():
    x = rm.asarray(np.arange(3, dtype=np.float32))
    out = rm.jit(lambda v: rm.full((2, 3), v))(x)
    np.testing.assert_array_equal(out, np.broadcast_to(np.arange(3, dtype=np.float32), (2, 3)))


def test_jit_results_are_cached_per_signature():
    f = rm.jit(lambda x: x * 2)
    f(rm.ones((2,)))
    f(rm.ones((2,)))
    assert f.trace_count == 1
    out = f(rm.ones((3,), "int32"))
    assert f.trace_count == 2
    assert out.dtype == I32
    np.testing.assert_array_equal(out, [2, 2, 2])
