"""What checkpointing buys: the values a gradient keeps, and the live memory of a run.

- `saved_residuals(fn, *args)`: what the gradient of `fn` keeps between the forward and the
  backward pass (shape, dtype, bytes, where it came from); `print_saved_residuals` prints it.
- `profile(fn, *args)`: one gradient step of `fn` run on a backend, with the peak live bytes,
  a timeline of live bytes per node (measured on NumPy; on XLA predicted, under the executable's
  measured figures), and `.plot(path)`.

Both differentiate `fn` with respect to every float array in `args` (or the positional
arguments `argnums`), with a cotangent of ones for each output.

>>> import remat as rm
>>> def loss(x, w):
...     return rm.sum(rm.checkpoint(lambda h: rm.tanh(h @ w), x, policy=rm.policies.dots_saveable))
>>> [r.provenance for r in rm.memory.saved_residuals(loss, rm.ones((4, 8)), rm.ones((8, 8)))]
['argument x', 'argument w', 'output of matmul at <doctest remat.memory[1]>:2']
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from remat import argcheck, dtypes, timeline, tree
from remat import budget as budgets
from remat.backends import numpy as evaluator
from remat.backends.capped import Cap
from remat.core import OPS, PerStep
from remat.errors import ArgumentTypeError, ArgumentValueError, BudgetTooSmall
from remat.gradients import vjp
from remat.graph import Graph, Node, Var
from remat.jit import bind_static, check_backend, memory_cap_of
from remat.planner.report import PlanReport, PlanWarning, format_bytes, residual_table
from remat.planner.solve import collect_reports
from remat.planner.target import NUMPY, Target, running_on
from remat.trace import asarray, current_trace, trace_function

# ---------------------------------------------------------------- the gradient program


@dataclasses.dataclass
class _Program:
    """A traced gradient step: `graph` (forward nodes first, then backward ones), how many of
    its nodes are forward, a name for each graph input, and the constants that are the
    cotangents the step seeds its backward pass with (inputs of it, not values it keeps)."""

    graph: Graph
    n_forward: int
    input_names: list[str]
    arrays: list[np.ndarray]
    seeds: frozenset[Var] = frozenset()


def _program(fn, args, argnums=None, grad: bool = True, where: str = "memory.saved_residuals",
             memory_budget=None, strategy=None) -> _Program:
    argcheck.check_callable(fn, where)
    if grad:
        budgets.check(memory_budget, strategy, where)
    else:  # a budget plans a gradient step: without one it would be ignored
        budgets.misplaced(f"{where}(grad=False)", memory_budget, strategy)
    if argnums is not None:
        requested = argcheck.argnums(argnums, where, fn)
        argnums = argcheck.resolve(requested, len(args), where, "argnums", argnums, fn)
    leaves, treedef = tree.flatten(args)
    names = _leaf_names(fn, args)
    positions = _leaf_positions(args)
    diff = [
        i for i, x in enumerate(leaves)
        if dtypes.is_float(asarray(x).dtype) and (argnums is None or positions[i] in _nums(argnums))
    ]
    forward: list[Node] = []
    seeds: set[Var] = set()

    def step(*xs):
        if not grad:
            return fn(*tree.unflatten(treedef, list(xs)))

        def partial(*ds):
            merged = list(xs)
            for i, d in zip(diff, ds):
                merged[i] = d
            return fn(*tree.unflatten(treedef, merged))

        out, back = vjp(partial, *[xs[i] for i in diff], memory_budget=memory_budget, strategy=strategy)
        forward.extend(current_trace().nodes)
        seed = tree.map(lambda o: asarray(np.ones(o.shape, o.dtype)), out)
        seeds.update(current_trace().lift(s) for s in tree.leaves(seed))
        return out, back(seed)

    graph = trace_function(step, leaves, name=f"step({getattr(fn, '__name__', 'fn')})").graph
    ids = {id(n) for n in forward}
    n_forward = sum(1 for n in graph.nodes if id(n) in ids) if grad else len(graph.nodes)
    return _Program(graph, n_forward, names, [np.asarray(asarray(x)) for x in leaves], frozenset(seeds))


def _nums(argnums) -> tuple[int, ...]:
    return (argnums,) if isinstance(argnums, int) else tuple(argnums)


def _leaf_positions(args) -> list[int]:
    """For each leaf of `args`, the positional argument it belongs to."""
    return [i for i, a in enumerate(args) for _ in tree.leaves(a)]


def _leaf_names(fn, args) -> list[str]:
    """`x`, `params[0][1]`, `batch['images']`: each leaf named by its argument and its path."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = []
    for i, a in enumerate(args):
        p = params[i] if i < len(params) and params[i].kind != inspect.Parameter.VAR_POSITIONAL else None
        base = p.name if p is not None else f"args[{i}]"
        names += argcheck.leaf_paths(a, base)
    return names


