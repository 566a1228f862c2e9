"""remat: numerical definitions with gradient checkpointing that captures closures.

>>> import remat as rm
>>> w = rm.ones((3, 3))
>>> loss = lambda x: rm.sum(rm.checkpoint(lambda h: rm.tanh(h @ w), x))
>>> rm.grad(loss)(rm.zeros((2, 3))).shape
(2, 3)
"""

from importlib import metadata as _metadata

from remat import dtypes, linalg, memory, nn, optim, policies, random, tree
from remat.autodiff import grad, value_and_grad, vjp
from remat.checkpoint import checkpoint, checkpoint_sequential, remat
from remat.custom_jvp import SymbolicZero, custom_jvp
from remat.custom_vjp import custom_vjp
from remat.dtypes import bfloat16, bool_, float16, float32, float64, int32, int64
from remat.errors import (
    ArgumentTypeError,
    ArgumentValueError,
    DTypeError,
    IndexOutOfRange,
    RematError,
    ShapeError,
    TracerError,
    ValueOverflow,
)
from remat.forward import jvp, linearize
from remat.graph import Graph, Node, Var
from remat.interop import from_dlpack
from remat.jacobians import hessian, jacfwd, jacrev
from remat.jit import clear_caches, jit
from remat.loops import cond, fori_loop, scan, switch, while_loop
from remat.ops import (
    abs,
    add,
    arange,
    argmax,
    argmin,
    argsort,
    astype,
    broadcast_to,
    checkpoint_name,
    clip,
    concat,
    concatenate,
    cos,
    cumprod,
    cumsum,
    divide,
    einsum,
    equal,
    exp,
    expand_dims,
    eye,
    flip,
    floor_divide,
    full,
    greater,
    greater_equal,
    index_add,
    less,
    less_equal,
    linspace,
    log,
    log1p,
    logical_and,
    logical_not,
    logical_or,
    matmul,
    matrix_transpose,
    max,
    maximum,
    mean,
    min,
    minimum,
    multiply,
    negative,
    not_equal,
    ones,
    ones_like,
    outer,
    pad,
    permute_dims,
    pow,
    prod,
    remainder,
    reshape,
    sign,
    sin,
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
    take,
    tanh,
    tensordot,
    transpose,
    var,
    where,
    zeros,
    zeros_like,
)
from remat.precision import default_matmul_precision
from remat.sharding import shard
from remat.trace import Tensor, asarray, make_graph
from remat.vectorize import devectorize, vectorize, vmap

#: The installed package's version, whose one source is pyproject.toml (CHANGELOG.md says what changed).
__version__ = _metadata.version("remat")


def __getattr__(name: str):
    # rm.parallel (the sharded set-ups) needs JAX, which `import remat` does not import.
    if name == "parallel":
        import importlib

        return importlib.import_module("remat.parallel")
    raise AttributeError(f"module 'remat' has no attribute {name!r}")
