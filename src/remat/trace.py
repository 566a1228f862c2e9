"""Trace contexts, and binding a primitive: run now, or recorded in the trace open.

A Tensor (tensor.py) is either concrete (it wraps a NumPy array) or traced (it names a Var of a
Trace). Ops on concrete tensors run at once; inside a trace they are recorded as Nodes. Traces nest: a child
trace (a checkpoint body, a function being differentiated) that meets a tensor of an enclosing
trace adds an input for it once and remembers the outer tensor — that is how captures are found.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, NamedTuple

import numpy as np

from remat import dtypes, tree, values
from remat.core import OPS, Op, pruned
from remat.errors import ArgumentTypeError, RematError, ShapeError, TracerError, at_source, user_source
from remat.graph import Graph, Node, Region, Var, needed
from remat.tensor import (
    OUTER_READS,
    Tensor,
    check_argument_leaf,
    frozen_copy,
    is_device_array,
    is_tensor_like,
    is_weak,
    snapshot,
)


class Trace:
    """Records the nodes of one function being traced."""

    def __init__(self, parent: Trace | None, name: str):
        self.parent = parent
        self.name = name
        self.depth = 0 if parent is None else parent.depth + 1
        self.inputs: list[Var] = []
        self.nodes: list[Node] = []
        self.constants: dict[Var, np.ndarray] = {}
        self._constant_of: dict[int, tuple[np.ndarray, Var]] = {}
        self.captured: list[Var] = []  # Vars of the parent trace, in capture order
        self.capture_vars: list[Var] = []  # the inputs standing for them here
        self._capture_of: dict[Var, Var] = {}
        self.regions: list[Region] = []  # over `nodes` (see `remat.regions`)
        self.plans_regions = False  # a gradient plans this trace's regions
        self.active = True

    def new_input(self, shape, dtype) -> Tensor:
        v = Var(shape, dtype)
        self.inputs.append(v)
        return Tensor._traced(self, v)

    def lift(self, t: Tensor) -> Var:
        """The Var standing for `t` in this trace: its own, a constant, or a capture."""
        if t._trace is self:
            return t._var
        if t._trace is None:
            return self._constant(t._value)
        if not t._trace.active or not self._is_ancestor(t._trace):
            raise TracerError(
                f"a tensor traced inside `{t._trace.name}` was used after that trace ended "
                f"(an escaped tracer); return it from the traced "
                "function instead of storing it outside"
            )
        outer = self.parent.lift(t)
        inner = self._capture_of.get(outer)
        if inner is None:
            inner = Var(outer.shape, outer.dtype)
            self._capture_of[outer] = inner
            self.captured.append(outer)
            self.capture_vars.append(inner)
        return inner

    def _is_ancestor(self, other: Trace) -> bool:
        t = self.parent
        while t is not None:
            if t is other:
                return True
            t = t.parent
        return False

    def _constant(self, value: np.ndarray) -> Var:
        hit = self._constant_of.get(id(value))
        if hit is not None:
            return hit[1]
        v = Var(value.shape, value.dtype)
        self.constants[v] = snapshot(value)
        self._constant_of[id(value)] = (value, v)  # keep `value` alive so its id stays unique
        return v

    def add_node(self, op: Op, args: list[Tensor], params: dict) -> list[Tensor]:
        in_vars = [self.lift(a) for a in args]
        source = user_source()
        avals = abstract_eval(op, [(v.shape, v.dtype) for v in in_vars], params, source)
        out_vars = [Var(a.shape, a.dtype) for a in avals]
        self.nodes.append(Node(op.name, in_vars, out_vars, params, source))
        return [Tensor._traced(self, v) for v in out_vars]

    def to_graph(self, outputs: list[Tensor]) -> Graph:
        """The recorded function, without nodes (and constants) that no output depends on:
        a VJP rule computes every operand's cotangent and the unwanted ones die here."""

        out_vars = [self.lift(t) for t in outputs]
        graph = needed(self.inputs + self.capture_vars, out_vars, self.nodes, self.constants, pruned)
        graph.regions = tuple(filter(None, (self._kept(r, graph) for r in self.regions)))
        return graph

    def _kept(self, region: Region, graph: Graph) -> Region | None:
        """`region`'s nodes, of those `graph` kept (in order, so still a run; a pruned loop is
        a new Node with some of the outputs), as a Region of `graph`; None if none is left."""
        made = {v for n in self.nodes[region.start : region.stop] for v in n.outputs}
        kept = [i for i, n in enumerate(graph.nodes) if not made.isdisjoint(n.outputs)]
        return dataclasses.replace(region, start=kept[0], stop=kept[-1] + 1) if kept else None


