"""The seven dtypes remat supports, and how they promote.

bool, int32, int64, float16, bfloat16, float32, float64. bfloat16 is `ml_dtypes.bfloat16`, the
NumPy dtype JAX uses; `np.dtype("bfloat16")` names it once remat is imported.

Promotion is JAX's lattice (`jnp.promote_types`): within a kind the wider dtype wins
(int32 < int64; float16, bfloat16 < float32 < float64), float16 and bfloat16 meet at float32
(neither holds the other), and a float wins over any integer without widening:
``int64 + bfloat16 -> bfloat16``. Python scalars are *weak*: they take the dtype of the tensor
they meet, so ``x_bf16 * 2.0`` stays bfloat16 (a scalar that dtype cannot hold is an error, see
remat/values.py); a Python float meeting integers gives float32 (float64 in x64 mode, see
`enable_x64`).

No other dtype is converted silently: naming one (``dtype="uint8"``) is a DTypeError, and so is
an array of one given without ``dtype=`` (see remat/values.py).
"""

from __future__ import annotations

import os

import ml_dtypes
import numpy as np

from remat.errors import DTypeError

float16 = np.dtype("float16")
bfloat16 = np.dtype(ml_dtypes.bfloat16)
float32 = np.dtype("float32")
float64 = np.dtype("float64")
int32 = np.dtype("int32")
int64 = np.dtype("int64")
bool_ = np.dtype("bool")

SUPPORTED = (bool_, int32, int64, float16, bfloat16, float32, float64)
SUPPORTED_NAMES = "bool, int32, int64, float16, bfloat16, float32, float64"

# JAX's x64 mode: Python floats and ints (and the defaults of `rm.zeros`, `rm.arange`, random
# draws...) are float64 and int64 instead of float32 and int32. Off by default, as in JAX; on
# with `rm.enable_x64()` or the environment variable JAX_ENABLE_X64 (or REMAT_ENABLE_X64).
_x64 = any(os.environ.get(name, "").lower() in ("1", "true", "yes", "on")
           for name in ("JAX_ENABLE_X64", "REMAT_ENABLE_X64"))


def x64_enabled() -> bool:
    """Whether Python numbers and default dtypes are 64-bit (see `enable_x64`)."""
    return _x64


class enable_x64:  # noqa: N801  (a function to users; a class so that `with` can restore)
    """Make Python numbers and default dtypes 64-bit (`enable_x64(False)`: 32-bit), as JAX's
    x64 mode: `rm.grad(f)(3.0)` is then float64, and so are `rm.zeros(3)` and `0.1 * i` in a
    loop. It applies now; used as `with rm.enable_x64():`, the mode is restored on exit.
    Programs already compiled by `rm.jit` are kept per mode.

    >>> import remat as rm
    >>> with rm.enable_x64():
    ...     rm.asarray(3.0).dtype
    dtype('float64')
    >>> rm.asarray(3.0).dtype
    dtype('float32')
    """

    def __init__(self, enabled: bool = True):
        global _x64
        self._previous, _x64 = _x64, bool(enabled)

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc) -> None:
        global _x64
        _x64 = self._previous


def default_float() -> np.dtype:
    return float64 if _x64 else float32


def default_int() -> np.dtype:
    return int64 if _x64 else int32


def __getattr__(name: str) -> np.dtype:
    # DEFAULT_FLOAT and DEFAULT_INT follow the x64 mode, so they are read when asked for.
    if name == "DEFAULT_FLOAT":
        return default_float()
    if name == "DEFAULT_INT":
        return default_int()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

#: Float dtypes whose sums and products are accumulated in float32 (results keep the dtype).
LOW_PRECISION = (float16, bfloat16)

_SHORT = {bool_: "bool", int32: "i32", int64: "i64", float16: "f16", bfloat16: "bf16", float32: "f32",
          float64: "f64"}


