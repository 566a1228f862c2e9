"""remat: numerical definitions with gradient checkpointing that captures closures.

>>> import remat as rm
>>> w = rm.ones((3, 3))
>>> loss = lambda x: rm.sum(rm.checkpoint(lambda h: rm.tanh(h @ w), x))
>>> rm.grad(loss)(rm.zeros((2, 3))).shape
(2, 3)
"""

from importlib import metadata as _metadata

# numpy_habits installs NumPy's dispatch on Tensor: np.exp(t) is rm.exp(t).
from remat import dtypes, linalg, memory, nn, numpy_habits, optim, policies, random, special, tree
from remat.checkpoint import checkpoint, checkpoint_sequential, remat
from remat.custom_jvp import SymbolicZero, custom_jvp
from remat.custom_vjp import custom_vjp
from remat.dtypes import bfloat16, bool_, enable_x64, float16, float32, float64, int32, int64, x64_enabled
from remat.errors import (
    ArgumentTypeError,
    ArgumentValueError,
    BudgetTooSmall,
    CapTooSmall,
    DTypeError,
    IndexOutOfRange,
    RematError,
    ShapeError,
    TracerError,
    ValueOverflow,
)
from remat.forward import jvp, linearize
from remat.gradients import grad, value_and_grad, vjp
from remat.graph import Graph, Node, Var
from remat.interop import from_dlpack
from remat.jacobians import hessian, jacfwd, jacrev
from remat.jit import clear_caches, jit
from remat.loops import cond, fori_loop, scan, switch, while_loop
from remat.ops import (
    abs,
    add,
    all,
    any,
    arange,
    arccos,
    arcsin,
    arcsinh,
    arctan,
    arctan2,
    arctanh,
    argmax,
    argmin,
    argsort,
    astype,
    atleast_1d,
    atleast_2d,
    atleast_3d,
    average,
    broadcast_to,
    ceil,
    checkpoint_name,
    clip,
    concat,
    concatenate,
    cos,
    cosh,
    count_nonzero,
    cumprod,
    cumsum,
    diag,
    diagonal,
    divide,
    einsum,
    equal,
    exp,
    exp2,
    expand_dims,
    expm1,
    eye,
    flip,
    floor,
    floor_divide,
    fmax,
    fmin,
    full,
    full_like,
    greater,
    greater_equal,
    hypot,
    index_add,
    isfinite,
    isinf,
    isnan,
    less,
    less_equal,
    linspace,
    log,
    log1p,
    log2,
    log10,
    logaddexp,
    logical_and,
    logical_not,
    logical_or,
    matmul,
    matrix_transpose,
    max,
    maximum,
    mean,
    meshgrid,
    min,
    minimum,
    moveaxis,
    multiply,
    nan_to_num,
    nansum,
    negative,
    not_equal,
    ones,
    ones_like,
    outer,
    pad,
    permute_dims,
    pow,
    prod,
    ravel,
    reciprocal,
    remainder,
    repeat,
    reshape,
    roll,
    round,
    sign,
    sin,
    sinc,
    sinh,
    slice,
    sort,
    split,
    sqrt,
    square,
    squeeze,
    stack,
    std,
    stop_gradient,
    subtract,
    sum,
    swapaxes,
    take,
    take_along_axis,
    tan,
    tanh,
    tensordot,
    tile,
    transpose,
    tril,
    triu,
    trunc,
    var,
    where,
    zeros,
    zeros_like,
)
from remat.precision import default_matmul_precision
from remat.regions import memory_budget
from remat.sharding import shard
from remat.tensor import Tensor
from remat.trace import asarray, make_graph
from remat.vectorize import devectorize, vectorize, vmap

#: The installed package's version, whose one source is pyproject.toml (CHANGELOG.md says what changed).
__version__ = _metadata.version("remat")


def __getattr__(name: str):
    # rm.parallel (the sharded set-ups) needs JAX, which `import remat` does not import.
    if name == "parallel":
        import importlib

        return importlib.import_module("remat.parallel")
    raise AttributeError(f"module 'remat' has no attribute {name!r}")