# ---------------------------------------------------------------- saved residuals


@dataclasses.dataclass(frozen=True)
class Residual:
    """A value the gradient keeps from the forward pass for the backward pass."""

    shape: tuple[int, ...]
    dtype: np.dtype
    nbytes: int
    kind: str  # "argument", "named", "output" or "constant"
    provenance: str  # "argument x[0]", "named 'attn'", "output of tanh at model.py:12"
    source: str | None  # the user's line that made it, when known


def saved_residuals(fn, *args, argnums=None, memory_budget=None, strategy=None) -> list[Residual]:
    """What the gradient of `fn(*args)` keeps between the forward and the backward pass, in the
    order the forward pass makes it: arguments, then computed values. With `memory_budget`,
    the gradient planned for it (see `rm.grad`)."""
    return _residuals_of(_program(fn, args, argnums, memory_budget=memory_budget, strategy=strategy))


def _residuals_of(prog: _Program) -> list[Residual]:
    graph = prog.graph
    forward, backward = graph.nodes[: prog.n_forward], graph.nodes[prog.n_forward :]
    made_by_backward = {v for n in backward for v in n.outputs}
    read = {v for n in backward for v in n.inputs if v not in made_by_backward}
    order = list(graph.inputs) + list(graph.constants) + [v for n in forward for v in n.outputs]
    describe = _Describer(graph, prog.input_names)
    out = []
    for v in order:
        if v not in read or v in prog.seeds or v in graph.constants and graph.constants[v].ndim == 0:
            continue
        kind, text, source = describe(v)
        out.append(Residual(v.shape, v.dtype, v.nbytes, kind, text, source))
    return out


class _Describer:
    """Where a Var of the step came from, looking through blocks to the body value a block
    output stands for: a checkpoint's or custom_vjp's, or one per step of a loop's (as its op's
    `describe_output` says)."""

    def __init__(self, graph: Graph, input_names: list[str]):
        self.graph = graph
        self.input_names = dict(zip(graph.inputs, input_names))
        self.defs: dict[int, dict[Var, tuple[Node, int]]] = {}

    def _defs(self, g: Graph) -> dict[Var, tuple[Node, int]]:
        if id(g) not in self.defs:
            self.defs[id(g)] = {v: (n, k) for n in g.nodes for k, v in enumerate(n.outputs)}
        return self.defs[id(g)]

    def __call__(self, v: Var, g: Graph | None = None, outer: list | None = None):
        g = g or self.graph
        outer = outer or []
        if v in g.constants:
            return "constant", f"constant read at {self._reader(v, g)}", self._reader(v, g)
        hit = self._defs(g).get(v)
        if hit is None:  # an input: of the step, or of a block whose body we are in
            if not outer:
                return "argument", f"argument {self.input_names.get(v, '?')}", None
            block, parent = outer[-1]
            return self(block.inputs[g.inputs.index(v)], parent, outer[:-1])
        node, k = hit
        if timeline.inline(node):
            body = node.params["body"]
            return self(body.outputs[k], body, outer + [(node, g)])
        if node.op == "checkpoint_name":
            return "named", f"named {node.params['name']!r}", node.source
        describe = OPS[node.op].describe_output
        said = None if describe is None else describe(node, k)
        if isinstance(said, PerStep):
            kind, text, source = self(said.value, said.body, outer + [(node, g)])
            return kind, f"{text}, {said.steps}", source
        if said is None:
            said = f"output of {node.op}" + (f" at {node.source}" if node.source else "")
        return "output", said, node.source

    def _reader(self, v: Var, g: Graph) -> str | None:
        return next((n.source for n in g.nodes if v in n.inputs and n.source), None)


