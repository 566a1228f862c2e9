"""Loops and branches as blocks of the graph: `scan`, `fori_loop`, `while_loop`, `cond`, `switch`.

Each is one node whose params hold its body Graph(s) and plain static data, built like the
checkpoint block: tensors a body reads from enclosing scope are found by tracing and become
inputs of the block. Backends run them with their own loops (`numpy_impl`, `xla_impl`).
`segments` and `binomial` are schedules for `scan(..., checkpoint=...)` (`schedules`).
"""

from remat.backends import lowerings as _lowerings
from remat.loops import numpy_impl as _numpy_impl  # noqa: F401  (gives the NumPy evaluator the loops)
from remat.loops import policy_reach as _policy_reach  # noqa: F401  (lets a checkpoint's policy reach into loops and conds)
from remat.loops import scan_binomial as _scan_binomial  # noqa: F401  (declares its op)
from remat.loops.cond import cond, switch
from remat.loops.scan import scan
from remat.loops.schedules import binomial, segments
from remat.loops.while_loop import fori_loop, while_loop

for _op, _fn in {"scan": "scan", "scan_binomial": "scan_binomial", "while": "while_loop", "cond": "cond",
                 "while_gradient": "while_gradient"}.items():
    _lowerings.register(_op, f"remat.loops.xla_impl:{_fn}")

__all__ = ["binomial", "cond", "fori_loop", "scan", "segments", "switch", "while_loop"]
