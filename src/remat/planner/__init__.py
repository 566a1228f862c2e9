"""The memory-budget planner: from a gradient step's traced forward graph and a budget, the
checkpoint blocks (and the values they keep) that make the step fit at the least recomputation.
It is a pass over that graph: `rm.grad(..., memory_budget=)` (`remat.gradients`) hands it to
reverse mode (`remat.autodiff`) as the rewrite of the forward graph.

- `plan` — `Block`, `Plan` and `apply` (a plan as ordinary checkpoint nodes);
- `cost` — FLOPs and time per node (the planner minimises time); `peak` — the exact peak of a
  planned step (the evaluator's count, and XLA's); `target` — which of the two a step is counted by;
- `stages` — the graph as a chain of stages between cheap cuts;
- `sqrt`, `chain`, `milp` — strategies; `solve.plan_step` picks one and verifies it;
- `budget` — parsing `memory_budget=`; `report` — `PlanReport`.
"""
