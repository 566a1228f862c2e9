"""`plan_step`: the plan a gradient step gets for a `memory_budget`, chosen, checked and reported.

The strategies model memory their own way (the chain DP over stages, the MILP over values);
only `peak.total_peak` — the evaluator's exact count of the whole planned step — decides
whether a plan fits. A strategy whose plan turns out over budget is asked again for a budget
smaller by the overshoot, a few times, before it gives up. A step traced for XLA must also fit
as XLA counts it (`remat.planner.target`): the plan chosen is compiled and, while it is over,
everything is planned again for less than the plan's own count by that overshoot.
`strategy=None` ("auto") takes the chain DP's plan (`remat.planner.chain`: nested blocks, and
blocks saving their matrix products) for a budget of a fixed ladder up to the one asked
(`LADDER`, all from the graph's one DP table) whose step is predicted fastest (the work it adds
and the memory it holds: `_Objective`) and fits by the exact count; the segment plans of
`sqrt.segment_plans` too where the graph is no chain or no chain plan fits. It plans a 64-layer
MLP or an 8-block transformer in under a second. A forced strategy takes its plan of least
recomputation. `strategy="milp"` runs the MILP
(`remat.planner.milp`) from the chain's plans: seconds to minutes, and never worse than they
are. Every strategy bounds its work, not its time, so the same graph and budget always give the
same plan. When nothing fits, the error states the smallest peak found, in bytes and as a
fraction, and the budget that works.

>>> import remat as rm
>>> layer = lambda h: h + rm.tanh(h)
>>> g = rm.make_graph(lambda x: rm.sum(layer(layer(layer(layer(layer(layer(x))))))))(rm.ones((1024,)))
>>> planned, report = plan_step(g, 0.8, None)
>>> report.predicted_peak <= report.budget_bytes, planned.count("checkpoint") > 0
(True, True)
"""

from __future__ import annotations

import bisect
import contextlib
import dataclasses
import importlib
import math
import time
import warnings
from collections.abc import Callable, Iterator
from contextvars import ContextVar

from remat import budget as budgets
from remat.errors import ArgumentValueError, BudgetTooSmall, at_source, user_source
from remat.graph import Graph
from remat.planner import plan_cache, sqrt
from remat.planner import target as targets
from remat.planner.cost import HELD, cost, flops
from remat.planner.peak import ALL, Step, StepCount, activation_bytes, base_bytes, planning, step_graph, total_peak
from remat.planner.plan import NO_PLAN, Plan, apply
from remat.planner.report import PlanReport, PlanWarning, extra_cost, extra_flops, recomputed_values
from remat.planner.stages import is_chain
from remat.planner.target import Target
from remat.timeline import inline

TRIES = 6  # how often a strategy is asked again with a budget tightened by its overshoot
# The chain DP's budgets, as shares of the activation memory: the same for every budget asked
# (one table answers them all), those within REACH of it tried; the model was over the exact
# count by up to a fifth of the activation memory on a 256-layer MLP, under it by a few percent.
LADDER = tuple(k / 100 for k in range(0, 151))
REACH = 0.25
BEYOND = 2
SPREAD = 0.03  # how much more than on the plan for the budget itself the model may be over on another
AMPLE = 2**62  # a budget every plan fits
NEAR = 0.02  # by predicted time, how close (a share of the unplanned step's) the model may rank plans wrongly
NEAR_COUNTED = 2  # how many such plans are counted, at most, where the model's peaks guide

_REPORTS: ContextVar[list | None] = ContextVar("remat_plan_reports", default=None)


@contextlib.contextmanager
def collect_reports() -> Iterator[list[PlanReport]]:
    """The PlanReports of the steps planned inside the block (for `rm.memory.plan_report`)."""
    reports: list[PlanReport] = []
    token = _REPORTS.set(reports)
    try:
        yield reports
    finally:
        _REPORTS.reset(token)


