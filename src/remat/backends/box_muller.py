"""Standard normal numbers from random integers, computed over an array namespace `xp` (NumPy
or jax.numpy) so that both backends give the same bits.

The transform is Box–Muller, z = sqrt(-2 ln(1 - u1)) cos(2π u2), but not in floating point:
XLA fuses a multiplication into the addition that reads it (one rounding, an FMA, where NumPy
rounds twice), rewrites a division by a constant as a multiplication, and brings its own `log`
and `cos`, so one float formula gives different last bits on the two backends. Here every step
is exact on both: unsigned integer arithmetic on W-bit words (W = 32 for float32 and 64 for
float64, so JAX's x64 mode is needed only where the result is float64 anyway), and the few float
operations are correctly rounded ones that nothing can fuse or rewrite: integer-to-float
conversion, `sqrt`, `frexp` and `ldexp` (exact scaling by powers of two). No float product is
ever added to anything, the result included.

Numbers are fixed point: an unsigned word m with an implicit scale, "Q(n)" meaning m * 2**-n.
`mulhi(a, b)` is the high word of the 2W-bit product, floor(a b / 2**W). Where relative precision
matters (a small radius, a small cosine) a value is a pair (mantissa, exponent): m * 2**e with m
normalized to its top bits. The radius is accurate to about 2**-(W-3) relative, the cosine to
2**-(W-4); the result is within about 2 ulp of the exact transform of the same integers.

u1 = k1 * 2**-B and u2 = k2 * 2**-B for B-bit integers k1, k2 (B = 24 or 53): the uniforms
`rm.random.uniform` would draw from the same bits.
"""

from __future__ import annotations

import functools
import math
from decimal import Decimal, localcontext

import numpy as np

_PI = Decimal("3.14159265358979323846264338327950288419716939937510582097494459230781640628620899")
_TABLE_BITS = 10  # the logarithm's table: 2**10 + 1 intervals of s in [0, 1/2]
# Polynomial degrees whose remainders stay below 2**-28 (W = 32) and 2**-57 (W = 64), a
# sixteenth of an ulp of the float32 and float64 results.
_LOG_DEGREE = {32: 2, 64: 5}  # a Taylor polynomial of -ln(1-s)/s per interval (remainder 2**-31.8, 2**-62.7)
_SINC_TERMS = {32: 4, 64: 8}  # sin(x)/x to x**(2N) for x <= pi/4 (remainder 2**-28.7, 2**-63.1)


def normal(xp, k1, k2, dtype):
    """Standard normals of `dtype` (float32 or float64) from B-bit integers `k1`, `k2` (uint32
    arrays for float32, B = 24; uint64 for float64, B = 53) of one shape."""
    w = _Words(xp, np.dtype(dtype))
    r, r_exp = _radius(w, k1)
    c, c_exp, negative = _cosine(w, k2)
    z = xp.ldexp(w.mulhi(r, c).astype(w.float), r_exp + c_exp + w.W)  # r c = mulhi(r, c) 2**W
    return xp.where(negative, -z, z)


