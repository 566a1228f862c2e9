"""The "chain" strategy: the cheapest checkpoint schedule of the forward graph seen as a chain of
stages (`stages.stages`), by dynamic programming over (stage range, bytes held), as Revolve
(Griewank and Walther 2000) for equal steps and Beaumont et al. 2019 ("Optimal checkpointing for
heterogeneous chains") for stages of unequal cost and bytes.

Reversing stages [a, b) (running them forward, then back-propagating the cotangent of x_b, the
values crossing the cut after stage b-1) while the schedule around holds k bytes, x_a included,
costs in forward cost (`remat.planner.cost`, first runs included):

    C(a, a+1, k) = f_a                                          if stage a fits run plainly
    C(a, b, k)   = min( f_a + C'(a+1, b, k + kept_a),            plain: keep what its gradient reads
                        min_{a<m<b} F(a, m) + C(m, b, k + out_{m-1}) + C(a, m, k + dout_{b-1}) )
                                                                 block [a, m): keep only x_m

The block option is Revolve's step: run [a, m) keeping nothing, reverse [m, b) holding x_m, then
reverse [a, m) again from x_a, while the backward block's input, the cotangent of x_b, stays live.
C' is C after a plain stage, whose gradient may not keep all of x_a: a block starting at a holds
the rest too. As planner Blocks, the block over [a, m) has as body the schedule C(a, m, .) chose:
plain stages and nested blocks, the first of which may start at a too. A stage inside d blocks
runs d + 1 times; with unit costs and cotangents that cost nothing, C is Revolve's binomial count.

A third option is a block over [a, m) that saves some of its matrix products (those of kind t,
`remat.planner.products`) and runs its body plainly when it is reversed, without them: the rest
holds x_m and the products, the block's backward holds the products and what the plain body
keeps (`dot_fwd`, `dot_back`), and its recomputation costs F(a, m) less the products'. Each
block's recomputation also leaves out the tail of its last stage (values only its outputs read).

Each option must fit the budget: with pend[b] what reversing [a, b) finds live that it does not
hold (the cotangent of x_b, gradients made already), a plain stage's forward needs
k + fwd_a + pend[b] and its backward k + own_a + the cotangents and gradients live; a block's
forward k + max_j (x_j + fwd_j) + pend[b] (`ChainModel.plain_need`, `block_fwd`). `own_a`, the
exact peak of stage a's gradient on its own, makes the model follow the evaluator's count
(`peak.step_peak`): over random schedules, a plan's predicted peak is from 2% under to 6% over
it on the GPT-style model, and never under, at most two layers' activations over, on the
residual MLP. `min_peak` solves the same recursion for the least budget.

Bytes are counted in units (sizes rounded up, the budget down: what fits in units fits in bytes),
so C is a table of O(L^2 K) entries, each a minimum over O(L) blocks: O(L^3 K) time for L stages
and K <= UNITS levels, vectorised with NumPy over k and over the ranges of one length. The entries
depend on the room left, so one table answers every budget up to its own (`cheapest_each`);
`plan_chains` builds one per graph, up to the step without a plan. 64 layers of the residual MLP
(70 stages) take about 0.2 s of CPU time.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import NamedTuple

import numpy as np

from remat import timeline
from remat.autodiff import backward_pass, replay
from remat.graph import Graph, Var
from remat.planner.cost import Weights, current_weights
from remat.planner.peak import ALL, Step, base_bytes, once, total_peak, traced_step
from remat.planner.plan import NO_PLAN, Block, Plan
from remat.planner.products import INNER, SavedProducts, saved_products, tail_costs
from remat.planner.stages import Stage, merged, stages
from remat.tensor import Tensor
from remat.trace import new_trace

# Memory levels of the DP table: finer costs time (O(L³ UNITS)), coarser wastes budget. One table
# serves every budget of a graph (its top is the step without a plan), so a tight budget gets a
# fraction of them: a transformer's 25 stages get all 1,024 (its plans at 50-70% of the
# activation memory came within 0.2 points of the MILP's optimum, against 2 with 256).
UNITS = 1024
# The tables' cells (ranges [a, b) × memory levels) at most: a long chain gets fewer levels and
# at most MOST_STAGES stages (runs of stages merged: fewer places to cut), so planning a deep model
# does not take the memory it means to save: about 20 bytes a cell, 20 MiB (the tables of 198
# stages at 256 levels took 330 MiB, and a 160 MiB cap had no room left for the step).
CELLS = 2**20
LEAST_UNITS = 32
MOST_STAGES = 128
PLAIN = -1  # the choice "keep the first stage's internals" in the table of choices
SAVING = 1 << 16  # a block [a, m) saving products of kind t is m + (t + 1) * SAVING in the table of choices
NEVER = 2**62  # a peak no schedule reaches (room to add to it without overflow)


@dataclass(frozen=True, eq=False)  # arrays: compared by identity
class ChainModel:
    """A chain of L stages as the DP sees it; bytes are beyond the step's inputs and constants.

    - `cost[i]`: stage i's forward cost (`remat.planner.cost`);
    - `out[i]`: bytes of x_{i+1}, the values crossing the cut after stage i;
    - `dout[i]`: bytes of its cotangent (its float values; the step's seeds, after the last
      stage, are constants: free);
    - `kept[i]`: what the plain gradient keeps of the values stage i makes;
    - `extra[i]`: the part of x_{i+1} not in `kept[i]`, held only when a block follows;
    - `fwd[i]`: the most stage i's own values take at once while it runs forward;
    - `own[i]`: the exact peak of stage i's gradient on its own: its kept values, backward
      temporaries, the cotangent of x_i and its parameters' gradients;
    - `grads[i]`: bytes of the parameter gradients stage i's backward makes (they live on);
    - `products`: the matrix products a block may save, by kind (`remat.planner.products`);
      None where the graph has none, or the model was written by hand;
    - `tail[i]`: the cost of stage i's nodes a block ending with it does not run again
      (`products.tail_costs`; zero when not given)."""

    cost: np.ndarray
    out: np.ndarray
    dout: np.ndarray
    kept: np.ndarray
    extra: np.ndarray
    fwd: np.ndarray
    own: np.ndarray
    grads: np.ndarray
    bounds: tuple[int, ...] = ()  # node index where each stage starts, and the end
    products: SavedProducts | None = None
    tail: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.cost)

    @cached_property
    def ct(self) -> np.ndarray:
        """ct[b]: bytes of the cotangent of x_b (none for x_0)."""
        return np.concatenate([[0], self.dout])

    @cached_property
    def after(self) -> np.ndarray:
        """after[b]: gradients made by the backward of stages b and later."""
        return np.concatenate([np.cumsum(self.grads[::-1])[::-1], [0]])

    @cached_property
    def pend(self) -> np.ndarray:
        """pend[b]: what reversing a range [a, b) finds live that its schedule does not hold:
        the cotangent of x_b (an input of the backward block around, held all through it) and
        the gradients already made."""
        return self.ct + self.after

    @cached_property
    def block_fwd(self) -> np.ndarray:
        """block_fwd[a, m]: the most a block over [a, m) adds while its forward runs, one stage
        at a time with the x_j it starts from (x_a is held already); a running maximum in m."""
        n = len(self)
        table = np.zeros((n + 1, n + 1), np.int64)
        for a in range(n):
            start = np.concatenate([[0], self.out[a : n - 1]]) + self.fwd[a:]
            table[a, a + 1 :] = np.maximum.accumulate(start)
        return table

    @cached_property
    def spared(self) -> np.ndarray:
        """spared[m]: what the recomputation of a block ending at m leaves out (`tail[m-1]`)."""
        return np.concatenate([[0.0], np.zeros(len(self)) if self.tail is None else self.tail])

    @cached_property
    def kinds(self) -> int:
        """How many kinds of blocks saving products the model offers."""
        return 0 if self.products is None else len(self.products)

    @cached_property
    def saved(self) -> np.ndarray:
        """saved[t, a, m]: bytes a block of kind t over [a, m) keeps of its products."""
        return np.zeros((0, 1, 1), np.int64) if self.products is None else self.products.saved

    @cached_property
    def skipped(self) -> np.ndarray:
        """skipped[t, a, m]: the cost its recomputation skips."""
        return np.zeros((0, 1, 1)) if self.products is None else self.products.skipped

    @cached_property
    def dot_fwd(self) -> np.ndarray:
        """dot_fwd[t, a, m]: `block_fwd` of a block of kind t over [a, m), which keeps its products
        as they are made: stage j runs holding those of stages a..j-1 too."""
        n = len(self)
        table = np.zeros((self.kinds, n + 1, n + 1), np.int64)
        for t in range(self.kinds):
            inner = np.concatenate([[0], np.cumsum(self.products.nbytes[t, INNER])])
            for a in range(n):
                start = np.concatenate([[0], self.out[a : n - 1]]) + self.fwd[a:] + inner[a:n] - inner[a]
                table[t, a, a + 1 :] = np.maximum.accumulate(start)
        return table

    @cached_property
    def dot_back(self) -> np.ndarray:
        """dot_back[t, a, m]: the most reversing a block of kind t over [a, m) needs beyond what is
        held around it: its body runs plainly again, stage s holding what the gradient keeps of
        stages a..s-1, then back; the products, inputs of the block's backward, are held all
        through it, and those the gradient keeps too are counted once."""
        n = len(self)
        table = np.zeros((self.kinds, n + 1, n + 1), np.int64)
        for t in range(self.kinds):
            for m in range(1, n + 1):
                s = np.arange(m)
                both = self.products.stagewise(self.products.kept, t, m)
                kept = np.concatenate([[0], np.cumsum(self.kept[:m] - both)])
                fwd, back = self.plain_need(s, m, 0)
                worst = np.maximum(fwd, back - both) + kept[:m]  # less kept[a], below
                table[t, :m, m] = np.maximum.accumulate(worst[::-1])[::-1] - kept[:m] + self.saved[t, :m, m]
        return table

    def plain_need(self, a, b, held):
        """(forward, backward) peaks of stage a run plainly in [a, b) with `held` bytes held."""
        fwd = held + self.fwd[a] + self.pend[b]
        back = held + self.own[a] + np.where(a + 1 < b, self.ct[np.minimum(a + 1, len(self))], 0)
        return fwd, back + self.ct[b] + self.after[np.minimum(a + 1, len(self))]


# A schedule: a tuple of segments, each a plain stage (an int) or a block (start, stop, body),
# or a block saving its products of kind t, whose body runs plainly: (start, stop, body, t).
Schedule = tuple


def _saves(block: tuple) -> bool:
    return len(block) > 3


# ---------------------------------------------------------------- the model of a graph


def chain_model(graph: Graph, step: Step = ALL) -> ChainModel:
    """The DP's view of `graph` (see `ChainModel`), from `stages.stages` and the graph's reads,
    its costs the current target's (`remat.planner.cost`)."""
    return _chain_model(graph, step, current_weights())


