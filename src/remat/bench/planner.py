"""`remat bench --planner`: the memory-budget planner (`memory_budget=`) against hand-placed
checkpoints, on the residual MLP (64 layers) and the GPT-style model (8 blocks), on NumPy and on
XLA (one executable, as `rm.jit` runs it).

Each step is one `value_and_grad` of the model's loss with respect to its parameters. A plan is
hand-placed ("none", "layer", "sqrt", "dots": see `remat.models`) or planned: a float, the
`memory_budget=` as a fraction of the activation memory of the step without checkpoints. Every
figure is measured as `remat bench` measures it, in processes of their own (`remat.bench.worker`):

- peak: on NumPy the evaluator's count of live bytes (tracemalloc's beside it); on XLA the rise of
  resident memory during the step's first run, in a fresh process started with
  `MALLOC_MMAP_THRESHOLD_=65536`. Both leave out the arguments (parameters and data).
- time: the step's time over the step without checkpoints, the median of per-round ratios, all
  steps of one backend timed in each round in rotated order. A second, separately built step
  without checkpoints is timed with them: its ratio to the first is the noise of this run.
- predicted peak, budget in bytes, strategy and FLOPs: the planner's report (a `PlanReport`, as
  `rm.memory.plan_report` prints it) of the very plan measured, caught while the step is built;
  the step is built again in the timing process, and the tables name any budget whose timed
  plan is not the one measured (`replanned`: a check that planning is deterministic);
- gradients: the measured planned step's against the step's without checkpoints, built in the
  same process (bitwise and as the largest relative difference);
- FLOPs and predicted time: the cost model's count of the whole step (recomputation included)
  over the count without checkpoints, and its prediction of the step's time by the backend's
  weights, the memory held counted (`remat.planner.cost.step_time`; what the planner minimises).

PyTorch's hand-placed checkpoints (`torch.utils.checkpoint`, eager) are measured beside them
when PyTorch is installed (its resident memory, as for XLA).

The Pareto check: at every budget, the planned step is no slower than any hand-placed plan whose
measured peak is at or below the planned step's, up to the noise (see `pareto`).
"""

from __future__ import annotations

import importlib.util
import inspect
import math
import re
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from remat import timeline
from remat.bench import impl_remat, timing
from remat.bench.config import GPT, MLP, PLAN_NAMES, UNet, inputs, size_from_dict, size_to_dict
from remat.errors import BudgetTooSmall
from remat.memory import plan_report
from remat.planner.cost import FLOPS, WEIGHTS, cost, step_time
from remat.planner.peak import base_bytes

SIZES = {
    # Activations dominate the parameters: 64 layers of (1024, 128) float32 (512 KiB each, above
    # the mmap threshold, so resident memory follows them) against 4 MiB of weights.
    ("mlp", False): MLP(depth=64, width=128, batch=1024),
    ("mlp", True): MLP(depth=16, width=64, batch=512),
    # Attention scores (16, 4, 128, 128) are 4 MiB a block; the weights are 1.6 MiB in all.
    ("gpt", False): GPT(layers=8, d_model=64, heads=4, seq=128, batch=16, vocab=256),
    ("gpt", True): GPT(layers=2, d_model=32, heads=2, seq=64, batch=8, vocab=64),
    # Long skip connections: each up layer reads its mirror's output, so a cut holds every skip
    # still to be read (the down path's are all live at the bottleneck).
    ("unet", False): UNet(depth=32, width=128, batch=1024),
    ("unet", True): UNet(depth=8, width=64, batch=512),
}
MODELS = ("mlp", "gpt", "unet")
# The sweep's bars (issue 28): measured peak within the budget + 3%, the prediction within 3% of
# it, the peak never rising as the budget shrinks, the time never rising as it grows (beyond noise).
SWEEP_OVER, SWEEP_PREDICTED = 0.03, 0.03
HAND = ("none", "layer", "sqrt", "dots")
BUDGETS = (0.25, 0.5, 0.75)  # the budgets
SWEEP = (0.15, 0.35, 0.6, 0.9)  # more points on the curve
FRAMEWORK = {"numpy": "remat-numpy", "xla": "remat-xla", "torch": "torch"}  # torch: hand-placed plans only
ROUNDS = {False: 9, True: 3}
MiB = 2**20