def plan_step(graph: Graph, memory_budget, strategy, step: Step = ALL,
              region: str | None = None) -> tuple[Graph, PlanReport]:
    """`graph` with the plan chosen for `memory_budget` applied, and its report. `memory_budget`
    and `strategy` are what a user passes (see `remat.budget`); the step is counted as
    the backend it is traced for counts memory (`remat.planner.target`). A graph planned before
    (the same program, printed alike: an eager `rm.grad` traces anew at every call) reuses its
    plan. `region`: the line of the `rm.memory_budget` the graph is the region of, if it is."""
    target = targets.current()
    key = (str(graph), repr(budgets.parse_budget(memory_budget)), budgets.parse_strategy(strategy), step, target)
    report = _CACHE.get(key)
    if report is None:
        report = _stored_or_planned(key, graph, memory_budget, strategy, step, target)
        _CACHE[key] = report
        while len(_CACHE) > CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
    report = dataclasses.replace(report, memory_budget=memory_budget, region=region)  # as written this time
    sink = _REPORTS.get()
    if sink is not None:
        sink.append(report)
    return apply(graph, report.plan), report


CACHE_SIZE = 64
_CACHE: dict[tuple, PlanReport] = {}


def _stored_or_planned(key: tuple, graph: Graph, memory_budget, strategy, step: Step, target: Target) -> PlanReport:
    """The plan an earlier process stored for `key` (see `plan_cache`), else a new one, stored."""
    started = time.perf_counter()
    name = plan_cache.entry_name(*key)
    stored = plan_cache.load(name)
    if stored is not None:
        return dataclasses.replace(stored, solver_time=time.perf_counter() - started,
                                   solver_status=f"{stored.solver_status}; read from the plan cache")
    with planning():
        report = _plan(graph, memory_budget, strategy, step, target)
    plan_cache.store(name, report)
    return report


def _plan(graph: Graph, memory_budget, strategy, step: Step, target: Target) -> PlanReport:
    started = time.perf_counter()
    budget = budgets.parse_budget(memory_budget)
    name = budgets.parse_strategy(strategy)
    count = StepCount(graph, step, target)
    limit = budget.resolve(count.base, count.activation)
    plan, peak, status = _fitting(graph, memory_budget, limit, name, step, count)
    loops = _loops(graph)
    if loops:
        status += f"; the working memory inside {loops} is not counted"
        warnings.warn(PlanWarning(
            f"memory_budget: the predicted peak, {peak} bytes, leaves out the memory {loops} uses while "
            f"its body runs (how often a loop runs is a run-time fact); the measured peak may be higher by "
            f"about one iteration's values: leave room in the budget{at_source(user_source())}"), stacklevel=2)
    unplanned = step_graph(graph, NO_PLAN, step)
    return PlanReport(
        strategy=plan.strategy, memory_budget=memory_budget, budget_bytes=limit, predicted_peak=peak,
        base_bytes=count.base, unplanned_peak=count.base + count.activation, recomputed=recomputed_values(graph, plan),
        extra_flops=extra_flops(graph, plan, step), step_flops=flops(unplanned),
        extra_cost=extra_cost(graph, plan, step), step_cost=cost(unplanned),
        solver_status=status, solver_time=time.perf_counter() - started, plan=plan, counted_by=str(target))


