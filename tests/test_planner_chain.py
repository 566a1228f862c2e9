"""The chain strategy (`remat.planner.chain`): its DP is optimal (Revolve's binomial count on
equal steps, brute force on small heterogeneous chains), its plans recompute what it counts,
fit the budget by the evaluator's exact count, keep gradients bit for bit, and plan fast."""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np
import pytest

import remat as rm
from remat import tree
from remat.loops import revolve
from remat.models import residual_mlp_loss, residual_mlp_params
from remat.planner import chain
from remat.planner.chain import ChainModel, cheapest, min_peak, schedule_cost, schedule_peak, to_plan
from remat.planner.peak import ALL, base_bytes, step_graph, step_peak, total_peak
from remat.planner.products import SavedProducts

# ---------------------------------------------------------------- abstract chains


def revolve_chain(length: int, tape: int = 100) -> ChainModel:
    """Revolve's setting: equal steps of unit cost; a snapshot (a block's output) costs 1, a
    step's tape `tape` (so only the step being reversed holds one), cotangents nothing."""
    one = np.ones(length, np.int64)
    return ChainModel(np.ones(length), one, 0 * one, tape * one, 0 * one, one, tape * one, 0 * one,
                      tuple(range(length + 1)))


@pytest.mark.parametrize("length, snapshots", [(2, 1), (5, 1), (5, 2), (10, 2), (10, 3), (20, 3), (30, 4),
                                               (64, 3), (64, 6)])
def test_equal_steps_recompute_revolve_binomial_count(length, snapshots):
    # Room for s step outputs held (the input is free) is Revolve's s snapshots (which count
    # the input but not the current carry): reversing T steps takes F(T, s) advances plus one
    # evaluation per step in its youturn, Griewank and Walther's binomial optimum.
    model = revolve_chain(length)
    schedule = cheapest(model, snapshots + 100)
    assert schedule_cost(model, schedule) == revolve.advances(length, snapshots) + length
    assert schedule_peak(model, schedule) <= snapshots + 100


def test_one_snapshot_fewer_costs_more():
    model = revolve_chain(20)
    assert schedule_cost(model, cheapest(model, 103)) == 65  # F(20, 3) + 20
    assert schedule_cost(model, cheapest(model, 102)) == revolve.advances(20, 2) + 20 == 85
    assert cheapest(model, 100) is None  # no room for even the last step's output
    assert min_peak(model)[0] == 101


def all_schedules(a: int, b: int):
    """Every schedule of stages [a, b): plain stage a or a block [a, m) (m < b), then the rest."""
    if b - a == 1:
        yield (a,)
        return
    for rest in all_schedules(a + 1, b):
        yield (a, *rest)
    for m in range(a + 1, b):
        for body in all_schedules(a, m):
            for rest in all_schedules(m, b):
                yield ((a, m, body), *rest)


def random_chain(rng: np.random.Generator, length: int) -> ChainModel:
    def sizes(lo, hi):
        return rng.integers(lo, hi, length).astype(np.int64)

    dout = sizes(1, 4)
    dout[-1] = 0
    return ChainModel(rng.uniform(1, 5, length), sizes(1, 5), dout, sizes(0, 6), sizes(0, 3), sizes(1, 6),
                      sizes(2, 9), sizes(0, 2), tuple(range(length + 1)))


@pytest.mark.parametrize("seed", range(12))
def test_dp_is_optimal_on_small_heterogeneous_chains(seed):
    rng = np.random.default_rng(seed)
    model = random_chain(rng, int(rng.integers(2, 6)))
    options = [(schedule_peak(model, s), schedule_cost(model, s), s) for s in all_schedules(0, len(model))]
    least = min(p for p, _, _ in options)
    assert min_peak(model)[0] == least
    assert schedule_peak(model, min_peak(model)[1]) == least
    for budget in range(least, max(p for p, _, _ in options) + 1):
        schedule = cheapest(model, budget)  # budgets this small are counted in single bytes
        assert schedule_peak(model, schedule) <= budget
        best = min(f for p, f, _ in options if p <= budget)
        assert schedule_cost(model, schedule) == pytest.approx(best, rel=1e-12)
    assert cheapest(model, least - 1) is None