@lru_cache(maxsize=4)  # a budget search plans one graph many times; `weights` key its costs
def _chain_model(graph: Graph, step: Step, weights: Weights) -> ChainModel:
    chain = merged(graph, stages(graph, step), MOST_STAGES)
    if not chain:
        z = np.zeros(0, np.int64)
        return ChainModel(z.astype(np.float64), z, z, z, z, z, z, z, (0,))
    kept_values = _kept_values(graph, step)
    own, kept, din = zip(*_own_peaks(graph, chain, kept_values))
    extra = [sum(v.nbytes for v in _crossing(graph, s.stop) if v not in kept_values) for s in chain]
    return ChainModel(np.array([s.cost for s in chain], np.float64), np.array([s.out_bytes for s in chain], np.int64),
                      np.array([*din[1:], 0], np.int64), np.array(kept, np.int64), np.array(extra, np.int64),
                      np.array([s.internal_bytes for s in chain], np.int64), np.array(own, np.int64),
                      _gradient_bytes(graph, chain, step),
                      tuple(s.start for s in chain) + (chain[-1].stop,),
                      saved_products(graph, chain, kept_values), tail_costs(graph, chain, kept_values))


def _kept_values(graph: Graph, step: Step) -> set[Var]:
    """The values of `graph` its plain gradient keeps. The traced step has Vars of its own: a
    value is matched by the node that made it, its shape and its dtype."""
    kept = {(i, v.shape, v.dtype) for v, i in traced_step(graph, step).kept().items()}
    return {v for i, n in enumerate(graph.nodes) for v in n.outputs if (i, v.shape, v.dtype) in kept}