def _fitting(graph: Graph, written, limit: int, name: str, step: Step, count: StepCount) -> tuple[Plan, int, str]:
    """The plan that fits `limit` as the target counts it and is chosen by `_Objective` (least
    predicted time for "auto", least recomputation for a forced strategy). The strategies plan by
    the evaluator's count; where the target's differs (XLA), the plan they choose is counted the
    target's way and, while it is over, they plan again for less than the evaluator's count of
    that plan by the overshoot."""
    unplanned = count.base + count.activation
    if unplanned <= limit and name != "auto":
        return NO_PLAN, unplanned, "the step fits without a plan"
    evaluated = total_peak(graph, NO_PLAN, step)
    objective = _Objective(graph, step, evaluated, timed=name == "auto")
    candidates: Found = []
    counted = "" if count.exact else f"; counted by {count.target}"

    def best(goal: int) -> tuple[Plan, str] | None:
        candidates[:] = [(NO_PLAN, evaluated, "")]
        if name == "auto" or evaluated > goal:  # a forced strategy plans only what does not fit
            candidates.extend(_candidates(graph, goal, name, step, objective))
        fits = [(p, peak, status) for p, peak, status in candidates if peak <= goal and p not in objective.rejected]
        if not fits:
            return None
        plan, _, status = min(fits, key=objective.of)
        return plan, status + counted

    def evaluator_peak(plan: Plan) -> int:  # of the plan `best` just chose
        return next(peak for p, peak, _ in candidates if p == plan)

    def counted_by_target(plan: Plan) -> int:
        peak = count(plan)
        if peak > limit:
            objective.rejected.add(plan)
        return peak

    tried = _checked(best, limit, counted_by_target, own=evaluator_peak)
    fits = [f for f in tried if f[1] <= limit]
    if fits:
        plan, peak, status = min(fits, key=objective.of)
        if plan == NO_PLAN:
            status = "the step fits without a plan, and no plan that fits is predicted faster"
        return plan, peak, status
    # The most frugal plan the strategies know, counted the target's way: "auto" takes it when it
    # fits (the error's smallest budget that works must work), else the error offers it.
    frugal = min(_frugal_plans(graph, evaluated, step), key=lambda f: f[1])[0]
    if name == "auto" and count(frugal) <= limit:
        return frugal, count(frugal), "the least memory the strategies reach" + counted
    found = candidates if count.exact else tried
    raise _infeasible(written, limit, count, found, (frugal, count(frugal), ""), name)


class _Objective:
    """What a plan is chosen by. "auto" takes the plan of least predicted time: the work it adds
    (`extra_cost`) and the memory it holds, weighed by the `HELD` share of the
    unplanned step's time (`cost.step_time`); so a bigger budget never gets a slower plan (to
    within the model's ranking of close plans, `NEAR`), and a budget the step meets without a
    plan still gets one where holding less is faster. A forced
    strategy's plan is the one of least recomputation (the strategy's own objective)."""

    def __init__(self, graph: Graph, step: Step, unplanned_peak: int, timed: bool):
        self.graph, self.step, self.timed = graph, step, timed
        self.rejected: set[Plan] = set()  # plans over the limit by the target's count: not chosen again
        self.step_cost = cost(step_graph(graph, NO_PLAN, step))
        self.per_byte = HELD * self.step_cost / max(unplanned_peak, 1) if timed else 0.0

    def of(self, found: tuple[Plan, int, str]) -> tuple[float, int]:
        """The key of a plan found with its peak: least first. By time, plans the model cannot
        tell apart (the same `NEAR` of the step's work) go by their peak: a bigger budget keeps
        a smaller one's plan until a plan it can hold is faster by more than the model's
        resolution, and of two plans as fast the one holding less is taken."""
        return self._key(self.time(found), found[1])

    def time(self, found: tuple[Plan, int, str]) -> float:
        """What "auto" minimises, in the cost model's units: the plan's extra work and its peak held."""
        return extra_cost(self.graph, found[0], self.step) + self.per_byte * found[1]

    def of_chained(self, chained) -> tuple[float, int]:
        """The key of a chain plan by the DP model's predictions (`chain.Chained`)."""
        return self._key(self.time_chained(chained), chained.peak)

    def time_chained(self, chained) -> float:
        return chained.cost + self.per_byte * chained.peak

    def bucket(self, time: float) -> float:
        """Times the model cannot tell apart share a bucket (by time; else the time itself)."""
        return math.floor(time / (NEAR * self.step_cost)) if self.timed and self.step_cost else time

    def _key(self, time: float, peak: int) -> tuple[float, int]:
        return self.bucket(time), peak