# The open traces, innermost last, of this thread or asyncio task. An immutable tuple in a
# ContextVar: a new thread starts with none, and a task copies the stack it was made with, so a
# push in one never shows in another (a shared list would be, as a task's copy is shallow).
_STACK: ContextVar[tuple[Trace, ...]] = ContextVar("remat_trace_stack", default=())


def current_trace() -> Trace | None:
    """The innermost open trace of this thread or task; None when ops run eagerly."""
    stack = _STACK.get()
    if not stack:
        return None
    trace = stack[-1]
    if not trace.active:  # only a task or context copied inside a trace, run after it ended
        raise TracerError(
            f"this code runs in an asyncio task or context created inside `{trace.name}` and "
            f"is tracing after `{trace.name}` ended; create the task outside the traced function"
        )
    return trace


class new_trace:
    """`with new_trace(name) as t:` — a child of the current trace, closed on exit (even on error)."""

    def __init__(self, name: str):
        self.trace = Trace(current_trace(), name)
        self._token = None

    def __enter__(self) -> Trace:
        self._token = _STACK.set(_STACK.get() + (self.trace,))
        return self.trace

    def __exit__(self, *exc) -> None:
        stack = _STACK.get()
        if not stack or stack[-1] is not self.trace:
            # Leave the stack as it is: the trace still open can close normally.
            state = f"while `{stack[-1].name}`, opened inside it, is still open" if stack else "but is not open"
            raise TracerError(
                f"trace `{self.trace.name}` closed {state}; close traces in the reverse order "
                "of opening them (with `with new_trace(...)`)"
            )
        _STACK.reset(self._token)
        self.trace.active = False


class outer_reads:
    """`with outer_reads() as reads:` collects in `reads.seen` each tensor made outside the scope
    (earlier in the current trace, or in an enclosing one) that is read inside it, by a primitive
    or laid out for one: the scope's operands and captures. A vmapped cond masks these per entry.
    Scopes nest: what an inner one sees, the outer one sees too."""

    def __init__(self):
        self.trace = current_trace()
        self.seen: dict[int, Tensor] = {}
        self._fresh: set[Var] = set()
        self._checked = 0 if self.trace is None else len(self.trace.nodes)
        self._outer: outer_reads | None = None

    def __enter__(self) -> outer_reads:
        self._outer = OUTER_READS.get()
        self._token = OUTER_READS.set(self)
        return self

    def __exit__(self, *exc) -> None:
        OUTER_READS.reset(self._token)

    def note(self, t: Tensor) -> None:
        if self._outer is not None:
            self._outer.note(t)
        if id(t) not in self.seen and self._is_outer(t):
            self.seen[id(t)] = t

    def _is_outer(self, t: Tensor) -> bool:
        if t._trace is None or self.trace is None:  # a constant: nothing to differentiate
            return False
        if t._trace is not self.trace:  # made in an enclosing trace, or in a child opened inside
            return self.trace._is_ancestor(t._trace)
        for node in self.trace.nodes[self._checked :]:
            self._fresh.update(node.outputs)
        self._checked = len(self.trace.nodes)
        return t._var not in self._fresh


def abstract_eval(op: Op, avals, params: dict, source: str | None):
    """Run `op`'s shape rule, turning its complaint into an error that names the op and the line."""
    try:
        return op.abstract_eval(avals, params)
    except (TypeError, ValueError) as e:
        shapes = ", ".join(f"{tuple(s)} {np.dtype(d)}" for s, d in avals)
        msg = f"{op.name}: {getattr(e, 'message', e)} [operands: {shapes}]"
        if isinstance(e, RematError):
            raise type(e)(msg, source) from None
        raise type(e)(msg + at_source(source)) from None


def bind(op: Op, *args, **params):
    """Apply a primitive to tensors: recorded in the current trace, or run now if there is none."""
    tensors = [asarray(a) for a in args]
    reads = OUTER_READS.get()
    if reads is not None:
        for t in tensors:
            reads.note(t)
    weak = bool(tensors) and all(t._weak for t in tensors)  # computed from weak tensors alone: weak too, as in JAX
    if any(t._vaxes for t in tensors):
        result = _vectorizer(op, tensors, params)
        if not weak:
            return result
        outs = list(result) if op.multiple_results else [result]
    else:
        trace = current_trace()
        outs = trace.add_node(op, tensors, params) if trace is not None else _eager(op, tensors, params)
    if weak:
        outs = [o._weakly_typed() if o.dtype == tensors[0].dtype else o for o in outs]
    return tuple(outs) if op.multiple_results else outs[0]


