"""The NumPy evaluator: runs a Graph node by node, freeing every buffer right after its last use
and counting the bytes it holds, so the peak it reports is what the schedule really needs."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar

import numpy as np

from remat import trace
from remat.backends import blas, low_precision, numpy_linalg, threefry
from remat.graph import Graph, Var


def _slice(x, *, start, stop, step):
    return x[tuple(slice(a, b, s) for a, b, s in zip(start, stop, step))]


def _pad(x, *, lo, hi, interior):
    spans = [n + (n - 1) * i if n else 0 for n, i in zip(x.shape, interior)]
    out = np.zeros([a + s + b for a, s, b in zip(lo, spans, hi)], x.dtype)
    out[tuple(slice(a, a + s, i + 1) for a, s, i in zip(lo, spans, interior))] = x
    return out


def _clamped(idx, n: int):
    # remat's rule for indices known only at run time (ops/indexing.py): negatives count from the
    # end, the rest is clamped into [0, n), as JAX's mode="clip"; take and index_add share it, so
    # a gradient lands on the element that was read.
    return np.clip(np.where(idx < 0, idx + n, idx), 0, max(n - 1, 0))


def _take(x, idx, *, axis):
    return np.take(x, _clamped(idx, x.shape[axis]), axis=axis)


def _index_add(x, idx, upd, *, axis):
    out = x.copy()
    np.add.at(out, (slice(None),) * axis + (_clamped(idx, x.shape[axis]),), upd)
    return out


def _cumulative(fn, x, axis, reverse):
    # In x's own dtype (NumPy would widen int32 to int64), wrapping as XLA does; bfloat16 and
    # float16 accumulated in float32 and rounded once per output (low_precision.xla_cumulative).
    low = x.dtype in low_precision.LOW
    acc = low_precision.ACCUMULATOR if low else x.dtype
    if reverse:
        out = np.flip(fn(np.flip(x, axis), axis=axis, dtype=acc), axis)
    else:
        out = fn(x, axis=axis, dtype=acc)
    return low_precision.numpy_convert(out, dtype=x.dtype) if low else out


def _sort(x, *, axis):
    # Stable: NaNs last, -0.0 equal to 0.0 (ops/sort.py).
    perm = np.argsort(x, axis=axis, kind="stable")
    return np.take_along_axis(x, perm, axis=axis), perm.astype(np.int32)


def _u32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).view(np.uint32)  # int32 bits as uint32: a reinterpretation


def _random_uniform(key, *, shape, dtype):
    return threefry.uniform(np, _u32(key), shape, dtype)


def _random_fold_in(key, data):
    return threefry.fold_in(np, _u32(key), _u32(data)).view(np.int32)


def run_block(*args, body, memory=None, **_):  # the other params are for the VJP rule
    """A block whose body runs once where it stands (checkpoint, custom_vjp, custom_jvp)."""
    if memory is None:  # run on its own (an op bound eagerly): the operands are the caller's
        return tuple(run(body, args, Memory.of_caller(args)))
    outs = run(body, args, memory)
    # `run` holds the body's outputs; the caller holds them from here on
    for v in dict.fromkeys(body.outputs):  # once per Var: a custom_vjp may output a value twice
        memory.release(outs[body.outputs.index(v)])
    return tuple(outs)


IMPLS: dict[str, Callable] = {
    "negative": np.negative, "abs": np.abs, "sign": np.sign, "exp": np.exp, "log": np.log,
    "log1p": np.log1p, "sqrt": np.sqrt, "sin": np.sin, "cos": np.cos, "tanh": np.tanh,
    "logical_not": np.logical_not,
    "expm1": np.expm1, "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh, "atan2": np.arctan2,
    "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
    "floor": np.floor, "ceil": np.ceil, "round": np.rint,  # rint: halves to even
    # scipy.special, imported on first use (`import remat` stays without SciPy)
    "erf": lambda x: __import__("scipy.special").special.erf(x),
    "erfc": lambda x: __import__("scipy.special").special.erfc(x),
    "lgamma": lambda x: __import__("scipy.special").special.gammaln(x),
    "digamma": lambda x: __import__("scipy.special").special.digamma(x),
    "polygamma": lambda x, *, n: __import__("scipy.special").special.polygamma(n, x),
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "pow": np.power, "maximum": np.maximum, "minimum": np.minimum,
    "equal": np.equal, "not_equal": np.not_equal, "less": np.less, "less_equal": np.less_equal,
    "greater": np.greater, "greater_equal": np.greater_equal,
    "logical_and": np.logical_and, "logical_or": np.logical_or,
    "where": np.where,
    "convert": low_precision.numpy_convert,
    "sum": low_precision.numpy_reduce(np.sum),
    "prod": low_precision.numpy_reduce(np.prod),
    "max": lambda x, *, axes: np.max(x, axis=axes),
    "min": lambda x, *, axes: np.min(x, axis=axes),
    "argmax": lambda x, *, axis: np.argmax(x, axis=axis),
    "argmin": lambda x, *, axis: np.argmin(x, axis=axis),
    "reshape": lambda x, *, shape: np.reshape(x, shape),
    "permute_dims": lambda x, *, axes: np.transpose(x, axes),
    "broadcast_to": lambda x, *, shape: np.broadcast_to(x, shape),
    "concat": lambda *xs, axis: np.concatenate(xs, axis=axis),
    "slice": _slice,
    "pad": _pad,
    "flip": lambda x, *, axes: np.flip(x, axes),
    "cumsum": lambda x, *, axis, reverse: _cumulative(np.cumsum, x, axis, reverse),
    "cumprod": lambda x, *, axis, reverse: _cumulative(np.cumprod, x, axis, reverse),
    "sort": _sort,
    "floor_divide": np.floor_divide, "remainder": np.remainder,
    "matmul": low_precision.numpy_matmul,
    "take": _take,
    "index_add": _index_add,
    "stop_gradient": lambda x: x,
    "barrier": lambda *xs: xs,
    "checkpoint_name": lambda x, *, name: x,
    "shard": lambda x, *, spec: x,  # where an array lives is XLA's business (remat/sharding.py)
    "random_uniform": _random_uniform,
    "random_normal": lambda key, *, shape, dtype: threefry.normal(np, _u32(key), shape, dtype),
    "random_fold_in": _random_fold_in,
    # LAPACK through np.linalg (SciPy's triangular solve); a matrix LAPACK refuses gives NaN, as on XLA
    "solve": numpy_linalg.solve,
    "triangular_solve": numpy_linalg.triangular_solve,
    "cholesky": numpy_linalg.cholesky,
    "qr": numpy_linalg.qr,
    "eigh": numpy_linalg.eigh,
    "svd": numpy_linalg.svd,
    "slogdet": numpy_linalg.slogdet,
    "det": np.linalg.det,  # a singular matrix gives 0: nothing to refuse
}

# ops that run sub-graphs and so take the memory counter: blocks, which `register` themselves
_BLOCKS: set[str] = set()


def register(op: str, impl: Callable, runs_graphs: bool = False) -> None:
    """A block's module gives the evaluator its implementation (the loops: loops/numpy_impl.py;
    checkpoint, custom_vjp and custom_jvp: `run_block`); `runs_graphs`: it runs sub-graphs, and
    takes the run's Memory as `memory=`."""
    IMPLS[op] = impl
    if runs_graphs:
        _BLOCKS.add(op)


