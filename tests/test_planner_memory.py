"""The memory-budget planner keeps its promises when measured (issue 15): on the residual MLP
(64 layers) and the GPT-style model (8 blocks), at budgets of 25%, 50% and 75% of the activation
memory. On NumPy (the evaluator's count, beside tracemalloc) the measured peak is within the
budget + 5% and exactly the predicted one. On XLA staged the planner counts what XLA's buffer
report of each stage adds up to (the fraction is of that count too): the program run fits the
budget by that count (its resident memory varies too much from run to run to assert; see
below). On both, the gradients equal the unplanned step's, and no
hand-placed plan that fits in as little memory takes less time by the backend's cost model (what
the planner minimises; measured times are `remat bench --planner`'s). The measurements are
`remat bench --planner`'s (`remat.bench.planner`); the fast tests below check its bookkeeping."""

from __future__ import annotations

import pytest

from remat.bench import planner
from remat.bench.config import MLP
from remat.cli import main

MiB = 2**20


# ---------------------------------------------------------------- measured (the claims tier)


# The chain models. The U-Net-like MLP is the sweep's (`benchmarks/planner.py --sweep`): its
# long skips leave the chain DP one stage over the middle of the net, so the planner refuses
# budgets below about 0.68 of its step where hand-placed √L segments fit in 0.48.
@pytest.fixture(scope="module", params=["mlp", "gpt"])
def measured(request) -> dict:
    return planner.measure_model(request.param, backends=["numpy", "xla"], budgets=planner.BUDGETS, time_steps=False,
                                 log=lambda _: None)


def _planned(result: dict, backend: str) -> dict:
    rows = {p: r for (be, p), r in result["rows"].items() if be == backend and isinstance(p, float)}
    assert sorted(rows) == list(planner.BUDGETS), result["infeasible"]  # every budget was planned and measured
    return rows


BACKENDS = pytest.mark.parametrize("backend", ["numpy", "xla"])


@pytest.mark.claims
def test_planned_peak_is_within_the_budget_on_numpy(measured):
    for fraction, row in _planned(measured, "numpy").items():
        total, budget = row["peak"] + row["base"], row["budget"] + row["base"]
        assert total <= 1.05 * budget, (measured["model"], fraction, total / MiB, budget / MiB)


@pytest.mark.claims
@BACKENDS
def test_a_fraction_is_of_the_backends_count_of_the_unplanned_step(measured, backend):
    # On NumPy the evaluator's count, on XLA what XLA's buffer reports of the stages add up to:
    # the unplanned step's own figures, measured beside it (row "none").
    none = measured["rows"][backend, "none"]
    for fraction, row in _planned(measured, backend).items():
        counted = none["peak"] if backend == "numpy" else none["xla_own"]
        assert row["unplanned"] == pytest.approx(counted, rel=0.02), (fraction, row["unplanned"], counted)
        assert row["budget"] == pytest.approx(fraction * row["unplanned"], rel=0.01)


@pytest.mark.claims
def test_on_xla_the_planned_step_fits_as_xla_counts_the_program_it_runs(measured):
    for fraction, row in _planned(measured, "xla").items():
        assert row["predicted"] == row["xla_own"], (measured["model"], fraction)  # its own stages, compiled
        assert row["predicted"] <= row["budget"], (measured["model"], fraction)


# Resident memory of XLA's first run varies from run to run: for the GPT-style step at 25% it
# read 28.2-33.1 MiB against XLA's report of 33.3 on this 2-core machine, idle and beside up to
# three busy processes (stage by stage, it followed the report within 1.4 MiB), and a bound of
# 0.80-1.15x the report failed beside the other claims tests. So it is not asserted here:
# `remat bench --planner` reports it (`budget_checks`), measured with nothing else running.


@pytest.mark.claims
def test_numpy_peaks_are_what_tracemalloc_sees_and_exactly_what_was_predicted(measured):
    for fraction, row in _planned(measured, "numpy").items():
        assert abs(row["peak"] - row["tracemalloc"]) <= 0.05 * row["tracemalloc"], (fraction, row)
        assert row["predicted"] == row["peak"]  # the model is the evaluator's own count


