"""The "milp" strategy (issue 15): the program's optimum equals the brute-force one on tiny
graphs, its plans fit and are never worse than the chain and √n plans, gradients with its plans
are bit-identical, and when HiGHS finds nothing (or nothing that fits) the best start plan comes
back, saying so."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import remat as rm
from remat import models
from remat.backends import numpy as numpy_backend
from remat.bench.config import GPT, inputs
from remat.planner import milp
from remat.planner.chain import plan_chain
from remat.planner.peak import activation_bytes, base_bytes, step_graph, total_peak
from remat.planner.plan import NO_PLAN, Block, Plan
from remat.planner.report import extra_cost
from remat.planner.sqrt import plan_sqrt, segment_plans
from remat.planner.stages import is_chain, merged, stages


def chain_fn(layers: int = 3):
    """`x * 1.5`, `layers` layers of `h + tanh(h @ w) * h`, a sum: 2 + layers stages, the stream
    `h` crossing each cut and held by the next layer's product."""
    rng = np.random.default_rng(0)
    ws = [rm.asarray(rng.normal(0, 0.3, (16, 16)), "float32") for _ in range(layers)]

    def f(ws, x):
        h = x * 1.5
        for w in ws:
            h = h + rm.tanh(h @ w) * h
        return rm.sum(h)

    return f, (ws, rm.asarray(rng.normal(size=(32, 16)), "float32"))


def skip_fn():
    """`e = x * 1.5` is read by both layers (`h + tanh(h @ w) * e`): a value crossing several
    cuts, held by each layer's product until the backward pass reaches the first layer."""
    rng = np.random.default_rng(1)
    ws = [rm.asarray(rng.normal(0, 0.3, (16, 16)), "float32") for _ in range(2)]

    def f(ws, x):
        e, h = x * 1.5, x * 2.0
        for w in ws:
            h = h + rm.tanh(h @ w) * e
        return rm.sum(h)

    return f, (ws, rm.asarray(rng.normal(size=(32, 16)), "float32"))


def graph_of(fn, args):
    return rm.make_graph(fn)(*args)


def flat_plans(graph) -> list[Plan]:
    """Every one-level plan over the stages: each run of stages plain or a block, each block
    saving any subset of its matrix products."""
    chain = stages(graph)
    n, out = len(chain), {}
    for cuts in itertools.product([0, 1], repeat=n - 1):
        bounds = [0] + [t + 1 for t, c in enumerate(cuts) if c] + [n]
        runs = list(zip(bounds, bounds[1:]))
        for kinds in itertools.product([0, 1], repeat=len(runs)):
            blocks = [(chain[i].start, chain[j - 1].stop) for (i, j), k in zip(runs, kinds) if k]
            dots = [[i for i in range(a, b) if graph.nodes[i].op == "matmul"] for a, b in blocks]
            for picks in itertools.product(*[itertools.product([0, 1], repeat=len(d)) for d in dots]):
                plan = Plan(tuple(Block(a, b, save=frozenset(i for i, p in zip(d, pick) if p))
                                  for (a, b), d, pick in zip(blocks, dots, picks)), "milp")
                out[plan.blocks] = plan
    return list(out.values())


# ---------------------------------------------------------------- the program itself


