"""The XLA backend: a Graph lowered op by op to `jax.lax` and run as one executable.

A checkpoint's gradient is a backward block behind an optimization barrier (remat/checkpoint/block.py).
Accelerators honour the barrier, and the block is inlined. XLA:CPU drops barriers, and then
schedules the recomputation with the forward pass and keeps every activation alive
(`jax.checkpoint` saves nothing there). But XLA scopes the buffers made inside a conditional's
branch to that branch: so on the CPU each backward block runs as the taken branch of a
`lax.cond` on a predicate the executable receives at run time (always true, unknown to the
compiler), and a checkpoint's recomputed internals live only while its backward block runs.
The step stays one executable, and XLA's buffer report of it is what a run holds.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from remat import precision as matmul_precision
from remat.backends import low_precision, lowerings, threefry
from remat.backends.xla_layout import layout_of
from remat.graph import Graph

# ---------------------------------------------------------------- the lowering table


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


# ---------------------------------------------------------------- backward blocks in branches


#: The run-time predicate backward blocks branch on while a program is lowered with branches
#: (None: lowered inline). A tracer of the executable's first argument.
_TAKEN: ContextVar = ContextVar("remat_xla_taken", default=None)


@contextlib.contextmanager
def _branching(taken) -> Iterator[None]:
    token = _TAKEN.set(taken)
    try:
        yield
    finally:
        _TAKEN.reset(token)


def run_block(*args, body: Graph, **params):  # the other params are for the VJP rule
    """A block whose body runs once where it stands (checkpoint, custom_vjp, custom_jvp): inlined,
    or on the CPU a checkpoint's backward block as the branch of a conditional (`default_branches`)."""
    taken = _TAKEN.get()
    # A checkpoint's backward block (`differentiated`, behind a barrier: prevent_cse=False asks
    # for none, and for the recomputation to merge with the forward pass, as in JAX).
    if taken is None or not params.get("differentiated") or params.get("prevent_cse") is False:
        # Forward evaluation inlines the body: its internals are temporaries of the executable.
        return tuple(evaluate(body, args))

    def untaken(*_):  # never runs; gives the branch's types
        return tuple(jnp.zeros(v.shape, v.dtype) for v in body.outputs)

    return tuple(lax.cond(taken, lambda *xs: tuple(evaluate(body, xs)), untaken, *args))


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
    if _uniform(a):
        return jnp.full(a.shape, a.flat[0], a.dtype)
    return a


def _uniform(a: np.ndarray) -> bool:
    return bool(a.ndim and a.size and (a == a.flat[0]).all())


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


def default_branches() -> bool:
    """Backward blocks in conditionals on the CPU, whose XLA drops optimization barriers; inline
    behind their barriers on GPUs and TPUs."""
    return jax.default_backend() == "cpu"


# ---------------------------------------------------------------- one executable


@dataclass(frozen=True)
class ExecutableMemory:
    """What a run of the executable holds, from XLA's own buffer report: its temporary buffers
    (`temp`, one allocation for the whole run, sized by XLA's buffer assignment) and its outputs
    (`outputs`), the caller's arguments left out. `peak` is their sum: the most the run holds at
    once beyond its arguments. For a sharded program, the bytes of one device."""

    temp: int
    outputs: int

    @property
    def peak(self) -> int:
        return self.temp + self.outputs