def planner_available() -> bool:
    """Whether `rm.value_and_grad` takes `memory_budget=` (the planner has landed)."""
    import remat as rm

    return "memory_budget" in inspect.signature(rm.value_and_grad).parameters


def backends_here() -> list[str]:
    """remat's backends, and PyTorch (its hand-placed checkpoints, for comparison) when installed."""
    found = lambda name: importlib.util.find_spec(name) is not None  # noqa: E731
    return ["numpy"] + ["xla"] * found("jax") + ["torch"] * found("torch")


def plans_for(backend: str, budgets) -> list:
    """PyTorch has neither a planner nor dots_saveable."""
    return ["none", "layer", "sqrt"] if backend == "torch" else [*HAND, *budgets]


def plan_label(plan: str | float) -> str:
    return f"budget {plan:.0%}" if isinstance(plan, float) else PLAN_NAMES[plan]


# ---------------------------------------------------------------- in the worker


def flops_job(job: dict) -> dict:
    """A hand-placed plan's FLOPs (the cost model's count of the whole step, recomputation
    included) over the step's without checkpoints, and its time as each backend's cost model
    predicts it (`modelled`: the work and the memory held, by the evaluator's count, as
    `PlanReport.time_ratio` weighs them). (A planned step's are its report's.)"""
    import remat as rm

    size = size_from_dict(job["size"])
    params, data = inputs(size)
    graphs = {p: rm.make_graph(impl_remat.step_function(size, p))(params, data) for p in ("none", job["plan"])}
    peaks = {p: base_bytes(g) + max((q.high for q in timeline.predict(g)), default=0) for p, g in graphs.items()}

    def modelled(backend: str) -> float:
        work = {p: cost(g, WEIGHTS[backend]) for p, g in graphs.items()}
        return step_time(work[job["plan"]] - work["none"], peaks[job["plan"]], work["none"], peaks["none"])

    ratio = cost(graphs[job["plan"]], FLOPS) / cost(graphs["none"], FLOPS)
    return {"flops": ratio, "modelled": {backend: modelled(backend) for backend in WEIGHTS}}


def memory_job(job: dict) -> dict:
    """`remat.bench.worker.memory_job` for a planned step, plus what the planner reported for the
    very plan measured, and whether its gradients equal those of the step without checkpoints."""
    from remat.bench import worker

    framework, size = job["framework"], size_from_dict(job["size"])
    try:
        with _reports() as reports:
            step, finish = worker.build(framework, size, job["plan"])
    except ValueError as e:  # below the smallest feasible peak: the planner says so
        if "memory_budget" not in str(e):
            raise
        return {"infeasible": re.sub(r" \(at [^()]*\)$", "", str(e).splitlines()[0])}  # not the worker's line
    out = {**worker.measure_memory(framework, step, finish), **_report_figures(reports[-1])}
    out["grads"] = _compare_grads(step(), worker.build(framework, size, "none")[0]())
    return out


def time_job(job: dict) -> dict:
    """`remat.bench.worker.time_job`, plus the fingerprint of each planned step's plan."""
    from remat.bench import worker

    with _reports() as reports:
        out = worker.time_job(job)
    out["plans"] = [_fingerprint(r) for r in reports]
    return out


JOBS = {"planner-flops": flops_job, "planner-memory": memory_job, "planner-time": time_job}


def _reports():
    from remat.planner.solve import collect_reports

    return collect_reports()


def _fingerprint(report) -> str:
    """Names a plan: equal plans, equal fingerprints."""
    import hashlib

    return hashlib.sha1(repr(report.plan).encode()).hexdigest()[:8]