def print_saved_residuals(fn, *args, argnums=None, file=None) -> None:
    """Print `saved_residuals(fn, *args)` as a table, with the total."""
    rows = saved_residuals(fn, *args, argnums=argnums)
    print(residual_table(rows), file=file or sys.stdout)


# ---------------------------------------------------------------- profile


@dataclasses.dataclass(frozen=True)
class Event:
    """One node of a run (a block's body nodes come before the block): live bytes after it, and
    the most bytes live while it ran. Under a memory cap, the values evicted to make room for it
    and the nodes run again to bring back what it reads, each named by its node's label."""

    label: str
    live: int
    high: int
    phase: str  # "forward" or "backward"
    evicted: tuple[str, ...] = ()
    recomputed: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class XlaFigure:
    """What XLA reports an executable holds while a step runs: its temporary buffers (`temp`, one
    allocation for the whole run, sized by XLA's buffer assignment) and its outputs, and what its
    largest library fusion allocates while it runs, outside the report (`scratch`, see
    `remat.backends.xla_scratch`); `high`, their sum, the most the step holds beyond its arguments.

    >>> import remat as rm
    >>> p = rm.memory.profile(lambda x: rm.sum(rm.tanh(x) * 2.0), rm.ones((256,)), backend="xla")
    >>> p.xla.outputs  # the gradient (1024 bytes), the value (4) and the output tuple's two pointers
    1044
    >>> p.peak_bytes == p.xla.high == p.xla.temp + p.xla.outputs + p.xla.scratch
    True
    """

    temp: int
    outputs: int
    scratch: int = 0

    @property
    def high(self) -> int:
        return self.temp + self.outputs + self.scratch


@dataclasses.dataclass
class Profile:
    """The memory of one run, arguments excluded.

    - `peak_bytes` is measured: the NumPy evaluator's count, or on XLA what the executable holds
      by XLA's own buffer report (`XlaFigure.high`).
    - `timeline` has an Event per node, in run order. On NumPy it is measured. On XLA it is
      predicted: the evaluator's count worked out from shapes (`remat.timeline`), never above
      what the executable was measured to hold (XLA fuses values the evaluator would keep).
    - `xla` (XLA only): the executable's measured figures.

    Every figure `plot` draws is one of these, so its highest point is `peak_bytes`.
    """

    peak_bytes: int
    timeline: list[Event]
    backend: str
    xla: XlaFigure | None = None
    memory_cap: int | None = None

    @property
    def evictions(self) -> int:
        """Buffers evicted under the memory cap (0 without one)."""
        return sum(len(e.evicted) for e in self.timeline)

    @property
    def recomputations(self) -> int:
        """Nodes run again under the memory cap to bring back evicted values (0 without one)."""
        return sum(len(e.recomputed) for e in self.timeline)

    @property
    def predicted(self) -> bool:
        """Whether the timeline is predicted (XLA) rather than counted as it ran (NumPy)."""
        return self.xla is not None

    @property
    def backward_start(self) -> int | None:
        """Index of the first backward event (None: the run has no backward pass)."""
        return next((i for i, e in enumerate(self.timeline) if e.phase == "backward"), None)

    def __str__(self) -> str:
        b = self.backward_start
        split = f", backward from node {b}" if b is not None else ""
        capped = "" if self.memory_cap is None else (
            f"; cap {format_bytes(self.memory_cap)}: {self.evictions} evictions, {self.recomputations} recomputations")
        peak = format_bytes(self.peak_bytes)
        return f"Profile({self.backend}: peak {peak} over {len(self.timeline)} nodes{split}{capped})"

    __repr__ = __str__

    def plot(self, path, title: str | None = None) -> Path:
        """Write a PNG of live memory over the run, forward and backward marked."""
        return plot({title or "": self}, path)