@pytest.mark.claims
def test_planned_gradients_equal_the_unplanned_ones(measured):
    for row in _planned(measured, "numpy").values():
        assert row["grads"]["equal"], row["grads"]  # bit for bit: the same ops on the same values
    for row in _planned(measured, "xla").values():
        assert row["grads"]["max_rel"] <= 1e-5, row["grads"]


@pytest.mark.claims
@BACKENDS
def test_no_hand_placed_plan_that_fits_is_faster_by_the_cost_model(measured, backend):
    # Memory as the planner counts it: the evaluator's count (the measured peak) on NumPy, XLA's
    # report of each compiled step on XLA (its resident memory varies with load: see above).
    rows = measured["rows"]
    held = (lambda r: r["peak"]) if backend == "numpy" else (lambda r: r["xla_own"])
    for fraction, row in _planned(measured, backend).items():
        for hand in planner.HAND:
            other = rows[backend, hand]
            if held(other) <= held(row):
                assert row["modelled"] <= other["modelled"] + 1e-9, (measured["model"], fraction, hand)


# ---------------------------------------------------------------- the bookkeeping (fast)


def _row(peak_mib: float, times: list[float], **more) -> dict:
    return {"peak": peak_mib * MiB, "times": times, **more}


def _result(rows: dict, noise: list[float]) -> dict:
    return {"model": "mlp", "size": MLP(4, 8, 2), "rows": rows, "noise": {"numpy": noise}, "infeasible": {}}


def test_noise_is_the_widest_half_window_median_of_the_control_at_least_2_percent():
    assert planner.noise_of([1.0, 1.01, 0.99, 1.0]) == 0.02
    assert planner.noise_of([1.0, 1.3, 1.2, 1.0, 1.0, 1.0]) == pytest.approx(0.2)  # median of 1.3, 1.2, 1.0
    assert planner.noise_of([]) == 0.05


def test_pareto_flags_a_slower_plan_only_against_hand_plans_that_fit_in_as_little():
    base = [1.0, 1.0, 1.0]
    rows = {("numpy", "none"): _row(100, base), ("numpy", "layer"): _row(40, [1.3] * 3),
            ("numpy", "sqrt"): _row(20, [1.2] * 3), ("numpy", "dots"): _row(90, [1.1] * 3),
            ("numpy", 0.5): _row(45, [1.21] * 3), ("numpy", 0.25): _row(19, [1.4] * 3)}
    # 50%: per layer and √L need less memory but are no faster (within 0.02); 25%: none fits in 19 MiB
    assert planner.pareto(_result(rows, [1.0] * 4), "numpy") == []
    rows["numpy", 0.5] = _row(45, [1.5] * 3)  # slower than per layer and √L, which need less
    (a, b) = planner.pareto(_result(rows, [1.0] * 4), "numpy")
    assert a.startswith("mlp numpy budget 50%: time 1.50x > per layer 1.30x (+0.02 noise)")
    assert b.startswith("mlp numpy budget 50%: time 1.50x > √L 1.20x")
    assert planner.pareto(_result(rows, [1.0, 1.4, 1.4, 1.0]), "numpy") == []  # within this run's noise (0.4)


def test_budget_checks_name_each_miss_with_its_figures():
    ok = {"budget": 10 * MiB, "base": MiB, "predicted": 10 * MiB, "unplanned": 40 * MiB,
          "grads": {"equal": True, "max_rel": 0.0}}
    rows = {("numpy", 0.5): _row(10.5, [], **ok), ("xla", 0.5): _row(12, [], **ok),
            ("xla", 0.25): _row(9, [], **{**ok, "grads": {"equal": False, "max_rel": 1e-3}})}
    fails = planner.budget_checks(_result(rows, []))
    assert fails == [
        "mlp xla budget 50%: measured 13.00 MiB > budget 11.00 MiB + 5% (inputs and constants included: 1.00 MiB)",
        "mlp xla budget 50%: predicted 10.00 MiB vs measured 12.00 MiB",
        "mlp xla budget 25%: predicted 10.00 MiB vs measured 9.00 MiB",
        "mlp xla budget 25%: gradients differ (largest relative difference 1.0e-03)",
    ]