def _report_figures(report) -> dict:
    """The report's figures, bytes counted as measured peaks are: without the step's inputs and
    constants (`base`), which every plan holds and the budget includes."""
    base = int(report.base_bytes)
    return {"predicted": int(report.predicted_peak) - base, "budget": int(report.budget_bytes) - base, "base": base,
            "unplanned": int(report.unplanned_peak) - base,
            "strategy": report.strategy, "flops": 1.0 + report.extra_flops_ratio,
            "modelled": report.time_ratio, "plan": _fingerprint(report),
            "solver": f"{report.solver_status} in {report.solver_time:.1f} s"}


def _compare_grads(planned, plain) -> dict:
    """`{"equal": bitwise, "max_rel": largest |planned - plain| / max |plain| over the leaves}`
    of two `(loss, grads)` results."""
    import remat as rm

    a, b = ([np.asarray(x) for x in rm.tree.leaves(r)] for r in (planned, plain))
    equal = all(np.array_equal(x, y) for x, y in zip(a, b))
    rel = max(float(np.max(np.abs(x - y))) / max(float(np.max(np.abs(y))), 1e-30) for x, y in zip(a, b))
    return {"equal": equal, "max_rel": rel}


# ---------------------------------------------------------------- in the parent: running the jobs


def _jobs(jobs: list[dict], processes: int) -> list[dict]:
    from remat.bench import _subprocess

    with ThreadPoolExecutor(max_workers=processes) as pool:
        return list(pool.map(_subprocess, jobs))


def measure_model(model: str, quick: bool = False, backends=None, budgets=None, log=print,
                  time_steps: bool = True) -> dict:
    """`{"model", "size", "rows": {(backend, plan): {...}}, "noise": {backend: [ratios]},
    "infeasible": {budget: message}, "timed_plans": {backend: [fingerprints]}}` for one model."""
    size = SIZES[model, quick]
    backends = list(backends or backends_here())
    budgets = [float(b) for b in (budgets if budgets is not None else BUDGETS + SWEEP)]
    if budgets and not planner_available():
        log("memory_budget= is not there yet: hand-placed plans only")
        budgets = []
    sized = size_to_dict(size)
    memory = [{"job": "planner-memory" if isinstance(p, float) else "memory", "framework": FRAMEWORK[be],
               "plan": p, "size": sized} for be in backends for p in plans_for(be, budgets)]
    rows = {(_backend_of(job), job["plan"]): res for job, res in zip(memory, _jobs(memory, 2))}
    log(f"{model}: memory")
    if importlib.util.find_spec("remat.planner.cost"):
        flops = dict(zip(HAND, _jobs([{"job": "planner-flops", "plan": p, "size": sized} for p in HAND], 2)))
        for (backend, plan), row in rows.items():
            if plan in flops:
                row.update(flops=flops[plan]["flops"], modelled=flops[plan]["modelled"].get(backend))
    infeasible = {p: r["infeasible"] for (_, p), r in rows.items() if "infeasible" in r}
    rows = {k: r for k, r in rows.items() if k[1] not in infeasible}
    feasible = [b for b in budgets if b not in infeasible]
    noise, timed = {}, {}
    for be in backends if time_steps else ():
        plans = plans_for(be, feasible)
        entries = [(FRAMEWORK[be], p) for p in ["none", *plans]]  # "none" twice: the noise control
        (res,) = _jobs([{"job": "planner-time", "size": sized, "rounds": ROUNDS[quick], "entries": entries}], 1)
        times = {k.split("/", 1)[1]: v for k, v in res["times"].items()}
        for p in plans:
            rows[be, p]["times"] = times[str(p)]
        noise[be] = timing.ratios(times["none'"], times["none"])
        timed[be] = dict(zip([p for p in plans if isinstance(p, float)], res["plans"]))  # built in this order
        log(f"{model}: time on {be}")
    return {"model": model, "size": size, "rows": rows, "noise": noise, "infeasible": infeasible, "timed_plans": timed}


def _backend_of(job: dict) -> str:
    return next(be for be, fw in FRAMEWORK.items() if fw == job["framework"])


def time_ratio(row: dict, base: dict) -> float | None:
    """The median of the per-round ratios of `row`'s step time to `base`'s."""
    if "times" not in row or "times" not in base:
        return None
    return timing.median_ratio(row["times"], base["times"])