def _crossing(graph: Graph, cut: int) -> list[Var]:
    outer = set(graph.inputs) | set(graph.constants)
    made = {v for n in graph.nodes[:cut] for v in n.outputs if v not in outer}
    read = {v for n in graph.nodes[cut:] for v in n.inputs} | set(graph.outputs)
    return list(made & read)


def _own_peaks(graph: Graph, chain: list[Stage], kept: set[Var]) -> list[tuple[int, int, int]]:
    """`_own_peak` of each stage, worked out once per kind of stage (a model's layers repeat)."""
    seen: dict[tuple, tuple[int, int, int]] = {}
    out = []
    for s in chain:
        key = _signature(graph, s, kept)
        if key not in seen:
            seen[key] = _own_peak(graph, s, kept)
        out.append(seen[key])
    return out


def _signature(graph: Graph, stage: Stage, kept: set[Var]) -> tuple:
    """What `_own_peak` depends on: the ops, their params, types and wiring (a sub-graph by its
    program as it prints: its ops and types, its values named in order)."""
    names: dict[Var, int] = {}
    later = set(_crossing(graph, stage.stop))

    def name(v: Var) -> tuple:
        return (names.setdefault(v, len(names)), v.shape, str(v.dtype), v in graph.constants, v in later, v in kept)

    return tuple((n.op, tuple((k, _param_key(p)) for k, p in sorted(n.params.items())), tuple(map(name, n.inputs)),
                  tuple(map(name, n.outputs)))
                 for n in graph.nodes[stage.start : stage.stop])


