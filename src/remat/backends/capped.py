"""The NumPy evaluator under a memory cap: dynamic rematerialization, no plan and no checkpoints.

Under a cap (`rm.jit(f, memory_cap=...)`, `with rm.memory.cap(...)`) the evaluator never counts
more than the cap of buffers it owns. Before a node runs it makes room for the node's results;
where the room is not there it evicts buffers it can make again, and a later read of an evicted
value runs the value's node again, and the nodes that one needs in turn. Every value a node of a
running graph computed can be evicted but its results; arguments, constants and what a running
loop keeps between its steps cannot. (A result is what the program is for: made once, it stays.
Evicted, a weight's gradient would cost the whole backward pass again at the end.) Ops are pure
functions of their operands (a random op of its key), so a recomputed value is bit for bit the
first one, and a gradient is the uncapped run's.

Which buffer goes is chosen as Dynamic Tensor Rematerialization chooses (Kirisame et al., ICLR
2021), with two changes measured on the models of `benchmarks/memory_cap.py`: the lowest
cost ÷ (bytes² × time). The cost is what bringing the value back would take: its node run again,
after the absent values it reads and theirs. DTR's time is staleness, how long since the value
was last read, a guess at how long until it is read again; an evaluator running a known graph
knows that second figure, so it takes it: the nodes of the schedule until the next reader
(Belady's rule, weighed by cost). Bytes are squared (see `_time`). At a third of the unplanned
peak, the staleness score recomputed 2.6x what the planner's plan does on a 16-layer MLP; this
one recomputes 0.96x on the 64-layer MLP and 1.17x on the 8-block GPT-style model. Costs come from the caller
(`Cap.cost`: the planner's cost model), so a graph is evicted the same way every run.

A value whose last reader has run is let go as in the plain run, but stays recomputable: an
evicted value may need it again. Arguments stay until the run ends, for the same reason (they
cost nothing: they are the caller's, unless donated, and then nothing is written into them).
"""

from __future__ import annotations

import bisect
import heapq
import weakref
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from remat.backends.numpy import IDENTITIES, VIEWS, Memory, _donation, apply, last_uses
from remat.errors import CapTooSmall
from remat.graph import Graph, Node, Var

HEADROOM = 1 / 32  # see CappedMemory.make_room


@dataclass(frozen=True)
class Cap:
    """At most `bytes` of the run's own buffers; `cost(node)` is what running `node` again costs
    (any unit: only ratios matter)."""

    bytes: int
    cost: Callable[[Node], float]

    def memory(self) -> CappedMemory:
        return CappedMemory(self)


class _Layout:
    """What eviction needs to know of a graph, worked out once (a loop's body runs many times):
    each value's node, each value's readers, and the bytes each node allocates."""

    def __init__(self, graph: Graph):
        # kept in _LAYOUTS by the graph, weakly: nothing here refers back to the graph itself
        self.frees = last_uses(graph)
        self.costs: dict[Callable, dict[int, float]] = {}  # by cost function, each node's cost
        self.producer: dict[Var, int] = {}
        self.readers: dict[Var, list[int]] = {}
        self.room: list[int] = []
        # what node i reads that some node computed, once each (the rest is never absent)
        self.computed_inputs: list[tuple[Var, ...]] = []
        self.outputs = frozenset(graph.outputs)
        for i, node in enumerate(graph.nodes):
            for v in node.outputs:
                self.producer[v] = i
            for v in dict.fromkeys(node.inputs):
                self.readers.setdefault(v, []).append(i)
            self.computed_inputs.append(tuple(v for v in dict.fromkeys(node.inputs) if v in self.producer))
            # a block's body makes its own room, node by node; views and identities allocate nothing
            free = node.op in VIEWS or node.op in IDENTITIES or node.subgraphs()
            self.room.append(0 if free else sum(v.nbytes for v in dict.fromkeys(node.outputs)))


def _laid_out(a: np.ndarray, strides: tuple[int, ...] | None) -> np.ndarray:
    """`a` in the memory layout it had when first computed (`strides`), so that what reads it
    rounds as it did. A result written into a dying operand's buffer took that buffer's layout,
    which a recomputation (into a new buffer) does not; a transposed layout changes the order of
    a reduction's sums, and so its last bit (a random program of the fuzz: one ulp)."""
    def steps(s):  # an axis of one element has any stride: it steps nowhere
        return tuple(x for n, x in zip(a.shape, s) if n > 1)

    if strides is None or steps(a.strides) == steps(strides) or a.base is not None:
        return a
    order = sorted(range(a.ndim), key=lambda k: -abs(strides[k]))  # axes from the slowest to the fastest
    out = np.empty([a.shape[k] for k in order], a.dtype).transpose(np.argsort(order))
    if steps(out.strides) != steps(strides):  # not a contiguous layout: never a buffer NumPy made
        return a
    out[...] = a
    return out


