"""The NumPy evaluator's memory count, predicted from shapes alone: live bytes after every node of
a graph as `backends/numpy.py` would count them, without running anything.

`rm.memory.profile` on XLA draws this under the executable's measured figure, where XLA reports
only a total. The rules are the evaluator's own (see its `Memory`, `run` and `_donation`):

- the caller's arrays (graph inputs) and constants cost nothing, and neither do views of them;
- a node's outputs are new buffers, except views (reshape of a contiguous array, transpose,
  broadcast, slice, flip), which share their base's bytes, and identities (stop_gradient,
  checkpoint_name, barrier), which are the very arrays they are given;
- an elementwise op writes into an input that dies at it when that buffer is nobody else's and
  has the output's type;
- a buffer dies after its last reader (`numpy.last_uses`); graph outputs live on;
- a checkpoint or custom_vjp block runs its body in place: a point per body node, then one for
  the block. A loop or branch is one point (its outputs): how often a body runs is a run-time fact.

>>> import remat as rm
>>> g = rm.make_graph(lambda x: rm.sum(rm.tanh(x) * 2.0))(rm.ones((256,)))
>>> [(p.label.split()[0], p.live) for p in predict(g)]  # multiply writes into tanh's dying buffer
[('tanh', 1024), ('multiply', 1024), ('sum', 4)]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from remat.backends.numpy import IDENTITIES, IMPLS, VIEWS, last_uses
from remat.core import OPS
from remat.graph import Graph, Node, Var


def inline(node: Node) -> bool:
    """Whether `node` is a block whose body runs once, where it stands (`Op.traits`)."""
    return "inline" in OPS[node.op].traits


@dataclass(frozen=True)
class Point:
    """Live bytes after one node (`live`) and the most while it ran (`high`); `node` is the index
    of the top-level node it belongs to (a block's body nodes belong to the block)."""

    label: str
    live: int
    high: int
    node: int


class _Buffer:
    __slots__ = ("nbytes", "refs")

    def __init__(self, nbytes: int):
        self.nbytes = nbytes
        self.refs = 0


@dataclass(frozen=True)
class _Value:
    """What a Var holds: its buffer (None: the caller's), whether it is that buffer's own array
    (not a view: only those can be written into) and its strides in elements (None: C order),
    which decide whether NumPy reshapes it in place or copies."""

    buffer: _Buffer | None
    base: bool = True
    strides: tuple[int, ...] | None = None


_EXTERNAL = _Value(None)


def predict(graph: Graph) -> list[Point]:
    """One Point per mark of the NumPy evaluator running `graph` (see the module docstring)."""
    model = _Model()
    model.run(graph, [_EXTERNAL] * len(graph.inputs), root=True)
    return model.points


class _Model:
    """The evaluator's `Memory` over buffers that have sizes but no data."""

    def __init__(self):
        self.live = 0
        self.high = 0
        self.top = 0
        self.points: list[Point] = []

    def hold(self, value: _Value) -> None:
        b = value.buffer
        if b is None:
            return
        b.refs += 1
        if b.refs == 1:
            self.live += b.nbytes
            self.high = max(self.high, self.live)

    def release(self, value: _Value) -> None:
        b = value.buffer
        if b is not None:
            b.refs -= 1
            if b.refs == 0:
                self.live -= b.nbytes

    def run(self, graph: Graph, args: list[_Value], root: bool = False) -> list[_Value]:
        env: dict[Var, _Value] = dict.fromkeys(graph.constants, _EXTERNAL)
        for v, a in zip(graph.inputs, args):
            env[v] = a
            self.hold(a)
        frees = last_uses(graph)
        for v in frees[0]:
            self.release(env.pop(v))
        for i, (node, dead) in enumerate(zip(graph.nodes, frees[1:])):
            if root:
                self.top = i
            dying = [(v, env[v]) for v in dead if v in env]  # not its own outputs nothing reads
            outs = self.apply(node, [env[v] for v in node.inputs], dying)
            for v, o in zip(node.outputs, outs):
                env[v] = o
                self.hold(o)
            for v in dead:
                self.release(env.pop(v))
            self.mark(node)
        return [env[v] for v in graph.outputs]

    def mark(self, node: Node) -> None:
        where = f" ({node.source})" if node.source else ""
        self.points.append(Point(node.op + where, self.live, self.high, self.top))
        self.high = self.live

    def apply(self, node: Node, ins: list[_Value], dying: list[tuple[Var, _Value]]) -> list[_Value]:
        if inline(node):
            return self.block(node.params["body"], ins)
        if node.op in IDENTITIES:
            return ins
        if node.op in VIEWS:
            return [_view(node, ins[0])]
        donated = _donation(node, dying)
        return [donated] if donated else [_Value(_Buffer(v.nbytes)) for v in node.outputs]

    def block(self, body: Graph, ins: list[_Value]) -> list[_Value]:
        outs = self.run(body, ins)
        for v in dict.fromkeys(body.outputs):  # the caller holds them from here on, as `run_block` does
            self.release(outs[body.outputs.index(v)])
        return outs


def _view(node: Node, x: _Value) -> _Value:
    (out,) = node.outputs
    (src,) = node.inputs
    strides = x.strides or _c_strides(src.shape)
    if node.op == "reshape":
        moved = _reshaped_strides(src.shape, strides, out.shape)
        # A copying reshape returns a view of its copy: never written into (not `base`).
        return _Value(_Buffer(out.nbytes), False) if moved is None else _Value(x.buffer, False, moved)
    p = node.params
    if node.op == "permute_dims":
        moved = tuple(strides[a] for a in p["axes"])
    elif node.op == "slice":
        moved = tuple(s * k for s, k in zip(strides, p["step"]))
    elif node.op == "flip":
        axes = {a % src.ndim for a in p["axes"]} if p.get("axes") is not None else set(range(src.ndim))
        moved = tuple(-s if i in axes else s for i, s in enumerate(strides))
    else:  # broadcast_to: new leading axes and stretched unit axes step by 0
        lead = out.ndim - src.ndim
        moved = (0,) * lead + tuple(0 if n == 1 and m != 1 else s
                                    for n, m, s in zip(src.shape, out.shape[lead:], strides))
    return _Value(x.buffer, False, moved)


def _c_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    out, step = [], 1
    for n in reversed(shape):
        out.append(step)
        step *= max(n, 1)
    return tuple(reversed(out))


def _reshaped_strides(shape, strides, new) -> tuple[int, ...] | None:
    """The strides NumPy gives `reshape(new)` of an array of `shape` and `strides` without
    copying, or None when it must copy (NumPy's `_attempt_nocopy_reshape`, C order)."""
    if 0 in shape:
        return _c_strides(new)
    old = [(n, s) for n, s in zip(shape, strides) if n != 1]
    out = [0] * len(new)
    oi, oj, ni, nj = 0, 1, 0, 1
    while ni < len(new) and oi < len(old):
        np_, op = new[ni], old[oi][0]
        while np_ != op:
            if np_ < op:
                np_ *= new[nj]
                nj += 1
            else:
                op *= old[oj][0]
                oj += 1
        if any(old[k][1] != old[k + 1][0] * old[k + 1][1] for k in range(oi, oj - 1)):
            return None
        out[nj - 1] = old[oj - 1][1]
        for k in range(nj - 1, ni, -1):
            out[k - 1] = out[k] * new[k]
        ni, nj, oi, oj = nj, nj + 1, oj, oj + 1
    last = out[ni - 1] if ni >= 1 else 1
    for k in range(ni, len(new)):
        out[k] = last
    return tuple(out)


def _donation(node: Node, dying: list[tuple[Var, _Value]]) -> _Value | None:
    """The buffer the evaluator's `_donation` would write an elementwise result into."""
    fn = IMPLS.get(node.op)
    if not (isinstance(fn, np.ufunc) or getattr(fn, "takes_out", False)) or len(node.outputs) != 1:
        return None
    (out,) = node.outputs
    for v, value in dying:
        b = value.buffer
        if v.shape == out.shape and v.dtype == out.dtype and b is not None and value.base and b.refs == 1:
            return value
    return None