def test_sweep_checks_name_a_peak_over_a_wrong_prediction_a_rise_and_a_slower_larger_budget():
    ok = {"base": MiB, "grads": {"equal": True, "max_rel": 0.0}}
    rows = {("numpy", "none"): _row(40, [1.0, 1.0]),
            ("numpy", 0.2): _row(10, [1.4, 1.4], budget=10 * MiB, predicted=10 * MiB, **ok),
            ("numpy", 0.4): _row(9, [1.2, 1.2], budget=20 * MiB, predicted=9 * MiB, **ok),  # below the smaller's
            ("numpy", 0.6): _row(26, [1.3, 1.3], budget=24 * MiB, predicted=22 * MiB, **ok),  # over; slower
            ("numpy", 0.8): _row(30, [1.1, 1.1], budget=32 * MiB, predicted=30 * MiB, **ok)}
    assert planner.sweep_checks(_result(rows, [1.0, 1.0])) == [
        "mlp numpy budget 40%: peak 9.00 MiB below the smaller budget's",
        "mlp numpy budget 60%: measured 26.00 MiB over the budget 24.00 MiB + 3%",
        "mlp numpy budget 60%: predicted 22.00 MiB, counted 26.00 MiB",
        "mlp numpy budget 60%: time 1.30x above the smaller budget's 1.20x (+0.02 noise)",
    ]
    xla = {("xla", 0.5): _row(9, [], budget=10 * MiB, predicted=10 * MiB, xla_own=10 * MiB, **ok)}
    assert planner.sweep_checks(_result(xla, [])) == []  # resident memory under XLA's own count


def test_a_plan_timed_at_several_budgets_is_a_repeated_control_of_the_sweep():
    """The same plan at 20% and 40% timed 1.2x and 1.3x: the time of one plan spreads over 0.1 in
    this run, so a larger budget's plan 0.08 slower is within the noise, and 0.12 slower is not."""
    ok = {"base": MiB, "grads": {"equal": True, "max_rel": 0.0}}
    row = lambda peak, t, budget, plan: _row(peak, [t, t], budget=budget * MiB, predicted=peak * MiB,  # noqa: E731
                                             plan=plan, **ok)
    rows = {("numpy", "none"): _row(40, [1.0, 1.0]), ("numpy", 0.2): row(10, 1.2, 10, "aaaa"),
            ("numpy", 0.4): row(10, 1.3, 20, "aaaa"), ("numpy", 0.6): row(22, 1.38, 24, "bbbb")}
    assert planner.repeat_noise(_result(rows, [1.0, 1.0]), "numpy") == pytest.approx(0.1)
    assert planner.sweep_checks(_result(rows, [1.0, 1.0])) == []
    rows["numpy", 0.6] = row(22, 1.42, 24, "bbbb")
    assert planner.sweep_checks(_result(rows, [1.0, 1.0])) == [
        "mlp numpy budget 60%: time 1.42x above the smaller budget's 1.30x (+0.10 noise)"]


@pytest.mark.claims
def test_a_quick_sweep_measures_and_times_every_budget(capsys):
    assert planner.run(quick=True, models=["mlp"], frameworks=["remat-numpy"], sweep=3) == 0
    text = capsys.readouterr().out
    rows = [line for line in text.splitlines() if line.startswith("| budget")]
    assert len(rows) == 3 and "budget 100% (" in rows[-1]
    assert all("n/a" not in line for line in rows)  # each budget timed (a shadowed name once skipped it)