def _param_key(value: object) -> object:
    if isinstance(value, Graph):
        return str(value)
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value


def _own_peak(graph: Graph, stage: Stage, kept: set[Var]) -> tuple[int, int, int]:
    """The stage's gradient alone: its nodes run on the values they read (free, as inputs are),
    then back-propagated from constant cotangents of the values read after it. Returns its
    exact peak, what the step's gradient keeps of the stage's values (what it holds when its
    forward ends, a loop's stacked residuals included, and the outputs later stages' gradients
    read: `kept`) and the bytes of the cotangent of x_i it ends with, as allocated (a view
    of a seed costs nothing): what it ends with less its parameters' gradients."""
    sub = _stage_graph(graph, stage)
    with new_trace("stage") as t:
        env = replay(sub, [t.new_input(v.shape, v.dtype) for v in sub.inputs])
        made_forward = {v for n in t.nodes for v in n.outputs}
        seeds = [Tensor._concrete(np.ones(v.shape, v.dtype)) if np.issubdtype(v.dtype, np.floating) else None
                 for v in sub.outputs]
        grads = backward_pass(sub, env, seeds)
        step = t.to_graph([g for g in grads if g is not None])
    # The step lost the forward nodes no gradient reads; a loop's VJP may have given one
    # residual outputs (a node of the forward still, by its other Vars).
    forward = sum(1 for n in step.nodes if made_forward.intersection(n.outputs))
    read = {v for n in step.nodes[forward:] for v in n.inputs}
    later = sum(v.nbytes for v in sub.outputs if v in kept and env[v]._var not in read)
    points = timeline.predict(step)
    held = ([p.live for p in points if p.node < forward] or [0])[-1]
    params = sum(v.nbytes for v, g in zip(sub.inputs, grads) if g is not None and v in set(graph.inputs))
    return max((p.high for p in points), default=0), held + later, max((points[-1].live if points else 0) - params, 0)


def _stage_graph(graph: Graph, stage: Stage) -> Graph:
    """The stage's nodes as a graph: from the values they read to those read after it."""
    nodes = graph.nodes[stage.start : stage.stop]
    made = {v for n in nodes for v in n.outputs}
    ins = list(dict.fromkeys(v for n in nodes for v in n.inputs if v not in made and v not in graph.constants))
    outs = [v for v in _crossing(graph, stage.stop) if v in made]
    consts = {v: graph.constants[v] for n in nodes for v in n.inputs if v in graph.constants}
    return Graph(ins, outs, nodes, consts)


def _gradient_bytes(graph: Graph, chain: list[Stage], step: Step) -> np.ndarray:
    """Per stage, the bytes of what its backward makes that lives to the end of the step: the
    gradients of the inputs it is the last to read (the backward reaches that reader first).
    The step's own outputs live on from the backward's start: they count with the last stage."""
    wrt = len(graph.inputs) if step.wrt is None else step.wrt
    owner = {}
    for k, s in enumerate(chain):
        for node in graph.nodes[s.start : s.stop]:
            for v in node.inputs:
                owner[v] = k
    out = np.zeros(len(chain), np.int64)
    for v in dict.fromkeys(graph.inputs[:wrt]):
        if v in owner and np.issubdtype(v.dtype, np.floating):
            out[owner[v]] += v.nbytes
    outer = set(graph.inputs) | set(graph.constants)
    if len(out):
        out[-1] += sum(v.nbytes for v in dict.fromkeys(graph.outputs) if v not in outer)
    return out


# ---------------------------------------------------------------- the least budget


