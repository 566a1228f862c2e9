"""A memory budget on a step jitted for XLA (issue 15) is counted as XLA runs the step: its one
executable compiled and its buffer report read (`xla.ExecutableMemory`), not the NumPy
evaluator's count, which on XLA can fall below what the run holds (measured in
tests/test_planner_memory.py)."""

from __future__ import annotations

import re

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import remat as rm  # noqa: E402
from remat.planner import peak as peaks  # noqa: E402
from remat.planner.solve import collect_reports, plan_step  # noqa: E402
from remat.planner.target import Target, running_on  # noqa: E402
from test_planner import gpt, mlp  # noqa: E402


def _jitted(fn, args, budget, strategy=None):
    """`(report, compiled)` of `value_and_grad(fn, memory_budget=budget)` jitted for XLA."""
    step = rm.value_and_grad(fn, memory_budget=budget, strategy=strategy)
    with collect_reports() as reports:
        compiled = rm.jit(step, backend="xla").lower(*args).compile()
    return reports[-1], compiled


def _forward(fn, args):
    graph = rm.make_graph(fn)(*args)
    return graph, peaks.Step(wrt=len(rm.tree.leaves(args[0])), seeded=1)


@pytest.mark.claims
def test_a_step_jitted_for_xla_fits_by_xlas_count_where_the_evaluators_plan_does_not():
    fn, args = gpt(3)
    graph, step = _forward(fn, args)
    limit = peaks.base_bytes(graph) + peaks.activation_bytes(graph, step) // 2
    # Planned by the evaluator's count, the plan fits it but XLA's executable holds more.
    by_evaluator = plan_step(graph, limit, "chain", step)[1]
    assert by_evaluator.predicted_peak <= limit < peaks.base_bytes(graph) + peaks.xla_step_peak(
        graph, by_evaluator.plan, step)
    report, compiled = _jitted(fn, args, limit, "chain")
    assert report.counted_by == "XLA's buffer report of the executable"
    assert report.predicted_peak <= limit
    assert report.plan != by_evaluator.plan
    loss, grads = compiled(*args)
    # The prediction is XLA's own figure for the very program run.
    assert compiled.last_memory.peak + report.base_bytes == report.predicted_peak
    plain_loss, plain = rm.jit(rm.value_and_grad(fn), backend="xla")(*args)
    np.testing.assert_allclose(float(loss), float(plain_loss), rtol=1e-6)
    for a, b in zip(rm.tree.leaves(grads), rm.tree.leaves(plain), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-7)


@pytest.mark.claims
def test_a_fraction_on_xla_is_of_xlas_count_of_the_unplanned_step():
    fn, args = mlp(depth=8)
    report, _ = _jitted(fn, args, 0.6)
    graph, step = _forward(fn, args)
    unplanned = peaks.xla_step_peak(graph, step=step)
    assert report.unplanned_peak == report.base_bytes + unplanned
    assert report.budget_bytes == report.base_bytes + int(0.6 * unplanned)


def test_eager_and_numpy_steps_are_counted_by_the_evaluator():
    fn, args = mlp(depth=8)
    for run in (lambda f: f(*args), lambda f: rm.jit(f)(*args)):
        with collect_reports() as reports:
            run(rm.value_and_grad(fn, memory_budget=0.6))
        assert reports[-1].counted_by == "the NumPy evaluator"
        graph, step = _forward(fn, args)
        assert reports[-1].predicted_peak == peaks.total_peak(graph, reports[-1].plan, step)


def test_the_same_graph_is_planned_again_for_another_backend():
    fn, args = mlp(depth=8)
    graph, step = _forward(fn, args)
    on_numpy = plan_step(graph, 0.6, "chain", step)[1]
    with running_on(Target("xla")):
        on_xla = plan_step(graph, 0.6, "chain", step)[1]
    assert (on_numpy.counted_by, on_xla.counted_by) == ("the NumPy evaluator", "XLA's buffer report of the executable")
    assert on_xla.unplanned_peak == on_xla.base_bytes + peaks.xla_step_peak(graph, step=step)


def test_plan_report_counts_for_the_backend_asked():
    fn, args = mlp(depth=8)
    report = rm.memory.plan_report(fn, *args, memory_budget=0.6, argnums=0, backend="xla")
    assert report.counted_by == "XLA's buffer report of the executable"
    assert "counted by XLA's buffer report of the executable" in str(report)
    with pytest.raises(ValueError, match="memory.plan_report: unknown backend 'tpu'"):
        rm.memory.plan_report(fn, *args, memory_budget=0.6, backend="tpu")


@pytest.mark.claims
def test_a_budget_below_xlas_least_names_it_and_that_budget_works():
    fn, args = mlp(depth=8)
    with pytest.raises(ValueError, match=r"memory_budget: 1000 bytes is below the smallest peak this step can "
                                         r"reach, \d+ bytes \(0\.\d+ of its activation memory, with \d+ bytes of "
                                         r"inputs and constants, counted by XLA's buffer report of the "
                                         r"executable\)") as e:
        _jitted(fn, args, 1000)
    least = int(re.search(r"memory_budget=(\d+)", str(e.value)).group(1))
    report, compiled = _jitted(fn, args, least)
    compiled(*args)
    assert report.predicted_peak <= least
    assert compiled.last_memory.peak + report.base_bytes == report.predicted_peak