def linear_jvp(op_name: str) -> Callable:
    """The JVP of an op linear in its one operand (reshape, sum, slice...): the op applied to
    the tangent, d f(x) = f(dx)."""

    def jvp(ts, x, out, **params):
        return bind(OPS[op_name], ts[0], **params)

    return jvp


# What runs an op bound outside any trace: the NumPy evaluator's `apply`, which the evaluator
# installs when imported (`set_evaluator`; `import remat` imports it); the IR core imports no backend.
_evaluator: Callable


def set_evaluator(apply: Callable) -> None:
    """`apply(op_name, arrays, params, avals) -> arrays` runs ops bound outside a trace."""
    global _evaluator
    _evaluator = apply


# What binds an op some of whose operands are vectorized: vmap's `bind_vectorized`, which
# remat/vectorize.py installs when imported (`set_vectorizer`); the IR core imports no transform.
_vectorizer: Callable


def set_vectorizer(bind_vectorized: Callable) -> None:
    """`bind_vectorized(op, tensors, params) -> output(s)` binds ops on vectorized operands."""
    global _vectorizer
    _vectorizer = bind_vectorized


def _eager(op: Op, tensors: list[Tensor], params: dict) -> list[Tensor]:
    for t in tensors:
        if t._trace is not None:
            raise TracerError(
                f"{op.name}: a tensor traced inside `{t._trace.name}` was used after that trace "
                f"ended (an escaped tracer); return it from the traced "
                "function instead of storing it outside"
            )
    values = [np.asarray(t._value) for t in tensors]  # device arrays too
    avals = abstract_eval(op, [(v.shape, v.dtype) for v in values], params, user_source())
    outs = _evaluator(op.name, values, params, avals)
    return [Tensor._concrete(o) for o in outs]


def asarray(x, dtype=None) -> Tensor:
    """A Tensor from a Tensor, NumPy or JAX array, Python number or nested list. Python floats
    default to float32 and ints to int32; arrays keep their dtype, which must be one of
    bool, int32, int64, float16, bfloat16, float32, float64. Values are converted exactly (rounded only where the
    dtype has no closer float) or not at all: the rules are in remat/values.py.

    >>> asarray([1.0, 2.0]).dtype
    dtype('float32')
    >>> float(asarray(0.1, "float64")) == 0.1
    True
    >>> asarray(2**40)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    remat.errors.ValueOverflow: asarray: the Python int 1099511627776 does not fit int32; pass dtype="int64"...
    """
    if isinstance(x, Tensor):
        if dtype is None:
            return x
        target = dtypes.canonical(dtype, "asarray")
        if x.dtype == target:
            return x._weakly_typed(False)  # a dtype asked for is strong
        if x.is_concrete and not x._vaxes and not dtypes.can_hold(x.dtype, np.dtype(dtype)):
            values.convert(np.asarray(x._value), np.dtype(dtype), "asarray")  # only to check the values fit
        return bind(OPS["convert"], x, dtype=target)  # `astype`'s primitive
    if is_device_array(x):
        if dtypes.is_supported(x.dtype) and (dtype is None or x.dtype == dtypes.canonical(dtype, "asarray")):
            return Tensor._concrete(x)  # a JAX array stays on its device
        return Tensor._concrete(frozen_copy(values.array(np.asarray(x), dtype), None))
    if isinstance(x, (list, tuple)) and _holds_tensor(x):
        return _stacked(x, dtype)
    return Tensor._concrete(frozen_copy(values.array(x, dtype), x))


def argument(x) -> Tensor:
    """An argument of a traced function (`rm.jit`, `rm.grad`, ...) as a tensor: a Python number
    is weakly typed there, as in JAX, so `jit(f)(2.0, x_bf16)` computes in bfloat16."""
    return asarray(x)._weakly_typed() if dtypes.is_weak(x) else asarray(x)


def _holds_tensor(x: list | tuple) -> bool:
    return any(isinstance(v, Tensor) or isinstance(v, (list, tuple)) and _holds_tensor(v) for v in x)


