"""The exceptions remat raises, and where in the user's code a problem came from."""

from __future__ import annotations

import functools
import os
import sys
from contextvars import ContextVar

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))


class RematError(Exception):
    """Base of remat's own errors; each is also a TypeError or a ValueError. The message ends
    with the user's line that caused it, found when the error is made."""

    def __init__(self, message: str, source: str | None = None):
        self.message = message
        self.source = source or user_source()
        super().__init__(message + at_source(self.source))


class ShapeError(RematError, ValueError):
    """Operands whose shapes an op cannot take."""


class DTypeError(RematError, TypeError):
    """Operands whose dtypes an op cannot take."""


class TracerError(RematError, TypeError):
    """A traced tensor used where only a concrete value will do, or after its trace ended."""


class ArgumentTypeError(RematError, TypeError):
    """An argument of a remat function of the wrong type (`axis=1.5`, `jit(42)`)."""


class ArgumentValueError(RematError, ValueError):
    """An argument of a remat function with a value it cannot take (an axis out of range)."""


class BudgetTooSmall(ArgumentValueError):
    """A `memory_budget` below the smallest peak any plan of the step reaches; `smallest_budget`
    is the least that works, in bytes (`rm.memory.pareto` starts its curve there)."""

    def __init__(self, message: str, smallest_budget: int, source: str | None = None):
        super().__init__(message, source)
        self.smallest_budget = smallest_budget


class CapTooSmall(ArgumentValueError):
    """A `memory_cap` below what one point of the program needs at once, with everything that can
    be evicted evicted: that node's operands and results, and what cannot be recomputed (a
    donated argument, what a running loop keeps between its steps). `smallest_cap` is that need,
    in bytes: the least cap that gets past this point."""

    def __init__(self, message: str, smallest_cap: int, source: str | None = None):
        super().__init__(message, source)
        self.smallest_cap = smallest_cap


class IndexOutOfRange(RematError, IndexError):
    """A concrete index outside the axis it indexes."""


class ValueOverflow(RematError, OverflowError):
    """A Python number that the requested (or default) dtype cannot hold exactly."""


# Per thread and asyncio task (a ContextVar), like the trace stack: one thread's re-emitted ops
# must not take another's line. None: find the line from the call stack.
_SOURCE_OVERRIDE: ContextVar[str | None] = ContextVar("remat_source_override", default=None)


class source_of:
    """Ops recorded inside `with source_of(line):` are attributed to `line` (used when a
    transformation re-emits a user's op, so the new node still points at the user's code)."""

    def __init__(self, source: str | None):
        self.source = source
        self._token = None

    def __enter__(self) -> None:
        self._token = _SOURCE_OVERRIDE.set(self.source)

    def __exit__(self, *exc) -> None:
        _SOURCE_OVERRIDE.reset(self._token)


def user_source() -> str | None:
    """`file.py:line` of the innermost frame outside the remat package, if any."""
    override = _SOURCE_OVERRIDE.get()
    if override is not None:
        return override
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not os.path.abspath(filename).startswith(_PACKAGE_DIR):
            return f"{os.path.basename(filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def callable_name(fn) -> str:
    """How messages and trace names call a user's callable (partials by their function)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    return getattr(fn, "__name__", type(fn).__name__)


def at_source(source: str | None) -> str:
    return f" (at {source})" if source else ""
