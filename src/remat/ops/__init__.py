"""The op set. Each module declares its primitives once and composes the rest.

elementwise, shape, creation and reduce use each other's ops in their gradient rules (a sum
un-broadcasts a cotangent, a slice's transpose pads zeros): an import cycle. Each of them imports
the others as module objects (`from remat.ops import shape as _shape`, then `_shape.reshape(...)`
when a function runs), never names, so that any module of the package can be imported first."""

from remat.core import NOT_DIFFERENTIABLE, OPS, Op, declare
from remat.ops import (
    decompositions,  # noqa: F401  (declares the primitives rm.linalg binds)
    tensor_methods,  # noqa: F401  (installs Tensor's operators and methods)
    update,  # noqa: F401  (installs Tensor.at)
)
from remat.ops.arrays import (
    atleast_1d,
    atleast_2d,
    atleast_3d,
    diag,
    diagonal,
    meshgrid,
    moveaxis,
    ravel,
    repeat,
    roll,
    swapaxes,
    take_along_axis,
    tile,
    tril,
    triu,
)
from remat.ops.creation import arange, eye, full, full_like, linspace, ones, ones_like, zeros, zeros_like
from remat.ops.cumulative import cumprod, cumsum
from remat.ops.division import floor_divide, remainder
from remat.ops.einsum import einsum
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
from remat.ops.nonfinite import fmax, fmin, isfinite, isinf, isnan, nan_to_num, nansum
from remat.ops.reduce import all, any, argmax, argmin, count_nonzero, max, mean, min, prod, sum
from remat.ops.rounding import ceil, floor, round, trunc
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
from remat.ops.sort import argsort, sort
from remat.ops.special_functions import digamma, erf, erfc, gammaln, polygamma
from remat.ops.statistics import average, std, var
from remat.ops.transcendental import (
    arccos,
    arcsin,
    arcsinh,
    arctan,
    arctan2,
    arctanh,
    cosh,
    exp2,
    expm1,
    hypot,
    log2,
    log10,
    logaddexp,
    reciprocal,
    sinc,
    sinh,
    tan,
)

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
    # more of NumPy's names
    "all", "any", "arccos", "arcsin", "arcsinh", "arctan", "arctan2", "arctanh", "atleast_1d", "atleast_2d",
    "atleast_3d", "average", "ceil", "cosh", "count_nonzero", "diag", "diagonal", "exp2", "expm1", "floor",
    "fmax", "fmin", "full_like", "hypot", "isfinite", "isinf", "isnan", "log2", "log10", "logaddexp",
    "meshgrid", "moveaxis", "nan_to_num", "nansum", "ravel", "reciprocal", "repeat", "roll", "round", "sinc",
    "sinh", "swapaxes", "take_along_axis", "tan", "tile", "tril", "triu", "trunc",
    # scipy.special's, public as rm.special
    "digamma", "erf", "erfc", "gammaln", "polygamma",
]
