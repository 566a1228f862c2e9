"""The XLA lowering table: each op of remat as `jax.lax` / `jax.numpy`, and `evaluate`, which
applies a Graph to JAX values node by node (inside `jax.jit`, tracers). Blocks lower through the
JAX-free table of `backends/lowerings.py`, resolved here the first time one is met; how a step
becomes one executable is `backends/xla.py`.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from remat.backends import low_precision, lowerings, threefry
from remat.graph import Graph


def _divide(x, y):
    # lax.div truncates integers toward zero, as NumPy's true division cast back to int does.
    return lax.div(*jnp.broadcast_arrays(x, y))


def _slice(x, *, start, stop, step):
    return lax.slice(x, start, tuple(max(a, b) for a, b in zip(start, stop)), step)


def _pad(x, *, lo, hi, interior):
    return lax.pad(x, jnp.zeros((), x.dtype), tuple(zip(lo, hi, interior)))


def _along(axis: int, idx) -> tuple:
    return (slice(None),) * axis + (idx,)


def _reduce(fn) -> Callable:
    return lambda x, *, axes: fn(x, axis=axes)


def _sort(x, *, axis):
    # Stable, in NumPy's order (ops/sort.py). lax.sort compares floats in IEEE total order
    # (-NaN first, -0.0 before 0.0), so it sorts keys with every zero +0.0 and every NaN +NaN,
    # as jnp.sort does, carrying the values and their positions along.
    keys = x
    if jnp.issubdtype(x.dtype, jnp.floating):
        keys = jnp.where(jnp.isnan(x), jnp.array(jnp.nan, x.dtype), jnp.where(x == 0, jnp.zeros((), x.dtype), x))
    iota = lax.broadcasted_iota(jnp.int32, x.shape, axis)
    _, values, perm = lax.sort((keys, x, iota), dimension=axis, is_stable=True, num_keys=1)
    return values, perm


def _by_nonzero(fn, x, y):
    # An integer divisor of 0 gives 0, as in NumPy (ops/division.py); XLA's would be -1 or x.
    out = fn(x, y)
    return jnp.where(y == 0, jnp.zeros((), out.dtype), out) if jnp.issubdtype(out.dtype, jnp.integer) else out


def _u32(x):
    return lax.bitcast_convert_type(x, jnp.uint32)


def _random_uniform(key, *, shape, dtype):
    return threefry.uniform(jnp, _u32(key), shape, dtype)


def _random_fold_in(key, data):
    return lax.bitcast_convert_type(threefry.fold_in(jnp, _u32(key), _u32(data)), jnp.int32)


def _shard(x, *, spec):
    # A bare PartitionSpec that met no mesh (a graph lowered outside rm.jit) says nothing XLA can use.
    return x if spec.mesh is None else lax.with_sharding_constraint(x, spec.named())


IMPLS: dict[str, Callable] = {
    "negative": lax.neg, "abs": jnp.abs, "sign": jnp.sign, "exp": lax.exp, "log": lax.log,
    "log1p": lax.log1p, "sqrt": lax.sqrt, "sin": lax.sin, "cos": lax.cos, "tanh": lax.tanh,
    "logical_not": jnp.logical_not,
    "expm1": lax.expm1, "sinh": lax.sinh, "cosh": lax.cosh, "asinh": lax.asinh, "atan2": jnp.arctan2,
    "asin": lax.asin, "acos": lax.acos, "atan": lax.atan,
    "floor": lax.floor, "ceil": lax.ceil, "round": lambda x: lax.round(x, lax.RoundingMethod.TO_NEAREST_EVEN),
    "erf": lax.erf, "erfc": lax.erfc, "lgamma": lax.lgamma, "digamma": lax.digamma,
    "polygamma": lambda x, *, n: lax.polygamma(jnp.full_like(x, n), x),
    "add": jnp.add, "subtract": jnp.subtract, "multiply": jnp.multiply, "divide": _divide,
    "pow": jnp.power, "maximum": jnp.maximum, "minimum": jnp.minimum,
    "equal": jnp.equal, "not_equal": jnp.not_equal, "less": jnp.less, "less_equal": jnp.less_equal,
    "greater": jnp.greater, "greater_equal": jnp.greater_equal,
    "logical_and": jnp.logical_and, "logical_or": jnp.logical_or,
    "where": jnp.where,
    "convert": low_precision.xla_convert,
    "sum": low_precision.xla_reduce(jnp.sum), "prod": low_precision.xla_reduce(jnp.prod),
    "max": _reduce(jnp.max), "min": _reduce(jnp.min),
    "argmax": lambda x, *, axis: jnp.argmax(x, axis=axis),
    "argmin": lambda x, *, axis: jnp.argmin(x, axis=axis),
    "reshape": lambda x, *, shape: lax.reshape(x, shape),
    "permute_dims": lambda x, *, axes: lax.transpose(x, axes),
    "broadcast_to": lambda x, *, shape: jnp.broadcast_to(x, shape),
    "concat": lambda *xs, axis: lax.concatenate(xs, axis),
    "slice": _slice,
    "pad": _pad,
    "flip": lambda x, *, axes: lax.rev(x, axes),
    "cumsum": low_precision.xla_cumulative(lax.cumsum),
    "cumprod": low_precision.xla_cumulative(lax.cumprod),
    "sort": _sort,
    "floor_divide": lambda x, y: _by_nonzero(jnp.floor_divide, x, y),
    "remainder": lambda x, y: _by_nonzero(jnp.remainder, x, y),
    "matmul": low_precision.xla_matmul,  # at the program's precision, the low dtypes accumulated in float32
    # Negative indices count from the end, the rest is clamped (ops/indexing.py): "clip" in both,
    # so the gradient (index_add) lands where take read.
    # jnp.asarray: a graph constant reaches the lowering as a NumPy array, which has no `.at`.
    "take": lambda x, idx, *, axis: jnp.asarray(x).at[_along(axis, idx)].get(mode="clip"),
    "index_add": lambda x, idx, upd, *, axis: jnp.asarray(x).at[_along(axis, idx)].add(upd, mode="clip"),
    "stop_gradient": lambda x: x,
    "barrier": lambda *xs: lax.optimization_barrier(xs),
    "checkpoint_name": lambda x, *, name: x,
    "shard": _shard,
    "random_uniform": _random_uniform,
    "random_normal": lambda key, *, shape, dtype: threefry.normal(jnp, _u32(key), shape, dtype),
    "random_fold_in": _random_fold_in,
    # the operands of the two solves have equal ranks (remat/ops/decompositions.py): no batched vectors
    "solve": jnp.linalg.solve,
    "triangular_solve": lambda a, b, *, lower: jax.scipy.linalg.solve_triangular(a, b, lower=lower),
    "cholesky": lambda a: lax.linalg.cholesky(a, symmetrize_input=False),
    "qr": lambda a, *, full_matrices: tuple(jnp.linalg.qr(a, mode="complete" if full_matrices else "reduced")),
    "eigh": lambda a, *, lower: lax.linalg.eigh(a, lower=lower, symmetrize_input=False)[::-1],  # (w, v)
    "svd": lambda a, *, full_matrices, compute_uv: (tuple(jnp.linalg.svd(a, full_matrices=full_matrices))
                                                     if compute_uv else (jnp.linalg.svd(a, compute_uv=False),)),
    "slogdet": lambda a: tuple(jnp.linalg.slogdet(a)),
    "det": jnp.linalg.det,
}


def _constant(a: np.ndarray):
    """A graph constant inside a traced function: a literal, or a broadcast when all its elements
    are equal (zeros, ones), so large constants cost no program text."""
    if uniform(a):
        return jnp.full(a.shape, a.flat[0], a.dtype)
    return a


def uniform(a: np.ndarray) -> bool:
    """Two or more elements, all equal: a constant XLA can make as a broadcast. A one-element
    array is no broadcast: the backend hands it to the executable as an argument, as run-time
    offsets need (xla_offsets.py)."""
    return bool(a.size > 1 and (a == a.flat[0]).all())


def evaluate(graph: Graph, args, given: dict | None = None) -> list:
    """`graph` applied to JAX values (tracers inside `jax.jit`): a loop over the lowering table.
    `given`: values of some of its constants (the program's arguments that carry them)."""
    given = given or {}
    env = {v: given[v] if v in given else _constant(a) for v, a in graph.constants.items()}
    env.update(zip(graph.inputs, args))
    for node in graph.nodes:
        fn = IMPLS.get(node.op) or _registered(node.op)
        out = fn(*[env[v] for v in node.inputs], **node.params)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        for v, o in zip(node.outputs, outs):  # jnp may widen (sum of bools, argmax in x64 mode)
            env[v] = o if o.dtype == v.dtype else lax.convert_element_type(o, v.dtype)
    return [env[v] for v in graph.outputs]


def _registered(op: str) -> Callable:
    """A block's lowering (`backends/lowerings.py`), imported the first time it is needed."""
    fn = IMPLS[op] = lowerings.resolve(op)
    return fn