def with_products(model: ChainModel, rng: np.random.Generator, kinds: int = 2) -> ChainModel:
    """`model` with `kinds` kinds of products a block may save (bytes, cost, bytes kept anyway),
    kind 1 saving more than kind 0, and a tail each stage's recomputation may leave out."""
    n = len(model)
    nbytes = np.cumsum(rng.integers(0, 3, (kinds, 2, n)), axis=0)
    cost = np.cumsum(rng.uniform(0, 1, (kinds, 2, n)), axis=0)
    kept = np.minimum(nbytes, rng.integers(0, 2, (kinds, 2, n)))
    nodes = tuple(tuple(tuple(frozenset() for _ in range(n)) for _ in range(2)) for _ in range(kinds))
    tail = rng.uniform(0, 0.5, n)
    return dataclasses.replace(model, products=SavedProducts(nbytes, cost, kept, nodes), tail=tail)


def all_schedules_saving(a: int, b: int, kinds: int):
    """`all_schedules`, and blocks saving products of each kind (their bodies run plainly)."""
    if b - a == 1:
        yield (a,)
        return
    for rest in all_schedules_saving(a + 1, b, kinds):
        yield (a, *rest)
    for m in range(a + 1, b):
        for rest in all_schedules_saving(m, b, kinds):
            for body in all_schedules_saving(a, m, kinds):
                yield ((a, m, body), *rest)
            for t in range(kinds):
                yield ((a, m, tuple(range(a, m)), t), *rest)


@pytest.mark.parametrize("seed", range(8))
def test_dp_is_optimal_with_blocks_that_save_products(seed):
    rng = np.random.default_rng(100 + seed)
    model = with_products(random_chain(rng, int(rng.integers(2, 6))), rng)
    options = [(schedule_peak(model, s), schedule_cost(model, s), s)
               for s in all_schedules_saving(0, len(model), model.kinds)]
    least = min(p for p, _, _ in options)
    for budget in range(least, max(p for p, _, _ in options) + 1):
        schedule = cheapest(model, budget)
        assert schedule_peak(model, schedule) <= budget
        best = min(f for p, f, _ in options if p <= budget)
        assert schedule_cost(model, schedule) == pytest.approx(best, rel=1e-9)


def test_one_table_answers_every_budget_up_to_its_own():
    rng = np.random.default_rng(7)
    model = with_products(random_chain(rng, 12), rng)
    low = min_peak(model)[0]
    budgets = list(range(low, low + 40, 3))
    schedules = chain.cheapest_each(model, budgets)
    costs = [schedule_cost(model, s) for s in schedules]
    assert all(schedule_peak(model, s) <= b for s, b in zip(schedules, budgets))
    assert costs == sorted(costs, reverse=True)  # more room never costs more
    # In single bytes (these budgets are small), the table of the largest is each one's own.
    assert costs == [schedule_cost(model, cheapest(model, b)) for b in budgets]