Found = list[tuple[Plan, int, str]]  # plans with their exact total peaks and how they were found


def _loops(graph: Graph) -> str:
    """The loops and branches of `graph` as a phrase ("a scan at model.py:3"), or "": the
    evaluator's count of their bodies is not predicted (`remat.timeline`)."""
    found = [n for n in graph.walk() if n.subgraphs() and not inline(n)]
    if not found:
        return ""
    where = f" at {found[0].source}" if found[0].source else ""
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return f"the {found[0].op}{where}{more}"


def _candidates(graph: Graph, limit: int, name: str, step: Step, objective: _Objective) -> Found:
    if name == "sqrt":  # √n segments; when they do not fit, the segment plans that might
        plan = sqrt.plan_sqrt(graph, step)
        found = [(plan, total_peak(graph, plan, step), "heuristic (√n segments)")]
        return found if found[0][1] <= limit else found + _segments(graph, limit, step, stop_at_fit=True)
    found: Found = []
    chain = _module("chain")
    if name in ("chain", "auto") and chain is not None:
        found += _chain_ladder(graph, limit, step, chain, objective)
    if name == "milp":  # started from the chain DP's plans: never worse than them
        start = _chain_ladder(graph, limit, step, chain, objective) if chain is not None else []
        found += _milp(graph, limit, step, [p for p, peak, _ in start if peak <= limit])
    if name == "auto" and (not is_chain(graph) or not any(peak <= limit for _, peak, _ in found)):
        # The chain DP's schedules hold the segment plans, but its model of memory does not know
        # the skips of a graph that is not a chain: there they may fit where its plans do not.
        # By time every one is counted (the least recomputing that fits may hold more, and be slower).
        found += _segments(graph, limit, step, stop_at_fit=not objective.timed)
    return found


def _checked(strategy: Callable[[int], tuple[Plan, str] | None], limit: int, count: Callable[[Plan], int],
             own: Callable[[Plan], int] | None = None) -> Found:
    """The strategy's plans (and how each was found) for `limit`, asked again with less while its
    `count` is over: less by the overshoot than the plan's peak by the strategy's `own` count
    (default: `count`), or than the target where that is lower. (From the target alone, a plan
    well under it by its own count came back unchanged while XLA's count was a few KiB over.)
    Once a target makes no plan, or one that fits, the rest of the `TRIES` halve the targets
    between it and the last one whose plan was over: on XLA an 8-block GPT's plan at 20% of its
    activations was over by a third, less by that left nothing, and a plan between fit; one
    further up may fit and recompute less. The caller takes the cheapest that fits."""
    found, target = [], limit
    over = below = None  # the last target whose plan was over; the last that made none, or one that fit
    for _ in range(TRIES):
        made = strategy(target)
        peak = None if made is None else count(made[0])
        if made is not None:
            found.append((made[0], peak, made[1]))
        if peak is not None and peak > limit:
            over = target
            if below is None:  # still tightening by the overshoot
                target = min(target, peak if own is None else own(made[0])) - max(peak - limit, 1)
                continue
        elif over is None:  # the budget itself made nothing, or a plan that fits
            break
        else:
            below = target
        target = (below + over) // 2
        if target in (below, over):
            break
    return found


def _named(plan: Plan | None, status: str) -> tuple[Plan, str] | None:
    return None if plan is None else (plan, status)


def _chain_ladder(graph: Graph, limit: int, step: Step, chain, objective: _Objective) -> Found:
    """Chain plans with their exact counts, the best that fits `limit` among them: the DP's
    plans for the budgets of a ladder (`LADDER`), from the graph's one DP table (every budget
    chooses among the same plans). By recomputation, the rungs around the budget (the least
    recomputing is near it); by time, every rung up to there (a plan for far less may be
    faster), and those around it where none of them fits (near the least a plan reaches). The
    DP's model of memory is not the count: mostly over it (a plan for a larger budget fits),
    sometimes under (one for a smaller budget is needed)."""
    if not objective.timed:
        return _ladder(graph, limit, step, chain, objective, by_time=False)
    found = _ladder(graph, limit, step, chain, objective, by_time=True)
    if any(peak <= limit and plan not in objective.rejected for plan, peak, _ in found):
        return found
    return found + _ladder(graph, limit, step, chain, objective, by_time=False)


