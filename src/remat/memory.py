"""What checkpointing buys: the values a gradient keeps, and the live memory of a run.

- `saved_residuals(fn, *args)`: what the gradient of `fn` keeps between the forward and the
  backward pass (shape, dtype, bytes, where it came from); `print_saved_residuals` prints it.
- `profile(fn, *args)`: one gradient step of `fn` run on a backend, with the peak live bytes,
  a timeline of live bytes per node (NumPy) or per stage (XLA, staged), and `.plot(path)`.

Both differentiate `fn` with respect to every float array in `args` (or the positional
arguments `argnums`), with a cotangent of ones for each output.

>>> import remat as rm
>>> def loss(x, w):
...     return rm.sum(rm.checkpoint(lambda h: rm.tanh(h @ w), x, policy=rm.policies.dots_saveable))
>>> [r.provenance for r in rm.memory.saved_residuals(loss, rm.ones((4, 8)), rm.ones((8, 8)))]
['argument x', 'argument w', 'output of matmul at <doctest remat.memory[1]>:2']
"""

from __future__ import annotations

import dataclasses
import inspect
import sys
from pathlib import Path

import numpy as np

from remat import argcheck, dtypes, tree
from remat.autodiff import vjp
from remat.graph import Graph, Node, Var, type_str
from remat.jit import check_backend
from remat.trace import asarray, current_trace, trace_function

# ---------------------------------------------------------------- the gradient program


@dataclasses.dataclass
class _Program:
    """A traced gradient step: `graph` (forward nodes first, then backward ones), how many of
    its nodes are forward, and a name for each graph input."""

    graph: Graph
    n_forward: int
    input_names: list[str]
    arrays: list[np.ndarray]


def _program(fn, args, argnums=None, grad: bool = True, where: str = "memory.saved_residuals") -> _Program:
    argcheck.check_callable(fn, where)
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

    def step(*xs):
        if not grad:
            return fn(*tree.unflatten(treedef, list(xs)))

        def partial(*ds):
            merged = list(xs)
            for i, d in zip(diff, ds):
                merged[i] = d
            return fn(*tree.unflatten(treedef, merged))

        out, back = vjp(partial, *[xs[i] for i in diff])
        forward.extend(current_trace().nodes)
        return out, back(tree.map(lambda o: asarray(np.ones(o.shape, o.dtype)), out))

    graph = trace_function(step, leaves, name=f"step({getattr(fn, '__name__', 'fn')})").graph
    ids = {id(n) for n in forward}
    n_forward = sum(1 for n in graph.nodes if id(n) in ids) if grad else len(graph.nodes)
    return _Program(graph, n_forward, names, [np.asarray(asarray(x)) for x in leaves])


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
        names += [base + path for path in _paths(a)]
    return names


def _paths(x) -> list[str]:
    node = tree._children(x)
    if node is None:
        return [""]
    kind, data, kids = node
    if kind == "dict":
        keys = [f"[{k!r}]" for k in data]
    elif kind in ("namedtuple", "dataclass"):
        fields = data._fields if kind == "namedtuple" else data[1]
        keys = [f".{f}" for f in fields]
    else:
        keys = [f"[{i}]" for i in range(len(kids))]
    return [key + rest for key, kid in zip(keys, kids) for rest in _paths(kid)]


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


def saved_residuals(fn, *args, argnums=None) -> list[Residual]:
    """What the gradient of `fn(*args)` keeps between the forward and the backward pass, in the
    order the forward pass makes it: arguments, then computed values."""
    prog = _program(fn, args, argnums)
    graph = prog.graph
    forward, backward = graph.nodes[: prog.n_forward], graph.nodes[prog.n_forward :]
    made_by_backward = {v for n in backward for v in n.outputs}
    read = {v for n in backward for v in n.inputs if v not in made_by_backward}
    order = list(graph.inputs) + list(graph.constants) + [v for n in forward for v in n.outputs]
    describe = _Describer(graph, prog.input_names)
    out = []
    for v in order:
        if v not in read or v in graph.constants and graph.constants[v].ndim == 0:
            continue
        kind, text, source = describe(v)
        out.append(Residual(v.shape, v.dtype, v.nbytes, kind, text, source))
    return out


