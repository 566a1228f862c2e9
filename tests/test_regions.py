"""Budgets for part of a function (issue 28): `with rm.memory_budget(...)` marks the ops traced
inside, a gradient step plans them as a step of their own within that budget (inner regions
first, kept by the outer ones and by the step's own budget), and the gradient is the unplanned
one bit for bit."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import remat as rm
from remat.errors import ArgumentTypeError, ArgumentValueError, BudgetTooSmall
from remat.planner import solve
from remat.planner.plan import PLANNER

WIDTH = 256


def layers(h, n, scale=1.0):
    for _ in range(n):
        h = h + rm.tanh(h * scale)
    return h


def x0():
    return rm.asarray(np.random.default_rng(0).normal(size=(WIDTH,)), "float32")


def planned_checkpoints(graph: rm.Graph) -> int:
    return sum(1 for n in graph.walk() if n.op == "checkpoint" and n.params["policy"] is PLANNER)


def step_forward(fn, *args) -> rm.Graph:
    """The forward graph a gradient step of `fn` runs, planned (the checkpoints it has)."""
    with solve.collect_reports():
        graph = rm.make_graph(lambda *xs: rm.grad(fn)(*xs))(*args)
    return graph


def test_a_region_prints_as_its_with():
    def loss(x):
        x = rm.sin(x)
        with rm.memory_budget("1KiB"):
            x = rm.tanh(x)
            with rm.memory_budget(0.5, strategy="sqrt"):
                x = rm.exp(x)
        return rm.sum(x)

    text = str(rm.make_graph(loss)(rm.ones((4,))))
    assert text.splitlines()[1:8] == [
        "  b:f32[4] = sin a",
        "  memory_budget('1KiB') {",
        "    c:f32[4] = tanh b",
        "    memory_budget(0.5, strategy='sqrt') {",
        "      d:f32[4] = exp c",
        "    }",
        "  }",
    ]


def test_a_region_is_planned_within_its_budget_and_keeps_the_gradient():
    def body(h):
        with rm.memory_budget(0.5):
            return layers(h, 12)

    def loss(x):
        return rm.sum(layers(body(layers(x, 4)), 4))

    def plain(x):
        return rm.sum(layers(x, 20))

    with solve.collect_reports() as reports:
        g = rm.grad(loss)(x0())
    np.testing.assert_array_equal(np.asarray(g), np.asarray(rm.grad(plain)(x0())))
    (region,) = reports
    assert region.plan.blocks and region.predicted_peak <= region.budget_bytes
    # The region's own step, measured: its forward and backward alone, seeded as the planner seeds it.
    measured = rm.memory.profile(lambda h: body(h), x0())
    assert measured.peak_bytes == region.predicted_peak - region.base_bytes
    assert rm.memory.profile(loss, x0()).peak_bytes < rm.memory.profile(plain, x0()).peak_bytes


def test_only_the_regions_nodes_are_recomputed():
    def loss(x):
        x = layers(x, 6)
        with rm.memory_budget(0.6):
            x = layers(x, 12, scale=2.0)
        return rm.sum(layers(x, 6))

    graph = step_forward(loss, x0())
    bodies = [n.params["body"] for n in graph.walk() if n.op == "checkpoint" and n.params["policy"] is PLANNER]
    assert bodies
    scales = {float(np.asarray(a)) for body in bodies for a in body.constants.values() if np.ndim(a) == 0}
    assert scales == {2.0}  # only the region's layers (which scale by 2) are in blocks


def test_nested_regions_each_keep_their_budget():
    def inner(h):
        with rm.memory_budget(0.6):
            return layers(h, 12, scale=2.0)

    def outer(h):
        with rm.memory_budget(0.7):
            return layers(inner(layers(h, 8)), 8)

    with solve.collect_reports() as reports:
        g = rm.grad(lambda x: rm.sum(outer(x)))(x0())
    inner_report, outer_report = reports
    assert inner_report.budget_bytes < outer_report.budget_bytes
    for r in reports:
        assert r.plan.blocks and r.predicted_peak <= r.budget_bytes
    np.testing.assert_array_equal(
        np.asarray(g), np.asarray(rm.grad(lambda x: rm.sum(layers(layers(layers(x, 8), 12, 2.0), 8)))(x0())))
    # The inner plan is kept by the outer one even where the outer budget needs no plan.
    def loose(h):
        with rm.memory_budget(1.0):
            return inner(h)

    assert planned_checkpoints(step_forward(lambda x: rm.sum(loose(x)), x0())) > 0


def test_the_steps_budget_is_planned_around_the_regions():
    def loss(x):
        x = layers(x, 10)
        with rm.memory_budget(0.6):
            x = layers(x, 16, scale=2.0)
        return rm.sum(x)

    with solve.collect_reports() as reports:
        g = rm.grad(loss, memory_budget=0.5)(x0())
    region, whole = reports
    assert region.predicted_peak <= region.budget_bytes and whole.predicted_peak <= whole.budget_bytes
    assert rm.memory.profile(loss, x0(), memory_budget=0.5).peak_bytes + whole.base_bytes == whole.predicted_peak
    np.testing.assert_array_equal(np.asarray(g), np.asarray(rm.grad(loss)(x0())))


def test_a_region_reads_captured_weights_and_undifferentiated_inputs():
    rng = np.random.default_rng(1)
    ws = [rm.asarray(rng.normal(size=(32, 32)) / 6, "float32") for _ in range(6)]

    def loss(x, mask, labels):
        with rm.memory_budget(0.8):
            for w in ws:
                x = x + rm.tanh(x @ w) * mask
        return rm.sum(x * labels)

    def plain(x, mask, labels):
        for w in ws:
            x = x + rm.tanh(x @ w) * mask
        return rm.sum(x * labels)

    args = (rm.asarray(rng.normal(size=(64, 32)), "float32"), rm.ones((32,)), rm.ones((64, 32)))
    np.testing.assert_array_equal(np.asarray(rm.grad(loss)(*args)), np.asarray(rm.grad(plain)(*args)))
    # The mask's cotangent sums six contributions, in another order where a block's boundary
    # falls between them (as with a checkpoint a user places): equal to rounding.
    np.testing.assert_allclose(np.asarray(rm.grad(loss, argnums=1)(*args)),
                               np.asarray(rm.grad(plain, argnums=1)(*args)), rtol=1e-5, atol=1e-5)


def test_a_budget_the_region_cannot_meet_is_an_error_at_its_with():
    def loss(x):
        with rm.memory_budget("1KiB"):  # the line the error names
            x = layers(x, 8)
        return rm.sum(x)

    with pytest.raises(BudgetTooSmall, match=r"rm\.memory_budget: '1KiB' \(1024 bytes\) is below the smallest peak "
                       r"this region can reach, \d+ bytes .*memory_budget=\d+") as e:
        rm.grad(loss)(x0())
    assert e.value.source.endswith(f"test_regions.py:{loss.__code__.co_firstlineno + 1}")
    # ... and the smallest budget it names works.
    smallest = e.value.smallest_budget

    def fits(x):
        with rm.memory_budget(smallest):
            x = layers(x, 8)
        return rm.sum(x)

    rm.grad(fits)(x0())


def test_a_region_inside_a_checkpoint_or_a_loop_is_an_error_naming_where_it_goes():
    def block(h):
        with rm.memory_budget(0.5):
            return layers(h, 4)

    with pytest.raises(ArgumentValueError, match=r"rm\.memory_budget: this region is inside `checkpoint\(block\)`, "
                       r"a function traced on its own .* within the gradient of `vjp\(partial\)`; .* put the `with` "
                       r"around the call") as e:
        rm.grad(lambda x: rm.sum(rm.checkpoint(block, x)))(x0())
    assert e.value.source.endswith(f"test_regions.py:{block.__code__.co_firstlineno + 1}")
    with pytest.raises(ArgumentValueError, match=r"this region is inside `scan\(<lambda>\)`"):
        rm.grad(lambda x: rm.sum(rm.scan(lambda c, _: (block(c), None), x, None, length=2)[0]))(x0())
    # Outside a gradient it runs as the checkpoint's body does.
    np.testing.assert_array_equal(np.asarray(rm.checkpoint(block, x0())), np.asarray(layers(x0(), 4)))


def test_a_region_in_a_function_jitted_inside_the_gradient_is_planned():
    def block(h):
        with rm.memory_budget(0.8):
            return layers(h, 6)

    with solve.collect_reports() as reports:
        g = rm.grad(lambda x: rm.sum(rm.jit(block)(x)))(x0())
    assert len(reports) == 1 and reports[0].plan.blocks
    np.testing.assert_array_equal(np.asarray(g), np.asarray(rm.grad(lambda x: rm.sum(layers(x, 6)))(x0())))


def test_a_region_runs_plainly_outside_a_gradient():
    def f(x):
        with rm.memory_budget(0.5):
            return layers(x, 3)

    np.testing.assert_array_equal(np.asarray(f(x0())), np.asarray(layers(x0(), 3)))  # eager: nothing recorded
    np.testing.assert_array_equal(np.asarray(rm.jit(f)(x0())), np.asarray(layers(x0(), 3)))


def test_memory_budget_as_a_decorator_and_reentered():
    region = rm.memory_budget(0.8)

    @region
    def block(h):
        return layers(h, 6)

    def loss(x):
        with region:
            x = layers(x, 6)
        return rm.sum(block(x))

    with solve.collect_reports() as reports:
        rm.grad(loss)(x0())
    assert len(reports) == 2 and all(r.plan.blocks for r in reports)
    assert repr(rm.memory_budget("200MiB", strategy="chain")) == "memory_budget('200MiB', strategy='chain')"


@pytest.mark.parametrize("budget, strategy, error, message", [
    (1.5, None, ArgumentValueError, r"memory_budget: budget=1\.5 is a float above 1"),
    ("lots", None, ArgumentValueError, r"memory_budget: budget='lots' is not an amount of memory"),
    (None, None, ArgumentTypeError, r"memory_budget: budget=None has type NoneType"),
    (0.5, "fast", ArgumentValueError, r"memory_budget: strategy='fast' is not a planner strategy"),
])
def test_a_bad_budget_fails_where_the_region_is_written(budget, strategy, error, message):
    with pytest.raises(error, match=message):
        rm.memory_budget(budget, strategy=strategy)


def test_regions_plan_for_xla_under_jit():
    pytest.importorskip("jax")

    def loss(x):
        with rm.memory_budget(0.5):
            x = layers(x, 12)
        return rm.sum(x)

    with solve.collect_reports() as reports:
        g = rm.jit(rm.grad(loss), backend="xla")(x0())
    (region,) = reports
    assert region.counted_by == "XLA's buffer report of the executable" and region.plan.blocks
    assert region.predicted_peak <= region.budget_bytes
    np.testing.assert_allclose(np.asarray(g), np.asarray(rm.grad(lambda x: rm.sum(layers(x, 12)))(x0())),
                               rtol=1e-5, atol=1e-6)


def test_jacrev_plans_regions_as_grad_does():
    def f(x):
        with rm.memory_budget(0.8):
            return layers(x, 6)

    with solve.collect_reports() as reports:
        jac = rm.jacrev(f)(rm.ones((8,)))
    assert len(reports) == 1 and reports[0].plan.blocks
    np.testing.assert_array_equal(np.asarray(jac), np.asarray(rm.jacrev(lambda x: layers(x, 6))(rm.ones((8,)))))


def test_plan_report_shows_the_regions_planned_before_the_step():
    def loss(x):
        with rm.memory_budget(0.6):
            x = layers(x, 16)
        return rm.sum(layers(x, 4))

    report = rm.memory.plan_report(loss, x0(), memory_budget=1.0)
    (region,) = report.regions
    assert report.region is None
    assert region.region.endswith(f"test_regions.py:{loss.__code__.co_firstlineno + 1}")
    assert region.predicted_peak <= region.budget_bytes < report.budget_bytes
    lines = str(report).splitlines()
    at = lines.index("regions planned first, each as a step of its own:")
    assert lines[at + 1].startswith(f"  rm.memory_budget at {region.region}: strategy chain, budget ")
    assert "(memory_budget=0.6), predicted peak " in lines[at + 1]


def test_a_region_no_gradient_passes_through_is_left_unplanned():
    def loss(x, y):
        with rm.memory_budget(0.5):  # below what its forward alone needs: no plan could help
            z = layers(y, 8)
        return rm.sum(x * z)

    with solve.collect_reports() as reports:
        g = rm.grad(loss)(x0(), x0())
    assert reports == []
    np.testing.assert_array_equal(np.asarray(g), np.asarray(layers(x0(), 8)))


def test_regions_under_vmap_and_with_aux_outputs():
    def loss(x):
        with rm.memory_budget(0.8):
            x = layers(x, 6)
            aux = rm.mean(x)  # an output of the region the step does not seed
        return rm.sum(x), aux

    xs = rm.ones((3, WIDTH))
    with solve.collect_reports() as reports:
        g, aux = rm.vmap(rm.grad(loss, has_aux=True))(xs)
    assert reports and all(r.plan.blocks for r in reports)
    plain_g, plain_aux = rm.vmap(rm.grad(lambda x: (rm.sum(layers(x, 6)), rm.mean(layers(x, 6))), has_aux=True))(xs)
    np.testing.assert_array_equal(np.asarray(g), np.asarray(plain_g))
    np.testing.assert_array_equal(np.asarray(aux), np.asarray(plain_aux))


def test_eager_vjp_and_value_and_grad_plan_regions():
    def f(x):
        with rm.memory_budget(0.8):
            return layers(x, 6)

    with solve.collect_reports() as reports:
        y, back = rm.vjp(f, x0())  # eager: the forward runs now, keeping what the plan keeps
        (g,) = back(rm.ones((WIDTH,)))
        value, g2 = rm.value_and_grad(lambda x: rm.sum(f(x)))(x0())
    assert len(reports) == 2 and all(r.plan.blocks for r in reports)
    plain = rm.grad(lambda x: rm.sum(layers(x, 6)))(x0())
    np.testing.assert_array_equal(np.asarray(g), np.asarray(plain))
    np.testing.assert_array_equal(np.asarray(g2), np.asarray(plain))
    np.testing.assert_array_equal(np.asarray(y), np.asarray(layers(x0(), 6)))


def test_regions_over_the_same_nodes_print_and_plan_outer_last():
    def loss(x):
        with rm.memory_budget(1.0):  # the outer region: planned last, around the inner one's plan
            with rm.memory_budget(0.8):
                x = layers(x, 6)
        return rm.sum(x)

    assert str(rm.make_graph(loss)(rm.ones((4,)))).splitlines()[1:3] == [
        "  memory_budget(1.0) {", "    memory_budget(0.8) {"]
    with solve.collect_reports() as reports:
        rm.grad(loss)(x0())
    assert [r.memory_budget for r in reports] == [0.8, 1.0] and reports[0].plan.blocks
    assert not reports[1].plan.blocks  # the inner plan fits the outer budget as it is


def test_one_region_object_used_by_two_threads_at_once():
    """Each thread's `with` closes its own region, whatever the order: the first thread to
    enter leaves while the second is inside."""
    region, both = rm.memory_budget(0.8), threading.Barrier(2, timeout=60)
    first_in, first_out = threading.Event(), threading.Event()

    def loss(x, first):
        if not first:
            first_in.wait(60)
        with region:
            first_in.set()
            h = layers(x, 3)
            both.wait()
            if not first:
                first_out.wait(60)
            h = layers(h, 3)
        return rm.sum(h)

    def run(first, out):
        with solve.collect_reports() as reports:
            out[first] = (rm.grad(lambda x: loss(x, first))(x0()), reports)
            if first:
                first_out.set()

    alone = rm.memory_budget(0.8)(lambda h: layers(h, 6))
    with solve.collect_reports() as expected:  # the region, traced in one thread
        rm.grad(lambda x: rm.sum(alone(x)))(x0())
    out = {}
    threads = [threading.Thread(target=run, args=(first, out)) for first in (True, False)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    plain = rm.grad(lambda x: rm.sum(layers(x, 6)))(x0())
    for g, reports in out.values():
        assert len(reports) == 1
        assert (reports[0].unplanned_peak, reports[0].plan) == (expected[0].unplanned_peak, expected[0].plan)
        np.testing.assert_array_equal(np.asarray(g), np.asarray(plain))


def test_regions_that_overlap_without_nesting_are_an_error():
    a, b = rm.memory_budget(0.8), rm.memory_budget(0.9)

    def loss(x):  # closed in the order they were opened: no `with` can write this
        a.__enter__()
        x = layers(x, 3)
        b.__enter__()
        x = layers(x, 3)
        a.__exit__(None, None, None)
        x = layers(x, 3)
        b.__exit__(None, None, None)
        return rm.sum(x)

    with pytest.raises(ArgumentValueError, match=r"rm\.memory_budget\(0\.8\) and rm\.memory_budget\(0\.9\) overlap "
                       r"without one inside the other; close regions in the reverse order of opening them"):
        rm.grad(loss)(x0())


def test_a_forced_strategy_that_misses_the_regions_budget_says_others_fit():
    def loss(x):
        with rm.memory_budget(0.45, strategy="sqrt"):
            x = layers(x, 16, scale=1.0)
        return rm.sum(x)

    with pytest.raises(ArgumentValueError, match=r"^rm\.memory_budget: 0\.45 \(\d+ bytes\) is below the smallest peak "
                       r"strategy='sqrt' reaches on this region, \d+ bytes; other plans fit it: pass strategy=None"):
        rm.grad(loss)(rm.ones((WIDTH,)))
