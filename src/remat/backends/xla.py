"""The XLA backend: a Graph lowered op by op to `jax.lax` and run as one or several executables.

- **Fused** (`staged=False`): the whole graph is one XLA executable; `barrier` becomes
  `lax.optimization_barrier`. Right where the compiler honours barriers (GPU, TPU).
- **Staged** (`staged=True`): the graph is cut before every top-level `barrier` (and a deep
  forward pass into chunks) into stages, each its own executable, run one after another; a stage
  receives only the values it reads and hands on only those later stages (or the result) read.
  XLA:CPU drops optimization barriers and then keeps every activation alive (`jax.checkpoint`
  saves nothing there); with stages, a checkpoint's recomputed internals cannot outlive the
  stage that recomputes them. Structurally identical stages (every layer of a model) share one
  executable.

`staged=None` picks staged on the CPU and fused elsewhere. Values stay on the device between
stages and between calls.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from remat import precision as matmul_precision
from remat.backends import low_precision, threefry
from remat.backends.xla_layout import layout_of
from remat.graph import Graph, Var
from remat.loops import xla_impl

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


def _block(*args, body: Graph, **_):  # the other params are for the VJP rule
    # Forward evaluation inlines the body: its internals are temporaries of the enclosing executable.
    return tuple(evaluate(body, args))


IMPLS: dict[str, Callable] = {
    "negative": lax.neg, "abs": jnp.abs, "sign": jnp.sign, "exp": lax.exp, "log": lax.log,
    "log1p": lax.log1p, "sqrt": lax.sqrt, "sin": lax.sin, "cos": lax.cos, "tanh": lax.tanh,
    "logical_not": jnp.logical_not,
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
    "cumsum": lambda x, *, axis, reverse: lax.cumsum(x, axis=axis, reverse=reverse),
    "cumprod": lambda x, *, axis, reverse: lax.cumprod(x, axis=axis, reverse=reverse),
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
    "checkpoint": _block,
    "custom_vjp": _block,  # runs fwd: the outputs, then the residuals
    "custom_jvp": _block,  # runs the function (the rule is for derivatives)
    "random_uniform": _random_uniform,
    "random_normal": lambda key, *, shape, dtype: threefry.normal(jnp, _u32(key), shape, dtype),
    "random_fold_in": _random_fold_in,
    "scan": xla_impl.scan,
    "scan_binomial": xla_impl.scan_binomial,
    "while": xla_impl.while_loop,
    "cond": xla_impl.cond,
    "while_gradient": xla_impl.while_gradient,
}


def _constant(a: np.ndarray):
    """A graph constant inside a traced function: a literal, or a broadcast when all its elements
    are equal (zeros, ones), so large constants cost no program text."""
    if a.ndim and a.size and (a == a.flat[0]).all():
        return jnp.full(a.shape, a.flat[0], a.dtype)
    return a


def evaluate(graph: Graph, args) -> list:
    """`graph` applied to JAX values (tracers inside `jax.jit`): a loop over the lowering table."""
    env = {v: _constant(a) for v, a in graph.constants.items()}
    env.update(zip(graph.inputs, args))
    for node in graph.nodes:
        out = IMPLS[node.op](*[env[v] for v in node.inputs], **node.params)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        for v, o in zip(node.outputs, outs):  # jnp may widen (sum of bools, argmax in x64 mode)
            env[v] = o if o.dtype == v.dtype else lax.convert_element_type(o, v.dtype)
    return [env[v] for v in graph.outputs]


# ---------------------------------------------------------------- structure: what makes stages equal


def structure(graph: Graph) -> tuple:
    """A hashable description of `graph` up to the identity of its Vars: types, ops, params
    (sub-graphs described the same way), constants by value, and the wiring by position."""
    ids: dict[Var, int] = {}

    def define(v: Var) -> tuple:
        ids[v] = len(ids)
        return v.shape, v.dtype.str

    ins = tuple(define(v) for v in graph.inputs)
    consts = tuple((define(v), _key(a)) for v, a in graph.constants.items())
    nodes = tuple(
        (n.op, _key(n.params), tuple(ids[v] for v in n.inputs), tuple(define(v) for v in n.outputs))
        for n in graph.nodes
    )
    return ins, consts, nodes, tuple(ids[v] for v in graph.outputs)


def _key(value):
    if isinstance(value, Graph):
        return structure(value)
    if isinstance(value, dict):
        return tuple(sorted((k, _key(v)) for k, v in value.items()))
    if isinstance(value, (tuple, list)):
        return tuple(_key(v) for v in value)
    if isinstance(value, np.ndarray):
        return "array", value.shape, value.dtype.str, hashlib.sha1(value.tobytes()).hexdigest()
    if isinstance(value, np.dtype):
        return value.str
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return type(value).__name__, value


# ---------------------------------------------------------------- the stage planner


@dataclass
class Stage:
    """One executable's worth of the graph. `graph` holds the stage's nodes as a function of the
    values it reads (scalar constants stay inside); `dead` are the inputs nothing after it reads;
    `donate` the positions of dead inputs XLA may overwrite with outputs of the same type."""

    graph: Graph
    dead: list[Var]
    donate: tuple[int, ...]
    key: tuple


# A staged run cuts before every top-level barrier (a layer's backward stage starts there) and,
# once a stage holds this many nodes, before the next checkpoint block. XLA's compile time (and
# its first run) grows faster than the program: a 3,000-layer forward pass compiled as one
# executable in 24 s, against 0.2 s for 300 layers. A deep forward pass therefore runs in chunks
# of this size, identical chunks sharing an executable, so the first call grows linearly with
# depth. A shallow one stays one stage: an executable per block costs each its dispatch (20% of
# a step of 24 layers of width 64).
STAGE_NODES = 500


def plan(graph: Graph, staged: bool) -> list[Stage]:
    """Cut `graph` into stages (see STAGE_NODES) or not at all (fused)."""
    cuts = _cuts(graph) if staged else []
    bounds = [0, *cuts, len(graph.nodes)]
    segments = [graph.nodes[a:b] for a, b in zip(bounds, bounds[1:])]
    last: dict[Var, int] = {}  # the last stage reading each Var; len(segments): the result does
    for s, nodes in enumerate(segments):
        for n in nodes:
            last.update((v, s) for v in n.inputs)
    last.update((v, len(segments)) for v in graph.outputs)
    mine = set(graph.inputs) | set(graph.constants)  # values the caller owns: never donated
    return [_stage(s, nodes, graph, last, mine) for s, nodes in enumerate(segments)]


def _cuts(graph: Graph) -> list[int]:
    cuts, size = [], 0
    for i, node in enumerate(graph.nodes):
        # A checkpoint made with prevent_cse=False has no barrier before its backward block.
        unbarred = node.op == "checkpoint" and node.params.get("differentiated") and "prevent_cse" in node.params
        if i and (node.op == "barrier" or unbarred or node.op == "checkpoint" and size >= STAGE_NODES):
            cuts.append(i)
            size = 0
        size += 1 + sum(1 for sub in node.subgraphs() for _ in sub.walk())
    return cuts


def _stage(s: int, nodes, graph: Graph, last: dict[Var, int], mine: set[Var]) -> Stage:
    defined = {v for n in nodes for v in n.outputs}
    ins: dict[Var, None] = {}
    scalars = {}
    for n in nodes:
        for v in n.inputs:
            if v in defined:
                continue
            if v in graph.constants and graph.constants[v].ndim == 0:
                scalars[v] = graph.constants[v]
            else:
                ins.setdefault(v)
    outs = [v for n in nodes for v in n.outputs if last.get(v, s) > s]
    inputs = list(ins)
    dead = [v for v in inputs if last[v] == s]
    donate = _donatable(inputs, [v for v in dead if v not in mine], outs)
    sub = Graph(inputs, outs, nodes, scalars)
    return Stage(sub, dead, donate, (structure(sub), donate))


def _donatable(inputs: list[Var], dead: list[Var], outs: list[Var]) -> tuple[int, ...]:
    """Positions of dead inputs, at most as many of each type as there are outputs of that type
    (XLA can reuse a donated buffer only for an output of the same shape and dtype)."""
    room: dict[tuple, int] = {}
    for v in outs:
        room[v.shape, v.dtype] = room.get((v.shape, v.dtype), 0) + 1
    position = {v: k for k, v in enumerate(inputs)}
    picked = []
    for v in dead:
        if room.get((v.shape, v.dtype), 0) > 0:
            room[v.shape, v.dtype] -= 1
            picked.append(position[v])
    return tuple(sorted(picked))


# ---------------------------------------------------------------- lowering and running


def default_staged() -> bool:
    """Staged on the CPU, whose XLA drops optimization barriers; fused on GPUs and TPUs."""
    return jax.default_backend() == "cpu"


class Program:
    """A Graph planned into stages. `str()` is the StableHLO of every stage; `compile()` gives
    the callable that runs them."""

    def __init__(self, graph: Graph, staged: bool | None = None, precision: str | None = None,
                 in_shardings=None, out_shardings=None):
        self.graph = graph
        self.precision = matmul_precision.effective(precision)  # fixed now: later scopes do not change it
        self.staged = default_staged() if staged is None else bool(staged)
        self.stages = plan(graph, self.staged)
        self.x64 = any(v.dtype.itemsize == 8 for v in _all_vars(graph))
        self._lowered: dict[tuple, jax.stages.Lowered] = {}
        self.layout = layout_of(graph, in_shardings, out_shardings)
        self._placed: dict[tuple, jax.stages.Compiled] | None = None

    def mode(self):
        """64-bit dtypes need JAX's x64 mode while tracing, transferring and running."""
        return _x64() if self.x64 else contextlib.nullcontext()

    def lowered(self, stage: Stage) -> jax.stages.Lowered:
        hit = self._lowered.get(stage.key)
        if hit is None:
            g = stage.graph
            avals = [jax.ShapeDtypeStruct(v.shape, v.dtype) for v in g.inputs]

            def stage_fn(*xs):
                return evaluate(g, xs)

            shardings = {} if self.layout is None else self.layout.jit_options(stage)
            with self.mode(), matmul_precision.lowering(self.precision), self._on_mesh(), warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*donated buffers.*")
                hit = jax.jit(stage_fn, donate_argnums=stage.donate, **shardings).lower(*avals)
            self._lowered[stage.key] = hit
        return hit

    def _on_mesh(self):
        """A sharded program's stages are traced on its mesh: one that reads no sharded value
        (a stage of constants) still runs on the mesh's devices, replicated."""
        return contextlib.nullcontext() if self.layout is None else jax.set_mesh(self.layout.mesh)

    def placed(self) -> dict[tuple, jax.stages.Compiled]:
        """A sharded program's executables, one per distinct stage, compiled in order: each stage
        takes its inputs as the stages before it left them (XLA's partitioner chooses the
        shardings of a stage's outputs, those asked for in out_shardings aside), so values stay
        sharded on the devices from one stage to the next. A stage's key gains its shardings."""
        if self._placed is None:
            compiled: dict[tuple, jax.stages.Compiled] = {}
            for stage in self.stages:
                ins, outs = self.layout.jit_options(stage).values()
                stage.key = (stage.key, ins, tuple(outs))
                if stage.key not in compiled:
                    compiled[stage.key] = self.lowered(stage).compile()
                placed = jax.tree.leaves(compiled[stage.key].output_shardings)
                self.layout.placed.update(zip(stage.graph.outputs, placed))
            self._placed = compiled
        return self._placed

    def as_text(self) -> str:
        if self.layout is not None:
            self.placed()
        if not self.staged:
            return self.lowered(self.stages[0]).as_text()
        first: dict[tuple, int] = {}
        lines = []
        for i, stage in enumerate(self.stages):
            if stage.key in first:
                lines.append(f"// stage {i}: the executable of stage {first[stage.key]}")
                continue
            first[stage.key] = i
            lines += [f"// stage {i}:", self.lowered(stage).as_text()]
        head = f"// staged: {len(self.stages)} stages, {len(first)} executables"
        return "\n".join([head, *lines])

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
    """Runs a Program's stages in order, keeping each value only as long as a later stage needs
    it. `last_memory` tells what a run holds, stage by stage."""

    def __init__(self, program: Program):
        self.program = program
        graph = program.graph
        with program.mode():
            compiled = _compile_distinct(program)
            # Constants the stages take as inputs (non-scalars) or the caller gets back, on the device once.
            wanted = {v: a for v, a in graph.constants.items() if a.ndim or v in graph.outputs}
            where = None if program.layout is None else [program.layout.replicated] * len(wanted)
            self._consts = dict(zip(wanted, jax.device_put(list(wanted.values()), where)))
        self._steps = [(s, compiled[s.key]) for s in program.stages]
        self._shared, self._returned = _argument_uses(graph, program.stages)
        self.executables = len(compiled)
        self._memory = stage_memory(program, compiled)
        self.last_memory: StageMemory | None = None

    def __call__(self, *args) -> list:
        graph = self.program.graph
        with self.program.mode():
            env = dict(self._consts)
            env.update(zip(graph.inputs, self._arguments(args)))
            for k, (stage, executable) in enumerate(self._steps):
                ins = [env[v] for v in stage.graph.inputs]
                for v in stage.dead:
                    del env[v]
                outs = executable(*ins)
                del ins  # the last references to dead inputs: XLA may free them now
                if k + 1 < len(self._steps):
                    # One stage at a time: dispatched while the one before still runs, a stage's
                    # outputs and temporaries would be allocated beside that one's, and the run
                    # would hold more than `last_memory` (on the planned 64-layer MLP, 5-12 MiB
                    # more, varying from run to run). Waiting keeps Python's dispatch of a stage
                    # from overlapping the one before: 1.08x the step time with 65 stages (the
                    # MLP checkpointed per layer), nothing measurable with 9.
                    jax.block_until_ready(outs)
                env.update(zip(stage.graph.outputs, outs))
            self.last_memory = self._memory
            outs = [env[v] for v in graph.outputs]
            return outs if self.program.layout is None else self.program.layout.finish(outs)

    def _arguments(self, args) -> list:
        """The caller's arrays as the stages take them. A NumPy array read by one stage goes to
        its executable as it is: the runtime copies it to the device in C++, as for `jax.jit`,
        where `jax.device_put` from Python costs tens of microseconds an array. One that several
        stages read goes to the device once, all such in one call. One the caller gets back is
        copied first: on the CPU, `device_put` keeps an aligned NumPy array's memory instead of
        copying it (`may_alias=False` notwithstanding), so the result would change with it."""
        out = [_typed(a, v.dtype) for v, a in zip(self.program.graph.inputs, args)]
        if self.program.layout is not None:
            return self.program.layout.arguments(out, self._returned)
        shared = [k for k in self._shared if isinstance(out[k], np.ndarray)]
        returned = [k for k in self._returned if isinstance(out[k], np.ndarray)]
        if shared or returned:
            arrays = [out[k] for k in shared] + [np.array(out[k]) for k in returned]
            for k, a in zip(shared + returned, jax.device_put(arrays)):
                out[k] = a
        return out