def _ladder(graph: Graph, limit: int, step: Step, chain, objective: _Objective, by_time: bool) -> Found:
    activation, base = activation_bytes(graph, step), base_bytes(graph)
    at = (limit - base) / max(activation, 1)  # the budget as a share of the activation memory
    # By time, the same rungs for every budget (the budget's own plan would be one more for some
    # budgets than for others: a bigger one could miss a plan a smaller one takes).
    low = -math.inf if by_time else at - REACH
    rungs = {base + int(activation * share) for share in LADDER if low <= share <= at + REACH}
    budgets = sorted(rungs if by_time and min(rungs, default=AMPLE) <= limit else rungs | {limit})
    # With the plans for the ladder, one for half the activations and the step without a plan.
    *laddered, half, plain = chain.plan_chains(graph, budgets + [base + activation // 2, AMPLE], step)
    made = [c._replace(cost=c.cost - plain.cost)  # what each adds, as `extra_cost` counts it
            for c in dict.fromkeys(c for c in laddered if c is not None)]
    if not made:
        return []
    # The model's overestimate, on the plan for the budget itself; by time, on the same plan for
    # every budget (for half the activations, else the step without a plan), so that which plans
    # may fit does not depend on the budget but through it.
    own = (half or plain) if by_time else made[min(bisect.bisect_right(budgets, limit) - 1, len(made) - 1)]
    found: Found = [(own.plan, total_peak(graph, own.plan, step), "optimal for the chain")]
    over = own.peak - found[0][1]
    if by_time:
        made.sort(key=objective.of_chained)
    else:
        made.reverse()  # the largest budget recomputes least
    # On a graph that is no chain the model's peaks are no guide to which plans fit: all are counted.
    over = over + int(SPREAD * activation) if is_chain(graph) else AMPLE
    _first_that_fits(graph, limit, step, made, over, found, objective, by_time)
    return found


def _first_that_fits(graph: Graph, limit: int, step: Step, made: list, over: int, found: Found,
                     objective: _Objective, by_time: bool) -> None:
    """Counts exactly the plans `made` (`chain.Chained`, best first by the model) until one
    fits, and adds them to `found`: those whose prediction less `over`, the most the model may
    overestimate it, is within `limit`; then, by time, up to `NEAR_COUNTED` after it that the
    model ranks within `NEAR` of the best counted, or all where its peaks are no guide (the
    model's time is within about that of the exact count's; the caller takes the best by the
    count, of plans as fast the one holding least); by recomputation, the `BEYOND`
    better ones it skipped whose predictions are least (the model overestimates some plans more
    than others: one may fit)."""

    def counted(i: int) -> tuple[Plan, int, str]:
        plan = made[i].plan
        known = next((f for f in found if f[0] == plan), None)
        if known is None:
            known = (plan, total_peak(graph, plan, step), "optimal for the chain")
            found.append(known)
        return known

    def fits(i: int) -> bool:
        return counted(i)[1] <= limit

    first = next((i for i in range(len(made)) if made[i].peak - over <= limit and fits(i)), None)
    if first is None:
        return
    if by_time:
        near = NEAR * objective.step_cost
        best = objective.time(counted(first))
        guided = over < AMPLE  # else the model's peaks, and so its times, are no guide: all are counted
        more = 0
        for i in range(first + 1, len(made)):
            model = objective.time_chained(made[i])
            if guided and (more == NEAR_COUNTED or objective.bucket(model) > objective.bucket(best + near)):
                break  # `made` is in order of the model's buckets: none further is near
            if (model - near <= best or not guided) and made[i].peak - over <= limit:
                more += 1
                if fits(i):
                    best = min(best, objective.time(counted(i)))
        return
    skipped = sorted((i for i in range(first) if made[i].peak - over > limit), key=lambda i: made[i].peak)
    for i in skipped[:BEYOND]:
        fits(i)


def _milp(graph: Graph, limit: int, step: Step, start: list[Plan]) -> Found:
    milp = _module("milp")
    if milp is None:
        return []
    # Started from the sqrt plan too, so it is never worse than either.
    start = start + [sqrt.plan_sqrt(graph, step)]

    def run(target: int) -> tuple[Plan, str] | None:
        plan, info = milp.plan_milp(graph, target, start=start, step=step)
        return _named(plan, f"{getattr(info, 'status', info)}")

    return _checked(run, limit, lambda p: total_peak(graph, p, step))


def _segments(graph: Graph, limit: int, step: Step, stop_at_fit: bool) -> Found:
    """The segment plans, cheapest first, until one fits (all of them when none does)."""
    found: Found = []
    for plan in sorted(sqrt.segment_plans(graph, step), key=lambda p: extra_cost(graph, p, step)):
        peak = total_peak(graph, plan, step)
        found.append((plan, peak, "heuristic (segments)"))
        if peak <= limit and stop_at_fit:
            break
    return found


def _module(name: str):
    """A strategy module, if installed (they are written separately)."""
    try:
        return importlib.import_module(f"remat.planner.{name}")
    except ModuleNotFoundError as e:
        if e.name != f"remat.planner.{name}":
            raise
        return None


def _infeasible(written, limit: int, count: StepCount, found: Found, frugal: tuple[Plan, int, str],
                name: str) -> ArgumentValueError:
    """The error for a budget nothing `found` fits: below the most `frugal` plan too (the
    smallest budget that works), or one a forced strategy `name` misses while others fit."""
    base, activation = count.base, count.activation
    peaks = [peak for _, peak, _ in found]
    lowest = min(peaks + [frugal[1]])
    if lowest <= limit:  # a forced strategy missed what the others reach
        tried_least = min(peaks, default=base + activation)
        return ArgumentValueError(
            f"memory_budget: {_written(written, limit)} is below the smallest peak strategy={name!r} reaches "
            f"on this step, {tried_least} bytes; other plans fit it: pass strategy=None to take the cheapest")
    share = (lowest - base) / activation if activation else 1.0
    fraction = math.ceil(share * 100) / 100
    counted = "" if count.exact else f", counted by {count.target}"
    return BudgetTooSmall(
        f"memory_budget: {_written(written, limit)} is below the smallest peak this step can reach, "
        f"{lowest} bytes ({fraction:g} of its activation memory, with {base} bytes of inputs and constants"
        f"{counted}); the smallest budget that works is memory_budget={lowest} (or {fraction:g})", lowest)


def _frugal_plans(graph: Graph, unplanned: int, step: Step) -> list[tuple[Plan, int]]:
    """The most frugal plans each strategy makes, with their exact peaks: the segment plans, and
    the chain plans for budgets from its own least prediction up (a model is not the count: the
    plan it thinks least need not be)."""
    plans = [(NO_PLAN, unplanned)] + [(p, total_peak(graph, p, step)) for p in sqrt.segment_plans(graph, step)]
    chain = _module("chain")
    if chain is not None:
        least = chain.least_plan(graph, step)
        low = total_peak(graph, least, step)
        plans.append((least, low))
        budgets = [low + (unplanned - low) * k // 8 for k in range(1, 8)]
        made = filter(None, chain.plan_chains(graph, budgets, step))
        plans += [(c.plan, total_peak(graph, c.plan, step)) for c in made]
    return plans


def _written(written, limit: int) -> str:
    if isinstance(written, str) or isinstance(written, float):
        return f"{written!r} ({limit} bytes)"
    return f"{limit} bytes"


__all__ = ["plan_step", "collect_reports"]