class _Recorder:
    """Wraps the evaluator's Memory: also records the high-water mark between two marks, and
    under a cap what was evicted and recomputed since the last mark."""

    def __init__(self, memory):
        self.memory = memory
        self.highs: list[int] = []
        self.evicted: list[tuple[str, ...]] = []
        self.recomputed: list[tuple[str, ...]] = []
        self._high = 0
        memory_hold = memory.hold
        record: list[tuple[str, str]] = []
        if memory.cap is not None:
            memory.record = record

        def hold(a):
            memory_hold(a)
            self._high = max(self._high, memory.live)

        def mark():
            memory.timeline.append(memory.live)
            self.highs.append(self._high)
            self._high = memory.live
            self.evicted.append(tuple(lab for what, lab in record if what == "evicted"))
            self.recomputed.append(tuple(lab for what, lab in record if what == "recomputed"))
            record.clear()

        memory.hold, memory.mark = hold, mark


def profile(fn, *args, backend: str = "numpy", argnums=None, grad: bool = True, static_argnums=(),
            memory_budget=None, strategy=None, memory_cap=None):
    """Run one gradient step of `fn(*args)` (with `grad=False`: `fn` itself) on `backend` and
    report the live bytes it holds: the arrays it allocates, not its arguments. Arguments at
    `static_argnums` are passed as the Python values they are, as `rm.jit` passes them;
    `argnums` counts every argument, static ones included. With `memory_budget` (and
    `strategy`), the step is the one planned for that budget, as `rm.grad` plans it. With
    `memory_cap` (NumPy only), the step runs under that cap as `rm.jit(..., memory_cap=)` runs
    it, evicting and recomputing: each Event names the values evicted to make room for its node
    and the nodes run again to bring back what it reads; the Profile counts them.

    >>> import remat as rm
    >>> p = rm.memory.profile(lambda x: rm.sum(rm.tanh(x) * 2.0), rm.ones((256,)))
    >>> p.peak_bytes >= 256 * 4, p.timeline[0].phase, p.timeline[p.backward_start].phase
    (True, 'forward', 'backward')
    """
    check_backend(backend, "memory.profile")
    fn, args, argnums = bind_static(fn, args, static_argnums, argnums, "memory.profile")
    cap_ = memory_cap_of(memory_cap, "memory.profile", backend)
    prog = _program(fn, args, argnums, grad, "memory.profile", memory_budget, strategy)
    return _profile_numpy(prog, cap_) if backend == "numpy" else _profile_xla(prog)


def _profile_numpy(prog: _Program, memory_cap: Cap | None = None) -> Profile:
    memory = evaluator.Memory() if memory_cap is None else memory_cap.memory()
    recorder = _Recorder(memory)
    for a in prog.arrays:
        memory.external(a)
    evaluator.run(prog.graph, prog.arrays, memory)
    labels = _evaluation_order(prog.graph, prog.n_forward)
    if len(labels) != len(memory.timeline):  # the evaluator marks differently: unlabelled steps
        labels = [("", "forward")] * len(memory.timeline)
    events = [Event(lab, live, high, phase, ev, rc) for (lab, phase), live, high, ev, rc
              in zip(labels, memory.timeline, recorder.highs, recorder.evicted, recorder.recomputed)]
    return Profile(memory.peak, events, "numpy", memory_cap=None if memory_cap is None else memory_cap.bytes)


def _evaluation_order(graph: Graph, n_forward: int, phase: str | None = None) -> list[tuple[str, str]]:
    """(label, phase) per mark of the evaluator: a block's body nodes, then the block itself."""
    out = []
    for i, node in enumerate(graph.nodes):
        ph = phase or ("forward" if i < n_forward else "backward")
        for sub in node.subgraphs():
            out += _evaluation_order(sub, len(sub.nodes), ph)
        where = f" ({node.source})" if node.source else ""
        out.append((node.op + where, ph))
    return out