class Program:
    """A Graph lowered for XLA. `str()` is the StableHLO; `compile()` gives the callable that runs it.
    `branches`: backward blocks as conditionals (None: on the CPU, see `default_branches`)."""

    def __init__(self, graph: Graph, precision: str | None = None, in_shardings=None, out_shardings=None,
                 branches: bool | None = None, donated: tuple[int, ...] = ()):
        self.graph = graph
        self.donated = donated  # inputs whose buffers the caller gives up
        self.precision = matmul_precision.effective(precision)  # fixed now: later scopes do not change it
        self.branches = default_branches() if branches is None else bool(branches)
        self.x64 = any(v.dtype.itemsize == 8 for v in _all_vars(graph))
        self.layout = layout_of(graph, in_shardings, out_shardings)
        # Array constants (masks, captured NumPy arrays) are arguments placed on the device once,
        # not program text: XLA would compile them into the executable.
        self.held = [v for v, a in graph.constants.items() if a.ndim and not _uniform(a)]
        self._lowered: jax.stages.Lowered | None = None
        self._compiled: jax.stages.Compiled | None = None

    def mode(self):
        """64-bit dtypes need JAX's x64 mode while tracing, transferring and running."""
        return _x64() if self.x64 else contextlib.nullcontext()

    def lowered(self) -> jax.stages.Lowered:
        if self._lowered is None:
            g, branches, held = self.graph, self.branches, self.held
            avals = [jax.ShapeDtypeStruct(v.shape, v.dtype) for v in [*held, *g.inputs]]

            def step(taken, *xs):
                with _branching(taken if branches else None):
                    return evaluate(g, xs[len(held):], dict(zip(held, xs)))

            options = {} if self.layout is None else self.layout.jit_options(len(held))
            donate = tuple(1 + len(held) + k for k in self.donated)
            with self.mode(), matmul_precision.lowering(self.precision), self._on_mesh(), warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*donated buffers were not usable.*")
                self._lowered = jax.jit(step, donate_argnums=donate, **options).lower(
                    jax.ShapeDtypeStruct((), jnp.bool_), *avals)
        return self._lowered

    def _on_mesh(self):
        """A sharded program is traced on its mesh: values it makes from constants alone still
        run on the mesh's devices, replicated."""
        return contextlib.nullcontext() if self.layout is None else jax.set_mesh(self.layout.mesh)

    def executable(self) -> jax.stages.Compiled:
        if self._compiled is None:
            with self.mode():
                self._compiled = self.lowered().compile()
        return self._compiled

    def memory(self) -> ExecutableMemory:
        """XLA's buffer report of the compiled program (compiled now if it is not yet)."""
        analysis = self.executable().memory_analysis()
        return ExecutableMemory(int(analysis.temp_size_in_bytes), int(analysis.output_size_in_bytes))

    def as_text(self) -> str:
        return self.lowered().as_text()

    __str__ = as_text

    def compile(self) -> Callable:
        return Runner(self)


def _x64():
    if hasattr(jax, "enable_x64"):
        return jax.enable_x64(True)
    from jax.experimental import enable_x64  # JAX before 0.7

    return enable_x64()


def _all_vars(graph: Graph):
    yield from graph.inputs
    yield from graph.constants
    for node in graph.walk():
        yield from node.outputs


class Runner:
    """Runs a Program's executable. `last_memory` tells what a run holds (XLA's buffer report)."""

    def __init__(self, program: Program):
        self.program = program
        self._executable = program.executable()
        with program.mode():
            where = None if program.layout is None else [program.layout.replicated] * len(program.held)
            self._held = jax.device_put([program.graph.constants[v] for v in program.held], where)
        self._returned = [k for k, v in enumerate(program.graph.inputs) if v in set(program.graph.outputs)]
        self._memory = program.memory()
        self.last_memory: ExecutableMemory | None = None

    def __call__(self, *args) -> list:
        with self.program.mode():
            outs = self._executable(np.True_, *self._held, *self._arguments(args))
            self.last_memory = self._memory
            return outs

    def _arguments(self, args) -> list:
        """The caller's arrays as the executable takes them. A NumPy array goes as it is: the
        runtime copies it to the device in C++, as for `jax.jit`. One the caller gets back is
        copied first: on the CPU, `device_put` keeps an aligned NumPy array's memory instead of
        copying it (`may_alias=False` notwithstanding), so the result would change with it."""
        out = [_typed(a, v.dtype) for v, a in zip(self.program.graph.inputs, args)]
        if self.program.layout is not None:
            return self.program.layout.arguments(out, self._returned)
        for k in self._returned:
            if isinstance(out[k], np.ndarray):
                out[k] = np.array(out[k])
        return out


def _typed(a, dtype: np.dtype):
    """`a` as a NumPy or JAX array of `dtype`."""
    if not isinstance(a, (np.ndarray, jax.Array)):
        a = np.asarray(a)
    return a if a.dtype == dtype else a.astype(dtype)


def lower(graph: Graph, precision: str | None = None, in_shardings=None, out_shardings=None,
          branches: bool | None = None, donated: tuple[int, ...] = ()) -> Program:
    """The program for `graph`; `.as_text()` lowers it to StableHLO without compiling.
    `in_shardings`/`out_shardings`: one `NamedSharding` or None per graph input/output;
    `donated`: the inputs whose buffers the executable may take over (`jax.jit`'s donation)."""
    return Program(graph, precision, in_shardings, out_shardings, branches, donated)


def compile(graph: Graph, precision: str | None = None, in_shardings=None, out_shardings=None,
            branches: bool | None = None) -> Callable:
    """A callable running `graph` on NumPy or JAX arrays; it returns JAX arrays."""
    return Program(graph, precision, in_shardings, out_shardings, branches).compile()