# ops whose result is a view of their operand's buffer (a reshape NumPy cannot do in place copies),
# and those whose result k is their operand k itself: neither allocates
VIEWS = frozenset({"reshape", "permute_dims", "broadcast_to", "slice", "flip"})
IDENTITIES = frozenset({"stop_gradient", "checkpoint_name", "barrier", "shard"})


def apply(op: str, values: list[np.ndarray], params: dict, avals, memory=None, out=None) -> list[np.ndarray]:
    """Run one op on arrays; outputs come back as arrays of exactly the declared dtypes.
    `out`, for an elementwise op, is a dying buffer of the output's type to write into."""
    fn = IMPLS[op]
    if op in _BLOCKS:
        out = fn(*values, memory=memory, **params)
    elif out is not None:
        out = fn(*values, out=out)
    else:
        out = fn(*values, **params)
    outs = out if isinstance(out, tuple) else (out,)
    return [np.asarray(o).astype(a.dtype, copy=False) for o, a in zip(outs, avals)]


class Memory:
    """Live bytes of the buffers a run allocated. Views share their base buffer's count, and
    arrays the caller passed in (inputs, constants) are not the run's to count."""

    cap: int | None = None  # a CappedMemory's (backends/capped.py), which runs graphs itself

    def __init__(self):
        self.live = 0
        self.peak = 0
        self._refs: dict[int, list] = {}  # id(base) -> [base, nbytes, refcount]
        self._external: set[int] = set()
        self.timeline: list[int] = []  # the live bytes at each mark, when a profiler records them

    @classmethod
    def of_caller(cls, arrays) -> Memory:
        """The counter of a block run on its own (bound eagerly): `arrays`, its operands, are the
        caller's, so no op of its body writes into them. (A checkpoint bound eagerly counted them
        as its own, and its body's first elementwise op overwrote the caller's array.)"""
        memory = cls()
        for a in arrays:
            memory.external(a)
        return memory

    @staticmethod
    def _base(a: np.ndarray) -> np.ndarray:
        while isinstance(a.base, np.ndarray):
            a = a.base
        return a

    def external(self, a: np.ndarray) -> None:
        """`a` belongs to the caller: views of it cost the run nothing."""
        self._external.add(id(self._base(a)))

    def hold(self, a: np.ndarray) -> None:
        base = self._base(a)
        key = id(base)
        if key in self._external:
            return
        entry = self._refs.get(key)
        if entry is None:
            self._refs[key] = [base, base.nbytes, 1]
            self.live += base.nbytes
            self.peak = max(self.peak, self.live)
        else:
            entry[2] += 1

    def release(self, a: np.ndarray) -> None:
        key = id(self._base(a))
        entry = self._refs.get(key)
        if entry is None:
            return
        entry[2] -= 1
        if entry[2] == 0:
            del self._refs[key]
            self.live -= entry[1]

    def sole_owner(self, a: np.ndarray) -> bool:
        """Whether `a` is a buffer of this run that nothing else shares (safe to overwrite)."""
        entry = self._refs.get(id(a))
        return entry is not None and entry[0] is a and entry[2] == 1 and a.flags.writeable

    def mark(self) -> None:
        """A node has run. The profiler's recorder notes the live bytes here (`timeline`); a plain
        run keeps no such list: a long loop runs millions of nodes (a binomial RNN of 61,440
        steps: hundreds of MiB of Python ints, more than the step's own arrays)."""

    def finish(self) -> None:
        """Let go of the run's buffers (its outputs are the caller's now), keeping the counts:
        a Memory kept for inspection must not keep a run's outputs alive."""
        self._refs.clear()
        self._external.clear()


