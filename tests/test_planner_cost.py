"""The planner's cost model (`remat.planner.cost`): FLOPs counted from shapes, time weighed per
backend, and plans that minimise time rather than FLOPs."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import numpy as np
import pytest

import remat as rm
from remat import models
from remat.bench.config import GPT, inputs
from remat.core import NOT_DIFFERENTIABLE, Aval
from remat.planner import cost, solve
from remat.planner import peak as peaks
from remat.planner.plan import NO_PLAN
from remat.planner.report import extra_cost, extra_flops
from remat.planner.target import Target, running_on

ROOT = Path(__file__).resolve().parents[1]


def _graph(fn, *shapes):
    return rm.make_graph(fn)(*(rm.ones(s) for s in shapes))


def _only(graph):
    (node,) = [n for n in graph.nodes if n.op not in ("reshape", "broadcast_to")]
    return node


W = cost.Weights(call=1000.0, flop=1.0, batched_flop=3.0, element=10.0, transcendental=50.0, reduced=20.0, moved=7.0)


@pytest.mark.parametrize("fn, shapes, expected", [
    (lambda a, b: a @ b, [(4, 8), (8, 3)], 1000 + 2 * 4 * 3 * 8 * 1.0),
    (lambda a, b: a @ b, [(5, 4, 8), (5, 8, 3)], 1000 + 2 * 5 * 4 * 3 * 8 * 3.0),
    (lambda a, b: a * b, [(4, 8), (4, 8)], 1000 + 32 * 10.0),
    (lambda a: rm.tanh(a), [(4, 8)], 1000 + 32 * 50.0),
    (lambda a: rm.sum(a, axis=0), [(4, 8)], 1000 + 32 * 20.0),
    (lambda a: rm.take(a, np.array([0, 2, 1]), axis=0), [(4, 8)], 1000 + 24 * 7.0),
    (lambda a: rm.permute_dims(a, (1, 0)), [(4, 8)], 1000.0),
])
def test_each_class_of_op_is_weighed_by_its_own_weight(fn, shapes, expected):
    assert cost.node_cost(_only(_graph(fn, *shapes)), W) == expected


def test_flops_are_the_cost_with_every_unit_one_flop_and_no_calls():
    g = _graph(lambda a, b: rm.sum(rm.exp(a @ b) + 1.0), (4, 8), (8, 3))
    assert [cost.node_flops(n) for n in g.nodes] == [192.0, 12.0 * cost.FLOPS.transcendental, 12.0, 12.0]
    assert cost.flops(g) == cost.cost(g, cost.FLOPS) == 192 + 48 + 12 + 12


def test_a_scan_costs_its_body_times_its_length():
    def f(x):
        return rm.scan(lambda h, _: (rm.tanh(h), None), x, length=5)[0]

    g = _graph(f, (3,))
    (node,) = [n for n in g.nodes if n.op == "scan"]
    assert cost.node_cost(node, W) == 5 * cost.cost(node.params["body"], W) == 5 * (1000 + 3 * 50)


def test_the_backend_a_step_is_traced_for_chooses_the_weights():
    node = _only(_graph(lambda a: rm.tanh(a), (64,)))
    assert cost.node_cost(node) == cost.node_cost(node, cost.WEIGHTS["numpy"])
    on_numpy = cost.node_cost(node)
    with running_on(Target("xla")):
        assert cost.node_cost(node) == cost.node_cost(node, cost.WEIGHTS["xla"]) != on_numpy


def test_the_weights_say_that_elementwise_work_costs_more_than_a_matrix_products_flops():
    """What calibration found on both backends, and why FLOPs alone plan badly."""
    for w in cost.WEIGHTS.values():
        assert w.element > 10 * w.flop and w.transcendental > w.element


def _gpt():
    params, data = inputs(GPT(layers=2, d_model=16, heads=2, seq=32, batch=4, vocab=11))
    return (lambda p, d: models.gpt_loss(p, d, "none", 2)), (params, data)


def _plan(graph, share):
    solve._CACHE.clear()
    return solve.plan_step(graph, share, "chain")[1]  # least recomputation: the weights alone decide


def test_the_planner_minimises_time_not_flops(monkeypatch):
    """On the GPT-style model, FLOPs favour recomputing the attention's elementwise work (the
    softmax's exp over the scores); NumPy's time favours recomputing matrix products."""
    fn, args = _gpt()
    g = rm.make_graph(fn)(*args)
    timed = _plan(g, 0.9)
    with monkeypatch.context() as m:
        m.setitem(cost.WEIGHTS, "numpy", cost.FLOPS)
        counted = _plan(g, 0.9)
    assert timed.plan != counted.plan and timed.predicted_peak <= timed.budget_bytes
    assert extra_cost(g, timed.plan) < extra_cost(g, counted.plan) / 2  # in NumPy's time, the time plan wins
    assert extra_flops(g, timed.plan) > extra_flops(g, counted.plan)  # doing more FLOPs
    assert timed.extra_cost == extra_cost(g, timed.plan)


def test_the_report_predicts_the_recomputations_share_of_the_steps_time():
    fn, args = _gpt()
    report = rm.memory.plan_report(fn, *args, memory_budget=0.7)
    assert report.extra_time_ratio == report.extra_cost / report.step_cost
    assert 0 < report.extra_time_ratio < 1 and report.step_cost == cost.cost(
        peaks.step_graph(rm.make_graph(fn)(*args), NO_PLAN))
    assert f"predicted time: +{report.extra_time_ratio:.2f} of the step's" in str(report)


def test_the_calibration_script_measures_every_weight():
    spec = importlib.util.spec_from_file_location("cost_weights", ROOT / "benchmarks" / "cost_weights.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    found = script.measure("numpy", rounds=3, low=2, high=4)
    assert set(found) == {f.name for f in dataclasses.fields(cost.Weights)}
    assert all(np.isfinite(v) and v >= 0 for v in found.values())  # the figures themselves are timings


def test_the_cost_model_and_the_policies_read_what_an_op_declares_of_itself(declare_op):
    """A new op needs no entry in the planner or the policies: its traits say what kind of work it
    is (a view costs nothing, a copy costs the elements it moves, a dot is what dots_saveable keeps)."""
    from remat.graph import Node, Var

    same = lambda x: Aval(x.shape, x.dtype)  # noqa: E731
    kinds = {"view": {"layout"}, "copy": {"layout", "copies"}, "dot": {"dot"}, "plain": set()}
    for kind, traits in kinds.items():
        declare_op(f"test_cost_{kind}", same, NOT_DIFFERENTIABLE, traits=traits)
    x = Var((8, 4), np.dtype("float32"))
    weights = dataclasses.replace(cost.FLOPS, element=2.0, moved=3.0)
    node_cost = {kind: cost.node_cost(Node(f"test_cost_{kind}", [x], [Var(x.shape, x.dtype)], {}), weights)
                 for kind in ("view", "copy", "plain")}
    assert node_cost == {"view": 0.0, "copy": 3.0 * 32, "plain": 2.0 * 32}
    saved = [rm.policies.dots_saveable(f"test_cost_{kind}", [x, x], [x], {}) for kind in kinds]
    assert saved == [False, False, True, False]
