"""How long `memory_budget=` takes to plan, and what planning fast gives up against the MILP.

    python benchmarks/planner_speed.py               # the three models, four budgets, MILP too
    python benchmarks/planner_speed.py --no-milp     # planning times only (a minute)
    python benchmarks/planner_speed.py --quick       # small models (a smoke test, not the figures)

Models: the residual MLP (64 layers, width 128, batch 1024), the GPT-style model (8 blocks, as
`remat bench --planner`) and a 256-layer residual MLP (about 1,000 nodes). For each, in a process
of its own with the plan cache off, at budgets of 90 %, 70 %, 50 % and 35 % of the activation
memory:

- auto: the default planner (`strategy=None`, the chain DP). `first` is the first plan of the
  process, the planner's imports and the chain model included; `report` is the planner's own
  time (`PlanReport.solver_time`);
- milp: `strategy="milp"` (HiGHS from the chain's plans, the plan of least recomputation) for
  a budget of auto's own peak, its time and status: auto takes the plan predicted fastest within
  the budget (the memory it holds counted), which may hold far less than the budget, so it is
  compared with the MILP at the memory it holds; where HiGHS proves its plan optimal (within its
  0.1 % gap), `gap` is the recomputation auto gives up against the optimum at that peak;
- extra: the cost of the recomputation over the step's (`PlanReport.extra_cost / step_cost`), on
  the step programs as they run; time: the step time predicted (`PlanReport.time_ratio`);
  peak/budget: the exact count over the budget;
- cached: a second process reading the plan from a fresh disk cache (`REMAT_PLAN_CACHE`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import remat as rm
from remat import models
from remat.bench.config import GPT, MLP, inputs
from remat.planner import solve

BUDGETS = (0.9, 0.7, 0.5, 0.35)
MODELS = ("mlp64", "gpt8", "mlp256")


def _step(model: str, quick: bool):
    if model.startswith("mlp"):
        depth = int(model[3:])
        size = MLP(depth=depth // 8, width=32, batch=64) if quick else MLP(depth=depth, width=128, batch=1024)
        return (lambda p, x: models.residual_mlp_loss(p, x)), inputs(size)
    size = (GPT(layers=2, d_model=32, heads=2, seq=64, batch=8, vocab=64) if quick
            else GPT(layers=8, d_model=64, heads=4, seq=128, batch=16, vocab=256))
    return (lambda p, d: models.gpt_loss(p, d, "none", size.heads)), inputs(size)


def worker(model: str, strategy: str | None, budgets: list[float], quick: bool) -> list[dict]:
    """Plans `model`'s step at each budget in this process; one row per budget."""
    fn, args = _step(model, quick)
    graph = rm.make_graph(fn)(*args)
    rows = []
    for budget in budgets:
        solve._CACHE.clear()  # each budget planned, not read from the process's own cache
        started = time.perf_counter()
        try:
            _, report = solve.plan_step(graph, budget, strategy)
        except rm.errors.BudgetTooSmall as e:
            rows.append({"budget": budget, "refused": str(e).split(";")[0]})
            continue
        rows.append({"budget": budget, "nodes": len(graph.nodes), "first": time.perf_counter() - started,
                     "report": report.solver_time, "extra": report.extra_cost / report.step_cost,
                     "time": report.time_ratio, "peak": report.predicted_peak,
                     "fill": report.predicted_peak / report.budget_bytes, "status": report.solver_status,
                     "strategy": report.strategy})
    return rows


def _run(model: str, strategy: str | None, budgets, quick: bool, cache: str = "off") -> list[dict]:
    code = (f"import json, sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); import planner_speed as p; "
            f"print(json.dumps(p.worker({model!r}, {strategy!r}, {list(budgets)!r}, {quick!r})))")
    env = {**os.environ, "REMAT_PLAN_CACHE": cache}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--no-milp", action="store_true")
    p.add_argument("--models", nargs="+", default=list(MODELS))
    a = p.parse_args(argv)
    print("| model | nodes | budget | auto first s | auto report s | cached s | auto extra | auto time | peak/budget "
          "| milp s | milp extra | milp status | gap |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for model in a.models:
        firsts = [_run(model, None, [b], a.quick)[0] for b in BUDGETS]  # each the first of its process
        with tempfile.TemporaryDirectory() as folder:
            _run(model, None, BUDGETS, a.quick, cache=folder)
            cached = _run(model, None, BUDGETS, a.quick, cache=folder)
        peaks = [auto.get("peak", auto["budget"]) for auto in firsts]  # the MILP at the memory auto holds
        milps = [{}] * len(BUDGETS) if a.no_milp else _run(model, "milp", peaks, a.quick)
        for auto, again, milp in zip(firsts, cached, milps):
            if "refused" in auto:
                print(f"| {model} | | {auto['budget']:g} | refused: {auto['refused']} |||||||||")
                continue
            proven = milp.get("status", "").startswith("optimal")
            gap = f"{auto['extra'] - milp['extra']:+.3f}" if "extra" in milp else ""
            print(f"| {model} | {auto['nodes']} | {auto['budget']:g} | {auto['first']:.2f} | {auto['report']:.2f} "
                  f"| {again['first']:.3f} | {auto['extra']:.3f} | {auto['time']:.3f}x | {auto['fill']:.3f} "
                  f"| {milp.get('report', float('nan')):.1f} | {milp.get('extra', float('nan')):.3f} "
                  f"| {milp.get('status', '').split(';')[0]} | {gap}{' (optimum)' if proven else ''} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