class _Describer:
    """Where a Var of the step came from, looking through blocks (checkpoint, custom_vjp) to the
    body value a block output stands for."""

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
        if node.op in ("checkpoint", "custom_vjp"):
            body = node.params["body"]
            return self(body.outputs[k], body, outer + [(node, g)])
        if node.op == "checkpoint_name":
            return "named", f"named {node.params['name']!r}", node.source
        where = f" at {node.source}" if node.source else ""
        if node.op == "scan" and k >= node.params["num_carry"]:  # stacked: one body value per step
            return self._per_step(node.params["body"].outputs[k], node, g, outer, where)
        return "output", f"output of {node.op}{where}", node.source

    def _per_step(self, v: Var, node: Node, g: Graph, outer: list, where: str):
        body = node.params["body"]
        steps = f"one per step of the scan{where}"
        if v in body.inputs[: node.params["num_carry"]]:
            return "output", f"the loop's carry, {steps}", node.source
        kind, text, source = self(v, body, outer + [(node, g)])
        return kind, f"{text}, {steps}", source

    def _reader(self, v: Var, g: Graph) -> str | None:
        return next((n.source for n in g.nodes if v in n.inputs and n.source), None)


def print_saved_residuals(fn, *args, argnums=None, file=None) -> None:
    """Print `saved_residuals(fn, *args)` as a table, with the total."""
    rows = saved_residuals(fn, *args, argnums=argnums)
    print(residual_table(rows), file=file or sys.stdout)


def residual_table(rows: list[Residual]) -> str:
    cells = [(type_str(r.shape, r.dtype), _size(r.nbytes), r.provenance) for r in rows]
    head = ("value", "size", "saved because")
    widths = [max(len(c[i]) for c in [head, *cells]) for i in range(2)]
    lines = [f"{head[0]:<{widths[0]}}  {head[1]:>{widths[1]}}  {head[2]}"]
    lines += [f"{a:<{widths[0]}}  {b:>{widths[1]}}  {c}" for a, b, c in cells]
    lines.append(f"{len(rows)} residuals, {_size(sum(r.nbytes for r in rows))} in all")
    return "\n".join(lines)


