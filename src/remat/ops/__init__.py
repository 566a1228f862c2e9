"""The op set. Each module declares its primitives once and composes the rest."""

# The order matters: elementwise before shape, whose ops the elementwise rules use (isort would
# put the modules that import shape first).
from remat.ops.core import NOT_DIFFERENTIABLE, OPS, Op, declare  # noqa: I001
from remat.ops.creation import arange, eye, full, linspace, ones, ones_like, zeros, zeros_like
from remat.ops.elementwise import (
    abs,
    add,
    astype,
    clip,
    cos,
    divide,
    equal,
    exp,
    greater,
    greater_equal,
    less,
    less_equal,
    log,
    log1p,
    logical_and,
    logical_not,
    logical_or,
    maximum,
    minimum,
    multiply,
    negative,
    not_equal,
    pow,
    sign,
    sin,
    sqrt,
    square,
    subtract,
    tanh,
    where,
)
from remat.ops.identity import barrier, checkpoint_name, stop_gradient
from remat.ops.indexing import getitem, index_add, take
from remat.ops.linalg import matmul, outer, tensordot
from remat.ops.reduce import argmax, argmin, max, mean, min, prod, sum
from remat.ops.shape import (
    broadcast_to,
    concat,
    concatenate,
    expand_dims,
    flip,
    matrix_transpose,
    pad,
    permute_dims,
    reshape,
    slice,
    split,
    squeeze,
    stack,
    transpose,
)
from remat.ops.cumulative import cumprod, cumsum
from remat.ops.division import floor_divide, remainder
from remat.ops.einsum import einsum
from remat.ops.sort import argsort, sort
from remat.ops.statistics import std, var

__all__ = [
    "OPS", "NOT_DIFFERENTIABLE", "Op", "declare",
    "abs", "add", "arange", "argmax", "argmin", "astype", "barrier", "broadcast_to",
    "checkpoint_name", "clip", "concat", "cos", "divide", "equal", "exp", "expand_dims", "eye",
    "flip", "full", "getitem", "greater", "greater_equal", "index_add", "less", "less_equal",
    "log", "log1p", "logical_and", "logical_not", "logical_or", "matmul", "matrix_transpose",
    "max", "maximum", "mean", "min", "minimum", "multiply", "negative", "not_equal", "ones",
    "ones_like", "pad", "permute_dims", "pow", "prod", "reshape", "sign", "sin", "slice", "sqrt",
    "square", "squeeze", "stack", "stop_gradient", "subtract", "sum", "take", "tanh",
    "tensordot", "transpose", "where", "zeros", "zeros_like",
    "argsort", "concatenate", "cumprod", "cumsum", "einsum", "floor_divide", "linspace", "outer",
    "remainder", "sort", "split", "std", "var",
]
