"""The special functions that need primitives of their own: erf, erfc, lgamma, digamma and
polygamma (`rm.special` gives them SciPy's names). The NumPy backend runs them with
scipy.special (imported on first use), XLA with jax.lax's.

Each derivative is the next function of the family: d erf = 2/sqrt(pi) exp(-x²), d lgamma =
digamma, d digamma = polygamma(1, .), d polygamma(n, .) = polygamma(n + 1, .); so every order
differentiates. Integer and bool inputs are promoted to float32, as in JAX.
"""

from __future__ import annotations

import math

from remat.core import Aval, declare
from remat.errors import ArgumentValueError
from remat.ops.axes import static_int
from remat.ops.elementwise import _float_unary, _to_float, _unary_jvp, exp
from remat.tensor import Tensor
from remat.trace import bind

_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _d_erf(t, x, out):
    return t * (_TWO_OVER_SQRT_PI * exp(-(x * x)))  # d erf x = 2/sqrt(pi) exp(-x²) dx


def _d_erfc(t, x, out):
    return -_d_erf(t, x, out)  # erfc = 1 - erf


def _d_lgamma(t, x, out):
    return t * bind(_digamma, x)  # d log|Γ(x)| = ψ(x) dx


def _d_digamma(t, x, out):
    return t * bind(_polygamma, x, n=1)  # d ψ(x) = ψ⁽¹⁾(x) dx


def _polygamma_rule(x: Aval, *, n: int) -> Aval:
    return _float_unary(x)


def _d_polygamma(t, x, out, *, n):
    return t * bind(_polygamma, x, n=n + 1)  # d ψ⁽ⁿ⁾(x) = ψ⁽ⁿ⁺¹⁾(x) dx


_erf = declare("erf", _float_unary, lambda g, x, out: (_d_erf(g, x, out),), jvp=_unary_jvp(_d_erf))
_erfc = declare("erfc", _float_unary, lambda g, x, out: (_d_erfc(g, x, out),), jvp=_unary_jvp(_d_erfc))
_lgamma = declare("lgamma", _float_unary, lambda g, x, out: (_d_lgamma(g, x, out),), jvp=_unary_jvp(_d_lgamma))
_digamma = declare("digamma", _float_unary, lambda g, x, out: (_d_digamma(g, x, out),),
                   jvp=_unary_jvp(_d_digamma))
_polygamma = declare("polygamma", _polygamma_rule, lambda g, x, out, *, n: (_d_polygamma(g, x, out, n=n),),
                     jvp=lambda ts, x, out, *, n: _d_polygamma(ts[0], x, out, n=n))


def erf(x) -> Tensor:
    """The error function `2/sqrt(pi) ∫₀ˣ exp(-t²) dt`, as `scipy.special.erf`.

    >>> import remat as rm
    >>> rm.special.erf(rm.asarray([0.0, 1.0]))
    Tensor([0.       , 0.8427008], dtype=float32)
    """
    return bind(_erf, _to_float(x))


def erfc(x) -> Tensor:
    """`1 - erf(x)`, accurate where erf is near 1, as `scipy.special.erfc`."""
    return bind(_erfc, _to_float(x))


def gammaln(x) -> Tensor:
    """`log|Γ(x)|`, as `scipy.special.gammaln`; its derivative is `digamma`.

    >>> import remat as rm
    >>> rm.special.gammaln(rm.asarray([1.0, 5.0]))
    Tensor([0.       , 3.1780539], dtype=float32)
    """
    return bind(_lgamma, _to_float(x))


def digamma(x) -> Tensor:
    """`d/dx log Γ(x)`, as `scipy.special.digamma`; its derivative is `polygamma(1, x)`."""
    return bind(_digamma, _to_float(x))


def polygamma(n: int, x) -> Tensor:
    """The n-th derivative of `digamma`, as `scipy.special.polygamma`; `n` is an int >= 0 known
    when tracing (`polygamma(0, x)` is `digamma(x)`).

    >>> import remat as rm
    >>> rm.special.polygamma(1, rm.asarray(1.0))  # pi² / 6
    Tensor(1.644934, dtype=float32)
    """
    n = static_int("polygamma", n, "n")
    if n < 0:
        raise ArgumentValueError(f"polygamma: n must be a non-negative int, got {n}")
    x = _to_float(x)
    return bind(_digamma, x) if n == 0 else bind(_polygamma, x, n=n)
