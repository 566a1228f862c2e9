"""How many threads NumPy's BLAS may use while the NumPy evaluator runs a graph.

Why a limit: OpenBLAS's worker threads busy-wait for new work after every matrix product, while
the evaluator's own (single-threaded) elementwise ops run. With as many BLAS threads as cores
there is no core left over, so anything else that wants one — XLA's thread pool in the same
process, another process — stalls the next product's barrier: on a busy 2-core machine the
residual MLP's step burnt 4.6x the CPU time and took 4.6 s instead of 1.1 s
(`benchmarks/blas_threads.py`). So while it runs a graph with matrix products, the evaluator
limits BLAS to half the cores this process may run on, at least one: a product still uses
several cores on a big machine, and one core is always left for the rest.

Eager ops (one op on concrete tensors) are plain NumPy calls under NumPy's own setting. Change
the limit with `set_threads(n)` (`None`: leave BLAS alone) or the environment variable
`REMAT_BLAS_THREADS` (a number, or `none`). The limit is process-wide while any evaluation runs
(a BLAS thread pool is one per process); the previous setting comes back when the last of the
concurrent evaluations ends.
"""

from __future__ import annotations

import functools
import os
import threading
import weakref
from contextlib import AbstractContextManager, nullcontext

from remat.errors import ArgumentTypeError, ArgumentValueError
from remat.graph import Graph

ENV = "REMAT_BLAS_THREADS"
_UNSET = object()
_setting: object = _UNSET  # int | None once read
_lock = threading.Lock()
_active = 0  # evaluations running now, in every thread
_saved: list[tuple[object, int]] = []  # (library controller, its thread count) for each one limited


def default_threads() -> int:
    """Half the cores this process may run on, at least one."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores // 2)


def threads() -> int | None:
    """The BLAS thread limit during evaluations (None: no limit)."""
    global _setting
    if _setting is _UNSET:
        _setting = _from_env(os.environ.get(ENV))
    return _setting  # type: ignore[return-value]


def set_threads(n: int | None) -> None:
    """Limit BLAS to `n` threads while the NumPy backend evaluates; `None` leaves BLAS alone.

    >>> from remat.backends import blas
    >>> blas.set_threads(1)
    >>> blas.threads()
    1
    >>> blas.set_threads(blas.default_threads())  # the default again
    """
    global _setting
    _setting = _checked(n)


def _checked(n) -> int | None:
    if n is None:
        return None
    if isinstance(n, bool) or not isinstance(n, int):
        raise ArgumentTypeError(f"blas.set_threads: n must be a positive int or None, got {n!r}")
    if n < 1:
        raise ArgumentValueError(f"blas.set_threads: n must be at least 1, got {n}; None means no limit")
    return n


def _from_env(text: str | None) -> int | None:
    text = (text or "").strip()
    if not text:
        return default_threads()
    if text.lower() == "none":
        return None
    if not text.isdigit() or int(text) < 1:
        raise ArgumentValueError(f"blas: ${ENV} must be a positive integer or 'none', got {text!r}")
    return int(text)


@functools.cache
def _controllers() -> list:
    """threadpoolctl's handles on the BLAS libraries loaded now (NumPy's among them)."""
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController().select(user_api="blas").lib_controllers


def _set(controller, n: int) -> None:
    # threadpoolctl ≥ 3.7 lets only the thread that last set OpenBLAS set it again, silently;
    # our own lock serialises us, so release that claim around each change.
    release = getattr(type(controller), "clear_controlling_thread", None)
    if release:
        release(force=True)
    controller.set_num_threads(n)
    if release:
        release(force=True)


def limited(graph: Graph) -> AbstractContextManager:
    """A context in which BLAS is limited to `threads()` if `graph` does matrix products (only
    `matmul` calls BLAS: other graphs skip the cost). Nested and concurrent uses share one limit."""
    limit = threads()
    if limit is None or not _uses_blas(graph):
        return _NOTHING
    return _Limit(limit)


_NOTHING = nullcontext()
_BLAS_OPS = frozenset({"matmul"})
_USES_BLAS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _uses_blas(graph: Graph) -> bool:
    found = _USES_BLAS.get(graph)
    if found is None:
        found = _USES_BLAS[graph] = any(node.op in _BLAS_OPS for node in graph.walk())
    return found


class _Limit:
    def __init__(self, limit: int):
        self.limit = limit

    def __enter__(self) -> None:
        global _active
        with _lock:
            if _active == 0:
                before = [(c, c.get_num_threads()) for c in _controllers()]
                _saved[:] = [(c, n) for c, n in before if n is not None and n > self.limit]
                for c, _ in _saved:
                    _set(c, self.limit)
            _active += 1

    def __exit__(self, *exc) -> None:
        global _active
        with _lock:
            _active -= 1
            if _active == 0:
                for c, n in _saved:
                    _set(c, n)
                _saved.clear()