def last_uses(graph: Graph) -> list[list[Var]]:
    """For each node, the Vars whose last reader it is, including its own outputs that nothing
    reads. Graph outputs are never freed."""
    last: dict[Var, int] = {v: -1 for v in graph.inputs}
    for i, node in enumerate(graph.nodes):
        for v in node.inputs:
            last[v] = i
        for v in node.outputs:
            last.setdefault(v, i)
    keep = set(graph.outputs) | set(graph.constants)
    frees: list[list[Var]] = [[] for _ in range(len(graph.nodes) + 1)]
    for v, i in last.items():
        if v not in keep:
            frees[i + 1].append(v)
    return frees


def run(graph: Graph, args, memory: Memory | None = None, frees: list[list[Var]] | None = None) -> list[np.ndarray]:
    """Evaluate `graph` on arrays `args`. Iterative over nodes; buffers die at their last use.
    `frees` is `last_uses(graph)`, for a loop that runs one graph many times."""
    memory = memory or Memory()
    if memory.cap is not None:  # dynamic rematerialization (backends/capped.py)
        return memory.run(graph, args, frees)
    env: dict[Var, np.ndarray] = dict(graph.constants)
    for a in graph.constants.values():
        memory.external(a)
    for v, a in zip(graph.inputs, args):
        env[v] = a
        memory.hold(a)
    frees = frees or last_uses(graph)
    for v in frees[0]:  # inputs nobody reads
        memory.release(env.pop(v))
    for node, dead in zip(graph.nodes, frees[1:]):
        donated = _donation(node, dead, env, memory)
        outs = apply(node.op, [env[v] for v in node.inputs], node.params, node.outputs, memory, donated)
        for v, o in zip(node.outputs, outs):
            env[v] = o
            memory.hold(o)
        for v in dead:
            memory.release(env.pop(v))
        memory.mark()
    return [env[v] for v in graph.outputs]