def _profile_xla(prog: _Program) -> Profile:
    """The executable's measured figures (see `XlaFigure`); per node, the evaluator's count
    predicted from shapes, at most what the executable was measured to hold."""
    from remat.backends import xla

    runner = xla.lower(prog.graph).compile()
    runner(*prog.arrays)
    measured = XlaFigure(**dataclasses.asdict(runner.last_memory))
    events = [Event(p.label, min(p.live, measured.high), min(p.high, measured.high),
                    "forward" if p.node < prog.n_forward else "backward")
              for p in timeline.predict(prog.graph)]
    return Profile(measured.high, events, "xla", measured)


# ---------------------------------------------------------------- plots


_MIB = 2.0**20


def plot(profiles: dict[str, Profile], path, title: str | None = None) -> Path:
    """Write a PNG with one panel per profile: live MiB node by node, the backward pass shaded,
    and on XLA the executable's measured figure; the legend says which lines are measured and which
    predicted. `profiles` maps a label (a plan's name) to its Profile; panels share the memory
    axis, and each panel's highest point is its profile's `peak_bytes`.

    >>> import pathlib, tempfile
    >>> import remat as rm
    >>> p = rm.memory.profile(lambda x: rm.sum(rm.tanh(x)), rm.ones((256,)))
    >>> rm.memory.plot({"tanh": p}, pathlib.Path(tempfile.mkdtemp()) / "memory.png").name
    'memory.png'
    """
    import matplotlib.pyplot as plt

    _check_profiles(profiles)
    fig = _figure(profiles, title)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _check_profiles(profiles) -> None:
    want = "a dict from a label to a Profile (what rm.memory.profile returns)"
    if isinstance(profiles, Profile):
        raise ArgumentTypeError(f"memory.plot: profiles must be {want}, got one Profile; "
                                "pass {'label': profile}, or call profile.plot(path)")
    if not isinstance(profiles, dict):
        raise ArgumentTypeError(f"memory.plot: profiles must be {want}, got {argcheck.short_repr(profiles)}")
    if not profiles:
        raise ArgumentValueError("memory.plot: profiles is empty ({}); pass at least one {'label': profile}")
    for label, prof in profiles.items():
        if not isinstance(prof, Profile):
            raise ArgumentTypeError(f"memory.plot: profiles[{label!r}] must be a Profile (what rm.memory.profile "
                                    f"returns), got {argcheck.short_repr(prof)}")


