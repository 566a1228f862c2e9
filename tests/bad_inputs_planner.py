"""Bad inputs to the memory-budget planner (issue 15): `memory_budget=` and `strategy=` on the
gradient transformations and `rm.memory`, a budget given where no gradient is made, and a
budget below what the step can reach."""

from __future__ import annotations

import numpy as np

import remat as rm
from bad_inputs import Case

X = rm.ones((64,))
AT = r"\(at bad_inputs_planner\.py:\d+\)"


def _loss(x):
    h = x
    for _ in range(4):
        h = h + rm.tanh(h)
    return rm.sum(h)


def _grad(**kw):
    return lambda: rm.grad(_loss, **kw)(X)


FORMS = r"pass an int of bytes, a string such as '300MiB' or '1\.5GB', or a fraction in \(0, 1\]"

CASES: list[Case] = [
    Case("planner-budget-negative", _grad(memory_budget=-5), rm.ArgumentValueError,
         (r"^grad: memory_budget=-5 is not a positive number of bytes", FORMS, AT)),
    Case("planner-budget-zero", _grad(memory_budget=0), rm.ArgumentValueError,
         (r"^grad: memory_budget=0 is not a positive number of bytes",)),
    Case("planner-budget-zero-fraction", _grad(memory_budget=0.0), rm.ArgumentValueError,
         (r"^grad: memory_budget=0\.0 is not positive", r"in \(0, 1\]")),
    Case("planner-budget-zero-with-unit", _grad(memory_budget="0 MiB"), rm.ArgumentValueError,
         (r"^grad: memory_budget='0 MiB' is not a positive number of bytes",)),
    Case("planner-budget-garbled-rate", _grad(memory_budget="300 MB/s"), rm.ArgumentValueError,
         (r"^grad: memory_budget='300 MB/s' is not an amount of memory", r"e\.g\. '300MiB'")),
    Case("planner-budget-garbled-word", _grad(memory_budget="lots"), rm.ArgumentValueError,
         (r"^grad: memory_budget='lots' is not an amount of memory", r"KiB, MiB, GiB")),
    Case("planner-budget-no-unit", _grad(memory_budget="300"), rm.ArgumentValueError,
         (r"^grad: memory_budget='300' has no unit", r"'300MiB'", r"the int 300")),
    Case("planner-budget-nan", _grad(memory_budget=float("nan")), rm.ArgumentValueError,
         (r"^grad: memory_budget=nan is not a number", FORMS)),
    Case("planner-budget-bool", _grad(memory_budget=True), rm.ArgumentTypeError,
         (r"^grad: memory_budget=True is a bool", FORMS)),
    Case("planner-budget-list", _grad(memory_budget=[100]), rm.ArgumentTypeError,
         (r"^grad: memory_budget=\[100\] has type list", FORMS)),
    Case("planner-budget-fraction-above-one", _grad(memory_budget=1.5), rm.ArgumentValueError,
         (r"^grad: memory_budget=1\.5 is a float above 1", r"fraction of the activation memory, in \(0, 1\]",
          r"'1\.5GB'")),
    Case("planner-budget-bytes-as-float", _grad(memory_budget=3e8), rm.ArgumentValueError,
         (r"^grad: memory_budget=300000000\.0 is a float above 1", r"pass the int 300000000")),
    Case("planner-budget-percent-above-hundred", _grad(memory_budget="150%"), rm.ArgumentValueError,
         (r"^grad: memory_budget='150%' is not a percentage in \(0, 100\]",)),
    Case("planner-budget-value-and-grad", lambda: rm.value_and_grad(_loss, memory_budget=-1.0),
         rm.ArgumentValueError, (r"^value_and_grad: memory_budget=-1\.0 is not positive",)),
    Case("planner-budget-vjp", lambda: rm.vjp(_loss, X, memory_budget="1 parsec"), rm.ArgumentValueError,
         (r"^vjp: memory_budget='1 parsec' is not an amount of memory",)),
    Case("planner-budget-plan-report", lambda: rm.memory.plan_report(_loss, X, memory_budget=np.int64(-3)),
         rm.ArgumentValueError, (r"^memory\.plan_report: memory_budget=-3 is not a positive number",)),
    Case("planner-budget-plan-report-none", lambda: rm.memory.plan_report(_loss, X, memory_budget=None),
         rm.ArgumentValueError, (r"^memory\.plan_report: memory_budget=None plans nothing", r"memory_budget=0\.5")),
    Case("planner-strategy-unknown", _grad(memory_budget=0.5, strategy="fast"), rm.ArgumentValueError,
         (r"^grad: strategy='fast' is not a planner strategy", r"'sqrt', 'chain', 'milp'")),
    Case("planner-strategy-type", _grad(memory_budget=0.5, strategy=3), rm.ArgumentTypeError,
         (r"^grad: strategy=3 has type int", r"pass None or one of 'auto'")),
    Case("planner-strategy-without-budget", _grad(strategy="chain"), rm.ArgumentValueError,
         (r"^grad: strategy='chain' given without memory_budget", r"pass memory_budget= too")),
    Case("planner-budget-on-jit", lambda: rm.jit(_loss, memory_budget="300MiB"), rm.ArgumentTypeError,
         (r"^jit: memory_budget belongs on the gradient", r"rm\.jit\(rm\.grad\(loss, memory_budget=\.\.\.\)\)", AT)),
    Case("planner-strategy-on-jit", lambda: rm.jit(_loss, strategy="sqrt"), rm.ArgumentTypeError,
         (r"^jit: strategy belongs on the gradient",)),
    Case("planner-budget-on-checkpoint", lambda: rm.checkpoint(_loss, X, memory_budget=0.5), rm.ArgumentTypeError,
         (r"^checkpoint: memory_budget belongs on the gradient", r"rm\.grad, rm\.value_and_grad or rm\.vjp")),
    Case("planner-budget-on-profile-without-grad",
         lambda: rm.memory.profile(_loss, X, grad=False, memory_budget=0.5), rm.ArgumentTypeError,
         (r"^memory\.profile\(grad=False\): memory_budget belongs on the gradient",)),
    Case("planner-budget-below-the-smallest-peak", _grad(memory_budget=1000, strategy="chain"),
         rm.ArgumentValueError, (r"^memory_budget: 1000 bytes is below the smallest peak this step can reach, "
                                 r"\d+ bytes \(0\.\d+ of its activation memory",
                                 r"the smallest budget that works is memory_budget=\d+ \(or 0\.\d+\)")),
    Case("planner-budget-string-below-the-smallest-peak", _grad(memory_budget="1KiB", strategy="chain"),
         rm.ArgumentValueError, (r"^memory_budget: '1KiB' \(1024 bytes\) is below the smallest peak",)),
]
