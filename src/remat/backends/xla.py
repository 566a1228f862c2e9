"""The XLA backend: a Graph lowered op by op to `jax.lax` (backends/xla_ops.py) and run as one executable.

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
from remat.backends.xla_layout import layout_of
from remat.backends.xla_ops import evaluate, uniform
from remat.backends.xla_scratch import library_scratch
from remat.graph import Graph

# ---------------------------------------------------------------- backward blocks in branches


#: While a program is lowered with branches: the run-time predicate backward blocks branch on (a
#: tracer of the executable's first argument), and the branches made so far by program (None:
#: lowered inline).
_BRANCHING: ContextVar[tuple | None] = ContextVar("remat_xla_branching", default=None)


@contextlib.contextmanager
def _branching(predicate) -> Iterator[None]:
    token = _BRANCHING.set(None if predicate is None else (predicate, {}))
    try:
        yield
    finally:
        _BRANCHING.reset(token)


def _branches(body: Graph, made: dict) -> tuple[Callable, Callable]:
    """The conditional's two branches for `body`, one pair per program: JAX traces a branch once
    per function and operand types, so the backward blocks of identical layers are traced into
    JAX once, not once a layer. A program is its printed text and what the text leaves out."""
    key = (str(body), tuple(_unprinted(body)))
    if key not in made:
        def taken(*xs):
            return tuple(evaluate(body, xs))

        def untaken(*_):  # never runs; gives the branch's types
            return tuple(jnp.zeros(v.shape, v.dtype) for v in body.outputs)

        made[key] = (taken, untaken, body)  # the body kept alive: the ids above stay its functions'
    return made[key][:2]


def _unprinted(graph: Graph) -> Iterator:
    """What a program's text does not tell apart: the values of arrays (printed by their type, or
    elided), and the functions its nodes hold (printed by name), by identity."""
    graphs = [graph, *(sub for node in graph.walk() for sub in node.subgraphs())]
    values = [*(a for g in graphs for a in g.constants.values()),
              *(v for n in graph.walk() for v in n.params.values() if not isinstance(v, Graph))]
    for v in values:
        if isinstance(v, np.ndarray):
            yield v.dtype.str, v.shape, v.tobytes()
        elif callable(v):
            yield id(v)


def run_block(*args, body: Graph, **params):  # the other params are for the VJP rule
    """A block whose body runs once where it stands (checkpoint, custom_vjp, custom_jvp): inlined,
    or on the CPU a checkpoint's backward block as the branch of a conditional (`default_branches`)."""
    branching = _BRANCHING.get()
    # A checkpoint's backward block (`differentiated`, behind a barrier: prevent_cse=False asks
    # for none, and for the recomputation to merge with the forward pass, as in JAX).
    if branching is None or not params.get("differentiated") or params.get("prevent_cse") is False:
        # Forward evaluation inlines the body: its internals are temporaries of the executable.
        return tuple(evaluate(body, args))
    predicate, made = branching
    return tuple(lax.cond(predicate, *_branches(body, made), *args))


def default_branches() -> bool:
    """Backward blocks in conditionals on the CPU, whose XLA drops optimization barriers; inline
    behind their barriers on GPUs and TPUs."""
    return jax.default_backend() == "cpu"


# ---------------------------------------------------------------- one executable


@dataclass(frozen=True)
class ExecutableMemory:
    """What a run of the executable holds, from XLA's own buffer report: its temporary buffers
    (`temp`, one allocation for the whole run, sized by XLA's buffer assignment) and its outputs
    (`outputs`), the caller's arguments left out; and what the largest library fusion allocates
    while it runs, which the report leaves out (`scratch`, see `xla_scratch`). `peak` is their
    sum: the most the run holds at once beyond its arguments. For a sharded program, the bytes
    of one device."""

    temp: int
    outputs: int
    scratch: int = 0

    @property
    def peak(self) -> int:
        return self.temp + self.outputs + self.scratch

    @classmethod
    def of(cls, executable: jax.stages.Compiled) -> ExecutableMemory:
        """The figures of a compiled executable, remat's or `jax.jit`'s."""
        analysis = executable.memory_analysis()
        return cls(int(analysis.temp_size_in_bytes), int(analysis.output_size_in_bytes),
                   library_scratch(executable.as_text()))


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
        self.held = [v for v, a in graph.constants.items() if a.ndim and not uniform(a)]
        self._lowered: jax.stages.Lowered | None = None
        self._compiled: jax.stages.Compiled | None = None
        self._memory: ExecutableMemory | None = None

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
        """XLA's buffer report of the compiled program (compiled now if it is not yet), and its
        library fusions' scratch."""
        if self._memory is None:  # read when asked: the module's text costs a few percent of a compile
            self._memory = ExecutableMemory.of(self.executable())
        return self._memory

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
        self._ran = False

    @property
    def last_memory(self) -> ExecutableMemory | None:
        """What a run holds (None before the first)."""
        return self.program.memory() if self._ran else None

    def __call__(self, *args) -> list:
        with self.program.mode():
            outs = self._executable(np.True_, *self._held, *self._arguments(args))
            self._ran = True
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