def label(node: Node) -> str:
    """`tanh (model.py:12)`: a node as profiles name it."""
    return node.op + (f" ({node.source})" if node.source else "")


_LAYOUTS: weakref.WeakKeyDictionary[Graph, _Layout] = weakref.WeakKeyDictionary()


def _layout(graph: Graph) -> _Layout:
    layout = _LAYOUTS.get(graph)
    if layout is None:
        layout = _LAYOUTS[graph] = _Layout(graph)
    return layout


class CappedMemory(Memory):
    """The evaluator's count with a cap, the buffers that can be evicted, and what was evicted
    and recomputed: `evictions` (buffers), `evicted_bytes`, `recomputations` (nodes run again) and
    `recompute_cost` (their cost by `Cap.cost`)."""

    def __init__(self, cap: Cap):
        super().__init__()
        self.cap = cap.bytes
        self.cost = cap.cost
        # id(base) -> the values that hold it. Kept from the first time room is short (`tracking`):
        # a run the cap never constrains pays nothing for it.
        self.owners: dict[int, list[tuple[_Run, Var]]] = {}
        self.tracking = False
        self.runs: list[_Run] = []  # the runs under way, innermost last
        self.recomputing = 0  # depth: the marks a profile records are the schedule's
        self.evictions = 0
        self.evicted_bytes = 0
        self.recomputations = 0
        self.recompute_cost = 0.0
        # A profiler's list of what happened, as ("evicted" | "recomputed", the node's label); a
        # plain run keeps none (a long loop under a tight cap recomputes without end).
        self.record: list[tuple[str, str]] | None = None

    def run(self, graph: Graph, args, frees: list[list[Var]] | None = None) -> list[np.ndarray]:
        """`backends.numpy.run` under the cap."""
        layout = _layout(graph)
        run = _Run(self, layout, graph)
        self.runs.append(run)
        try:
            return run.evaluate(args, frees or layout.frees)
        finally:
            self.runs.pop()

    def hold(self, a: np.ndarray) -> None:
        # What a loop allocates for its results arrives here already made: room, then count it.
        if self.live + a.nbytes > self.cap:
            base = self._base(a)
            if id(base) not in self._refs and id(base) not in self._external:
                self.make_room(base.nbytes, "a buffer made outside a node (a loop's results, a donated argument)")
        super().hold(a)

    def make_room(self, nbytes: int, what: Node | str) -> None:
        """Evict until `nbytes` more fit under the cap, cheapest first (see the module docstring),
        and a little more (`HEADROOM` of the cap): the next nodes need room too, and each search
        scores the candidates. On the 64-layer MLP at a third of its peak, 101 searches took 23%
        of the step's time; with the headroom 47 took 11%, and the recomputation grew from 0.19
        to 0.22 of the step. `what` needs the bytes, for the error when they cannot be found."""
        if self.live + nbytes <= self.cap:
            return
        if not self.tracking:
            self.tracking = True
            for run in self.runs:
                for v, a in run.env.items():
                    if a is not None:
                        run.own(v, a)
        ahead = int(self.cap * HEADROOM)
        for key in self._cheapest():
            self._evict(key)
            if self.live + nbytes + ahead <= self.cap:
                return
        if self.live + nbytes <= self.cap:
            return
        need = self.live + nbytes
        if isinstance(what, Node):
            what = label(what)
        raise CapTooSmall(
            f"memory_cap={self.cap} bytes is too small for {what}: it needs {nbytes} bytes more while the run "
            f"holds {self.live} bytes it cannot evict (the operands being read, the results made so far, donated "
            f"arguments, what running loops keep); this point of the program needs memory_cap >= {need} bytes", need)

    def finish(self) -> None:
        super().finish()
        self.owners.clear()

    def _evictable(self) -> list[int]:
        out = []
        for key, slots in self.owners.items():
            entry = self._refs.get(key)
            # every holder is a value that can be made again, and none is being read
            if entry is not None and entry[2] == len(slots) and not any(r.locks.get(v) for r, v in slots):
                out.append(key)
        return out

    def _cheapest(self):
        """The evictable buffers, lowest score first. A score is cost ÷ (bytes² × distance), and a
        value's cost is at least its own node's: that bound orders the candidates, and a full
        score (the walks through the absent values around) is worked out only while the bound
        could still beat the best found; most candidates are never walked."""
        bounds, scored, memo = [], [], {}  # memo: each run's absent values, costed once
        for key in self._evictable():
            slots = self.owners[key]
            time = self._time(key, slots)
            bound = sum(run.cost(run.layout.producer[v]) for run, v in slots) / time
            heapq.heappush(bounds, (bound, key, time))
        while bounds or scored:
            while bounds and (not scored or bounds[0][0] < scored[0][0]):
                _, key, time = heapq.heappop(bounds)
                cost = sum(run.eviction_cost(v, memo.setdefault(run, {})) for run, v in self.owners[key])
                heapq.heappush(scored, (cost / time, key))
            yield heapq.heappop(scored)[1]

    def _time(self, key: int, slots) -> float:
        """Bytes² × the nodes until the buffer is read next. Squared: a large buffer frees its
        room in one eviction where small ones leave chains of absent values that recomputations
        walk again and again (the 8-block GPT-style model at a third of its peak recomputed 2.2x
        its step with bytes, 0.31x with bytes², against 0.25x for the planner's plan)."""
        return self._refs[key][1] ** 2 * min(run.distance(v) for run, v in slots)

    def _evict(self, key: int) -> None:
        self.evictions += 1
        self.evicted_bytes += self._refs[key][1]
        for run, v in self.owners.pop(key):
            if self.record is not None:
                self.record.append(("evicted", label(run.nodes[run.layout.producer[v]])))
            run.let_go(v, owned=False)


