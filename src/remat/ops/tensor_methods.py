"""Tensor's operators (`+`, `==`, `x[i]`, ...) and NumPy's array methods (`x.T`, `x.sum()`,
...), each the op function of the same meaning. They are installed on `Tensor` here, beside the
op functions, so that the IR core (remat/tensor.py, where `Tensor` is defined) imports no op."""

from __future__ import annotations

from types import FunctionType

import numpy as np

from remat.ops.arrays import diagonal, repeat, swapaxes
from remat.ops.cumulative import cumprod, cumsum
from remat.ops.division import floor_divide, remainder
from remat.ops.elementwise import (
    abs,
    add,
    astype,
    clip,
    divide,
    equal,
    greater,
    greater_equal,
    less,
    less_equal,
    logical_and,
    logical_not,
    logical_or,
    multiply,
    negative,
    not_equal,
    pow,
    subtract,
)
from remat.ops.indexing import getitem
from remat.ops.linalg import matmul
from remat.ops.reduce import all, any, argmax, argmin, max, mean, min, prod, sum
from remat.ops.rounding import round
from remat.ops.shape import matrix_transpose, reshape, squeeze, transpose
from remat.ops.sort import argsort, sort
from remat.ops.statistics import std, var
from remat.tensor import Tensor


class _TensorMethods:
    """What `Tensor` gains here: its operators, then its methods."""

    def __add__(self, o): return add(self, o)  # noqa: E704
    def __radd__(self, o): return add(o, self)  # noqa: E704
    def __sub__(self, o): return subtract(self, o)  # noqa: E704
    def __rsub__(self, o): return subtract(o, self)  # noqa: E704
    def __mul__(self, o): return multiply(self, o)  # noqa: E704
    def __rmul__(self, o): return multiply(o, self)  # noqa: E704
    def __truediv__(self, o): return divide(self, o)  # noqa: E704
    def __rtruediv__(self, o): return divide(o, self)  # noqa: E704
    def __pow__(self, o): return pow(self, o)  # noqa: E704
    def __rpow__(self, o): return pow(o, self)  # noqa: E704
    def __matmul__(self, o): return matmul(self, o)  # noqa: E704
    def __rmatmul__(self, o): return matmul(o, self)  # noqa: E704
    def __neg__(self): return negative(self)  # noqa: E704
    def __pos__(self): return self  # noqa: E704
    def __abs__(self): return abs(self)  # noqa: E704
    def __eq__(self, o): return equal(self, o)  # type: ignore[override]  # noqa: E704
    def __ne__(self, o): return not_equal(self, o)  # type: ignore[override]  # noqa: E704
    def __lt__(self, o): return less(self, o)  # noqa: E704
    def __le__(self, o): return less_equal(self, o)  # noqa: E704
    def __gt__(self, o): return greater(self, o)  # noqa: E704
    def __ge__(self, o): return greater_equal(self, o)  # noqa: E704
    def __invert__(self): return logical_not(self)  # noqa: E704
    def __and__(self, o): return logical_and(self, o)  # noqa: E704
    def __or__(self, o): return logical_or(self, o)  # noqa: E704
    def __floordiv__(self, o): return floor_divide(self, o)  # noqa: E704
    def __rfloordiv__(self, o): return floor_divide(o, self)  # noqa: E704
    def __mod__(self, o): return remainder(self, o)  # noqa: E704
    def __rmod__(self, o): return remainder(o, self)  # noqa: E704
    def __divmod__(self, o): return floor_divide(self, o), remainder(self, o)  # noqa: E704
    def __rdivmod__(self, o): return floor_divide(o, self), remainder(o, self)  # noqa: E704
    def __getitem__(self, index): return getitem(self, index)  # noqa: E704
    __getitem__.__doc__ = getitem.__doc__  # `x[index]` is `getitem`: help(Tensor.__getitem__) states its rule too

    # Methods as NumPy's and JAX's arrays have them, each the remat function of the same name.
    @property
    def T(self) -> Tensor:
        """All axes reversed, as `ndarray.T`."""
        return transpose(self)

    @property
    def mT(self) -> Tensor:
        """The last two axes swapped (a batch of matrices transposed), as `ndarray.mT`."""
        return matrix_transpose(self)

    def astype(self, dtype) -> Tensor:
        return astype(self, dtype)

    def reshape(self, *shape) -> Tensor:
        """`x.reshape(2, 3)` or `x.reshape((2, 3))`, as NumPy's."""
        return reshape(self, _varargs(shape))

    def transpose(self, *axes) -> Tensor:
        """`x.transpose()` (all axes reversed), `x.transpose(1, 0, 2)` or `x.transpose((1, 0, 2))`."""
        return transpose(self, _varargs(axes) if axes else None)

    def flatten(self) -> Tensor:
        """The tensor as 1-d (a reshape: remat tensors are immutable, so NumPy's copy is moot)."""
        return reshape(self, (-1,))

    def ravel(self) -> Tensor:
        return reshape(self, (-1,))

    def squeeze(self, axis=None) -> Tensor:
        return squeeze(self, axis)

    def sum(self, axis=None, keepdims=False) -> Tensor:
        return sum(self, axis=axis, keepdims=keepdims)

    def prod(self, axis=None, keepdims=False) -> Tensor:
        return prod(self, axis=axis, keepdims=keepdims)

    def mean(self, axis=None, keepdims=False) -> Tensor:
        return mean(self, axis=axis, keepdims=keepdims)

    def var(self, axis=None, ddof=0, keepdims=False) -> Tensor:
        return var(self, axis=axis, ddof=ddof, keepdims=keepdims)

    def std(self, axis=None, ddof=0, keepdims=False) -> Tensor:
        return std(self, axis=axis, ddof=ddof, keepdims=keepdims)

    def max(self, axis=None, keepdims=False) -> Tensor:
        return max(self, axis=axis, keepdims=keepdims)

    def min(self, axis=None, keepdims=False) -> Tensor:
        return min(self, axis=axis, keepdims=keepdims)

    def argmax(self, axis=None, keepdims=False) -> Tensor:
        return argmax(self, axis=axis, keepdims=keepdims)

    def argmin(self, axis=None, keepdims=False) -> Tensor:
        return argmin(self, axis=axis, keepdims=keepdims)

    def cumsum(self, axis=None, dtype=None) -> Tensor:
        return cumsum(self, axis=axis, dtype=dtype)

    def cumprod(self, axis=None, dtype=None) -> Tensor:
        return cumprod(self, axis=axis, dtype=dtype)

    def sort(self, axis=-1, descending=False) -> Tensor:
        """The sorted tensor (a new one, as JAX's `x.sort()`; NumPy's sorts in place)."""
        return sort(self, axis=axis, descending=descending)

    def argsort(self, axis=-1, descending=False) -> Tensor:
        return argsort(self, axis=axis, descending=descending)

    def clip(self, min=None, max=None) -> Tensor:
        return clip(self, min, max)

    def swapaxes(self, axis1, axis2) -> Tensor:
        return swapaxes(self, axis1, axis2)

    def round(self, decimals=0) -> Tensor:
        return round(self, decimals)

    def all(self, axis=None, keepdims=False) -> Tensor:
        return all(self, axis=axis, keepdims=keepdims)

    def any(self, axis=None, keepdims=False) -> Tensor:
        return any(self, axis=axis, keepdims=keepdims)

    def repeat(self, repeats, axis=None) -> Tensor:
        return repeat(self, repeats, axis=axis)

    def diagonal(self, offset=0, axis1=0, axis2=1) -> Tensor:
        return diagonal(self, offset, axis1, axis2)


def _varargs(args: tuple):
    """A method's `*args` as NumPy reads them: `f(2, 3)` and `f((2, 3))` are the same call."""
    return args[0] if len(args) == 1 and not isinstance(args[0], (int, np.integer)) else args


def _install(methods: type) -> None:
    """Put the functions and properties of `methods` on `Tensor`, named as its own."""
    for name, member in vars(methods).items():
        fn = member.fget if isinstance(member, property) else member
        if isinstance(fn, FunctionType):
            fn.__qualname__ = f"Tensor.{name}"
            setattr(Tensor, name, member)


_install(_TensorMethods)