def test_table_prints_every_plan_with_its_figures():
    rows = {("numpy", "none"): _row(100, [1.0, 2.0], flops=1.0, modelled=1.0),
            ("numpy", "layer"): _row(50, [1.2, 2.6], flops=1.34, modelled=1.22),
            ("numpy", 0.25): _row(24, [1.3, 2.4], flops=1.3, modelled=1.21, budget=25 * MiB, base=MiB,
                                  predicted=24 * MiB, strategy="chain", grads={"equal": True, "max_rel": 0.0})}
    text = planner.table(_result(rows, [1.0, 1.02]), "numpy")
    assert "| none |  |  | 100.0 | 1.00x | 1.00x | 1.00x | 1.00x |  |" in text
    assert "| per layer |  |  | 50.0 | 0.50x | 1.25x | 1.22x | 1.34x |  |" in text
    assert "| budget 25% (chain) | 25.0 | 24.0 | 24.0 | 0.24x | 1.25x | 1.21x | 1.30x | bit-identical |" in text
    assert "Noise (a second step without checkpoints against the first): median 1.01x" in text


def test_a_plan_built_again_differently_is_named():
    rows = {("numpy", 0.5): {"plan": "aaaa"}, ("numpy", 0.25): {"plan": "bbbb"}}
    result = {**_result(rows, []), "timed_plans": {"numpy": {0.5: "aaaa", 0.25: "cccc"}}}
    assert planner.replanned(result, "numpy") == [0.25]


def test_remat_bench_planner_passes_its_options(monkeypatch):
    seen = {}
    monkeypatch.setattr(planner, "run", lambda **kw: seen.update(kw) or 0)
    assert main(["bench", "--planner", "--quick", "--models", "gpt", "--plot", "p.png", "--out", "t.md"]) == 0
    assert seen == {"quick": True, "out": "t.md", "png": "p.png", "models": ["gpt"], "frameworks": None}


@pytest.mark.parametrize("models, frameworks, error, says", [
    (["rnn"], None, ValueError, "bench --planner: unknown model 'rnn'; known here: mlp, gpt"),
    (None, ["jax"], ValueError, "bench --planner: unknown framework 'jax'; known here: remat-numpy, remat-xla"),
    ("mlp", None, TypeError, "bench --planner: models must be a list of names, got 'mlp'; use ['mlp']"),
])
def test_remat_bench_planner_names_a_bad_choice(models, frameworks, error, says):
    with pytest.raises(error) as e:
        planner.run(quick=True, models=models, frameworks=frameworks)
    assert str(e.value).startswith(says)


def test_a_step_timed_twice_is_built_twice_under_two_names(monkeypatch):
    from remat.bench import worker

    built = []

    def build(framework, size, plan):
        built.append(plan)
        return (lambda: plan), (lambda out: str(out))

    monkeypatch.setattr(worker, "build", build)
    entries = [("remat-numpy", "none"), ("remat-numpy", "none"), ("remat-numpy", 0.5)]
    size = {"kind": "MLP", "depth": 2, "width": 4, "batch": 2}
    out = worker.time_job({"size": size, "rounds": 2, "entries": entries})
    assert built == ["none", "none", 0.5]  # the noise control is a step of its own, not the same one again
    assert {k: len(v) for k, v in out["times"].items()} == {"remat-numpy/none": 2, "remat-numpy/none'": 2,
                                                            "remat-numpy/0.5": 2}


def test_the_pareto_picture_draws_the_predicted_curve_beside_the_measured_one():
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    rows = {("numpy", "none"): _row(100, [1.0, 1.0]),
            ("numpy", 0.5): _row(45, [1.2, 1.2], predicted=44 * MiB, modelled=1.18),
            ("numpy", 0.25): _row(24, [1.3, 1.3], predicted=24 * MiB, modelled=1.28)}
    fig, ax = plt.subplots()
    planner._plot_pareto(ax, _result(rows, [1.0]))
    lines = {line.get_label(): line for line in ax.get_lines()}
    plt.close(fig)
    assert list(lines["planner, numpy"].get_xdata()) == [24 * MiB, 45 * MiB]
    assert list(lines["planner predicted, numpy"].get_xdata()) == [24 * MiB, 44 * MiB]
    assert list(lines["planner predicted, numpy"].get_ydata()) == [1.28, 1.18]
