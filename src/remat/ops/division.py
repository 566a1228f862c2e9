"""Floor division and its remainder (`x // y`, `x % y`), with Python's and NumPy's signs: the
quotient rounds toward -inf and the remainder takes the sign of the divisor.

An integer divisor known when tracing (a Python int, a concrete tensor) that holds 0 is an
error, as in Python. A traced one is only known when the program runs: there `x // 0` and
`x % 0` are 0 on both backends, as in NumPy. Float division by zero gives inf or nan, as in
NumPy and JAX.
"""

from __future__ import annotations

import numpy as np

from remat import dtypes
from remat.core import NOT_DIFFERENTIABLE, declare
from remat.errors import ArgumentValueError
from remat.ops.elementwise import _binary_jvp, _binary_rule, _ub, promote
from remat.tensor import Tensor
from remat.trace import bind

# The quotient is piecewise constant: no gradient (JAX's is zero too).
_floor_divide = declare("floor_divide", _binary_rule("numeric"), NOT_DIFFERENTIABLE)


def _remainder_vjp(g, x, y, out):
    # x mod y = x - floor(x / y) y, with floor(x / y) locally constant.
    return g, -g * bind(_floor_divide, x, y)


_remainder = declare(
    "remainder", _binary_rule("numeric"), _ub(_remainder_vjp),
    jvp=_binary_jvp(lambda t, x, y, out: t, lambda t, x, y, out: -t * bind(_floor_divide, x, y)),
)


def _operands(fn: str, x, y) -> list[Tensor]:
    a, b = promote(x, y, what=fn)
    if dtypes.is_int(b.dtype) and b.is_concrete and not b._vaxes and (np.asarray(b._value) == 0).any():
        raise ArgumentValueError(
            f"{fn}: integer division by zero (the divisor {_shown(b)} holds 0); divide by a "
            "nonzero value, or use rm.where to choose one"
        )
    return [a, b]


def _shown(b: Tensor) -> str:
    v = np.asarray(b._value)
    return repr(v.item()) if v.ndim == 0 else f"of shape {b.shape}"


def floor_divide(x, y) -> Tensor:
    """`x // y` elementwise: the quotient rounded toward -inf, as in Python and NumPy (for
    floats, the exact floor of the quotient: `1.0 // 0.1` is 9.0). Operands are promoted as in
    `add`; integers stay integers.

    >>> import remat as rm
    >>> rm.floor_divide(rm.asarray([7, -7]), 2)
    Tensor([ 3, -4], dtype=int32)
    """
    return bind(_floor_divide, *_operands("floor_divide", x, y))


def remainder(x, y) -> Tensor:
    """`x % y` elementwise, with the sign of `y`, as in Python and NumPy: `x - (x // y) * y`.
    Its gradient is 1 for `x` and `-(x // y)` for `y`.

    >>> import remat as rm
    >>> rm.remainder(rm.asarray([7, -7]), 3)
    Tensor([1, 2], dtype=int32)
    """
    return bind(_remainder, *_operands("remainder", x, y))
