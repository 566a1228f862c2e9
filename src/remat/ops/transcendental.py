"""More of NumPy's elementwise math. expm1, sinh, cosh, arcsinh, arcsin, arccos, arctan and
arctan2 are primitives, as in JAX (composed, they lose accuracy near 0 or at the edge of
overflow, or their slopes at ±1 come out nan instead of inf); log2, log10, exp2, reciprocal,
tan, arctanh, hypot, logaddexp and sinc are composed, as jax.numpy composes them. Integer and
bool inputs are promoted to float32.
"""

from __future__ import annotations

import math

from remat import dtypes
from remat.core import declare
from remat.ops.elementwise import (
    _binary_jvp,
    _binary_rule,
    _float_unary,
    _to_float,
    _ub,
    _unary_jvp,
    abs,
    broadcast_shapes_for,
    cos,
    exp,
    log,
    log1p,
    maximum,
    minimum,
    promote,
    sin,
    sqrt,
    where,
)
from remat.tensor import Tensor
from remat.trace import bind


def _d_atan2_y(t, y, x, out):
    return t * x / (x * x + y * y)  # d atan2(y, x) = (x dy - y dx) / (x² + y²)


def _d_atan2_x(t, y, x, out):
    return -t * y / (x * x + y * y)


_expm1 = declare("expm1", _float_unary, lambda g, x, out: (g * (out + 1.0),),  # d(e^x - 1) = e^x dx
                 jvp=_unary_jvp(lambda t, x, out: t * (out + 1.0)))
_sinh = declare("sinh", _float_unary, lambda g, x, out: (g * cosh(x),),  # d sinh x = cosh x dx
                jvp=_unary_jvp(lambda t, x, out: t * cosh(x)))
_cosh = declare("cosh", _float_unary, lambda g, x, out: (g * sinh(x),),  # d cosh x = sinh x dx
                jvp=_unary_jvp(lambda t, x, out: t * sinh(x)))
_asinh = declare("asinh", _float_unary, lambda g, x, out: (g / sqrt(x * x + 1.0),),  # dx / sqrt(x² + 1)
                 jvp=_unary_jvp(lambda t, x, out: t / sqrt(x * x + 1.0)))
# d asin x = dx / sqrt(1 - x²), d acos x = -dx / sqrt(1 - x²), d atan x = dx / (1 + x²)
_asin = declare("asin", _float_unary, lambda g, x, out: (g / _cosine_side(x),),
                jvp=_unary_jvp(lambda t, x, out: t / _cosine_side(x)))
_acos = declare("acos", _float_unary, lambda g, x, out: (-g / _cosine_side(x),),
                jvp=_unary_jvp(lambda t, x, out: -t / _cosine_side(x)))
_atan = declare("atan", _float_unary, lambda g, x, out: (g / (1.0 + x * x),),
                jvp=_unary_jvp(lambda t, x, out: t / (1.0 + x * x)))
_atan2 = declare("atan2", _binary_rule("float"),
                 _ub(lambda g, y, x, out: (_d_atan2_y(g, y, x, out), _d_atan2_x(g, y, x, out))),
                 jvp=_binary_jvp(_d_atan2_y, _d_atan2_x))


def _cosine_side(x: Tensor) -> Tensor:
    return sqrt((1.0 - x) * (1.0 + x))  # sqrt(1 - x²) without cancellation near |x| = 1


def float_pair(what: str, x1, x2) -> list[Tensor]:
    """Two operands promoted together and checked to broadcast; integers become the default float."""
    a, b = promote(x1, x2, what=what)
    broadcast_shapes_for(what, a.shape, b.shape)
    if not dtypes.is_float(a.dtype):
        a, b = a.astype(dtypes.DEFAULT_FLOAT), b.astype(dtypes.DEFAULT_FLOAT)
    return [a, b]


# ---------------------------------------------------------------- primitives


def expm1(x) -> Tensor:
    """`exp(x) - 1`, accurate for small `x`.

    >>> import remat as rm
    >>> float(rm.expm1(rm.asarray(1e-10, "float64")))
    1.00000000005e-10
    """
    return bind(_expm1, _to_float(x))


def sinh(x) -> Tensor:
    """Hyperbolic sine."""
    return bind(_sinh, _to_float(x))


def cosh(x) -> Tensor:
    """Hyperbolic cosine."""
    return bind(_cosh, _to_float(x))