def min_peak(model: ChainModel) -> tuple[int, Schedule]:
    """The least budget (in the model's bytes) any chain schedule fits in, and that schedule.
    Two tables: `full` with x_a held whole, `part` after a plain stage, which holds only what
    its gradient keeps of x_a (a block starting at a holds the rest, `extra[a-1]`, too)."""
    n = len(model)
    if n == 0:
        return 0, ()
    full = np.zeros((n + 1, n + 1), np.int64)
    part = np.zeros((n + 1, n + 1), np.int64)
    choice = np.full((2, n + 1, n + 1), PLAIN, np.int64)
    extra = np.concatenate([[0], model.extra])  # extra[a]: what a block at a adds after a plain stage
    for length in range(1, n + 1):
        a = np.arange(0, n - length + 1)
        b = a + length
        fwd, back = model.plain_need(a, b, 0)
        rest = model.kept[a] + part[a + 1, b] if length > 1 else 0
        plain_full = np.maximum(np.maximum(fwd, back), rest)
        plain_part = np.maximum(np.maximum(fwd + extra[a], back), rest)
        low, pick = np.full(len(a), NEVER), np.full(len(a), PLAIN)
        if length > 1:
            m = a[:, None] + np.arange(1, length)[None, :]
            blocks = np.maximum.reduce([model.block_fwd[a[:, None], m] + model.pend[b][:, None],
                                        model.out[m - 1] + full[m, b[:, None]],
                                        model.ct[b][:, None] + full[a[:, None], m]])
            at = np.argmin(blocks, axis=1)
            low, pick = blocks[np.arange(len(a)), at], m[np.arange(len(a)), at]
        for table, plain, add, side in ((full, plain_full, 0, 0), (part, plain_part, extra[a], 1)):
            table[a, b] = np.minimum(plain, low + add)
            choice[side, a, b] = np.where(low + add < plain, pick, PLAIN)
    return int(full[0, n]), _rebuild(lambda side, a, b, k: int(choice[side, a, b]), model, 0, n)


# ---------------------------------------------------------------- the cheapest schedule in a budget


def cheapest(model: ChainModel, budget: int) -> Schedule | None:
    """The schedule of least forward cost whose model peak is at most `budget` bytes; None
    when none fits (in units of the table). Tables `full` and `part` as in `min_peak`."""
    return cheapest_each(model, [budget])[0]


def cheapest_each(model: ChainModel, budgets: list[int], top: int | None = None) -> list[Schedule | None]:
    """`cheapest` for each budget, from one table: the table's entries depend on the room left,
    `top - held`, so the table built for the largest budget (or for `top`, when given: budgets
    above it are planned as `top`) answers a smaller one from held = the difference, in that
    table's units (coarser for a small budget than its own table's)."""
    n = len(model)
    top = max(budgets) if top is None else top
    if n == 0 or top < 0:
        return [() if b >= 0 else None for b in budgets]
    table = _table(model, int(top))
    return [table.schedule(min(int(b), int(top))) if b >= 0 else None for b in budgets]


def _table(model: ChainModel, budget: int) -> _Table:
    """The table for `budget`, built once per plan's search (`peak.once`): the ladder of budgets
    reads it many times, and it is let go when the search ends (tens of MiB on a long chain)."""
    return once(("chain table", model, budget), lambda: _Table(model, budget))


