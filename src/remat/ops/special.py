"""The normal distribution's CDF and quantile function, composed from exp, log, sqrt and where:
published fits (written before the erf primitive of ops/special_functions.py), accurate far
beyond what sampling (rm.random.truncated_normal) or exact GELU need.
"""

from __future__ import annotations

import math

from remat.ops.elementwise import exp, log, sqrt, where
from remat.tensor import Tensor


def erfc_nonneg(z: Tensor) -> Tensor:
    """erfc(z) for z >= 0 with relative error below 1.2e-7 (Numerical Recipes' Chebyshev fit).

    NOTE: differentiating this fit gives erfc's gradient to float32 precision, not float64's."""
    t = 1.0 / (1.0 + 0.5 * z)
    poly = 0.17087277
    for c in (-0.82215223, 1.48851587, -1.13520398, 0.27886807, -0.18628806,
              0.09678418, 0.37409196, 1.00002368, -1.26551223):
        poly = c + t * poly
    return t * exp(poly - z * z)


def normal_cdf(x: Tensor) -> Tensor:
    """Phi(x) = erfc(-x / sqrt 2) / 2, with relative error below 1.2e-7 in both tails (erfc of a
    negative argument is 2 - erfc(|z|))."""
    z = x * (1.0 / math.sqrt(2.0))
    tail = erfc_nonneg(where(x < 0, -z, z))
    return 0.5 * where(x < 0, tail, 2.0 - tail)


# P. J. Acklam's rational approximation of the normal quantile: relative error below 1.15e-9.
_A = (-3.969683028665376e01, 2.209460984245205e02, -2.759285104469687e02, 1.383577518672690e02,
      -3.066479806614716e01, 2.506628277459239e00)
_B = (-5.447609879822406e01, 1.615858368580409e02, -1.556989798598866e02, 6.680131188771972e01,
      -1.328068155288572e01, 1.0)
_C = (-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e00, -2.549732539343734e00,
      4.374664141464968e00, 2.938163982698783e00)
_D = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00, 3.754408661907416e00, 1.0)
_P_LOW = 0.02425


def _horner(coefficients, x):
    out = coefficients[0]
    for c in coefficients[1:]:
        out = out * x + c
    return out


def normal_quantile(p: Tensor) -> Tensor:
    """The x with Phi(x) = p, for p in [0, 1] (-inf and inf at the ends), relative error below
    1.15e-9: a rational function of p near the middle and of sqrt(-2 log p) in the tails."""
    q = p - 0.5
    r = q * q
    middle = _horner(_A, r) * q / _horner(_B, r)
    lower = p < _P_LOW
    upper = p > 1.0 - _P_LOW
    tail_p = where(lower, p, 1.0 - p)  # the tail's own probability, exact near 0
    s = sqrt(-2.0 * log(where((lower | upper) & (tail_p > 0), tail_p, 0.5)))
    tail = _horner(_C, s) / _horner(_D, s)
    inner = where(lower, tail, where(upper, -tail, middle))
    return where(p <= 0, -math.inf, where(p >= 1, math.inf, inner))
