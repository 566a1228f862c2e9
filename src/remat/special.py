"""`rm.special`: scipy.special's functions as `jax.scipy.special` has them. erf, erfc, gammaln,
digamma and polygamma are primitives (remat/ops/special_functions.py); logsumexp is
`rm.nn.logsumexp`; xlogy and xlog1py carry JAX's derivative rules (`custom_jvp`), which hold
at `x == 0` too; expit and logit are composed.
"""

from __future__ import annotations

from remat import dtypes
from remat.custom_jvp import custom_jvp
from remat.nn import logsumexp
from remat.nn import sigmoid as _sigmoid
from remat.ops import log, log1p, where
from remat.ops.special_functions import digamma, erf, erfc, gammaln, polygamma
from remat.ops.transcendental import float_pair
from remat.tensor import Tensor
from remat.trace import asarray

__all__ = ["digamma", "erf", "erfc", "expit", "gammaln", "logit", "logsumexp", "polygamma", "xlog1py", "xlogy"]


def _xlogy_value(x: Tensor, y: Tensor) -> Tensor:
    nonzero = x != 0
    return where(nonzero, x * log(where(nonzero, y, 1.0)), 0.0)


def _xlog1py_value(x: Tensor, y: Tensor) -> Tensor:
    nonzero = x != 0
    return where(nonzero, x * log1p(where(nonzero, y, 0.0)), 0.0)


_xlogy = custom_jvp(_xlogy_value)
# d(x log y) = log(y) dx + x / y dy, also at x == 0 (as JAX's rule)
_xlogy.defjvp(lambda p, t: (_xlogy_value(*p), t[0] * log(p[1]) + t[1] * p[0] / p[1]))
_xlog1py = custom_jvp(_xlog1py_value)
# d(x log(1 + y)) = log1p(y) dx + x / (1 + y) dy
_xlog1py.defjvp(lambda p, t: (_xlog1py_value(*p), t[0] * log1p(p[1]) + t[1] * p[0] / (1.0 + p[1])))


def xlogy(x, y) -> Tensor:
    """`x * log(y)`, 0 where `x == 0` (whatever `y`), as `scipy.special.xlogy`.

    >>> import remat as rm
    >>> rm.special.xlogy(rm.asarray([0.0, 2.0]), rm.asarray([0.0, 1.0]))
    Tensor([0., 0.], dtype=float32)
    """
    return _xlogy(*float_pair("xlogy", x, y))


def xlog1py(x, y) -> Tensor:
    """`x * log1p(y)`, 0 where `x == 0` (whatever `y`), as `scipy.special.xlog1py`."""
    return _xlog1py(*float_pair("xlog1py", x, y))


def expit(x) -> Tensor:
    """The logistic function `1 / (1 + exp(-x))`, as `scipy.special.expit` (`rm.nn.sigmoid`)."""
    return _sigmoid(x)


def logit(x) -> Tensor:
    """`log(x / (1 - x))`, the inverse of `expit`, as `scipy.special.logit` (computed as
    `log(x) - log1p(-x)`, whose slope `1 / (x (1 - x))` is inf, not nan, at 0 and 1).

    >>> import remat as rm
    >>> rm.special.logit(rm.asarray([0.5, 0.75]))
    Tensor([0.       , 1.0986123], dtype=float32)
    """
    x = asarray(x)
    x = x if dtypes.is_float(x.dtype) else x.astype(dtypes.DEFAULT_FLOAT)
    return log(x) - log1p(-x)