class StageMemory:
    """Bytes a staged run holds, per stage: `live` after it (values of the run, not the caller's
    arguments or constants) and `high` while it runs (also its outputs and XLA's temporaries,
    less the inputs it donates). The schedule is fixed, so this is worked out once, from the
    shapes and XLA's own buffer report, not counted on every call. For a sharded program the
    bytes are those of one device: `size(v)` is the bytes of v's shard (XLA's report is per
    device already)."""

    def __init__(self, stages: list[Stage], temps: list[int], external: set[Var],
                 size: Callable[[Var], int] | None = None):
        self.temp = list(temps)  # XLA's temporary buffers per stage, as its memory analysis reports
        self.live: list[int] = []
        self.high: list[int] = []
        held = 0
        # Kept as a running total: every value of the run is made by one stage and dies in one
        # (the last that reads it), so each is added and taken off once, and the work is linear
        # in the graph, not stages x live values.
        size = size or _var_bytes
        for stage, temp in zip(stages, temps):
            made = sum(map(size, stage.graph.outputs))
            donated = sum(size(stage.graph.inputs[k]) for k in stage.donate)
            self.high.append(held + temp + made - donated)
            held += made - sum(size(v) for v in stage.dead if v not in external)
            self.live.append(held)

    @property
    def peak(self) -> int:
        return max(self.high + self.live, default=0)