def noise_of(ratios: list[float]) -> float:
    """How far two identical steps' median time ratio may land from 1 in this run: the largest
    distance from 1 of the median of any half of the control's per-round ratios (a median over
    fewer rounds than a compared one, so it errs towards more noise), at least 2%."""
    if not ratios:
        return 0.05
    half = max(1, len(ratios) // 2)
    medians = [statistics.median(ratios[i : i + half]) for i in range(len(ratios) - half + 1)]
    return max(0.02, max(abs(m - 1) for m in medians))


# ---------------------------------------------------------------- the checks


def pareto(result: dict, backend: str) -> list[str]:
    """The budgets whose planned step is slower, beyond the noise (`time_tolerance`), than a
    hand-placed plan whose measured peak is at or below the planned step's own: one line
    each (empty: Pareto holds)."""
    rows, fails = result["rows"], []
    none = rows.get((backend, "none"), {})
    tol = time_tolerance(result, backend)
    for (be, plan), row in rows.items():
        if be != backend or not isinstance(plan, float) or "peak" not in row:
            continue
        mine = time_ratio(row, none)
        for hand in HAND:
            other = rows.get((backend, hand), {})
            theirs = time_ratio(other, none)
            if mine is None or theirs is None or other.get("peak", np.inf) > row["peak"]:
                continue
            if mine > theirs + tol:
                fails.append(f"{result['model']} {backend} {plan_label(plan)}: time {mine:.2f}x > "
                             f"{PLAN_NAMES[hand]} {theirs:.2f}x (+{tol:.2f} noise) at peak "
                             f"{other['peak'] / MiB:.1f} <= {row['peak'] / MiB:.1f} MiB")
    return fails


def budget_checks(result: dict) -> list[str]:
    """Each planned row against the issue's bars: measured peak <= budget + 5%, predicted within
    10% of measured, gradients equal. One line per miss (empty: all met)."""
    fails = []
    for (be, plan), row in result["rows"].items():
        if not isinstance(plan, float) or "peak" not in row:
            continue
        name = f"{result['model']} {be} {plan_label(plan)}"
        total, budget = row["peak"] + row["base"], row["budget"] + row["base"]
        if total > 1.05 * budget:
            fails.append(f"{name}: measured {total / MiB:.2f} MiB > budget {budget / MiB:.2f} MiB + 5% "
                         f"(inputs and constants included: {row['base'] / MiB:.2f} MiB)")
        if abs(row["predicted"] - row["peak"]) > 0.10 * row["peak"]:
            fails.append(f"{name}: predicted {row['predicted'] / MiB:.2f} MiB vs measured {row['peak'] / MiB:.2f} MiB")
        grads = row["grads"]
        if not (grads["equal"] if be == "numpy" else grads["max_rel"] <= 1e-5):
            fails.append(f"{name}: gradients differ (largest relative difference {grads['max_rel']:.1e})")
    return fails


# ---------------------------------------------------------------- printing and plotting


def table(result: dict, backend: str) -> str:
    rows = result["rows"]
    none = rows[backend, "none"]
    head = ["plan", "budget MiB", "predicted MiB", "measured peak MiB", "vs none", "step time", "predicted time",
            "FLOPs", "gradients"]
    lines = [f"**{result['size'].describe()}, {_BACKEND_NAMES[backend]}**", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (be, plan), row in sorted(rows.items(), key=lambda kv: _order(kv[0][1])):
        if be != backend:
            continue
        ratio = time_ratio(row, none)
        cells = [plan_label(plan) + (f" ({row['strategy']})" if "strategy" in row else ""),
                 _mib(row.get("budget")), _mib(row.get("predicted")), _measured(row),
                 f"{row['peak'] / none['peak']:.2f}x" if "peak" in row else "n/a",
                 _times(ratio), _times(row.get("modelled")),
                 _times(row.get("flops")), _grads(row, backend)]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", _notes(result, backend)]
    return "\n".join(lines)


_BACKEND_NAMES = {"numpy": "remat · NumPy (evaluator count)", "xla": "remat · XLA (resident memory)",
                  "torch": "PyTorch eager, torch.utils.checkpoint (resident memory)"}


def _order(plan) -> tuple:
    return (1, plan) if isinstance(plan, float) else (0, HAND.index(plan))


def _measured(row: dict) -> str:
    own = f" (XLA's report: {row['xla_own'] / MiB:.1f})" if "xla_own" in row else ""
    return _mib(row.get("peak")) + own


def _times(x) -> str:
    return "n/a" if x is None else f"{x:.2f}x"


def _mib(n) -> str:
    return "" if n is None else f"{n / MiB:.1f}"


def _grads(row: dict, backend: str) -> str:
    g = row.get("grads")
    if g is None:
        return ""
    return "bit-identical" if g["equal"] else f"max rel. diff {g['max_rel']:.0e}"


def _notes(result: dict, backend: str) -> str:
    out = []
    ratios = result["noise"].get(backend)
    if ratios:
        out.append(f"Noise (a second step without checkpoints against the first): median "
                   f"{statistics.median(ratios):.2f}x, tolerance {noise_of(ratios):.2f}.")
    repeated = repeat_noise(result, backend)
    if repeated:
        out.append(f"The same plan timed at several budgets spread over {repeated:.2f} (the sweep's tolerance is "
                   f"the larger of the two).")
    rows = [r for (be, _), r in result["rows"].items() if be == backend and "tracemalloc" in r]
    if rows:
        traced = max(abs(r["peak"] - r["tracemalloc"]) / r["tracemalloc"] for r in rows)
        out.append(f"tracemalloc agrees with the evaluator's count within {traced:.1%}.")
    for b, why in result.get("infeasible", {}).items():
        out.append(f"Budget {b:.0%}: infeasible ({why.splitlines()[0]})")
    differ = replanned(result, backend)
    if differ:
        out.append("The planner chose another plan when the step was built again (for timing) at: "
                   + ", ".join(plan_label(b) for b in differ) + ".")
    return " ".join(out)


def replanned(result: dict, backend: str) -> list[float]:
    """The budgets whose plan, built again in the timing process, differs from the plan measured
    for memory (none: the planner bounds its work, not its time, and a plan read from the plan
    cache is the plan stored)."""
    timed = result.get("timed_plans", {}).get(backend, {})
    return [b for b, fp in timed.items() if result["rows"][backend, b]["plan"] != fp]


def plot(results: list[dict], path) -> Path:
    """Per model: budget -> measured peak (left), measured peak -> step-time ratio with the
    hand-placed plans (right), one colour per backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(len(results), 2, figsize=(11, 4.2 * len(results)), squeeze=False)
    for (left, right), result in zip(axes, results):
        _plot_budget(left, result)
        _plot_pareto(right, result)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


_COLOURS = {"numpy": "tab:blue", "xla": "tab:orange", "torch": "tab:green"}


def _plot_budget(ax, result: dict) -> None:
    for be in _COLOURS:
        pts = sorted((p, r) for (b, p), r in result["rows"].items() if b == be and isinstance(p, float) and "peak" in r)
        if pts:
            ax.plot([r["budget"] / MiB for _, r in pts], [r["peak"] / MiB for _, r in pts], "o-",
                    color=_COLOURS[be], label=f"measured, {be}")
            ax.plot([r["budget"] / MiB for _, r in pts], [r["predicted"] / MiB for _, r in pts], "x:",
                    color=_COLOURS[be], label=f"predicted, {be}")
    lim = ax.get_xlim()
    ax.plot(lim, lim, color="grey", lw=0.8, label="peak = budget")
    ax.set(xlabel="budget (MiB)", ylabel="peak (MiB)", title=f"{result['size'].describe()}: budget → peak")
    ax.title.set_fontsize(8)
    ax.legend(fontsize=7)


def _plot_pareto(ax, result: dict) -> None:
    for be in _COLOURS:
        none = result["rows"].get((be, "none"), {})
        pts = sorted((r["peak"], time_ratio(r, none)) for (b, p), r in result["rows"].items()
                     if b == be and isinstance(p, float) and "peak" in r and "times" in r)
        if pts:
            ax.plot(*zip(*pts), "o-", color=_COLOURS[be], label=f"planner, {be}")
        predicted = sorted((r["predicted"], r["modelled"]) for (b, p), r in result["rows"].items()
                           if b == be and isinstance(p, float) and "modelled" in r)
        if predicted:  # the curve rm.memory.pareto predicts, at the budgets measured
            ax.plot(*zip(*predicted), "x:", color=_COLOURS[be], label=f"planner predicted, {be}")
        for hand in HAND:
            r = result["rows"].get((be, hand))
            if r and "peak" in r and "times" in r:
                ax.plot(r["peak"], time_ratio(r, none), "s", color=_COLOURS[be], mfc="none")
                name = PLAN_NAMES[hand] + (" (torch)" if be == "torch" else "")
                ax.annotate(name, (r["peak"], time_ratio(r, none)), fontsize=7, xytext=(4, 4),
                            textcoords="offset points")
    ax.xaxis.set_major_formatter(lambda v, _: f"{v / MiB:.0f}")
    ax.set(xlabel="peak (MiB)", ylabel="step time / no checkpoint", title="planner vs hand-placed")
    ax.legend(fontsize=7)


# ---------------------------------------------------------------- the sweep: many budgets


def smallest_budget(model: str, backend: str, quick: bool) -> float:
    """The smallest `memory_budget=` fraction the planner meets for `model`'s step on `backend`,
    rounded up to a hundredth (as its refusal says it)."""
    size = SIZES[model, quick]
    params, data = inputs(size)
    loss = impl_remat.loss_fn(size, "none")
    try:
        plan_report(loss, params, data, memory_budget=0.001, argnums=0, backend=backend)
    except BudgetTooSmall as e:
        whole = plan_report(loss, params, data, memory_budget=1.0, argnums=0, backend=backend)
        share = (e.smallest_budget - whole.base_bytes) / (whole.unplanned_peak - whole.base_bytes)
        return math.ceil(share * 100) / 100
    return 0.001


def sweep_model(model: str, quick: bool, backends, points: int, log=print, time_steps: bool = True) -> dict:
    """`measure_model` at `points` budgets evenly spaced from the smallest each backend meets to
    the whole step (each backend's own: a fraction is of its own count of the unplanned step)."""
    merged: dict = {"model": model, "size": SIZES[model, quick], "rows": {}, "noise": {}, "infeasible": {},
                    "timed_plans": {}}
    for be in backends:
        if be == "torch":
            continue
        low = smallest_budget(model, be, quick)
        budgets = [float(b) for b in np.round(np.linspace(low, 1.0, points), 3)]
        log(f"{model} on {be}: {points} budgets from {low:g}")
        one = measure_model(model, quick, [be], budgets=budgets, log=log, time_steps=time_steps)
        for key in ("rows", "noise", "infeasible", "timed_plans"):
            merged[key].update(one[key])
    return merged


def sweep_checks(result: dict) -> list[str]:
    """The sweep's bars for each backend's planned rows, in order of budget: within the budget
    (+3%), predicted within 3% (on XLA of its buffer report, which the plan is counted by; the
    resident memory, `peak`, must be within the budget), the peak never above that of a larger
    budget, the time never above a smaller budget's beyond the noise (`time_tolerance`)."""
    fails = []
    for be in {b for b, _ in result["rows"]}:
        planned = sorted((p, r) for (b, p), r in result["rows"].items() if b == be and isinstance(p, float)
                         and "peak" in r)
        none = result["rows"].get((be, "none"), {})
        tol = time_tolerance(result, be)
        for k, (plan, row) in enumerate(planned):
            name = f"{result['model']} {be} {plan_label(plan)}"
            if row["peak"] + row["base"] > (1 + SWEEP_OVER) * (row["budget"] + row["base"]):
                fails.append(f"{name}: measured {row['peak'] / MiB:.2f} MiB over the budget "
                             f"{row['budget'] / MiB:.2f} MiB + 3%")
            held = _counted(row)
            if abs(row["predicted"] - held) > SWEEP_PREDICTED * (held + row["base"]):
                fails.append(f"{name}: predicted {row['predicted'] / MiB:.2f} MiB, counted {held / MiB:.2f} MiB")
            if k == 0:
                continue
            before = planned[k - 1][1]
            if held < _counted(before):
                fails.append(f"{name}: peak {held / MiB:.2f} MiB below the smaller budget's")
            mine, theirs = time_ratio(row, none), time_ratio(before, none)
            if mine is not None and theirs is not None and mine > theirs + tol:
                fails.append(f"{name}: time {mine:.2f}x above the smaller budget's {theirs:.2f}x (+{tol:.2f} noise)")
    return fails


def time_tolerance(result: dict, backend: str) -> float:
    """How much slower one step may measure than another and be as fast, in this run: the
    larger of the control's noise (`noise_of`) and of one plan's spread (`repeat_noise`)."""
    return max(noise_of(result["noise"].get(backend, [])), repeat_noise(result, backend))


def repeat_noise(result: dict, backend: str) -> float:
    """The widest spread of the time ratios of budgets that got the same plan (a plan timed at
    several budgets is a repeated control too): 0 where no plan repeats."""
    none = result["rows"].get((backend, "none"), {})
    by_plan: dict[str, list[float]] = {}
    for (be, plan), row in result["rows"].items():
        ratio = time_ratio(row, none) if be == backend and isinstance(plan, float) and "plan" in row else None
        if ratio is not None:
            by_plan.setdefault(row["plan"], []).append(ratio)
    return max((max(r) - min(r) for r in by_plan.values()), default=0.0)


def _counted(row: dict) -> int:
    """What a planned step's plan is counted by: XLA's buffer report, or the evaluator's peak."""
    return row.get("xla_own", row["peak"])


# ---------------------------------------------------------------- the whole benchmark


def run(quick: bool = False, out: str | None = None, png: str | None = None, models=None, frameworks=None,
        sweep: int | None = None) -> int:
    """Measure, print the tables and the checks (and write them to `out`, the picture to `png`);
    `models` and `frameworks` are lists of names (all when None). `sweep`: that many budgets
    from the smallest each backend meets to the whole step, checked against the sweep's bars,
    instead of the fixed budgets. Returns 1 when a check fails."""
    models, backends = _names(models, frameworks)
    start = time.perf_counter()
    log = lambda msg: print(f"  [{time.perf_counter() - start:6.1f} s] {msg}", file=sys.stderr)  # noqa: E731
    if sweep:
        backends = [be for be in backends if be != "torch"]
        results = [sweep_model(m, quick, backends, sweep, log=log) for m in models]
    else:
        results = [measure_model(m, quick, backends, log=log) for m in models]
    sections, fails = [], []
    for result in results:
        for be in backends:
            sections.append(table(result, be))
            fails += pareto(result, be)
        fails += sweep_checks(result) if sweep else budget_checks(result)
    sections.append("All checks met." if not fails else "NOT MET:\n" + "\n".join(f"- {f}" for f in fails))
    text = "\n\n".join(sections)
    print(text)
    if out:
        Path(out).write_text(text + "\n")
    if png:
        log(f"picture written to {plot(results, png)}")
    return 1 if fails else 0


def _names(models, frameworks) -> tuple[list[str], list[str]]:
    """The models and backends asked for, checked as `remat bench` checks its own."""
    from remat.errors import ArgumentTypeError, ArgumentValueError

    here = [FRAMEWORK[b] for b in backends_here()]
    for name, known, given in (("models", MODELS, models), ("frameworks", here, frameworks)):
        if isinstance(given, str):
            raise ArgumentTypeError(f"bench --planner: {name} must be a list of names, got {given!r}; use [{given!r}]")
        bad = [g for g in given or () if g not in known]
        if bad:
            raise ArgumentValueError(f"bench --planner: unknown {name[:-1]} {bad[0]!r}; known here: {', '.join(known)}")
    backends = [be for be, fw in FRAMEWORK.items() if fw in (frameworks or here)]
    return list(models or MODELS), backends
