"""The "milp" strategy: a Checkmate-style mixed-integer program (Jain et al., MLSys 2020) over the
schedules a Plan can express, solved by HiGHS through `scipy.optimize.milp`.

Checkmate decides, for every step of the schedule and every value, whether it is computed and
kept. A Plan is coarser: one level of checkpoint blocks over the stages (`stages.stages`, merged
down to `MOST_STAGES`), plus the matrix products each block saves. The program encodes exactly
that, so every solution is a Plan; what it adds over the chain DP is the memory accounting of an
arbitrary graph: a value that crosses several stages (attention's skip paths, the residual
stream read by two layer norms) is charged until the backward pass reaches the last stage that
holds it, as the evaluator frees it.

Stages `0..n-1`; position `k` is the backward pass of stage k (the backward runs k = n-1 .. 0,
so a value is alive at k when the last stage that holds it is at or below k). Variables:

- `p[s]` (binary): stage s runs plainly; its gradient keeps what its nodes' VJPs read.
- `x[i,j]` (binary, 0 ≤ i < j ≤ n): stages i..j-1 form one checkpoint block. Each stage is plain
  or in exactly one block: `p[s] + Σ_{i ≤ s < j} x[i,j] = 1` (an interval matrix: the LP
  relaxation of the partition is tight).
- `y[c]` (binary): the block around matrix product c saves its output (`y[c] ≤ 1 - p[stage(c)]`).
- `q[s,k] = Σ_{i ≤ s, j > k} x[i,j]` (continuous, s ≤ k): stages s..k lie in one block, so the
  block's backward recomputes stage s while position k runs.
- `a[v,k] ∈ [0, 1]` (continuous): buffer v is alive at position k. Only lower bounds constrain
  it (the peak rows push it down), one per reason for v to be alive:
  - a plain stage h holds v (v is made or read there and a VJP of h reads it), h ≤ k: `a ≥ p[h]`;
  - v is recomputed in k's block and a stage holding v lies in [stage(v), k]: `a ≥ q[stage(v), k]`;
  - v is an explicit input of a block that starts after stage(v), at or before k, and reads it
    (a block keeps its inputs until its backward is done): `a ≥ Σ x[t,j]` over those blocks;
  - c is saved: `a[c,k] ≥ y[c]` for k ≥ stage(c).
  A buffer read by no later stage is not a variable: what stage s's gradient keeps of those
  (`kept[s]`, with a custom_vjp's hidden residuals) is alive at k ≥ s as `p[s] + q[s,k]`.

Constraints: for each position k,
`Σ_{s≤k} kept[s]·(p[s] + q[s,k]) + Σ_v bytes(v)·a[v,k] + W_k·Σ_i x[i,k+1] ≤ budget - T`, where
`W_k` is the working set stage k's forward adds to what it keeps (`Stage.internal_bytes`), there
when k is the last stage of a block (its backward starts by recomputing the block), and T is what
the model leaves out: the inputs and constants, cotangents, the backward's temporaries. T is
bracketed by calibration: the least and most the exact peak (`peak.total_peak`) exceeds the
model's peak over the plans at hand (the start plans, `sqrt.segment_plans`, no plan).
Objective: the cost of what the gradient recomputes (`remat.planner.cost`, the time the backend
takes), `Σ x[i,j]·cost(stages i..j-1) - Σ y[c]·cost(c)` (= `report.extra_cost` of the plan),
with the cut `objective <` the best plan that fits so far, so HiGHS only looks for better ones.

The model is approximate, so every plan HiGHS returns is checked by the exact count, and T is
searched: first the calibration's worst case; a plan over budget raises T by its excess; a plan
that fits (or no better plan) lowers T towards the calibration's best case, looking for a
cheaper plan; `RUNS` runs of at most `NODES` branch-and-bound nodes each (work limits, so the
plan does not depend on the machine's speed). The result is never worse than the start plans:
if HiGHS finds nothing better that fits, the best start plan that fits is returned, and
`SolverInfo.fallback` says so. Nested blocks (Revolve-like schedules) are the chain DP's; the
MILP is compared with them through `start`.

>>> import remat as rm
>>> layer = lambda h: h + rm.tanh(h)
>>> g = rm.make_graph(lambda x: rm.sum(layer(layer(layer(layer(x))))))(rm.ones((1024,)))
>>> from remat.planner.cost import cost
>>> budget = total_peak(g) - 4096
>>> plan, info = plan_milp(g, budget)
>>> info.objective < cost(g), info.peak <= budget
(True, True)
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import optimize, sparse

from remat import dtypes
from remat.backends.numpy import IDENTITIES, VIEWS  # the evaluator's aliasing
from remat.core import OPS
from remat.graph import Graph, Node, Var
from remat.planner.cost import node_cost
from remat.planner.peak import ALL, Step, total_peak, traced_step
from remat.planner.plan import NO_PLAN, Block, Plan
from remat.planner.report import extra_cost
from remat.planner.sqrt import segment_plans
from remat.planner.stages import Stage, merged, stages
from remat.timeline import inline

_MIB = float(2**20)  # the program counts MiB: HiGHS is happier with coefficients near 1
_GAP = 1e-3  # relative MIP gap: closing the last 0.1% of recomputation is not worth the time
RUNS = 3  # HiGHS runs per plan_milp, each with another guess at the transient T
_TOLERANCE = 0.005  # stop refining T once its bracket is this share of the budget
# Work, not seconds, bounds each HiGHS run, so a plan never depends on the machine's load: the
# branch-and-bound nodes per run. The time limit is only a safety net a normal run never reaches.
# HiGHS's root (presolve, LP, cuts) takes much of each run; 100 nodes x 3 runs plan the 8-block
# GPT-style model in 11-22 s on a 2-core machine (`remat bench --planner` reports the time).
NODES = 100
# The program grows with the square of the stages (x, q and the liveness rows): HiGHS's root
# takes seconds on the 8-block GPT's 25 stages, minutes on the 64-layer MLP's 70. Longer chains
# are planned over merged stages; the chain DP, which the MILP starts from, keeps every cut.
MOST_STAGES = 32
SAFETY_SECONDS = 300.0


@dataclass(frozen=True)
class SolverInfo:
    """How the plan was found: HiGHS's `status` in words, the `objective` (the recomputation cost of
    the returned plan), the seconds spent, HiGHS's relative MIP `gap` (None without a solution),
    whether the plan is a start plan (`fallback`) and its exact `peak` (`peak.total_peak`)."""

    status: str
    objective: float
    time: float
    gap: float | None
    fallback: bool
    peak: int


def plan_milp(graph: Graph, budget_bytes: int, *, nodes: int = NODES, runs: int = RUNS,
              time_limit: float = SAFETY_SECONDS, start: Sequence[Plan] = (),
              step: Step = ALL) -> tuple[Plan, SolverInfo]:
    """The plan of least recomputation whose step fits `budget_bytes` (as `peak.total_peak`
    counts it), found by at most `runs` HiGHS runs of at most `nodes` branch-and-bound nodes
    each, never worse than the `start` plans. The same graph and budget always give the same
    plan. `time_limit` (seconds, all runs together) is a safety net: when it is reached, the
    HiGHS plans found so far are dropped (they depend on the machine's speed) and the best start
    plan is returned. If nothing fits, the plan of least peak found is returned with
    `info.peak > budget_bytes`."""
    t0 = time.perf_counter()
    chain = merged(graph, stages(graph, step), MOST_STAGES)
    program = _Program(_buffers(graph, chain), chain)
    tried = _Tried(graph, budget_bytes, step)
    for p in (NO_PLAN, *start, *(segment_plans(graph, step) if chain else ())):  # they calibrate T too
        tried.add(p, None)
    # T is searched between `lo` (too optimistic: a plan came out over budget) and `safe` (the
    # answer fitted, or nothing cheaper was found), starting from the calibration's worst case.
    lo, transient = program.calibrate(tried.flat(program))
    safe, ran, timed_out = np.inf, [], False
    free = tried.cutoff() is not None and tried.cutoff() < 0  # a plan that fits recomputes nothing
    for _ in range(runs if chain and not free else 0):
        left = time_limit - (time.perf_counter() - t0)
        if left <= 0:
            timed_out = True
            break
        cutoff = tried.cutoff()
        result = program.solve(budget_bytes - transient, cutoff, left, nodes)
        if _timed_out(result):
            timed_out = True
            break
        ran.append((_status(result, cutoff is not None), getattr(result, "mip_gap", None)))
        peak = None if result.x is None else tried.add(program.decode(result.x, graph), ran[-1])
        if peak is not None and peak > budget_bytes:
            lo = transient
            transient = min(transient + peak - budget_bytes, (transient + safe) / 2)
        else:
            safe = transient
            transient = (lo + transient) / 2
        if safe - lo <= _TOLERANCE * budget_bytes:
            break
    plan, run, peak = tried.best(starts_only=timed_out)
    status, gap = run or (ran[-1] if ran else (_idle(chain, free, timed_out), None))
    if timed_out and ran:
        status = (f"time limit of {time_limit:g} s reached (a safety net): the HiGHS plans are dropped, "
                  f"so the best start plan is returned")
    elif run is None and ran:
        status += "; nothing better than the start plans fits, so the best of them is returned"
    info = SolverInfo(status, extra_cost(graph, plan), time.perf_counter() - t0, gap, run is None, peak)
    return plan if run is None else plan.replace(strategy="milp"), info


def _idle(chain: list[Stage], free: bool, timed_out: bool) -> str:
    return "not run: " + ("the graph has no nodes to plan" if not chain else
                          "a start plan fits without recomputing anything" if free else
                          "no time left" if timed_out else "no run")


def _timed_out(result) -> bool:
    """HiGHS stopped at the time limit (not at the node limit, which is deterministic)."""
    return result.status == 1 and str(result.message).lower().startswith("time limit")


def _status(result, cut: bool) -> str:
    if result.status == 0:
        return "optimal"
    if "limit" in str(result.message).lower():  # HiGHS says "Solution limit" for its node limit
        return "node limit reached" + (" with a solution" if result.x is not None else ", no solution")
    if result.status == 2:
        return f"infeasible: no plan the model allows {'is cheaper than the best that fits' if cut else 'fits'}"
    return f"HiGHS: {result.message}"


class _Tried:
    """Every plan seen, with its exact peak and objective, and the HiGHS run that found it
    (None: a start plan); the cheapest that fits wins."""

    def __init__(self, graph: Graph, budget: int, step: Step):
        self.graph, self.budget, self.step = graph, budget, step
        self.rows: list[tuple[Plan, tuple | None, int, float]] = []

    def add(self, plan: Plan, run: tuple[str, float | None] | None) -> int:
        peak = total_peak(self.graph, plan, self.step)
        self.rows.append((plan, run, peak, extra_cost(self.graph, plan)))
        return peak

    def cutoff(self) -> float | None:
        """Only plans strictly cheaper than the best that fits are worth HiGHS's time."""
        fits = [r[3] for r in self.rows if r[2] <= self.budget]
        return min(fits) * (1 - 1e-9) - 1e-3 if fits else None

    def best(self, starts_only: bool = False) -> tuple[Plan, tuple | None, int]:
        """The plan, the run that found it and its peak. Ties go to the MILP's plan, then to
        the lower peak; when nothing fits, the lowest peak wins."""
        rows = [r for r in self.rows if r[1] is None] if starts_only else self.rows
        fits = [r for r in rows if r[2] <= self.budget]
        key = (lambda r: (r[3], r[1] is None, r[2])) if fits else (lambda r: (r[2], r[3]))
        plan, run, peak, _ = min(fits or rows, key=key)
        return plan, run, peak

    def flat(self, program: _Program) -> list[tuple[dict, int]]:
        """The plans the model can express, as assignments, with their exact peaks."""
        out = []
        for plan, _, peak, _ in self.rows:
            assignment = program.assignment(plan)
            if assignment is not None:
                out.append((assignment, peak))
        return out


# ---------------------------------------------------------------- what the gradient keeps


@dataclass
class _Buffer:
    """A buffer of the forward graph (views share their base's): its bytes, the stage that makes
    it, the later stages that read it, the stages whose VJPs read it (`holders`), and the matrix
    product that makes it (None: not a candidate to save)."""

    nbytes: int
    stage: int
    readers: set[int] = field(default_factory=set)
    holders: set[int] = field(default_factory=set)
    dot: int | None = None
    cost: float = 0.0


@dataclass
class _Buffers:
    crossing: list[_Buffer]  # read by a later stage
    saveable: list[_Buffer]  # matrix products read only in their stage
    kept: list[int]  # per stage: the other bytes its gradient keeps that no later stage reads
    fixed: list[int]  # per position: bytes alive whatever the plan (the outputs)


def _buffers(graph: Graph, chain: list[Stage]) -> _Buffers:
    stage_of = [k for k, s in enumerate(chain) for _ in range(s.start, s.stop)]
    root = _roots(graph)
    bufs: dict[Var, _Buffer] = {}
    kept = [0] * len(chain)
    used = {v for n in graph.nodes for v in n.inputs} | set(graph.outputs)
    for i, node in enumerate(graph.nodes):
        s = stage_of[i]
        dot = "dot" in OPS[node.op].traits  # einsum and tensordot are composed from matmul
        for v in node.outputs:
            if root.get(v) is v:
                bufs[v] = _Buffer(v.nbytes, s, dot=i if dot else None, cost=node_cost(node) if dot else 0.0)
        for v in node.inputs:
            if root.get(v) is not None:
                bufs[root[v]].readers.add(s)
        reads, hidden = _needs(graph, node, used)
        kept[s] += hidden
        for v in reads:
            if root.get(v) is not None:
                bufs[root[v]].holders.add(s)
    fixed = [0] * len(chain)
    for r in dict.fromkeys(root[v] for v in graph.outputs if root.get(v) is not None):
        for k in range(bufs.pop(r).stage, len(chain)):
            fixed[k] += r.nbytes
    crossing, saveable = [], []
    for b in bufs.values():
        b.readers.discard(b.stage)
        if b.readers:
            crossing.append(b)
        elif b.dot is not None:
            saveable.append(b)
        elif b.holders:
            kept[b.stage] += b.nbytes
    return _Buffers(crossing, saveable, kept, fixed)


def _roots(graph: Graph, given: dict[Var, Var | None] | None = None) -> dict[Var, Var | None]:
    """Each Var's buffer, as the evaluator shares them: a view or an identity is its input's, a
    checkpoint or custom_vjp output is whatever its body returns (two outputs may be one buffer);
    graph inputs and constants are None (they cost the step nothing) unless `given`."""
    root: dict[Var, Var | None] = dict.fromkeys([*graph.inputs, *graph.constants])
    root.update(given or {})
    for node in graph.nodes:
        if node.op in VIEWS or node.op in IDENTITIES:
            root.update((o, root.get(i)) for o, i in zip(node.outputs, node.inputs))
        elif inline(node):
            body = node.params["body"]
            args = {b: root.get(i) for b, i in zip(body.inputs, node.inputs)}
            inner, outer = _roots(body, args), set(args.values())
            mine: dict[Var, Var] = {}  # a body value -> the first output that returns it
            for o, b in zip(node.outputs, body.outputs):
                r = inner.get(b)
                root[o] = r if r is None or r in outer else mine.setdefault(r, o)
        else:
            root.update((o, o) for o in node.outputs)
    return root


def _needs(graph: Graph, node: Node, used: set[Var]) -> tuple[set[Var], int]:
    """The inputs and outputs of `node` its VJP reads, and the bytes of the other values it keeps
    (a custom_vjp's residuals), found by tracing the gradient of the node alone, seeding the
    outputs that are `used` (an unused output's cotangent path may read more)."""
    if node.op in VIEWS or node.op in IDENTITIES or not any(dtypes.is_float(v.dtype) for v in node.inputs):
        return set(), 0
    consts = {v: graph.constants[v] for v in node.inputs if v in graph.constants}
    ins = list(dict.fromkeys(v for v in node.inputs if v not in consts))
    outs = sorted(node.outputs, key=lambda v: v not in used)
    seeded = sum(v in used for v in outs)
    traced = traced_step(Graph(ins, outs, [node], consts), Step(seeded=seeded))
    g, owner = traced.graph, traced.owner
    read = {v for n in g.nodes if n.outputs and n.outputs[0] not in owner for v in n.inputs}
    made = g.outputs[: len(outs)]
    mine = set(g.inputs) | set(made)
    needs = {v for v, w in zip(ins, g.inputs) if w in read} | {v for v, w in zip(outs, made) if w in read}
    return needs, sum(w.nbytes for w in owner if w in read and w not in mine)


# ---------------------------------------------------------------- the program


class _Program:
    """The MILP of the module docstring, built once; `solve` sets the capacity and the cut."""

    def __init__(self, bufs: _Buffers, chain: list[Stage]):
        self.bufs, self.chain, self.n = bufs, chain, len(chain)
        n = self.n
        self.n_vars = 0
        self.p = [self._var() for _ in range(n)]
        self.x = {(i, j): self._var() for i in range(n) for j in range(i + 1, n + 1)}
        self.y = [self._var() for _ in bufs.saveable]
        self.n_binary = self.n_vars
        # q[s,k] = Σ_{i ≤ s, j > k} x[i,j]: stages s..k lie in one block (s ≤ k); defined by equalities.
        self.q = {(s, k): self._var() for s in range(n) for k in range(s, n)}
        self.lower: list[tuple[int, float, list[tuple[int, float]]]] = []  # a >= c + Σ coef·var
        self.at: list[list[tuple[int, float]]] = [[] for _ in range(n)]  # per position: (var, MiB)
        self.alive: dict[tuple[int, int], int] = {}  # (id of a buffer, position) -> its `a`
        for k in range(n):  # what each stage's gradient keeps: plain, or recomputed in k's block
            for s in range(k + 1):
                if bufs.kept[s]:
                    self.at[k] += [(self.p[s], bufs.kept[s] / _MIB), (self.q[s, k], bufs.kept[s] / _MIB)]
        for k in range(n):  # a block's backward starts by recomputing its last stage's working set
            extra = max(0, chain[k].internal_bytes - bufs.kept[k]) / _MIB
            self.at[k] += [(self.x[i, k + 1], extra) for i in range(k + 1)] if extra else []
        for b in bufs.crossing:
            self._crossing(b)
        for c, b in enumerate(bufs.saveable):
            self._saveable(b, self.y[c])

    def _var(self) -> int:
        self.n_vars += 1
        return self.n_vars - 1

    def _alive(self, k: int, b: _Buffer) -> int:
        a = self.alive[id(b), k] = self._var()
        self.at[k].append((a, b.nbytes / _MIB))
        return a

    def _saveable(self, b: _Buffer, saved: int) -> None:
        for k in range(b.stage, self.n):
            a = self._alive(k, b)
            self.lower.append((a, 0.0, [(saved, 1.0)]))
            if b.holders:
                self.lower.append((a, 0.0, [(self.p[b.stage], 1.0), (self.q[b.stage, k], 1.0)]))

    def _crossing(self, b: _Buffer) -> None:
        d = b.stage
        # A block that starts at t reads b when it reaches b's first reader at or after t.
        first = {t: min((r for r in b.readers if r >= t), default=None) for t in range(d + 1, self.n)}
        for k in range(d, self.n):
            a = self._alive(k, b)
            held = [h for h in b.holders if h <= k]
            self.lower += [(a, 0.0, [(self.p[h], 1.0)]) for h in held]
            if held:
                self.lower.append((a, 0.0, [(self.q[d, k], 1.0)]))
            # an explicit input of a block that starts after d, at or before k, and reads it:
            # the blocks from t that reach r are Σ_{j>r} x[t,j] = q[t,r] - q[t-1,r]
            starts = [term for t in range(d + 1, k + 1) if first[t] is not None
                      for term in ((self.q[t, first[t]], 1.0), (self.q[t - 1, first[t]], -1.0))]
            if starts:
                self.lower.append((a, 0.0, starts))

    # ---------------------------------------------------------------- solving

    def rows(self, capacity: float, cutoff: float | None):
        """The constraint rows (terms, lower, upper) and the scaled cost vector."""
        n, out = self.n, []
        for s in range(n):  # each stage is plain or in exactly one block (q[s,s]: the blocks around s)
            out.append(([(self.p[s], 1.0), (self.q[s, s], 1.0)], 1.0, 1.0))
        for (s, k), q in self.q.items():  # q[s,k] = q[s-1,k] + Σ_{j>k} x[s,j]: O(n) terms a row, not O(n²)
            prev = [(self.q[s - 1, k], -1.0)] if s else []
            out.append(([(q, 1.0)] + prev + [(self.x[s, j], -1.0) for j in range(k + 1, n + 1)], 0.0, 0.0))
        for a, const, terms in self.lower:
            out.append(([(a, 1.0)] + [(v, -c) for v, c in terms], const, np.inf))
        for c, b in enumerate(self.bufs.saveable):
            out.append(([(self.y[c], 1.0), (self.p[b.stage], 1.0)], -np.inf, 1.0))
        for k in range(n):
            out.append((self.at[k], -np.inf, (capacity - self.bufs.fixed[k]) / _MIB))
        c = self.cost()
        scale = max(1.0, float(np.abs(c).max()))
        if cutoff is not None:
            out.append(([(i, c[i] / scale) for i in np.flatnonzero(c)], -np.inf, cutoff / scale))
        return out, c / scale

    def cost(self) -> np.ndarray:
        """Recomputed cost = c·x: a block recomputes its stages, less the products it saves."""
        c = np.zeros(self.n_vars)
        prefix = np.concatenate([[0.0], np.cumsum([st.cost for st in self.chain])])
        for (i, j), v in self.x.items():
            c[v] = prefix[j] - prefix[i]
        for k, b in enumerate(self.bufs.saveable):
            c[self.y[k]] = -b.cost
        return c

    def solve(self, capacity: float, cutoff: float | None, time_limit: float, nodes: int):
        rows, c = self.rows(capacity, cutoff)
        matrix = _sparse([r[0] for r in rows], self.n_vars)
        integrality = np.zeros(self.n_vars)
        integrality[: self.n_binary] = 1
        return optimize.milp(c, integrality=integrality, bounds=optimize.Bounds(0, 1),
                             constraints=optimize.LinearConstraint(matrix, [r[1] for r in rows], [r[2] for r in rows]),
                             options={"time_limit": time_limit, "node_limit": nodes, "disp": False,
                                      "mip_rel_gap": _GAP})

    # ---------------------------------------------------------------- plans <-> assignments

    def decode(self, x: np.ndarray, graph: Graph) -> Plan:
        saved = [b.dot for k, b in enumerate(self.bufs.saveable) if x[self.y[k]] > 0.5]
        blocks = []
        for (i, j), v in sorted(self.x.items()):
            if x[v] > 0.5:
                lo, hi = self.chain[i].start, self.chain[j - 1].stop
                blocks.append(Block(lo, hi, save=frozenset(d for d in saved if lo <= d < hi)))
        return Plan(tuple(blocks), "milp")

    def assignment(self, plan: Plan) -> dict[int, float] | None:
        """`plan` as values of p, x and y, or None if it is not one level of blocks over stages."""
        starts = {st.start: s for s, st in enumerate(self.chain)}
        stops = {st.stop: s + 1 for s, st in enumerate(self.chain)}
        val = dict.fromkeys([*self.p, *self.x.values(), *self.y], 0.0)
        for s in range(self.n):
            val[self.p[s]] = 1.0
        for blk in plan.blocks:
            if blk.inner or blk.start not in starts or blk.stop not in stops:
                return None
            i, j = starts[blk.start], stops[blk.stop]
            val[self.x[i, j]] = 1.0
            for s in range(i, j):
                val[self.p[s]] = 0.0
        saves = {d for blk in plan.blocks for d in blk.save}
        val.update({self.y[k]: float(b.dot in saves) for k, b in enumerate(self.bufs.saveable)})
        return val

    def values(self, val: dict[int, float]) -> np.ndarray:
        """Every variable under an assignment of p, x and y: q by its definition, each `a` the
        largest of its lower bounds (as the peak rows would push it)."""
        v = np.zeros(self.n_vars)
        for var, value in val.items():
            v[var] = value
        for (s, k), q in self.q.items():
            v[q] = sum(v[x] for (i, j), x in self.x.items() if i <= s and j > k)
        for a, const, terms in self.lower:
            v[a] = max(v[a], const + sum(c * v[t] for t, c in terms))
        return v

    def peak(self, val: dict[int, float]) -> float:
        """The model's peak (bytes, transient left out) of an assignment of p, x and y."""
        v = self.values(val)
        return max((self.bufs.fixed[k] + _MIB * sum(w * v[a] for a, w in self.at[k]) for k in range(self.n)),
                   default=0.0)

    def calibrate(self, known: list[tuple[dict[int, float], int]]) -> tuple[float, float]:
        """The least and the most the exact peak exceeds the model's over the plans it can
        express: the bracket of the transient T."""
        gaps = [peak - self.peak(x) for x, peak in known] or [0.0]
        return min(gaps), max(gaps)


def _sparse(rows: list[list[tuple[int, float]]], n_vars: int) -> sparse.csr_array:
    i = [r for r, terms in enumerate(rows) for _ in terms]
    j = [v for terms in rows for v, _ in terms]
    w = [c for terms in rows for _, c in terms]
    return sparse.csr_array((w, (i, j)), shape=(len(rows), n_vars))


__all__ = ["SolverInfo", "plan_milp"]