def _figure(profiles: dict[str, Profile], title: str | None):
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    n = len(profiles)
    height = 1.9 * n + 1.6
    fig, axes = plt.subplots(n, 1, figsize=(8, height), sharey=True, squeeze=False)
    for ax, (label, prof) in zip(axes[:, 0], profiles.items()):
        _panel(ax, label, prof)
    highest = max(p.peak_bytes for p in profiles.values()) / _MIB
    axes[0, 0].set_ylim(0, 1.25 * highest or 1)  # shared; room above the peaks for the labels
    predicted = any(p.predicted for p in profiles.values())
    axes[-1, 0].set_xlabel("node of the step, in run order (a checkpoint's body nodes, then the block)"
                           + ("; XLA's report in black" if predicted else ""))
    entries = {}
    for ax in axes[:, 0]:
        entries.update(zip(*reversed(ax.get_legend_handles_labels())))
    legend = 0.17 * ((len(entries) + 1) // 2)  # inches: its rows
    head = 0.1 + (0.3 if title else 0)
    # Laid out first: tight_layout would push the panels down again for a title it sees.
    fig.tight_layout(rect=(0, 0, 1, 1 - (head + legend + 0.1) / height))
    if title:
        fig.suptitle(title, y=1 - 0.1 / height, va="top")
    fig.legend(entries.values(), entries.keys(), loc="upper center", bbox_to_anchor=(0.5, 1 - head / height),
               ncol=2, fontsize=7.5, frameon=False, handlelength=1.5, columnspacing=2, borderaxespad=0)
    renderer = fig.canvas.get_renderer()
    for ax in axes[:, 0]:
        _separate_labels(ax, renderer)
    return fig


def _panel(ax, label: str, prof: Profile) -> None:
    n = len(prof.timeline)
    how = "predicted" if prof.predicted else "measured"
    if n:
        xs = np.arange(n + 1)  # node i spans [i, i + 1)
        live = [e.live / _MIB for e in prof.timeline]
        high = [e.high / _MIB for e in prof.timeline]
        ax.fill_between(xs, live + live[-1:], step="post", alpha=0.35, color="C0", lw=0,
                        label=f"live after each node: {how}, the NumPy evaluator's count")
        ax.plot(xs, high + high[-1:], drawstyle="steps-post", lw=0.9, color="C0",
                label=f"most live while each node runs: {how}")
    if prof.xla is not None:
        ax.hlines(prof.xla.high / _MIB, 0, max(n, 1), color="k", lw=1.1,
                  label="held while the step runs: measured, XLA's buffer report (temporaries + outputs)")
    if prof.memory_cap is not None:
        ax.hlines(prof.memory_cap / _MIB, 0, max(n, 1), color="C3", lw=1, ls=":", label="the memory cap")
        again = [i + 0.5 for i, e in enumerate(prof.timeline) if e.recomputed]
        if again:
            ax.plot(again, [0.0] * len(again), "|", color="C3", ms=9, clip_on=False,
                    label=f"nodes whose operands were recomputed ({prof.recomputations} nodes run again)")
    _phase_labels(ax, prof.backward_start, n)
    name = f"{label}: " if label else ""
    how = " (XLA's buffer report)" if prof.xla is not None else ""
    ax.set_title(f"{name}peak {prof.peak_bytes / _MIB:.2f} MiB, measured{how}", fontsize=9, loc="left")
    ax.set_ylabel("live MiB")
    ax.set_xlim(0, max(n, 1))
    ax.set_ylim(bottom=0)


def _phase_labels(ax, b: int | None, n: int) -> None:
    if b is None:
        return
    ax.axvspan(b, max(n, 1), color="C1", alpha=0.08)
    ax.axvline(b, color="C1", lw=1, ls="--")
    box = {"facecolor": "white", "alpha": 0.8, "lw": 0, "pad": 1}
    at = ax.get_xaxis_transform()
    if b > 0:
        ax.text(0, 0.97, " forward", transform=at, va="top", color="C0", fontsize=8, bbox=box, gid="phase")
    ax.text(b, 0.97, " backward", transform=at, va="top", color="C1", fontsize=8, bbox=box, gid="phase")


def _separate_labels(ax, renderer) -> None:
    """A forward pass too short for its label ("forward ckward"): the backward label drops a line."""
    labels = [t for t in ax.texts if t.get_gid() == "phase"]
    if len(labels) != 2:
        return
    forward, backward = (t.get_window_extent(renderer) for t in labels)
    if forward.overlaps(backward):
        step = (backward.height + 2) / ax.get_window_extent(renderer).height
        labels[1].set_y(labels[1].get_position()[1] - step)


# ---------------------------------------------------------------- the memory planner's report


def plan_report(fn, *args, memory_budget, strategy=None, argnums=None, backend: str = "numpy"):
    """The plan `rm.grad(fn, memory_budget=...)` makes for `fn(*args)` (differentiated as
    `saved_residuals` does): the strategy, the budget, the predicted peak, the values kept (with
    their provenance) and those recomputed, the extra FLOPs, the solver's status and time.
    `print(report)` prints it as `print_saved_residuals` does. `backend` is where the step will
    run: under `rm.jit(backend="xla")` a step is counted by XLA's buffer report of its
    executable (`remat.planner.target`), and so planned.

    >>> import remat as rm
    >>> layer = lambda h: h + rm.tanh(h)
    >>> loss = lambda x: rm.sum(layer(layer(layer(layer(layer(layer(x)))))))
    >>> report = rm.memory.plan_report(loss, rm.ones((1024,)), memory_budget=0.8)
    >>> report.predicted_peak <= report.budget_bytes, report.strategy in ("chain", "milp"), len(report.recomputed)
    (True, True, 10)
    """
    if memory_budget is None:
        raise ArgumentValueError("memory.plan_report: memory_budget=None plans nothing; pass a budget, "
                                 "e.g. memory_budget='300MiB' or memory_budget=0.5 (the plans of the "
                                 "rm.memory_budget regions in the step are the report's `regions`)")
    check_backend(backend, "memory.plan_report")
    with collect_reports() as reports, running_on(Target("xla") if backend == "xla" else NUMPY):
        prog = _program(fn, args, argnums, where="memory.plan_report", memory_budget=memory_budget,
                        strategy=strategy)
    return dataclasses.replace(reports[-1], kept=tuple(_residuals_of(prog)), regions=tuple(reports[:-1]))


@dataclasses.dataclass(frozen=True)
class Pareto:
    """A step's predicted trade-off between memory and recomputation: for budgets from the
    smallest any plan reaches up to the step without a plan, the plan each gets (`reports`, one
    `PlanReport` a budget, smallest budget first). `print(pareto)` prints it as a table."""

    reports: tuple[PlanReport, ...]

    @property
    def budgets(self) -> list[int]:
        return [r.budget_bytes for r in self.reports]

    @property
    def peaks(self) -> list[int]:
        """The predicted peaks, bytes (inputs and constants included, as a budget counts)."""
        return [r.predicted_peak for r in self.reports]

    @property
    def extra_time(self) -> list[float]:
        """Each plan's recomputation as a fraction of the unplanned step's time (the cost model's)."""
        return [r.extra_time_ratio for r in self.reports]

    @property
    def time(self) -> list[float]:
        """Each planned step's predicted time over the unplanned one's, the memory it holds
        counted (`PlanReport.time_ratio`): what "auto" minimises, so it does not rise with the
        budget (to within the planner's ranking of close plans, `remat.planner.solve.NEAR`)."""
        return [r.time_ratio for r in self.reports]

    def __str__(self) -> str:
        if not self.reports:
            return "pareto: no budget the strategy meets"
        first = self.reports[0]
        activation = first.unplanned_peak - first.base_bytes
        head = ("budget", "of activations", "predicted peak", "extra time", "extra FLOPs", "step time", "strategy")
        rows = [(format_bytes(r.budget_bytes),
                 f"{(r.budget_bytes - r.base_bytes) / activation:.2f}" if activation else "-",
                 format_bytes(r.predicted_peak), f"+{r.extra_time_ratio:.3f}", f"+{r.extra_flops_ratio:.3f}",
                 f"{r.time_ratio:.3f}x", r.strategy)
                for r in self.reports]
        widths = [max(len(row[i]) for row in [head, *rows]) for i in range(len(head))]
        lines = [f"predicted memory/recomputation trade-off, counted by {first.counted_by}; inputs and constants "
                 f"{format_bytes(first.base_bytes)}, the step without a plan {format_bytes(first.unplanned_peak)}"]
        lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in [head, *rows]]
        return "\n".join(lines)

    __repr__ = __str__