def arcsinh(x) -> Tensor:
    """Inverse hyperbolic sine."""
    return bind(_asinh, _to_float(x))


def arcsin(x) -> Tensor:
    """Inverse sine, in `[-pi/2, pi/2]` (nan outside `[-1, 1]`)."""
    return bind(_asin, _to_float(x))


def arccos(x) -> Tensor:
    """Inverse cosine, in `[0, pi]` (nan outside `[-1, 1]`)."""
    return bind(_acos, _to_float(x))


def arctan(x) -> Tensor:
    """Inverse tangent, in `[-pi/2, pi/2]`."""
    return bind(_atan, _to_float(x))


def arctan2(x1, x2) -> Tensor:
    """The angle of the point `(x2, x1)`, in `[-pi, pi]`, with broadcasting, as `np.arctan2`.

    >>> import remat as rm
    >>> rm.arctan2(rm.asarray([1.0, -1.0]), -1.0) / 3.14159265
    Tensor([ 0.75, -0.75], dtype=float32)
    """
    return bind(_atan2, *float_pair("arctan2", x1, x2))


# ---------------------------------------------------------------- compositions


def log2(x) -> Tensor:
    """Base-2 logarithm, `log(x) / log(2)` as in JAX."""
    return log(x) / math.log(2.0)


def log10(x) -> Tensor:
    """Base-10 logarithm, `log(x) / log(10)` as in JAX."""
    return log(x) / math.log(10.0)


def exp2(x) -> Tensor:
    """`2 ** x`, as `exp(x log 2)`."""
    return exp(_to_float(x) * math.log(2.0))


def reciprocal(x) -> Tensor:
    """`1 / x` (integers are promoted to float32, as in JAX)."""
    return 1.0 / _to_float(x)


def tan(x) -> Tensor:
    """Tangent, `sin(x) / cos(x)`."""
    x = _to_float(x)
    return sin(x) / cos(x)


def arctanh(x) -> Tensor:
    """Inverse hyperbolic tangent, `(log1p(x) - log1p(-x)) / 2` (±inf at ±1, nan beyond)."""
    x = _to_float(x)
    return 0.5 * (log1p(x) - log1p(-x))


def hypot(x1, x2) -> Tensor:
    """`sqrt(x1² + x2²)` without overflow or underflow, as `jnp.hypot` computes it.

    >>> import remat as rm
    >>> rm.hypot(rm.asarray([3.0, 3e30]), 4e30)
    Tensor([4.e+30, 5.e+30], dtype=float32)
    """
    a, b = float_pair("hypot", x1, x2)
    a, b = abs(a), abs(b)
    infinite = (a == math.inf) | (b == math.inf)
    big, small = maximum(a, b), minimum(a, b)
    big_safe = where(big == 0, 1.0, big)
    out = where(big == 0, big, big * sqrt(1.0 + (small / big_safe) * (small / big_safe)))
    return where(infinite, math.inf, out)


def logaddexp(x1, x2) -> Tensor:
    """`log(exp(x1) + exp(x2))` without overflow, as `np.logaddexp`.

    >>> import remat as rm
    >>> rm.logaddexp(rm.asarray(1000.0), 1000.0)
    Tensor(1000.6932, dtype=float32)
    """
    a, b = float_pair("logaddexp", x1, x2)
    delta = a - b
    undefined = delta != delta  # a nan operand, or infinities of one sign: a + b is the answer
    delta = where(undefined, 0.0, delta)
    # max(a, b) + log1p(exp(-|a - b|)). NOTE: the maximum and |a - b| take their kinks on the
    # same side (a >= b), so at a tie the slopes are 1/2 each, as JAX's.
    top = where(delta >= 0, a, b)
    out = top + log1p(exp(where(delta >= 0, -delta, delta)))
    return where(undefined, a + b, out)


def sinc(x) -> Tensor:
    """`sin(pi x) / (pi x)`, 1 at 0, as `np.sinc`.

    NOTE: at 0 the value comes from the Maclaurin polynomial `1 - (pi x)² / 6`, so derivatives
    there are right to the third order (JAX's are right to every order).
    """
    x = _to_float(x)
    zero = x == 0
    pi_x = math.pi * x
    safe = where(zero, 1.0, pi_x)
    return where(zero, 1.0 - pi_x * pi_x / 6.0, sin(safe) / safe)