def _size(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


# ---------------------------------------------------------------- profile


@dataclasses.dataclass(frozen=True)
class Event:
    """One step of a run: a node (NumPy) or a stage (XLA); live bytes after it, and the most
    bytes live while it ran."""

    label: str
    live: int
    high: int
    phase: str  # "forward" or "backward"


@dataclasses.dataclass
class Profile:
    """The memory of one run: `peak_bytes` and `timeline` (a list of Events)."""

    peak_bytes: int
    timeline: list[Event]
    backend: str
    unit: str  # "node" or "stage"

    @property
    def backward_start(self) -> int | None:
        """Index of the first backward event (None: the run has no backward pass)."""
        return next((i for i, e in enumerate(self.timeline) if e.phase == "backward"), None)

    def __str__(self) -> str:
        b = self.backward_start
        split = f", backward from {self.unit} {b}" if b is not None else ""
        return (f"Profile({self.backend}: peak {_size(self.peak_bytes)} over "
                f"{len(self.timeline)} {self.unit}s{split})")

    __repr__ = __str__

    def plot(self, path, title: str | None = None) -> Path:
        """Write a PNG of live memory over the run, forward and backward marked."""
        return plot({title or "": self}, path)


class _Recorder:
    """Wraps the evaluator's Memory: also records the high-water mark between two marks."""

    def __init__(self, memory):
        self.memory = memory
        self.highs: list[int] = []
        self._high = 0
        memory_hold = memory.hold

        def hold(a):
            memory_hold(a)
            self._high = max(self._high, memory.live)

        def mark():
            memory.timeline.append(memory.live)
            self.highs.append(self._high)
            self._high = memory.live

        memory.hold, memory.mark = hold, mark


def profile(fn, *args, backend: str = "numpy", argnums=None, grad: bool = True, staged: bool | None = None):
    """Run one gradient step of `fn(*args)` (with `grad=False`: `fn` itself) on `backend` and
    report the live bytes it holds: the arrays it allocates, not its arguments.

    >>> import remat as rm
    >>> p = rm.memory.profile(lambda x: rm.sum(rm.tanh(x) * 2.0), rm.ones((256,)))
    >>> p.peak_bytes >= 256 * 4, p.timeline[0].phase, p.timeline[p.backward_start].phase
    (True, 'forward', 'backward')
    """
    check_backend(backend, "memory.profile")
    prog = _program(fn, args, argnums, grad, "memory.profile")
    return _profile_numpy(prog) if backend == "numpy" else _profile_xla(prog, staged)


def _profile_numpy(prog: _Program) -> Profile:
    from remat.backends import numpy as evaluator

    memory = evaluator.Memory()
    recorder = _Recorder(memory)
    for a in prog.arrays:
        memory.external(a)
    evaluator.run(prog.graph, prog.arrays, memory)
    labels = _evaluation_order(prog.graph, prog.n_forward)
    if len(labels) != len(memory.timeline):  # the evaluator marks differently: unlabelled steps
        labels = [("", "forward")] * len(memory.timeline)
    events = [Event(lab, live, high, phase)
              for (lab, phase), live, high in zip(labels, memory.timeline, recorder.highs)]
    return Profile(memory.peak, events, "numpy", "node")


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


def _profile_xla(prog: _Program, staged: bool | None) -> Profile:
    """Per stage, what the backend's runner recorded: the step's own arrays alive after the
    stage, and while it ran also its outputs and XLA's temporary buffers for it."""
    from remat.backends import xla

    runner = xla.lower(prog.graph, staged).compile()
    runner(*prog.arrays)
    backward = {id(n) for n in prog.graph.nodes[prog.n_forward :]}
    stages = runner.program.stages
    memory = runner.last_memory
    events = [
        Event(f"stage {i} ({len(s.graph.nodes)} nodes)", live, high,
              "backward" if id(s.graph.nodes[0]) in backward else "forward")
        for i, (s, live, high) in enumerate(zip(stages, memory.live, memory.high))
    ]
    return Profile(memory.peak, events, f"xla ({'staged' if runner.program.staged else 'fused'})", "stage")


# ---------------------------------------------------------------- plots


def plot(profiles: dict[str, Profile], path, title: str | None = None) -> Path:
    """Write a PNG with one panel per profile: live MiB over the run, the backward pass shaded.

    `profiles` maps a label (a plan's name) to its Profile; panels share the memory axis."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    path = Path(path)
    n = len(profiles)
    fig, axes = plt.subplots(n, 1, figsize=(8, 1.9 * n + 0.8), sharey=True, squeeze=False)
    for ax, (label, prof) in zip(axes[:, 0], profiles.items()):
        _panel(ax, label, prof)
    axes[-1, 0].set_xlabel(f"{next(iter(profiles.values())).unit} of the step (in run order)")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _panel(ax, label: str, prof: Profile) -> None:
    mib = 2.0**20
    xs = np.arange(len(prof.timeline))
    ax.fill_between(xs, [e.live / mib for e in prof.timeline], step="post", alpha=0.35, color="C0")
    ax.plot(xs, [e.high / mib for e in prof.timeline], drawstyle="steps-post", lw=0.9, color="C0")
    b = prof.backward_start
    if b is not None:
        ax.axvspan(b, len(xs), color="C1", alpha=0.08)
        ax.axvline(b, color="C1", lw=1, ls="--")
        box = {"facecolor": "white", "alpha": 0.8, "lw": 0, "pad": 1}
        ax.text(b, 0.95, " backward", transform=ax.get_xaxis_transform(), va="top", color="C1", fontsize=8, bbox=box)
        ax.text(0, 0.95, " forward", transform=ax.get_xaxis_transform(), va="top", color="C0", fontsize=8, bbox=box)
    name = f"{label}: " if label else ""
    ax.set_title(f"{name}peak {prof.peak_bytes / mib:.2f} MiB", fontsize=9, loc="left")
    ax.set_ylabel("live MiB")
    ax.set_xlim(0, max(len(xs), 1))
    ax.set_ylim(bottom=0)


__all__ = ["Residual", "Event", "Profile", "saved_residuals", "print_saved_residuals", "profile", "plot"]