def pareto(fn, *args, points: int = 20, strategy=None, argnums=None, backend: str = "numpy") -> Pareto:
    """The plans `rm.grad(fn, memory_budget=b)` makes for `points` budgets `b`, evenly spaced
    from the smallest budget any plan of the step reaches (`rm.BudgetTooSmall.smallest_budget`)
    to the step without a plan: the whole predicted curve of peak and recomputation, planned
    and counted but not run (each point is `plan_report`'s, and kept in the plan cache, so a
    `rm.grad` with one of these budgets finds its plan made). With a forced `strategy`, the
    budgets it cannot meet are left out.

    >>> import remat as rm
    >>> layer = lambda h: h + rm.tanh(h)
    >>> loss = lambda x: rm.sum(layer(layer(layer(layer(layer(layer(x)))))))
    >>> curve = rm.memory.pareto(loss, rm.ones((1024,)), points=4, strategy="chain")
    >>> all(p <= b for p, b in zip(curve.peaks, curve.budgets)), curve.extra_time[-1]
    (True, 0.0)
    """
    if isinstance(points, bool) or not isinstance(points, int) or points < 2:
        raise ArgumentValueError(f"memory.pareto: points={points!r}; pass an int of at least 2 (the curve's ends)")
    options = dict(argnums=argnums, backend=backend)
    top = plan_report(fn, *args, memory_budget=1.0, strategy=strategy, **options)
    try:  # below every plan: the error names the smallest budget that works ("sqrt" finds it at least cost)
        plan_report(fn, *args, memory_budget=top.base_bytes + 1, strategy="sqrt", **options)
        least = top.base_bytes + 1
    except BudgetTooSmall as e:
        least = e.smallest_budget
    spaced = np.linspace(least, top.unplanned_peak, points).round().astype(np.int64)
    reports = []
    for b in dict.fromkeys(int(b) for b in spaced[:-1]):
        try:
            reports.append(plan_report(fn, *args, memory_budget=b, strategy=strategy, **options))
        except ArgumentValueError:  # a forced strategy that misses this budget: no point
            if strategy is None:
                raise
    return Pareto((*reports, top))


