"""A hard memory cap without a plan (dynamic rematerialization) against the planner's plan.

    python benchmarks/memory_cap.py            # the residual MLP (64 layers) and the GPT-style model (8 blocks)
    python benchmarks/memory_cap.py --quick    # small sizes, seconds
    python benchmarks/memory_cap.py --out cap.md

For each model, on the NumPy evaluator, `rm.value_and_grad` of its loss run four ways, side by
side in interleaved rounds: no checkpoint (the reference), `rm.jit(step, memory_cap=cap)` with
`cap` a third of the reference's peak (`--fraction`), the planner's plan for the same cap
(`memory_budget=` the arguments' bytes + cap: a budget counts them, a cap does not), and the
cap set far above the peak, never reached (what the bookkeeping costs). Per way: the peak (the
evaluator's count, and tracemalloc's for the capped run), the extra compute by the planner's
cost model of the NumPy evaluator (the same units for both), the median step-time ratio to the
reference, and whether the gradients are bit-identical to it. Exit status 1 when a capped run
goes over its cap or changes a gradient; the speed goals are reported, not enforced (timings
are noisy on a shared machine).
"""

from __future__ import annotations

import argparse
import sys
import tracemalloc
from functools import partial

import numpy as np

import remat as rm
from remat.bench.config import GPT, MLP, inputs
from remat.bench.impl_remat import loss_fn, step_function
from remat.bench.timing import interleaved, median_ratio
from remat.planner.cost import WEIGHTS, node_cost

SIZES = {
    False: {"mlp": MLP(depth=64, width=128, batch=1024),
            "gpt": GPT(layers=8, d_model=64, heads=4, seq=128, batch=16, vocab=256)},
    True: {"mlp": MLP(depth=16, width=64, batch=256),
           "gpt": GPT(layers=2, d_model=32, heads=2, seq=64, batch=8, vocab=64)},
}
GOALS = {"extra compute ÷ the planner's": 1.2, "step time ÷ no checkpoint": 1.3, "never reached ÷ no cap": 1.03}


def measure(size, fraction: float, rounds: int) -> dict:
    params, data = inputs(size)
    step = step_function(size, "none")
    plain = rm.jit(step).lower(params, data).compile()
    reference = _leaves(plain(params, data))
    peak = plain.last_memory.peak
    cap = int(peak * fraction)
    capped = rm.jit(step, memory_cap=cap).lower(params, data).compile()
    idle = rm.jit(step, memory_cap=10 * peak).lower(params, data).compile()
    base = rm.memory.plan_report(loss_fn(size, "none"), params, data, memory_budget=1.0, argnums=0).base_bytes
    budget = base + cap
    runs = {"no checkpoint": plain, "memory_cap": capped, "cap never reached": idle}
    try:
        report = rm.memory.plan_report(loss_fn(size, "none"), params, data, memory_budget=budget, argnums=0)
    except rm.BudgetTooSmall as e:  # no plan reaches the cap: the cap runs where the planner cannot
        report, smallest = None, e.smallest_budget - base
    else:
        smallest = None
        runs["planner"] = rm.jit(rm.value_and_grad(loss_fn(size, "none"), memory_budget=budget)).lower(
            params, data).compile()

    same = {name: all(np.array_equal(a, b) for a, b in zip(_leaves(c(params, data)), reference))
            for name, c in runs.items()}
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    capped(params, data)
    traced_peak = tracemalloc.get_traced_memory()[1] - before
    tracemalloc.stop()
    memory = capped.last_memory
    times = interleaved({name: partial(c, params, data) for name, c in runs.items()}, rounds)
    ratios = {name: median_ratio(times[name], times["no checkpoint"]) for name in runs}
    return {
        "size": size, "peak": peak, "cap": cap, "budget": budget, "same": same, "ratios": ratios,
        "peaks": {name: c.last_memory.peak for name, c in runs.items()}, "traced_peak": traced_peak,
        "evictions": memory.evictions, "recomputations": memory.recomputations,
        "extra": {"memory_cap": memory.recompute_cost, **({} if report is None else {"planner": report.extra_cost})},
        "step_cost": _step_cost(plain), "strategy": None if report is None else report.strategy,
        "planner_smallest": smallest,
    }


def _step_cost(compiled) -> float:
    return sum(node_cost(n, WEIGHTS["numpy"]) for n in compiled.lowered.graph.nodes)


def _leaves(out) -> list[np.ndarray]:
    return [np.asarray(t) for t in rm.tree.leaves(out)]


def table(r: dict, fraction: float) -> str:
    mib = lambda n: f"{n / 2**20:.2f} MiB"  # noqa: E731
    planner = (f"the planner's budget {mib(r['budget'])} (the arguments' bytes + the cap), strategy {r['strategy']}"
               if r["planner_smallest"] is None else
               f"no plan of the planner fits it (the least step peak a plan reaches: {mib(r['planner_smallest'])})")
    lines = [f"### {r['size'].describe()}", "",
             f"Cap: {fraction:.3g} of the unplanned peak {mib(r['peak'])} = {mib(r['cap'])}; {planner}.", "",
             "| run | peak (evaluator) | extra compute (share of the step) | step time ÷ no checkpoint | gradients |",
             "|---|---|---|---|---|"]
    for name in r["ratios"]:
        extra = r["extra"].get(name)
        share = "" if extra is None else f"{extra / r['step_cost']:.3f}"
        same = "bit-identical" if r["same"][name] else "DIFFER"
        lines.append(f"| {name} | {mib(r['peaks'][name])} | {share} | {r['ratios'][name]:.2f}x | {same} |")
    lines += ["", f"memory_cap: {r['evictions']} evictions, {r['recomputations']} nodes recomputed; tracemalloc "
              f"peak {mib(r['traced_peak'])} ({r['traced_peak'] / r['cap']:.3f} of the cap: NumPy's "
              "temporaries inside an op are not the evaluator's buffers).", ""]
    return "\n".join(lines)


def goals(r: dict) -> dict[str, float]:
    met = {"step time ÷ no checkpoint": r["ratios"]["memory_cap"],
           "never reached ÷ no cap": r["ratios"]["cap never reached"]}
    if "planner" in r["extra"]:
        met["extra compute ÷ the planner's"] = r["extra"]["memory_cap"] / max(r["extra"]["planner"], 1e-9)
    return met


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes (a smoke test, not the figures)")
    p.add_argument("--models", nargs="+", default=["mlp", "gpt"], help="mlp, gpt")
    p.add_argument("--fraction", type=float, default=None,
                   help="the cap, as a fraction of the unplanned peak (default 1/3; quick 1/2: small models keep more)")
    p.add_argument("--rounds", type=int, default=None, help="timing rounds (default 9, quick 3)")
    p.add_argument("--out", help="also write the tables to this markdown file")
    a = p.parse_args(argv)
    rounds = a.rounds or (3 if a.quick else 9)
    fraction = a.fraction or (1 / 2 if a.quick else 1 / 3)
    text, failed = [], False
    for model in a.models:
        r = measure(SIZES[a.quick][model], fraction, rounds)
        text.append(table(r, fraction))
        met = goals(r)
        text.append("Goals: " + "; ".join(f"{k} {v:.2f} (goal ≤ {GOALS[k]}: {'met' if v <= GOALS[k] else 'NOT met'})"
                                          for k, v in met.items()) + "\n")
        over = r["peaks"]["memory_cap"] > r["cap"]
        failed |= over or not all(r["same"].values())
        print(text[-2], text[-1], sep="\n", flush=True)
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(text))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