def _stacked(x: list | tuple, dtype) -> Tensor:
    """A nested list holding tensors, as `jnp.asarray` makes it: every entry takes one dtype
    (`dtype`, else the promoted dtype of the tensors and arrays, Python numbers weak), then each
    level is stacked, so traced entries stay traced and their gradients flow."""
    if dtype is None:
        leaves = list(_nested_leaves(x))
        strong = [asarray(v).dtype for v in leaves if not is_weak(v)]
        dtype = dtypes.result_type(*strong) if strong else dtypes.result_type(*map(dtypes.scalar_dtype, leaves))
        for v in filter(is_weak, leaves):
            dtype = dtypes.weak_result_type(dtype, v)
    return _stacked_level(x, dtypes.canonical(dtype, "asarray"), type(x).__name__)


def _nested_leaves(x):
    for v in x:
        if isinstance(v, (list, tuple)):
            yield from _nested_leaves(v)
        else:
            yield v


def _stacked_level(x, dtype: np.dtype, kind: str) -> Tensor:
    if not isinstance(x, (list, tuple)):
        return asarray(x, dtype)
    rows = [_stacked_level(v, dtype, kind) for v in x]
    if not rows:
        return Tensor._concrete(frozen_copy(np.zeros((0,), dtype), None))
    for i, r in enumerate(rows):
        if r.shape != rows[0].shape:
            raise ShapeError(f"asarray: the nested {kind} of tensors is ragged: its entry {i} has shape {r.shape} "
                             f"and entry 0 has {rows[0].shape}; the entries of one list must have one shape")
    if rows[0].ndim >= values.MAX_RANK:
        raise ShapeError(f"asarray: the nested {kind} of tensors is more than {values.MAX_RANK} deep; a tensor has "
                         f"at most {values.MAX_RANK} dimensions (NumPy's limit)")
    # `stack(rows)` with the primitives it binds (the ops are above this module): the rows share
    # one shape and dtype already, so each gets a leading axis and they are joined along it.
    rows = [bind(OPS["reshape"], r, shape=(1, *r.shape)) for r in rows]
    return rows[0] if len(rows) == 1 else bind(OPS["concat"], *rows, axis=0)


def make_graph(fn):
    """`make_graph(fn)(*args)` traces `fn` on arguments like `args` and returns its Graph.

    >>> import remat as rm
    >>> print(rm.make_graph(lambda x: rm.sin(x) * 2.0)(rm.ones((3,))))
    graph(a:f32[3]) {
      b:f32[3] = sin a
      c:f32[3] = multiply b 2.0
      return c
    }
    """

    if not callable(fn):
        raise ArgumentTypeError(f"make_graph: expected a callable, got {type(fn).__name__} {fn!r:.60}")

    def traced(*args) -> Graph:
        return trace_function(fn, args).graph

    return traced


class Traced(NamedTuple):
    """A traced function: its graph, the structure of its outputs, the parent-trace Vars it
    captured (standing for its last inputs), each output's vectorized axes and whether it is
    weakly typed."""

    graph: Graph
    out_tree: tree.TreeDef
    captured: list[Var]
    out_vaxes: list[tuple]
    out_weak: list[bool]

    def wrap_outputs(self, raw_outputs) -> Any:
        """Graph outputs (raw tensors) as the traced function's result."""
        leaves = [t._relabel(v)._weakly_typed(w) for t, v, w in zip(raw_outputs, self.out_vaxes, self.out_weak)]
        return tree.unflatten(self.out_tree, leaves)


def trace_function(fn, args, name: str | None = None, plans_regions: bool = False) -> Traced:
    """Trace `fn(*args)` with every array leaf of `args` an input; `plans_regions`: the caller
    (a gradient) plans the regions of `rm.memory_budget` traced here."""
    leaves, treedef = tree.flatten(args)
    for leaf in leaves:
        check_argument_leaf(leaf)
    with new_trace(name or getattr(fn, "__name__", "fn")) as t:
        t.plans_regions = plans_regions
        tensors = [argument(x) for x in leaves]
        inputs = [t.new_input(a._full_shape, a.dtype)._alias(a._vaxes, a._weak) for a in tensors]
        out = fn(*tree.unflatten(treedef, inputs))
        out_leaves, out_tree = tree.flatten(out)
        outs = [_output_tensor(x) for x in out_leaves]
        graph = t.to_graph(outs)
    return Traced(graph, out_tree, t.captured, [o._vaxes for o in outs], [o._weak for o in outs])


def _output_tensor(x) -> Tensor:
    if not is_tensor_like(x):
        trace = current_trace()
        who = f"`{trace.name}`" if trace is not None else "a traced function"
        raise ArgumentTypeError(
            f"{who} returned a {type(x).__name__}, not a tensor or a pytree of tensors; return "
            "tensors (pass other values out through a closure or make them static)"
        )
    return asarray(x)

