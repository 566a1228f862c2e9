"""`rm.jit`: trace once per input signature, hand the Graph to a backend, cache the result."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from remat import backends, tree
from remat.errors import callable_name
from remat.trace import (
    Tensor,
    Traced,
    asarray,
    check_argument_leaf,
    current_trace,
    is_array,
    is_device_array,
    trace_function,
)


def _signature(leaves) -> tuple:
    out = []
    for x in leaves:
        check_argument_leaf(x)
        t = asarray(x)
        out.append((t.shape, t.dtype, t.vectorized_axes))
    return tuple(out)


class Lowered:
    """A traced and lowered program: `.as_text()` shows it, `.compile()` makes it runnable."""

    def __init__(self, traced: Traced, backend: str, options: dict):
        self.traced = traced
        self.graph = traced.graph
        self.backend = backend
        self._program = backends.get(backend).lower(self.graph, **options)

    def as_text(self) -> str:
        """The program handed to the backend: the graph for NumPy, StableHLO for XLA."""
        return str(self._program)

    def compile(self) -> Compiled:
        return Compiled(self)


class Compiled:
    """A compiled program: call it with arrays shaped like the ones it was lowered for."""

    def __init__(self, lowered: Lowered):
        self.lowered = lowered
        self._run = lowered._program.compile()

    @property
    def last_memory(self):
        return getattr(self._run, "last_memory", None)

    def __call__(self, *args):
        leaves = tree.leaves(args)
        outs = self._run(*[_raw(x) for x in leaves])
        return self.lowered.traced.wrap_outputs([Tensor._concrete(_array(o)) for o in outs])


def _array(x):
    """A backend's result as a tensor's value: device arrays (XLA) stay on their device."""
    return x if isinstance(x, np.ndarray) or is_device_array(x) else np.asarray(x)


def _raw(x):
    """An argument as backends take it: a NumPy or device array, not copied."""
    if isinstance(x, np.ndarray) or is_device_array(x):
        return x
    return asarray(x)._value


class Jitted:
    """The result of `rm.jit(fn)`: call it like `fn`; `.lower(*args)` exposes the program."""

    def __init__(self, fn: Callable, backend: str, static_argnums: tuple[int, ...],
                 static_argnames: tuple[str, ...], options: dict):
        backends.get(backend)  # fail now on an unknown name
        self.fn = fn
        self.backend = backend
        self.static_argnums = static_argnums
        self.static_argnames = static_argnames
        self.options = options
        self._cache: dict[Any, Compiled] = {}
        self.trace_count = 0
        functools.update_wrapper(self, fn)

    def _split(self, args, kwargs):
        """(static values, dynamic positional arguments, dynamic keyword arguments)."""
        static = tuple((i, args[i]) for i in self.static_argnums if i < len(args))
        static += tuple(sorted((k, v) for k, v in kwargs.items() if k in self.static_argnames))
        dynamic = tuple(a for i, a in enumerate(args) if i not in self.static_argnums)
        return static, dynamic, {k: v for k, v in kwargs.items() if k not in self.static_argnames}

    def _traceable(self, static):
        """`fn` as a function of (dynamic positional arguments, keyword arguments), with the
        static arguments put back in their places."""
        positional = {k: v for k, v in static if isinstance(k, int)}
        named = {k: v for k, v in static if isinstance(k, str)}

        def fn(dynamic, kwargs):
            it = iter(dynamic)
            full = [positional[i] if i in positional else next(it) for i in range(len(dynamic) + len(positional))]
            return self.fn(*full, **kwargs, **named)

        return fn

    def lower(self, *args, **kwargs) -> Lowered:
        static, dynamic, kwargs = self._split(args, kwargs)
        self.trace_count += 1
        name = f"jit({getattr(self.fn, '__name__', 'fn')})"
        traced = trace_function(self._traceable(static), (dynamic, kwargs), name=name)
        return Lowered(traced, self.backend, self.options)

    def __call__(self, *args, **kwargs):
        if current_trace() is not None:  # inside another transformation: inline
            return self.fn(*args, **kwargs)
        static, dynamic, dynamic_kwargs = self._split(args, kwargs)
        leaves, treedef = tree.flatten((dynamic, dynamic_kwargs))
        key = (treedef, _signature(leaves), static)
        compiled = self._cache.get(key)
        if compiled is None:
            compiled = self._cache[key] = self.lower(*args, **kwargs).compile()
        return compiled(dynamic, dynamic_kwargs)


def call_traced(fn: Callable, args: tuple):
    """Run `fn(*args)` as one traced program on the NumPy evaluator, so that transformations
    called outside `jit` (an eager `grad`) free buffers and recompute checkpoints as in `jit`.
    Tensor and array leaves of `args` become inputs; other leaves are passed as they are."""
    arrays = tree.partition(args, is_array)
    traced = trace_function(lambda *xs: fn(*arrays.rebuild(xs)), arrays.picked, name=callable_name(fn))
    outs = backends.get("numpy").compile(traced.graph)(*[np.asarray(x) for x in arrays.picked])
    return traced.wrap_outputs([Tensor._concrete(o) for o in outs])


def jit(fn: Callable, backend: str = "numpy", static_argnums=(), static_argnames=(),
        staged: bool | None = None) -> Jitted:
    """Trace `fn` once per signature (pytree structure, shapes, dtypes, static values) and run
    it on `backend` ("numpy" or "xla"). `staged` chooses the XLA execution mode.

    >>> import remat as rm
    >>> f = rm.jit(lambda x: x * 2.0)
    >>> f(rm.ones((2,)))
    Tensor([2., 2.], dtype=float32)
    """
    if isinstance(static_argnums, int):
        static_argnums = (static_argnums,)
    options = {} if backend == "numpy" else {"staged": staged}
    if isinstance(static_argnames, str):
        static_argnames = (static_argnames,)
    return Jitted(fn, backend, tuple(static_argnums), tuple(static_argnames), options)