def stage_memory(program: Program, compiled: dict[tuple, jax.stages.Compiled] | None = None) -> StageMemory:
    """What a run of `program` holds, stage by stage, from XLA's buffer report of each of its
    executables (compiled now unless given). The memory planner counts a step for XLA with it."""
    with program.mode():
        compiled = _compile_distinct(program) if compiled is None else compiled
    temp = {key: _temp_bytes(executable) for key, executable in compiled.items()}
    size = None if program.layout is None else program.layout.device_bytes
    external = set(program.graph.inputs) | set(program.graph.constants)  # the caller's, or placed once
    return StageMemory(program.stages, [temp[s.key] for s in program.stages], external, size)


def _var_bytes(v: Var) -> int:
    return math.prod(v.shape) * v.dtype.itemsize


def _compile_distinct(program: Program) -> dict[tuple, jax.stages.Compiled]:
    """One executable per distinct stage: a 1,000-layer model has three, not 1,000 (compiling
    an already compiled Lowered again costs milliseconds even when JAX's cache answers)."""
    if program.layout is not None:
        return program.placed()
    compiled: dict[tuple, jax.stages.Compiled] = {}
    for stage in program.stages:
        if stage.key not in compiled:
            compiled[stage.key] = program.lowered(stage).compile()
    return compiled


