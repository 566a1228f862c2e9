"""Tensors: the values remat's functions take and return.

A Tensor is either concrete (it wraps a NumPy array) or traced (it names a Var of a Trace,
trace.py). Its operators and methods are installed by the ops that compute them
(ops/tensor_methods.py, `.at` by ops/update.py, the array protocols by interop.py).
"""

from __future__ import annotations

import math
import sys
from contextvars import ContextVar
from typing import TYPE_CHECKING

import numpy as np

from remat import dtypes, values
from remat.errors import ArgumentTypeError, TracerError
from remat.graph import Var, type_str

if TYPE_CHECKING:
    from remat.trace import Trace, outer_reads

# The `trace.outer_reads` scope open here, if any: it notes each tensor read inside it, by a
# primitive or laid out for one.
OUTER_READS: ContextVar[outer_reads | None] = ContextVar("remat_outer_reads", default=None)


class Tensor:
    """An n-dimensional array: concrete (a NumPy array) or traced (a Var being recorded)."""

    __slots__ = ("_value", "_trace", "_var", "_vaxes", "_weak")
    __array_priority__ = 100  # so `np_array + tensor` comes to Tensor.__radd__
    __hash__ = None  # type: ignore[assignment]  # == builds a tensor, as in NumPy

    @classmethod
    def _concrete(cls, value: np.ndarray, vaxes: tuple = ()) -> Tensor:
        t = object.__new__(cls)
        t._value, t._trace, t._var, t._vaxes, t._weak = value, None, None, vaxes, False
        return t

    @classmethod
    def _traced(cls, trace: Trace, var: Var, vaxes: tuple = ()) -> Tensor:
        t = object.__new__(cls)
        t._value, t._trace, t._var, t._vaxes, t._weak = None, trace, var, vaxes, False
        return t

    def _raw(self) -> Tensor:
        """This tensor with its vectorized axes as plain leading axes (no copy)."""
        reads = OUTER_READS.get()
        if reads is not None:
            reads.note(self)
        if not self._vaxes:
            return self
        return self._alias((), self._weak)

    def _relabel(self, vaxes: tuple) -> Tensor:
        """The same storage seen with the leading `vaxes` vectorized."""
        reads = OUTER_READS.get()
        if reads is not None:
            reads.note(self)
        return self._alias(vaxes, self._weak)

    def _weakly_typed(self, weak: bool = True) -> Tensor:
        """This tensor weakly typed (or strongly: `weak=False`), as JAX types a Python number:
        it takes the dtype of the tensors it meets (see `dtypes.weak_result_type`)."""
        return self if self._weak == weak else self._alias(self._vaxes, weak)

    def _alias(self, vaxes: tuple, weak: bool) -> Tensor:
        if self._trace is None:
            t = Tensor._concrete(self._value, vaxes)
        else:
            t = Tensor._traced(self._trace, self._var, vaxes)
        t._weak = weak
        return t

    def _stand_in(self, other: Tensor) -> tuple:
        """Make this object `other` until `_restore(state)` with the state returned: code that
        holds it (a closure) then reads `other`."""
        state = (self._value, self._trace, self._var, self._vaxes, self._weak)
        self._value, self._trace, self._var, self._vaxes, self._weak = (
            other._value, other._trace, other._var, other._vaxes, other._weak)
        return state

    def _restore(self, state: tuple) -> None:
        self._value, self._trace, self._var, self._vaxes, self._weak = state

    @property
    def is_concrete(self) -> bool:
        return self._trace is None

    @property
    def _full_shape(self) -> tuple[int, ...]:
        return tuple(self._value.shape) if self._trace is None else self._var.shape

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape ops see: vectorized axes are not part of it."""
        return self._full_shape[len(self._vaxes) :]

    @property
    def vectorized_axes(self) -> tuple[tuple[str, int], ...]:
        """`((name, size), ...)` of the vectorized axes, outermost first."""
        return self._vaxes

    @property
    def dtype(self) -> np.dtype:
        return self._value.dtype if self._trace is None else self._var.dtype

    @property
    def weak_type(self) -> bool:
        """Whether the dtype is weak, as JAX's `weak_type`: a Python number passed to a traced
        function (`rm.jit`, `rm.grad`, ...) is a weakly typed tensor there, and what is computed
        from weak tensors alone stays weak; meeting a tensor of a strong dtype, it takes that dtype
        (`2.0 * bfloat16` is bfloat16)."""
        return self._weak

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(math.prod(self.shape))

    def _concrete_value(self, what: str) -> np.ndarray:
        if self._trace is not None:
            raise TracerError(
                f"{what} needs a concrete value, but this tensor is traced inside "
                f"`{self._trace.name}`; use rm.where(cond, a, b) instead "
                "of `if`/`bool()` on a traced tensor, and pass Python values as static arguments"
            )
        return self._value

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        value = np.asarray(self._concrete_value("converting to a NumPy array"))
        return value if dtype is None else value.astype(dtype)

    # The operators (`+`, `==`, `x[i]`, ...) and NumPy's array methods (`x.T`, `x.sum()`, ...)
    # are installed by remat/ops/tensor_methods.py, beside the op functions they call;
    # `__jax_array__`, `__dlpack__` and `__dlpack_device__` by remat/interop.py, `.at` by
    # remat/ops/update.py: the modules that own those protocols.

    def item(self):
        return self._concrete_value("item()").item()

    def __bool__(self) -> bool:
        return bool(self._concrete_value("bool()"))

    def __float__(self) -> float:
        return float(self._concrete_value("float()"))

    def __int__(self) -> int:
        return int(self._concrete_value("int()"))

    def __index__(self) -> int:
        return int(self._concrete_value("using a tensor as an index").__index__())

    def __len__(self) -> int:
        if not self.shape:
            raise ArgumentTypeError("len() of a 0-d tensor: it has no leading axis; use .shape or .size")
        return self.shape[0]

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __repr__(self) -> str:
        vec = "".join(f"vectorized[{n}={k}] " for n, k in self._vaxes)
        if self._trace is None:
            body = np.array2string(np.asarray(self._value), separator=", ", prefix="Tensor(" + vec)
            return f"Tensor({vec}{body}, dtype={self.dtype})"
        return f"Tensor({vec}traced {type_str(self.shape, self.dtype)} in `{self._trace.name}`)"


def snapshot(value) -> np.ndarray:
    """A graph constant: the value as it is now, which nothing can change later. A NumPy array
    the caller may still write into is copied (mutating it after tracing must not change what
    the program computes, as in JAX); a JAX array, or one remat made read-only, is kept.
    Read-only, so that a program whose output is a constant hands out a value no caller can
    write into (and so change what later calls return)."""
    if is_device_array(value):
        a = np.asarray(value)
    elif _frozen(value):
        return value
    else:
        a = np.array(value, copy=True)
    a.flags.writeable = False
    return a


def _frozen(a: np.ndarray) -> bool:
    """Read-only, and so is every array whose memory it views."""
    while not a.flags.writeable:
        if a.base is None:
            return True
        if not isinstance(a.base, np.ndarray):
            return False
        a = a.base
    return False


def frozen_copy(a: np.ndarray, source) -> np.ndarray:
    """`a`, read-only when it is a new array (not the caller's `source`): a tensor's value,
    like a JAX array, is not changed in place, so a trace can take it as a constant uncopied."""
    if a is not source:
        a.flags.writeable = False
    return a


def is_weak(x) -> bool:
    """A Python number or a weakly typed tensor: it takes the dtype of the strong tensors it meets."""
    return dtypes.is_weak(x) or isinstance(x, Tensor) and x._weak


def is_tensor_like(x) -> bool:
    """A value that can be a tensor: a tensor, an array, or a Python or NumPy number."""
    return isinstance(x, (Tensor, np.ndarray, int, float, bool, np.number, np.bool_)) or is_device_array(x)


def is_array(x) -> bool:
    """A tensor or an array (NumPy or JAX): what a transformation takes as a traced input when
    other leaves (Python numbers, strings, None) pass through unchanged."""
    return isinstance(x, (Tensor, np.ndarray)) or is_device_array(x)


def is_device_array(x) -> bool:
    """A JAX array (the XLA backend's values). If JAX isn't loaded, `x` can't be one."""
    jax = sys.modules.get("jax")
    return jax is not None and isinstance(x, jax.Array)


def check_argument_leaf(leaf) -> None:
    """Arguments of traced functions are arrays of remat's dtypes (or numbers); anything else
    must be made static."""
    if not is_tensor_like(leaf):
        raise ArgumentTypeError(
            f"argument leaf of type {type(leaf).__name__} is not an array; mark it static "
            "(static_argnums) or pass it through a closure"
        )
    if isinstance(leaf, (np.ndarray, np.generic)) or is_device_array(leaf):
        values.supported(leaf.dtype, "", "an argument of dtype {dtype} is", 'pass rm.asarray(x, dtype="{to}")')