# ---------------------------------------------------------------- a cap for a region


@contextlib.contextmanager
def cap(memory_cap) -> Iterator[None]:
    """Every program the NumPy evaluator runs inside the block holds at most `memory_cap` bytes
    of its own buffers (`"200MiB"`, an int), evicting and recomputing as
    `rm.jit(f, memory_cap=...)` does: an eager `rm.grad`, an eager checkpoint, a jitted NumPy
    function (under the smaller of this cap and its own). Single eager ops hand their results to
    the caller and hold nothing. Nested blocks: the smallest cap holds. An XLA program called
    inside raises: XLA allocates its buffers itself.

    >>> import remat as rm
    >>> f = rm.grad(lambda x: rm.sum(rm.tanh(rm.tanh(x) * 2.0)))
    >>> with rm.memory.cap("64KiB"):
    ...     g = f(rm.ones((4096,)))
    >>> g.shape
    (4096,)
    """
    if memory_cap is None:
        raise ArgumentTypeError("memory.cap: memory_cap=None caps nothing; pass an int of bytes or a string such as "
                                "'200MiB'")
    new = memory_cap_of(memory_cap, "memory.cap")
    outer = evaluator.SCOPED_CAP.get()
    token = evaluator.SCOPED_CAP.set(new if outer is None or new.bytes < outer.bytes else outer)
    try:
        yield
    finally:
        evaluator.SCOPED_CAP.reset(token)


def available(cap=None) -> int:
    """Bytes this process may still take before it reaches `cap`: the cap minus its resident set
    size now (the interpreter, the libraries and every array it already holds), at least 0.
    `cap` is bytes or a string such as "512MiB"; None is the tightest limit the OS sets on this
    process (RLIMIT_DATA, RLIMIT_AS, the cgroup's memory limit) or, without one, the memory the
    machine has available. Linux only (it reads /proc). A step's `memory_budget=` counts its
    inputs too, so a step over `args` may be planned with
    `memory_budget=rm.memory.available(cap) + <bytes of args>` (see `remat.fit`).

    >>> import remat as rm
    >>> 0 < rm.memory.available("64GiB") <= 64 * 2**30
    True
    """
    if cap is None:
        limit = _os_limit()
    else:
        parsed = budgets.parse_budget(cap, "memory.available")
        if parsed.bytes is None:  # a fraction means nothing without a step; name what to pass
            raise ArgumentValueError(f"memory.available: cap={cap!r} is a fraction; pass bytes, e.g. '512MiB'")
        limit = parsed.bytes
    return max(0, limit - _resident())


def _resident() -> int:
    import os

    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _os_limit() -> int:
    import resource

    limits = [soft for soft, _ in (resource.getrlimit(resource.RLIMIT_DATA), resource.getrlimit(resource.RLIMIT_AS))
              if soft != resource.RLIM_INFINITY]
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**60:  # "max" or a huge number: no limit
            limits.append(int(text))
    with open("/proc/meminfo") as f:  # the machine's free memory bounds the rest
        avail = next(int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:"))
    return min([*limits, avail + _resident()])


__all__ = ["Residual", "Event", "XlaFigure", "Profile", "saved_residuals", "print_saved_residuals", "profile", "plot",
           "plan_report", "PlanReport", "PlanWarning", "pareto", "Pareto", "available"]