def test_sixty_four_stages_plan_well_under_a_second():
    rng = np.random.default_rng(0)
    n = 64
    model = ChainModel(rng.uniform(1, 3, n), rng.integers(1000, 3000, n), rng.integers(1000, 3000, n),
                       rng.integers(3000, 9000, n), rng.integers(0, 3000, n), rng.integers(3000, 9000, n),
                       rng.integers(3000, 12000, n), rng.integers(0, 300, n), tuple(range(n + 1)))
    low = min_peak(model)[0]
    for budget in (low * 3 // 2, low * 4):
        started = time.process_time()
        schedule = cheapest(model, budget)
        assert time.process_time() - started < 1.0
        assert schedule_peak(model, schedule) <= budget
    assert schedule_cost(model, cheapest(model, low * 4)) < schedule_cost(model, cheapest(model, low * 3 // 2))


# ---------------------------------------------------------------- real graphs


def tanh_chain(length: int, size: int = 64):
    """x -> tanh -> ... -> sum: node i is step i. tanh's gradient reads its output, so a block's
    backward recomputes every tanh in it."""

    def f(x):
        for _ in range(length):
            x = rm.tanh(x)
        return rm.sum(x)

    return rm.make_graph(f)(rm.ones((size,)))


@pytest.mark.parametrize("length, snapshots", [(6, 2), (10, 2), (12, 3)])
def test_gradient_graph_runs_the_binomial_count_of_steps(length, snapshots):
    # The Revolve schedule as nested planner blocks over the tanh nodes: counting the tanh
    # nodes of the gradient program counts the step evaluations it runs.
    schedule = cheapest(revolve_chain(length), snapshots + 100)
    plan = to_plan(revolve_chain(length), schedule)
    assert len(plan.blocks) > 0
    graph = step_graph(tanh_chain(length), plan)
    assert graph.count("tanh") == revolve.advances(length, snapshots) + length
    assert step_graph(tanh_chain(length)).count("tanh") == length


def mlp(depth: int, batch: int = 256, width: int = 32):
    params = residual_mlp_params(depth, width)
    x = rm.asarray(np.random.default_rng(0).normal(size=(batch, width)), "float32")
    return params, x, rm.make_graph(residual_mlp_loss)(params, x)


def depth_of_nodes(plan) -> dict[int, int]:
    out: dict[int, int] = {}

    def visit(blocks, depth):
        for b in blocks:
            for i in b.nodes():
                out[i] = depth
            visit(b.inner, depth + 1)

    visit(plan.blocks, 1)
    return out


def test_plan_recomputes_what_the_model_counts():
    _, _, graph = mlp(8)
    model = chain.chain_model(graph)
    budget = step_peak(graph) // 2
    schedule = cheapest(model, budget)
    plan = to_plan(model, schedule)
    depth = depth_of_nodes(plan)
    tanhs = [i for i, n in enumerate(graph.nodes) if n.op == "tanh"]
    assert step_graph(graph, plan).count("tanh") == sum(1 + depth.get(i, 0) for i in tanhs) > 8
    per_layer = model.cost.sum() / 8  # one matmul, two adds, one tanh per layer
    assert schedule_cost(model, schedule) > model.cost.sum() + per_layer


@pytest.mark.parametrize("fraction", [0.3, 0.5, 0.75])
def test_plans_fit_the_budget_by_the_exact_count(fraction):
    _, _, graph = mlp(16)
    base, activation = base_bytes(graph), step_peak(graph)
    budget = base + int(fraction * activation)
    plan, predicted, _ = chain.plan_chains(graph, [budget])[0]
    exact = total_peak(graph, plan)
    assert predicted <= budget
    # The model follows the evaluator's count: a few KiB under it at most, a layer over.
    assert -8192 <= predicted - exact <= 256 * 32 * 4
    assert exact <= budget + 8192
    assert plan.strategy == "chain"


def test_plenty_of_budget_plans_nothing_and_too_little_plans_none():
    _, _, graph = mlp(8)
    plain = total_peak(graph)
    assert chain.plan_chain(graph, 2 * plain).blocks == ()
    low = chain.min_chain_peak(graph)
    assert low < plain / 2
    plan = chain.plan_chain(graph, low)
    assert plan is not None and total_peak(graph, plan) <= low
    assert chain.plan_chain(graph, low // 2) is None
    assert chain.plan_chain(graph, -1) is None


def test_least_budget_keeps_a_logarithmic_number_of_activations():
    # The least peak grows like log L (Revolve), not like L. Counted in residual-stream
    # activations on a narrow, tall MLP, whose weight gradients are small: log2(L) + 3 of them.
    unit = 2048 * 16 * 4
    for depth in (8, 16, 32):
        _, _, graph = mlp(depth, batch=2048, width=16)
        assert step_peak(graph) / unit > 2 * depth
        least = (chain.min_chain_peak(graph) - base_bytes(graph)) / unit
        assert math.log2(depth) + 2.5 < least < math.log2(depth) + 3.5


def test_gradients_with_the_chain_plan_are_bit_identical():
    params, x, _ = mlp(12)
    plain = rm.grad(residual_mlp_loss, argnums=(0, 1))(params, x)
    planned = rm.grad(residual_mlp_loss, argnums=(0, 1), memory_budget=0.3, strategy="chain")(params, x)
    for a, b in zip(tree.leaves(plain), tree.leaves(planned), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    report = rm.memory.plan_report(residual_mlp_loss, params, x, memory_budget=0.3, strategy="chain")
    assert report.strategy == "chain" and report.predicted_peak <= report.budget_bytes
    assert report.extra_flops > 0


def random_schedule(rng: np.random.Generator, a: int, b: int, depth: int = 0) -> tuple:
    segments: list = []
    while a < b:
        if b - a > 1 and depth < 4 and rng.random() < 0.4:
            m = int(rng.integers(a + 1, b))
            segments.append((a, m, random_schedule(rng, a, m, depth + 1)))
            a = m
        else:
            segments.append(a)
            a += 1
    return tuple(segments)


def test_model_follows_the_exact_count_on_any_schedule():
    # Nested blocks, blocks after plain stages, single-stage blocks: each applies as a plan,
    # and the model's peak is the evaluator's within a few KiB below and a layer's activations above.
    _, _, graph = mlp(8)
    model = chain.chain_model(graph)
    rng = np.random.default_rng(1)
    unit = 256 * 32 * 4
    for _ in range(8):
        schedule = random_schedule(rng, 0, len(model))
        diff = schedule_peak(model, schedule) - step_peak(graph, to_plan(model, schedule))
        assert -8192 <= diff <= 2 * unit


def test_transformer_blocks_plan_within_the_budget():
    from remat.bench.config import GPT, inputs
    from remat.models import gpt_loss

    size = GPT(layers=3, d_model=32, heads=2, seq=32, batch=4, vocab=64)
    params, data = inputs(size)

    def loss(params, data):
        return gpt_loss(params, data, "none", size.heads)

    graph = rm.make_graph(loss)(params, data)
    model = chain.chain_model(graph)
    activation, low = step_peak(graph), min_peak(model)[0]
    assert low < 0.6 * activation
    for budget in (int(1.1 * low), (low + activation) // 2):
        schedule = cheapest(model, budget)
        exact = step_peak(graph, to_plan(model, schedule))
        assert schedule_peak(model, schedule) <= budget
        assert abs(schedule_peak(model, schedule) - exact) <= 0.05 * exact
    report = rm.memory.plan_report(loss, params, data, memory_budget=0.5, strategy="chain")
    assert report.strategy == "chain" and report.predicted_peak <= report.budget_bytes


def test_a_scan_stage_counts_the_residuals_its_gradient_stacks():
    # A scan's gradient keeps one residual per step (5 here), made by the forward scan: the
    # model must count them as what the stage keeps, or it would plan for a quarter of the peak.
    def f(x):
        h, _ = rm.scan(lambda c, _: (rm.tanh(c) + c, None), x, None, length=5)
        for _ in range(5):
            h = rm.tanh(h) + h
        return rm.sum(h)

    graph = rm.make_graph(f)(rm.ones((64, 64)))
    model = chain.chain_model(graph)
    unit = 64 * 64 * 4
    assert model.kept[0] == 5 * unit
    plain = tuple(range(len(model)))
    assert step_peak(graph) <= schedule_peak(model, plain) <= step_peak(graph) + unit
    least = chain._least(model)
    assert schedule_peak(model, least) == step_peak(graph, to_plan(model, least)) == 7 * unit + 4


def _custom(op):
    @rm.custom_vjp
    def f(x):
        return op(x)

    f.defvjp(lambda x: (op(x), x), lambda x, g: (g * rm.cos(x),))
    return f


def test_repeated_stages_with_sub_graphs_are_counted_once_per_kind(monkeypatch):
    # Layers holding a custom_vjp (as the GPT-style model's layer norms do) repeat too: their
    # gradients' own peaks are worked out as often as those of the same layers without one, a
    # kind being the ops, shapes and wiring of the stage and of the bodies it holds (a body of
    # other ops is another kind); each figure is the stage's own.
    rng = np.random.default_rng(0)
    ws = [rng.standard_normal((32, 32)).astype(np.float32) for _ in range(8)]
    x = rm.asarray(rng.standard_normal((16, 32)).astype(np.float32))
    worked = []
    real = chain._own_peak

    def counted(graph, stage, kept):
        worked.append(stage)
        return real(graph, stage, kept)

    def model_of(kinds):
        def loss(x):
            for w, f in zip(ws, kinds):
                x = f(x @ w) + x
            return rm.sum(x * x)

        graph = rm.make_graph(loss)(x)
        worked.clear()
        model = chain.chain_model(graph)
        kept = chain._kept_values(graph, ALL)
        stages = chain.merged(graph, chain.stages(graph, ALL), chain.MOST_STAGES)
        assert model.own.tolist() == [real(graph, s, kept)[0] for s in stages]
        return len(model), len(worked)

    monkeypatch.setattr(chain, "_own_peak", counted)
    stages, plain = model_of([rm.sin] * 8)
    assert plain < stages
    assert model_of([_custom(rm.sin)] * 8) == (stages, plain)
    assert model_of([_custom(rm.sin), _custom(rm.tanh)] * 4)[1] > plain