class _Table:
    """The DP's tables for a budget: `full` and `part` as in `min_peak`, and the choices."""

    def __init__(self, model: ChainModel, budget: int):
        n = len(model)
        q = _unit(model, budget)
        u = _Units(model, q, budget // q)
        top = u.top
        # Columns past `top` (held beyond the budget) never fit: inf, as many again as there are
        # levels, so that the entries for `s` more held are one row from column s (`_rows`).
        full = np.full((n + 1, n + 1, 2 * top + 2), np.inf)
        part = np.full((n + 1, n + 1, 2 * top + 2), np.inf)
        choice = np.full((2, n + 1, n + 1, top + 1), PLAIN, np.int32)
        k = np.arange(top + 1)
        prefix = np.concatenate([[0.0], np.cumsum(model.cost)])
        assert n < SAVING
        for length in range(1, n + 1):
            a = np.arange(0, n - length + 1)
            b = a + length
            plain_full, plain_part = _plain_costs(u, part, model.cost, a, b, k)
            low = np.full((len(a), 2 * top + 2), np.inf)
            pick = np.full((len(a), 2 * top + 2), PLAIN)
            if length > 1:
                m = a[:, None] + np.arange(1, length)[None, :]
                blocks = _block_costs(u, full, prefix, a, b, m, k) - model.spared[m][:, :, None]
                ends = np.broadcast_to(m[:, :, None], blocks.shape)
                for t in range(model.kinds):
                    saving = _saving_block_costs(u, full, prefix, model.skipped[t], t, a, b, m, k)
                    saving -= model.spared[m][:, :, None]
                    ends = np.where(saving < blocks, m[:, :, None] + (t + 1) * SAVING, ends)
                    blocks = np.minimum(blocks, saving)
                at = np.argmin(blocks, axis=1)[:, None, :]
                low[:, : top + 1] = np.take_along_axis(blocks, at, axis=1)[:, 0]
                pick[:, : top + 1] = np.take_along_axis(ends, at, axis=1)[:, 0]
            rows = np.arange(len(a))
            for table, plain, shift, side in ((full, plain_full, 0, 0), (part, plain_part, u.extra[a], 1)):
                cands = _rows(low, (rows,), shift, top)
                # A block only where it beats running plainly by more than rounding.
                better = cands < plain - np.where(np.isfinite(plain), 1e-9 * np.abs(plain), 0.0)
                table[a, b, : top + 1] = np.where(better, cands, plain)
                choice[side, a, b] = np.where(better, _rows(pick, (rows,), shift, top), PLAIN)
        self.model, self.units, self.choice = model, u, choice
        self.whole = full[0, n]  # the cost of the whole chain by the room held; what `schedule` reads of `full`

    def schedule(self, budget: int) -> Schedule | None:
        """The cheapest schedule within `budget` (at most the table's), None when none fits."""
        u, n = self.units, len(self.model)
        held = u.top - budget // u.q
        if not np.isfinite(self.whole[held]):
            return None
        return _rebuild(lambda side, a, b, at: int(self.choice[side, a, b, at]), self.model, 0, n, u, held)


def _unit(model: ChainModel, budget: int) -> int:
    """Bytes per unit: at least budget / UNITS (fewer levels for a long chain: `CELLS`); where the
    large sizes a schedule holds (layer outputs, kept values) share a divisor, an exact fraction
    of it, so that holding many of them wastes nothing to rounding."""
    levels = min(UNITS, max(LEAST_UNITS, CELLS // (len(model) + 1) ** 2))
    least = max(1, -(-budget // levels))
    sizes = np.concatenate([model.out, model.kept, model.extra, model.dout])
    common = int(np.gcd.reduce(sizes[sizes >= least])) if np.any(sizes >= least) else 0
    if common < least:
        return least
    q = common // (common // least)
    return q if common % q == 0 else least


class _Units:
    """The model's byte figures in units of q, rounded up; `top`: the budget, rounded down."""

    def __init__(self, model: ChainModel, q: int, top: int):
        def up(x):
            return -(-np.asarray(x, np.int64) // q)

        self.q, self.top = q, top
        self.out, self.kept, self.ct, self.pend = up(model.out), up(model.kept), up(model.ct), up(model.pend)
        self.extra = up(np.concatenate([[0], model.extra]))[:-1]  # extra[a]: x_a beyond kept[a-1]
        self.block_fwd = up(model.block_fwd)
        self.saved, self.dot_fwd, self.dot_back = up(model.saved), up(model.dot_fwd), up(model.dot_back)
        fwd, back = model.plain_need(np.arange(len(model))[:, None], np.arange(len(model) + 1)[None, :], 0)
        self.fwd_need, self.back_need = up(fwd), up(back)  # [a, b]


def _rows(table: np.ndarray, cells: tuple, shift, top: int) -> np.ndarray:
    """`table[*cells, s + k]` for k = 0..top: the entries for s = `shift` more held (s past
    top + 1 clipped to it: all inf), each a slice of one row rather than top + 1 cells gathered
    one by one."""
    windows = np.lib.stride_tricks.sliding_window_view(table, top + 1, axis=-1)
    return windows[(*cells, np.minimum(shift, top + 1))]


def _plain_costs(u: _Units, part: np.ndarray, cost: np.ndarray, a: np.ndarray, b: np.ndarray,
                 k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows: ranges [a, b) starting with stage a plain, with x_a held whole or in part; columns:
    memory held."""
    kk = k[None, :]
    fwd, back = u.fwd_need[a, b][:, None], u.back_need[a, b][:, None]
    rest = cost[a][:, None] + (0.0 if b[0] - a[0] == 1 else _rows(part, (a + 1, b), u.kept[a], u.top))
    fits = kk + back <= u.top
    return (np.where(fits & (kk + fwd <= u.top), rest, np.inf),
            np.where(fits & (kk + fwd + u.extra[a][:, None] <= u.top), rest, np.inf))


def _block_costs(u: _Units, full: np.ndarray, prefix: np.ndarray, a: np.ndarray, b: np.ndarray, m: np.ndarray,
                 k: np.ndarray) -> np.ndarray:
    """Axis 0: ranges [a, b); axis 1: the block over [a, m) for each m of the row; axis 2: memory
    held (x_a included)."""
    rest = _rows(full, (m, b[:, None]), u.out[m - 1], u.top)
    again = _rows(full, (a[:, None], m), u.ct[b][:, None], u.top)
    need = u.block_fwd[a[:, None], m] + u.pend[b][:, None]
    fits = k[None, None, :] + need[:, :, None] <= u.top
    return np.where(fits, (prefix[m] - prefix[a][:, None])[:, :, None] + rest + again, np.inf)


def _saving_block_costs(u: _Units, full: np.ndarray, prefix: np.ndarray, skipped: np.ndarray, t: int,
                        a: np.ndarray, b: np.ndarray, m: np.ndarray, k: np.ndarray) -> np.ndarray:
    """`_block_costs` of blocks saving products of kind t: the rest holds them too, and the
    block's backward runs its body once more, plainly, without the products."""
    kk = k[None, None, :]
    held = u.out[m - 1] + u.saved[t, a[:, None], m]
    rest = _rows(full, (m, b[:, None]), held, u.top)
    need = np.maximum(u.dot_fwd[t, a[:, None], m] + u.pend[b][:, None],
                      u.dot_back[t, a[:, None], m] + u.ct[b][:, None])
    runs = 2 * (prefix[m] - prefix[a][:, None]) - skipped[a[:, None], m]
    return np.where(kk + need[:, :, None] <= u.top, runs[:, :, None] + rest, np.inf)


def _rebuild(choose, model: ChainModel, a: int, b: int, units: _Units | None = None, held: int = 0) -> Schedule:
    """The schedule the tables of choices (`choose(side, a, b, held)`) describe for [a, b),
    entered with `held` already held."""
    src = model if units is None else units
    extra = np.concatenate([[0], model.extra]) if units is None else units.extra

    def walk(a: int, b: int, k: int, side: int) -> Schedule:
        segments: list = []
        while a < b:
            m = PLAIN if b - a == 1 else choose(side, a, b, k)
            if m == PLAIN:
                segments.append(a)
                k, a, side = k + int(src.kept[a]), a + 1, 1
            elif m > SAVING:
                t, m = m // SAVING - 1, m % SAVING
                k += int(extra[a]) if side else 0
                segments.append((a, m, tuple(range(a, m)), t))
                k, a, side = k + int(src.out[m - 1]) + int(src.saved[t, a, m]), m, 0
            else:
                k += int(extra[a]) if side else 0
                segments.append((a, m, walk(a, m, k + int(src.ct[b]), 0)))
                k, a, side = k + int(src.out[m - 1]), m, 0
        return tuple(segments)

    return walk(a, b, held, 0)


# ---------------------------------------------------------------- schedules: peak, cost, Plan


def schedule_peak(model: ChainModel, schedule: Schedule) -> int:
    """The model's peak for `schedule`: the events the DP checks, one by one."""
    extra = np.concatenate([[0], model.extra])

    def walk(segs: Schedule, b: int, k: int, part: bool) -> int:
        high = 0
        for seg in segs:
            if isinstance(seg, int):
                fwd, back = model.plain_need(seg, b, k)
                high = max(high, fwd + (extra[seg] if part else 0), back)
                k, part = k + int(model.kept[seg]), True
            elif _saves(seg):
                a, m, _, t = seg
                k += int(extra[a]) if part else 0
                high = max(high, k + model.dot_fwd[t, a, m] + model.pend[b], k + model.ct[b] + model.dot_back[t, a, m])
                k, part = k + int(model.out[m - 1]) + int(model.saved[t, a, m]), False
            else:
                a, m, body = seg
                k += int(extra[a]) if part else 0
                high = max(high, k + model.block_fwd[a, m] + model.pend[b], walk(body, m, k + int(model.ct[b]), False))
                k, part = k + int(model.out[m - 1]), False
        return int(high)

    return walk(schedule, len(model), 0, False)


def schedule_cost(model: ChainModel, schedule: Schedule) -> float:
    """Forward cost of the stages the schedule runs: each stage once, and once more per block
    around it (a block saving its products runs its body without them once more), less what
    each block's recomputation leaves out (`ChainModel.tail`)."""

    def walk(segs: Schedule, depth: int) -> float:
        total = 0.0
        for seg in segs:
            if isinstance(seg, int):
                total += (depth + 1) * model.cost[seg]
            elif _saves(seg):
                a, m, body, t = seg
                total += walk(body, depth + 1) - model.skipped[t, a, m] - model.spared[m]
            else:
                total += walk(seg[2], depth + 1) - model.spared[seg[1]]
        return total

    return walk(schedule, 0)


def to_plan(model: ChainModel, schedule: Schedule) -> Plan:
    """The schedule as planner Blocks over the stages' node ranges (`NO_PLAN` where it has none)."""

    def block(seg: tuple) -> Block:
        a, m, body = seg[:3]
        saves = model.products.block_nodes(seg[3], a, m) if _saves(seg) else frozenset()
        return Block(model.bounds[a], model.bounds[m], blocks(body), saves)

    def blocks(segs: Schedule) -> tuple[Block, ...]:
        return tuple(block(s) for s in segs if not isinstance(s, int))

    made = blocks(schedule)
    return Plan(made, "chain") if made else NO_PLAN


# ---------------------------------------------------------------- the strategy


def plan_chain(graph: Graph, budget_bytes: int, step: Step = ALL) -> Plan | None:
    """The chain plan of least recomputation whose predicted total peak (the step's inputs and
    constants included, as a `memory_budget` counts) is at most `budget_bytes`; None when no
    chain schedule fits. The prediction is the DP's model: `solve.plan_step` checks the exact
    peak and asks for other budgets where it is over or well under.

    >>> import remat as rm
    >>> layer = lambda h: h + rm.tanh(h)
    >>> g = rm.make_graph(lambda x: rm.sum(layer(layer(layer(layer(x))))))(rm.ones((1024,)))
    >>> plan_chain(g, 10**9).blocks  # room for everything: nothing to recompute
    ()
    >>> len(plan_chain(g, min_chain_peak(g)).blocks) > 0
    True
    """
    found = plan_chains(graph, [budget_bytes], step)[0]
    return None if found is None else found.plan


class Chained(NamedTuple):
    """A chain plan with the DP model's predictions: its total peak (where the plan is below the
    model's least, its exact count) and the forward cost it runs (`schedule_cost`)."""

    plan: Plan
    peak: int
    cost: float


def plan_chains(graph: Graph, budgets: list[int], step: Step = ALL) -> list[Chained | None]:
    """`plan_chain` for each of `budgets`, from one DP table, with the model's predictions."""
    model = chain_model(graph, step)
    base = base_bytes(graph)
    low, frugal = min_peak(model)
    rooms = [int(b) - base for b in budgets]
    # One table for every budget of the graph (its own top: the step without a plan), so that
    # each budget chooses among the same plans: a bigger budget never gets a costlier one.
    plain = tuple(range(len(model)))
    top = max(schedule_peak(model, plain), low)
    able = sorted({r for r in rooms if low <= r < top} | {low})
    found = dict(zip(able, cheapest_each(model, able, top)))
    found.update((r, plain) for r in rooms if r >= top)  # room for the step without a plan
    least = found[low] or frugal  # as `_least`
    least_peak = None
    plans: list[Chained | None] = []
    for budget, room in zip(budgets, rooms):
        if room >= low:
            schedule = least if found[room] is None else found[room]
            plans.append(Chained(to_plan(model, schedule), base + schedule_peak(model, schedule),
                                 schedule_cost(model, schedule)))
            continue
        # Below the model's least peak, the least plan may still fit by the exact count.
        least_peak = total_peak(graph, to_plan(model, least), step) if least_peak is None else least_peak
        fits = least_peak <= budget
        plans.append(Chained(to_plan(model, least), least_peak, schedule_cost(model, least)) if fits else None)
    return plans


def min_chain_peak(graph: Graph, step: Step = ALL) -> int:
    """The least total peak (inputs and constants included) a chain plan reaches: the exact
    count (`peak.total_peak`) of the plan of least predicted peak. `plan_chain` finds a plan
    for any budget at least this."""
    return total_peak(graph, least_plan(graph, step), step)


def least_plan(graph: Graph, step: Step = ALL) -> Plan:
    """The chain plan of least predicted peak (the cheapest such)."""
    model = chain_model(graph, step)
    return to_plan(model, _least(model))


def _least(model: ChainModel) -> Schedule:
    """The cheapest schedule of least predicted peak (the least-peak schedule itself where the
    table's rounding leaves no schedule at that peak)."""
    low, schedule = min_peak(model)
    cheap = cheapest(model, low)
    return schedule if cheap is None else cheap


__all__ = ["ChainModel", "chain_model", "min_peak", "cheapest", "cheapest_each", "schedule_peak", "schedule_cost",
           "to_plan", "plan_chain", "plan_chains", "Chained", "min_chain_peak"]