class _Words:
    """Unsigned W-bit arithmetic over `xp`, for results of float `dtype`."""

    def __init__(self, xp, dtype: np.dtype):
        self.xp = xp
        self.float = xp.float32 if dtype == np.float32 else xp.float64
        self.W = 32 if dtype == np.float32 else 64
        self.B = 24 if dtype == np.float32 else 53  # bits of a uniform
        self.P = 24 if dtype == np.float32 else 53  # bits of a float mantissa
        self.uint = np.uint32 if dtype == np.float32 else np.uint64  # NumPy scalars are literals to JAX
        self.tables = _tables(self.W)
        # NumPy has 64-bit products for 32-bit words (JAX has them only in x64 mode): the same
        # floor(a b / 2**W), in one multiplication rather than four.
        self._widen = xp is np and self.W == 32

    def c(self, value: int):
        return self.uint(value)

    def mulhi(self, a, b):
        """floor(a b / 2**W), from the four products of W/2-bit halves (each fits a word)."""
        if self._widen:
            return ((a.astype(np.uint64) * b) >> np.uint64(32)).astype(np.uint32)
        h, mask = self.c(self.W // 2), self.c(2 ** (self.W // 2) - 1)
        a1, a0, b1, b0 = a >> h, a & mask, b >> h, b & mask
        lo, m1, m2 = a0 * b0, a1 * b0, a0 * b1
        carry = ((lo >> h) + (m1 & mask) + (m2 & mask)) >> h
        return a1 * b1 + (m1 >> h) + (m2 >> h) + carry

    def normalize(self, x):
        """(n, x << n) with n the leading zeros of `x`, so the top bit is set (n = W-1 for 0)."""
        xp, W = self.xp, self.W
        if xp is np:
            n = self.c(W) - _bit_length(x, W).astype(self.uint)
        else:
            from jax import lax

            n = lax.clz(x)
        n = xp.where(x == self.c(0), self.c(W - 1), n)
        return n, x << n

    def to_mantissa(self, f):
        """A positive float (or 0) as (mantissa normalized to W bits, exponent): f = m 2**e."""
        frac, exp = self.xp.frexp(f)
        m = self.xp.ldexp(frac, self.P).astype(self.uint) << self.c(self.W - self.P)
        return m, exp - self.W

    def gather(self, table: np.ndarray, index):
        return self.xp.asarray(table)[index]


def _radius(w: _Words, k1):
    """sqrt(-2 ln(1 - u1)) as (mantissa, exponent). With 1 - u1 = 2**-n (1 - s), s in (0, 1/2]:
    -ln(1 - u1) = n ln 2 + L(s) where L(s) = -ln(1 - s) = s Q(s), computed relative to s so that
    a small radius keeps its precision."""
    xp, W, B = w.xp, w.W, w.B
    lead, g = w.normalize(w.c(2**B) - k1)  # 1 - u1 = g 2**-(lead + B), g in [2**(W-1), 2**W)
    n1 = lead - w.c(W - B - 1)  # n + 1, in [0, B]; 0 only for u1 = 0
    S = w.c(0) - g  # s 2**W, exactly: 2**W - g
    z, s_norm = w.normalize(S)
    L = w.mulhi(s_norm, _log_ratio(w, S))  # L(s) = L 2**-(W-1+z)
    n = n1 - w.c(1)
    fixed = n * w.c(w.tables.ln2) + (L >> (z + w.c(5)))  # n ln 2 + L(s) in Q(W-6) (< 2**(W-6) B ln 2)
    zi = z.astype(xp.int32)
    v_small = xp.ldexp(L.astype(w.float), 2 - W - zi)  # 2 L(s): n = 0, relative precision
    v_large = xp.ldexp(fixed.astype(w.float), 7 - W)  # 2 (n ln 2 + L(s)): n >= 1, >= 2 ln 2
    zero = xp.zeros_like(v_small)
    v = xp.where(n1 >= w.c(2), v_large, xp.where(n1 == w.c(1), v_small, zero))
    return w.to_mantissa(xp.sqrt(v))


def _log_ratio(w: _Words, S):
    """Q(s) = -ln(1 - s)/s in Q(W-1), for s = S 2**-W in (0, 1/2]: a Taylor polynomial about the
    left end of s's interval, i = floor(s 2**(T+1)), in h = (s - i 2**-(T+1)) 2**(T+1) in [0, 1).
    Q's Taylor coefficients are all positive, so no step subtracts."""
    T, W = _TABLE_BITS, w.W
    i = S >> w.c(W - T - 1)
    h = (S & w.c(2 ** (W - T - 1) - 1)) << w.c(T + 1)
    coeffs = w.tables.log
    acc = w.gather(coeffs[-1], i)
    for table in coeffs[-2::-1]:
        acc = w.gather(table, i) + w.mulhi(h, acc)
    return acc


def _cosine(w: _Words, k2):
    """cos(2π u2) as (mantissa, exponent, negative). The quarter turn and a reflection bring the
    angle to φ in [0, π/4], where the cosine is cos φ or sin φ; sin φ = φ sinc(φ) is computed
    relative to φ (exact: φ = j π 2**-(B-1) for an integer j), cos φ = sqrt(1 - sin² φ)."""
    xp, W, B = w.xp, w.W, w.B
    quarter = k2 >> w.c(B - 2)
    j = k2 & w.c(2 ** (B - 2) - 1)  # the angle within its quarter: (π/2) j 2**-(B-2)
    reflect = j > w.c(2 ** (B - 3))
    j = xp.where(reflect, w.c(2 ** (B - 2)) - j, j)  # φ = (π/2) j 2**-(B-2) <= π/4
    use_sin = ((quarter & w.c(1)) == w.c(1)) != reflect
    negative = (quarter == w.c(1)) | (quarter == w.c(2))

    phi = w.mulhi(j << w.c(W - B + 2), w.c(w.tables.half_pi))  # φ in Q(W-1)
    sinc = _sinc(w, w.mulhi(phi, phi) << w.c(2))  # from φ² in Q(W)
    # sin φ = j 2**-(B-2) (π/2) sinc(φ), with j normalized: its mantissa and exponent.
    lead, j_norm = w.normalize(j)
    sin_m = w.mulhi(j_norm, w.mulhi(w.c(w.tables.half_pi), sinc))  # (π/2) sinc in Q(W-2)
    sin_e = 4 - B - lead.astype(xp.int32)
    # cos φ = sqrt(1 - sin² φ) in floating point: 1 - sin² φ >= 1/2, so nothing cancels.
    sin_abs = w.mulhi(phi, sinc) << w.c(1)  # sin φ in Q(W-1)
    one_minus = w.c(2 ** (W - 2)) - w.mulhi(sin_abs, sin_abs)  # 1 - sin² φ in Q(W-2)
    cos_m, cos_e = w.to_mantissa(xp.sqrt(xp.ldexp(one_minus.astype(w.float), 2 - W)))
    return xp.where(use_sin, sin_m, cos_m), xp.where(use_sin, sin_e, cos_e), negative


def _sinc(w: _Words, x):
    """sin(φ)/φ in Q(W-1) from x = φ² in Q(W), x <= (π/4)²: 1 - x (c1 - x (c2 - ...)) with
    c_k = 1/(2k+1)!; each bracket is positive for such x, so unsigned words do."""
    coeffs = w.tables.sinc
    b = w.c(coeffs[-1])
    for c in coeffs[-2::-1]:
        b = w.c(c) - w.mulhi(x, b)
    return w.c(2 ** (w.W - 1)) - (w.mulhi(x, b) >> w.c(1))


def _bit_length(x: np.ndarray, W: int) -> np.ndarray:
    """NumPy's missing count of significant bits, from the float exponent: exact below 2**53;
    above, rounding up to a power of two overstates it by one, which the shift test undoes."""
    e = np.minimum(np.frexp(x.astype(np.float64))[1], W)
    over = (e > 0) & ((x >> np.maximum(e - 1, 0).astype(x.dtype)) == 0)
    return e - over


class _Tables:
    """The constants of one word size, exact to the last bit (computed in decimal arithmetic)."""

    def __init__(self, W: int):
        with localcontext() as ctx:
            ctx.prec = 50  # digits: 36 would do (the recurrence loses at most 2**55)
            self.ln2 = _fixed(Decimal(2).ln(), W - 6)
            self.half_pi = _fixed(_PI / 2, W - 1)
            self.sinc = [_fixed(1 / Decimal(math.factorial(2 * k + 1)), W) for k in range(1, _SINC_TERMS[W] + 1)]
            self.log = _log_tables(W)


def _log_tables(W: int) -> list[np.ndarray]:
    """Per interval i of s (i = 0 .. 2**T), the Taylor coefficients of Q(s) = -ln(1-s)/s about
    a = i 2**-(T+1), scaled by 2**-(T+1)k for the variable h, in Q(W-1)."""
    T, d = _TABLE_BITS, _LOG_DEGREE[W]
    uint = np.uint32 if W == 32 else np.uint64
    rows = []
    for i in range(2**T + 1):
        a = Decimal(i) / 2 ** (T + 1)
        rows.append([_fixed(q / Decimal(2) ** ((T + 1) * k), W - 1) for k, q in enumerate(_q_taylor(a, d))])
    return [np.array(col, dtype=uint) for col in zip(*rows)]


def _q_taylor(a: Decimal, d: int) -> list[Decimal]:
    """Taylor coefficients q_0 .. q_d of Q(s) = -ln(1-s)/s about s = a. Those of L(s) = -ln(1-s)
    are l_0 = L(a), l_k = 1/(k (1-a)^k); s Q(s) = L(s) gives a q_k + q_(k-1) = l_k."""
    if a == 0:
        return [1 / Decimal(k + 1) for k in range(d + 1)]
    q = [-(1 - a).ln() / a]
    for k in range(1, d + 1):
        q.append((1 / (k * (1 - a) ** k) - q[-1]) / a)
    return q


def _fixed(x: Decimal, frac_bits: int) -> int:
    return int((x * 2**frac_bits).to_integral_value())


@functools.cache
def _tables(W: int) -> _Tables:
    return _Tables(W)
