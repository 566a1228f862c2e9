"""`call_traced`: a function run now, as one traced program on the NumPy evaluator.

Transformations called outside `jit` (an eager `grad`, `jvp`) run through it, so that they free
buffers and recompute checkpoints as they do under `jit`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from remat import backends, tree
from remat.errors import callable_name
from remat.tensor import Tensor, is_array
from remat.trace import trace_function


def call_traced(fn: Callable, args: tuple):
    """Run `fn(*args)` as one traced program on the NumPy evaluator. Tensor and array leaves of
    `args` become inputs; other leaves are passed as they are."""
    arrays = tree.partition(args, is_array)
    traced = trace_function(lambda *xs: fn(*arrays.rebuild(xs)), arrays.picked, name=callable_name(fn))
    outs = backends.get("numpy").compile(traced.graph)(*[np.asarray(x) for x in arrays.picked])
    return traced.wrap_outputs([Tensor._concrete(o) for o in outs])