def _temp_bytes(executable) -> int:
    try:
        return int(executable.memory_analysis().temp_size_in_bytes)
    except Exception:  # not every platform reports it
        return 0


def _argument_uses(graph: Graph, stages: list[Stage]) -> tuple[list[int], list[int]]:
    """Positions of the graph inputs that several stages read, and of those that are results."""
    readers = dict.fromkeys(graph.inputs, 0)
    for v in (v for s in stages for v in s.graph.inputs):
        if v in readers:
            readers[v] += 1
    results = set(graph.outputs)
    returned = [k for k, v in enumerate(graph.inputs) if v in results]
    shared = [k for k, v in enumerate(graph.inputs) if readers[v] > 1 and v not in results]
    return shared, returned


def _typed(a, dtype: np.dtype):
    """`a` as a NumPy or JAX array of `dtype`."""
    if not isinstance(a, (np.ndarray, jax.Array)):
        a = np.asarray(a)
    return a if a.dtype == dtype else a.astype(dtype)


def lower(graph: Graph, staged: bool | None = None, precision: str | None = None,
          in_shardings=None, out_shardings=None) -> Program:
    """The program for `graph`; `.as_text()` lowers it to StableHLO without compiling (a sharded
    program compiles its stages in order: each takes the shardings the one before chose).
    `in_shardings`/`out_shardings`: one `NamedSharding` or None per graph input/output."""
    return Program(graph, staged, precision, in_shardings, out_shardings)


def compile(graph: Graph, staged: bool | None = None, precision: str | None = None,
            in_shardings=None, out_shardings=None) -> Callable:
    """A callable running `graph` on NumPy or JAX arrays; it returns JAX arrays."""
    return Program(graph, staged, precision, in_shardings, out_shardings).compile()