class _Run:
    """One run of one graph under the cap: its values (None: evicted, or let go after their last
    reader), which of them are read right now (`locks`), and which node of the schedule runs (`at`)."""

    def __init__(self, memory: CappedMemory, layout: _Layout, graph: Graph):
        self.memory = memory
        self.layout = layout
        self.graph = graph
        self.nodes = graph.nodes
        self.costs = layout.costs.setdefault(memory.cost, {})
        self.env: dict[Var, np.ndarray | None] = {}
        self.dead: set[Var] = set()
        self.locks: dict[Var, int] = {}
        self.at = 0  # the node of the schedule running
        self.strides: dict[Var, tuple[int, ...]] = {}  # of the values let go that had their own buffer

    def evaluate(self, args, frees: list[list[Var]]) -> list[np.ndarray]:
        graph, memory, env = self.graph, self.memory, self.env
        env.update(graph.constants)
        for a in graph.constants.values():
            memory.external(a)
        for v, a in zip(graph.inputs, args):
            env[v] = a
            memory.hold(a)
        for v in frees[0]:  # inputs nobody reads: nothing will read them again either
            memory.release(env.pop(v))
        producer, locks, gone, nodes = self.layout.producer, self.locks, self.dead, self.nodes
        mark = not memory.recomputing
        for i, dead in enumerate(frees[1:]):
            self.at = i
            self.bring(i, nodes[i].inputs, dead)
            for v in dead:
                gone.add(v)
                if v in producer and env[v] is not None and not locks.get(v):
                    self.let_go(v)
            if mark:
                memory.mark()
        outputs = list(dict.fromkeys(graph.outputs))
        self.at = len(self.nodes)
        self.bring(-1, outputs)
        for v in outputs:
            self.unlock(v)
        # The run is over: its values can no longer be made again. The outputs are the caller's
        # to release; the rest the plain run would have let go already.
        for slots in memory.owners.values():
            slots[:] = [s for s in slots if s[0] is not self]
        keep = set(outputs)
        for v, a in env.items():
            if a is not None and v not in keep and v not in graph.constants:
                memory.release(a)
        return [env[v] for v in graph.outputs]

    def bring(self, i: int, reads, dead=()) -> None:
        """Make every value of `reads` present, running again the nodes of those evicted (and of
        what those read in turn); then run node `i` on them (i = -1: none, and the reads stay
        locked for the caller). A stack, not recursion: a chain of evicted values can be long."""
        env, producer, locks = self.env, self.layout.producer, self.locks
        if all(env[v] is not None for v in reads):  # the common case: nothing to bring back
            for v in reads:
                locks[v] = locks.get(v, 0) + 1
            if i >= 0:
                self.run_node(i, None, dead)
                self.unlock_all(reads)
            return
        stack = [[i, reads, 0, None]]  # node, its reads, how many are present and locked, the value awaited
        while True:
            frame = stack[-1]
            j, ins, k, awaited = frame
            if k < len(ins):
                v = ins[k]
                if env[v] is None:
                    stack.append([producer[v], self.nodes[producer[v]].inputs, 0, v])
                else:
                    self.lock(v)
                    frame[2] += 1
                continue
            if len(stack) == 1:
                break
            stack.pop()
            self.run_node(j, awaited)
            self.unlock_all(ins)
        if i >= 0:
            self.run_node(i, None, dead)
            self.unlock_all(reads)

    def run_node(self, i: int, awaited: Var | None, dead=()) -> None:
        """Run node `i`, its operands present and locked. In the schedule (`awaited` None) every
        result is kept; run again for `awaited`, only the results that are absent and still to
        be read, and `awaited` itself."""
        memory, env, node = self.memory, self.env, self.nodes[i]
        ins = [env[v] for v in node.inputs]
        if awaited is None:
            # a dying buffer to write into: never an argument's, which a recomputation may read again
            producer = self.layout.producer
            donated = _donation(node, [v for v in dead if v in producer], env, memory) if dead else None
            need = self.layout.room[i] - (donated.nbytes if donated is not None else 0)
            if memory.live + need > memory.cap:
                memory.make_room(need, node)
            # Holding one result may evict one kept before it: it will be made again when read.
            for v, o in zip(node.outputs, apply(node.op, ins, node.params, node.outputs, memory, donated)):
                self.keep(v, o)
            return
        if memory.live + self.layout.room[i] > memory.cap:
            memory.make_room(self.layout.room[i], node)
        memory.recomputing += 1
        try:
            outs = apply(node.op, ins, node.params, node.outputs, memory)
        finally:
            memory.recomputing -= 1
        memory.recomputations += 1
        memory.recompute_cost += self.cost(i)
        if memory.record is not None:
            memory.record.append(("recomputed", label(node)))
        kept = [(v, _laid_out(o, self.strides.get(v))) for v, o in zip(node.outputs, outs)
                if v is awaited or env[v] is None and v not in self.dead]
        for v, o in kept:  # locked while they arrive: holding one may evict one, and `awaited` must stay
            self.keep(v, o)
            self.lock(v)
        for v, _ in kept:
            self.unlock(v)

    def keep(self, v: Var, a: np.ndarray) -> None:
        self.env[v] = a
        self.memory.hold(a)
        if self.memory.tracking:
            self.own(v, a)

    def own(self, v: Var, a: np.ndarray) -> None:
        """`v`, holding `a`, among the owners of `a`'s buffer, if it can be made again."""
        memory = self.memory
        if v in self.layout.producer and v not in self.layout.outputs:
            key = id(memory._base(a))
            if key not in memory._external:
                memory.owners.setdefault(key, []).append((self, v))

    def let_go(self, v: Var, owned: bool = True) -> None:
        """Drop value `v` (evicted, or its last reader has run); `owned`: still among its buffer's
        owners (an eviction has taken the whole list)."""
        a = self.env[v]
        self.env[v] = None
        if a.base is None:  # its own buffer: the layout a recomputation must give it again
            self.strides[v] = a.strides
        memory = self.memory
        if owned and memory.tracking:
            slots = memory.owners.get(id(memory._base(a)))
            if slots is not None:
                slots.remove((self, v))
        memory.release(a)

    def distance(self, v: Var) -> int:
        """Nodes of the schedule until `v` is read next."""
        readers = self.layout.readers.get(v, ())
        k = bisect.bisect_right(readers, self.at)
        return readers[k] - self.at if k < len(readers) else len(self.nodes) + 1 - self.at

    def lock(self, v: Var) -> None:
        self.locks[v] = self.locks.get(v, 0) + 1

    def unlock(self, v: Var) -> None:
        self.locks[v] -= 1

    def unlock_all(self, reads) -> None:
        locks, dead = self.locks, self.dead
        for v in reads:
            locks[v] -= 1
            if v in dead and not locks[v] and self.env[v] is not None and v in self.layout.producer:
                self.let_go(v)  # brought back for a recomputation, read for the last time

    # ---- the cost of evicting a value: its node, and what it would need again

    def eviction_cost(self, v: Var, memo: dict[Var, float]) -> float:
        """What bringing `v` back would take: its node, run again, after the absent values it reads
        and theirs (a chain of evicted values costs its length). Each absent value's share is
        worked out once per eviction (`memo`); one reached twice is counted twice, as a
        recomputation may well run it twice."""
        i = self.layout.producer[v]
        return self.cost(i) + sum(self._up(w, memo) for w in self._absent(i))

    def cost(self, i: int) -> float:
        cost = self.costs.get(i)
        if cost is None:
            cost = self.costs[i] = self.memory.cost(self.nodes[i])
        return cost

    def _absent(self, i: int) -> list[Var]:
        """The computed values node `i` reads that are absent, once each."""
        env = self.env
        return [w for w in self.layout.computed_inputs[i] if env[w] is None]

    def _up(self, v: Var, memo: dict[Var, float]) -> float:
        """Making absent `v` again: its node, after the absent values it reads."""
        producer, stack = self.layout.producer, [(v, None)]
        while stack:
            u, absent = stack.pop()
            if u in memo:
                continue
            if absent is None:  # first visit: its operands first
                absent = self._absent(producer[u])
                stack.append((u, absent))
                stack += [(w, None) for w in absent if w not in memo]
            else:
                memo[u] = self.cost(producer[u]) + sum(memo[w] for w in absent)
        return memo[v]