def test_program_optimum_equals_brute_force_over_its_model():
    """HiGHS's optimum of the program equals the cheapest plan whose modelled peak fits, found
    by evaluating the model on every plan of a 5-stage graph."""
    g = graph_of(*chain_fn(3))
    chain = stages(g)
    assert len(chain) == 5
    program = milp._Program(milp._buffers(g, chain), chain)
    plans = flat_plans(g)
    assert len(plans) > 100
    modelled = [(program.peak(program.assignment(p)), extra_cost(g, p), p) for p in plans]
    peaks = sorted({m for m, _, _ in modelled})
    for capacity in peaks[:: max(1, len(peaks) // 6)] + [peaks[-1]]:
        best = min(f for m, f, _ in modelled if m <= capacity)
        result = program.solve(capacity, None, 10.0, nodes=10**6)  # solved to optimality
        assert result.status == 0
        plan = program.decode(result.x, g)
        assert extra_cost(g, plan) == pytest.approx(best, rel=1e-9)
        assert program.peak(program.assignment(plan)) <= capacity * (1 + 1e-9)


def test_below_the_least_modelled_peak_the_program_is_infeasible():
    g = graph_of(*chain_fn(3))
    chain = stages(g)
    program = milp._Program(milp._buffers(g, chain), chain)
    least = min(program.peak(program.assignment(p)) for p in flat_plans(g))
    assert program.solve(least - 1024, None, 10.0, nodes=10**6).status == 2


def _alive(program, assignment, buf, k) -> float:
    """The model's `a[buf, k]` under an assignment."""
    return program.values(assignment)[program.alive[id(buf), k]]


def test_model_counts_a_value_until_the_last_stage_that_holds_it():
    """`e` (stage 0) is read and held by both layers' products (stages 3 and 4: the skip makes
    this graph no chain, so the first layer is cut at its local minimum, into stages 2 and 3).
    Plain, it lives from its first reader until the backward pass is done with it; with the
    layers in one block, it is the block's input, alive from the block's start; with its own
    stage in the block too, it is recomputed in the block's backward only (positions 3 and 4),
    not kept from the forward pass."""
    g = graph_of(*skip_fn())
    chain = stages(g)
    assert len(chain) == 7 and not is_chain(g)
    program = milp._Program(milp._buffers(g, chain), chain)
    (e,) = [b for b in program.bufs.crossing if len(b.readers) == 2 and b.stage == 0]
    assert e.readers == e.holders == {3, 4}
    pattern = lambda plan: [_alive(program, program.assignment(plan), e, k) for k in range(7)]  # noqa: E731
    assert pattern(NO_PLAN) == [0, 0, 0, 1, 1, 1, 1]
    assert pattern(Plan((Block(chain[2].start, chain[4].stop),))) == [0, 0, 1, 1, 1, 1, 1]
    assert pattern(Plan((Block(chain[0].start, chain[4].stop),))) == [0, 0, 0, 1, 1, 0, 0]


# ---------------------------------------------------------------- plan_milp against brute force


@pytest.mark.claims
@pytest.mark.parametrize("make", [chain_fn, skip_fn], ids=["chain", "skip"])
def test_plan_milp_matches_brute_force_on_exact_peaks(make):
    """On every budget between the least and the unplanned peak, the MILP's plan fits (exact
    count) and recomputes no more than the cheapest flat plan that fits."""
    g = graph_of(*make())
    assert len(stages(g)) <= 7  # no more than ~1,500 plans to count exactly
    exact = [(total_peak(g, p), extra_cost(g, p)) for p in flat_plans(g)]
    peaks = sorted({m for m, _ in exact})
    for budget in peaks[:: max(1, len(peaks) // 5)]:
        best = min(f for m, f in exact if m <= budget)
        plan, info = milp.plan_milp(g, budget)
        assert info.peak == total_peak(g, plan) <= budget
        assert info.objective == extra_cost(g, plan) <= best * (1 + 1e-9) + 1e-9, (budget, info)


def test_merged_stages_cover_the_chain_with_fewer_cuts():
    g = graph_of(*chain_fn(10))
    chain = stages(g)
    assert len(chain) == 12 and merged(g, chain, 12) is chain
    coarse = merged(g, chain, 5)
    assert len(coarse) == 4  # groups of ceil(12 / 5) = 3 stages
    last = [chain[min(i + 2, 11)] for i in range(0, 12, 3)]
    assert [(s.start, s.stop) for s in coarse] == [(chain[i].start, t.stop) for i, t in zip(range(0, 12, 3), last)]
    assert sum(s.cost for s in coarse) == pytest.approx(sum(s.cost for s in chain), rel=1e-12)
    assert [s.out_bytes for s in coarse] == [t.out_bytes for t in last]
    assert sum(s.kept_bytes for s in coarse) == sum(s.kept_bytes for s in chain)
    assert all(s.internal_bytes >= max(t.internal_bytes for t in chain if s.start <= t.start < s.stop) for s in coarse)


def test_a_long_chain_is_planned_over_merged_stages(monkeypatch):
    """Past MOST_STAGES the program is built over merged stages: every block the MILP places
    starts and stops at a merged boundary, and the plan fits."""
    monkeypatch.setattr(milp, "MOST_STAGES", 4)
    g = graph_of(*chain_fn(10))
    coarse = merged(g, stages(g), 4)
    budget = (total_peak(g) + total_peak(g, plan_sqrt(g))) // 2
    plan, info = milp.plan_milp(g, budget)
    assert not info.fallback and plan.strategy == "milp" and info.peak == total_peak(g, plan) <= budget
    starts, stops = {s.start for s in coarse}, {s.stop for s in coarse}
    assert plan.blocks and all(b.start in starts and b.stop in stops for b in plan.blocks)


# ---------------------------------------------------------------- fallback and reporting


def test_no_time_returns_the_best_start_plan_and_says_so():
    g = graph_of(*chain_fn(3))
    layer = stages(g)[1]
    start = Plan((Block(layer.start, layer.stop),), "chain")
    budget = total_peak(g, start)
    plan, info = milp.plan_milp(g, budget, time_limit=0.0, start=[start])
    assert plan == start and plan.strategy == "chain"
    assert info.fallback and info.status.startswith("not run")
    assert info.objective == extra_cost(g, start) and info.peak == budget and info.gap is None


def test_a_plan_over_budget_is_refused_for_a_start_plan(monkeypatch):
    """Whatever HiGHS proposes is checked by the exact count: here every proposal is the
    unplanned step, over budget, so the start plan that fits comes back, flagged."""
    g = graph_of(*chain_fn(3))
    chain = stages(g)
    start = Plan(tuple(Block(s.start, s.stop) for s in chain[1:4]), "sqrt")
    budget = total_peak(g, start)
    proposals = []
    monkeypatch.setattr(milp._Program, "decode", lambda self, x, graph: proposals.append(x) or NO_PLAN)
    plan, info = milp.plan_milp(g, budget, start=[start])
    assert proposals, "HiGHS proposed nothing: the test checks nothing"
    assert plan == start and info.fallback and info.peak == budget
    assert "best of them is returned" in info.status


def test_nothing_fits_returns_the_least_peak_found():
    g = graph_of(*chain_fn(3))
    plan, info = milp.plan_milp(g, 1, time_limit=5.0)
    assert info.peak > 1 and info.peak == total_peak(g, plan)
    assert info.peak == min(total_peak(g, p) for p in [NO_PLAN, *segment_plans(g)])
    assert info.fallback and info.status.startswith("infeasible: no plan the model allows fits")


@pytest.mark.parametrize("fn, nodes", [(lambda x: x, 0), (lambda x: rm.sum(rm.tanh(x)), 2)], ids=["empty", "tiny"])
def test_graphs_with_nothing_to_plan(fn, nodes):
    g = graph_of(fn, (rm.ones((8,)),))
    assert len(g.nodes) == nodes
    plan, info = milp.plan_milp(g, total_peak(g), time_limit=5.0)
    assert plan == NO_PLAN and info.fallback and info.objective == 0.0 and info.peak == total_peak(g)
    assert info.status == ("not run: the graph has no nodes to plan" if not nodes else
                           "not run: a start plan fits without recomputing anything")


def test_the_milp_plan_is_named_milp_and_saves_only_inside_its_blocks():
    g = graph_of(*chain_fn(3))
    budget = base_bytes(g) + int(0.9 * activation_bytes(g))
    plan, info = milp.plan_milp(g, budget)
    assert not info.fallback and plan.strategy == "milp" and plan.blocks
    assert info.peak <= budget and any(b.save for b in plan.blocks)
    assert all(b.start <= i < b.stop and g.nodes[i].op == "matmul" for b in plan.blocks for i in b.save)


# ---------------------------------------------------------------- gradients


def small_gpt():
    params, data = inputs(GPT(layers=2, d_model=16, heads=2, seq=32, batch=4, vocab=11))
    return (lambda p, d: models.gpt_loss(p, d, "none", 2)), (params, data)


@pytest.mark.parametrize("share", [pytest.param(0.75, marks=pytest.mark.claims), 0.9])
def test_gradients_with_the_milp_plan_are_bit_identical(share):
    """The step with the MILP's own plan applied, run by the NumPy evaluator, returns the loss
    and every gradient bit for bit as the unplanned step does."""
    fn, args = small_gpt()
    g = graph_of(fn, args)
    budget = base_bytes(g) + int(share * activation_bytes(g))
    plan, info = milp.plan_milp(g, budget)
    assert plan.blocks and info.peak <= budget and not info.fallback
    arrays = [np.asarray(rm.asarray(a)) for a in rm.tree.leaves(args)]
    got = numpy_backend.run(step_graph(g, plan), arrays)
    want = numpy_backend.run(step_graph(g, NO_PLAN), arrays)
    assert len(got) == len(want) > 10
    for u, v in zip(got, want, strict=True):
        np.testing.assert_array_equal(u, v)
    assert info.peak == total_peak(g, plan)


def test_grad_with_strategy_milp_is_bit_identical():
    fn, args = small_gpt()
    got = rm.grad(fn, memory_budget=0.5, strategy="milp")(*args)
    for u, v in zip(rm.tree.leaves(got), rm.tree.leaves(rm.grad(fn)(*args)), strict=True):
        np.testing.assert_array_equal(np.asarray(u), np.asarray(v))


# ---------------------------------------------------------------- the GPT-style model


@pytest.mark.claims
@pytest.mark.parametrize("share", [0.25, 0.5, 0.75])
def test_gpt_never_worse_than_chain_and_sqrt(share):
    """8 blocks, the bench's size: a plan that fits, recomputing no more than the chain DP's or
    the √n plan (when they fit). HiGHS stops at its node limits, so the plan does not depend on
    the machine's speed; the time it takes is the bench's figure (`remat bench --planner`)."""
    params, data = inputs(GPT(layers=8, d_model=128, heads=4, seq=128, batch=16, vocab=256))
    g = rm.make_graph(lambda p, d: models.gpt_loss(p, d, "none", 4))(params, data)
    budget = base_bytes(g) + int(share * activation_bytes(g))
    starts = [p for p in (plan_chain(g, budget), plan_sqrt(g)) if p is not None]
    plan, info = milp.plan_milp(g, budget, start=starts)
    assert info.peak == total_peak(g, plan) <= budget
    for other in starts:
        if total_peak(g, other) <= budget:
            assert info.objective <= extra_cost(g, other)


# ---------------------------------------------------------------- determinism (work limits, not seconds)


def test_highs_runs_under_a_node_limit_and_the_plan_ignores_the_clock(monkeypatch):
    """The same graph and budget give the same plan however slow the machine: HiGHS stops at a
    node count, and the time limit, when not reached, changes nothing."""
    g = graph_of(*skip_fn())
    budget = (total_peak(g) + total_peak(g, plan_sqrt(g))) // 2
    options = []
    highs = milp.optimize.milp
    monkeypatch.setattr(milp.optimize, "milp", lambda *a, **k: options.append(dict(k["options"])) or highs(*a, **k))
    plan, info = milp.plan_milp(g, budget, nodes=50)
    assert options and all(o["node_limit"] == 50 for o in options)
    for limit in (20.0, 1000.0):
        again, again_info = milp.plan_milp(g, budget, nodes=50, time_limit=limit)
        assert again == plan and again_info.status == info.status and again_info.objective == info.objective
    clock = iter(range(0, 10**6, 3))  # a machine where every check takes 3 s
    monkeypatch.setattr(milp.time, "perf_counter", lambda: float(next(clock)))
    slow, slow_info = milp.plan_milp(g, budget, nodes=50, time_limit=1000.0)
    assert slow == plan and slow_info.status == info.status


def test_reaching_the_time_limit_returns_the_best_start_plan_not_a_partial_one(monkeypatch):
    g = graph_of(*skip_fn())
    start = plan_sqrt(g)
    budget = total_peak(g, start)
    solve_program = milp._Program.solve
    calls = []

    def timed_out_second(self, *args):
        result = solve_program(self, *args)
        calls.append(result)
        if len(calls) == 2:
            result.status, result.message = 1, "Time limit reached. "
        return result

    monkeypatch.setattr(milp._Program, "solve", timed_out_second)
    plan, info = milp.plan_milp(g, budget, start=[start])
    assert len(calls) >= 2, "HiGHS converged in one run: no second run to time out, the test checks nothing"
    assert info.fallback and plan.strategy != "milp"
    assert "time limit of 300 s reached (a safety net)" in info.status
    assert info.peak <= budget and info.objective <= extra_cost(g, start)