def _donation(node, dead: list[Var], env: dict, memory: Memory) -> np.ndarray | None:
    """A buffer dying at `node` that an elementwise op can write its result into, so that
    `g * (1 - y * y)` needs one new buffer rather than three."""
    fn = IMPLS[node.op]
    if not (isinstance(fn, np.ufunc) or getattr(fn, "takes_out", False)) or len(node.outputs) != 1:
        return None
    (result,) = node.outputs
    for v in dead:
        if v.shape == result.shape and v.dtype == result.dtype and memory.sole_owner(env[v]):
            return env[v]
    return None


# The cap of a `with rm.memory.cap(...)` scope: a `backends.capped.Cap` every program compiled
# here runs under, with its own cap if that is smaller.
SCOPED_CAP: ContextVar = ContextVar("remat_memory_cap", default=None)


class Program:
    """What `lower` gives: the graph itself, which is the program this backend runs."""

    def __init__(self, graph: Graph, donated: tuple[int, ...] = (), memory_cap=None):
        self.graph = graph
        self.donated = donated
        self.memory_cap = memory_cap

    def __str__(self) -> str:
        return str(self.graph)

    def compile(self) -> Callable:
        return compile(self.graph, self.donated, self.memory_cap)


def lower(graph: Graph, donated: tuple[int, ...] = (), memory_cap=None) -> Program:
    return Program(graph, donated, memory_cap)


def compile(graph: Graph, donated: tuple[int, ...] = (), memory_cap=None) -> Callable:
    """A callable running `graph` on NumPy arrays; `.last_memory` holds its latest Memory. The
    inputs at `donated` are the run's: counted, freed after their last use, written into.
    `memory_cap` (a `backends.capped.Cap`) bounds the bytes the run holds: see backends/capped.py."""

    def call(*args):
        # A JAX array on the CPU becomes a read-only view of its own buffer, not a copy; what
        # the run counts and frees are NumPy arrays, so the conversion comes first.
        arrays = [np.asarray(a) for a in args]
        caps = [c for c in (memory_cap, SCOPED_CAP.get()) if c is not None]
        memory = min(caps, key=lambda c: c.bytes).memory() if caps else Memory()
        for k, a in enumerate(arrays):
            if k not in donated:
                memory.external(a)
        with blas.limited(graph):  # spinning BLAS workers stall everything else (see blas.py)
            outs = run(graph, arrays, memory)
        memory.finish()
        call.last_memory = memory
        return outs

    call.last_memory = None
    return call


trace.set_evaluator(apply)  # ops bound outside a trace run here