def canonical(dtype, what: str = "dtype") -> np.dtype:
    """The supported dtype that `dtype` names (a name, a NumPy dtype or scalar type). Any other
    is a DTypeError naming it, raised on behalf of the function `what`."""
    if dtype is None:
        raise DTypeError(f"{what}: dtype None is not a dtype; use one of {SUPPORTED_NAMES}")
    if dtype is float or dtype is int:  # as in JAX: the default float or int (64-bit in x64 mode)
        return default_float() if dtype is float else default_int()
    try:
        d = np.dtype(dtype)
    except (TypeError, ValueError):
        raise DTypeError(f"{what}: {dtype!r} is not a dtype; use one of {SUPPORTED_NAMES}") from None
    if d not in SUPPORTED:
        raise DTypeError(f"{what}: dtype {d} is not supported; use one of {SUPPORTED_NAMES}")
    return d


def is_supported(dtype) -> bool:
    return np.dtype(dtype) in SUPPORTED


def is_float(dtype) -> bool:
    """float16, bfloat16, float32, float64 (and NumPy's other floats, which remat refuses):
    bfloat16's NumPy kind is "V", so `dtype.kind == "f"` misses it."""
    d = np.dtype(dtype)
    return d.kind == "f" or d == bfloat16


def is_int(dtype) -> bool:
    return np.dtype(dtype).kind == "i"


def is_numeric(dtype) -> bool:
    """A dtype whose values are numbers: bool, integers and floats."""
    return np.dtype(dtype).kind in "biu" or is_float(dtype)


def finfo(dtype) -> ml_dtypes.finfo:
    """`np.finfo` that knows bfloat16 (NumPy's own does not)."""
    return ml_dtypes.finfo(np.dtype(dtype))


def can_hold(src: np.dtype, dst: np.dtype) -> bool:
    """Whether casting any value of `src` to `dst` keeps it in range (floats may still round).
    Narrowing integers, a float to a float of smaller range (float64 -> float32 or bfloat16,
    float32 -> bfloat16 or float16, bfloat16 -> float16), an integer to float16, and a float to
    an integer can overflow; nothing else can."""
    src, dst = np.dtype(src), np.dtype(dst)
    if dst.kind == "b" or src.kind == "b":
        return True
    if is_float(dst):
        top = finfo(src).max if is_float(src) else np.iinfo(src).max
        return float(finfo(dst).max) >= float(top)
    if is_float(src):
        return False
    s, d = np.iinfo(src), np.iinfo(dst)
    return d.min <= s.min and s.max <= d.max


def short_name(dtype: np.dtype) -> str:
    return _SHORT[np.dtype(dtype)]


def _rank(d: np.dtype) -> int:
    return 2 if is_float(d) else 1 if d.kind in "iu" else 0


def result_type(*dtypes: np.dtype) -> np.dtype:
    """The promoted dtype of strongly typed operands: the widest of the highest kind, with
    float16 and bfloat16 (the same width, neither holding the other) meeting at float32.

    >>> result_type(float16, bfloat16), result_type(int64, bfloat16), result_type(bfloat16, float32)
    (dtype('float32'), dtype(bfloat16), dtype('float32'))
    """
    ds = [np.dtype(d) for d in dtypes]
    kind = max(_rank(d) for d in ds)
    top = {d for d in ds if _rank(d) == kind}
    widest = max(top, key=lambda d: d.itemsize)
    if len({d for d in top if d.itemsize == widest.itemsize}) > 1:  # float16 meets bfloat16
        return float32
    return widest


def scalar_dtype(value) -> np.dtype:
    """The dtype a Python scalar gets on its own."""
    if isinstance(value, (bool, np.bool_)):
        return bool_
    if isinstance(value, (int, np.integer)):
        return default_int()
    if isinstance(value, (float, np.floating)):
        return default_float()
    if getattr(value, "weak_type", False) is True:  # a tensor that was a Python number
        return np.dtype(value.dtype)
    raise DTypeError(f"expected a Python number, got {type(value).__name__}")


def is_weak(value) -> bool:
    """A Python number (not a NumPy scalar): weakly typed, as in JAX, it takes the dtype of what
    it meets."""
    return isinstance(value, (bool, int, float)) and not isinstance(value, np.generic)


def weak_result_type(strong: np.dtype, scalar) -> np.dtype:
    """The dtype of a tensor of dtype `strong` combined with a weak Python scalar (or a weakly
    typed tensor: its kind counts, not its width)."""
    weak = scalar_dtype(scalar)
    if _rank(weak) <= _rank(strong):
        return strong
    return weak
