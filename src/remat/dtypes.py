"""The five dtypes remat supports, and how they promote.

Promotion follows NumPy's lattice within a kind (int32 < int64, float32 < float64) and, like JAX,
lets a float win over any integer without widening it: ``int64 + float32 -> float32``. Python
scalars are *weak*: they take the dtype of the tensor they meet, so ``x_f32 * 2.0`` stays float32
(a scalar that dtype cannot hold is an error, see remat/values.py).

No other dtype is converted silently: naming one (``dtype="float16"``) is a DTypeError, and so
is an array of one given without ``dtype=`` (see remat/values.py). float16 and bfloat16 are not
supported yet.
"""

from __future__ import annotations

import numpy as np

from remat.errors import DTypeError

float32 = np.dtype("float32")
float64 = np.dtype("float64")
int32 = np.dtype("int32")
int64 = np.dtype("int64")
bool_ = np.dtype("bool")

SUPPORTED = (bool_, int32, int64, float32, float64)
SUPPORTED_NAMES = "bool, int32, int64, float32, float64"
DEFAULT_FLOAT = float32
DEFAULT_INT = int32

_SHORT = {bool_: "bool", int32: "i32", int64: "i64", float32: "f32", float64: "f64"}
_KIND_RANK = {"b": 0, "i": 1, "f": 2}


def canonical(dtype, what: str = "dtype") -> np.dtype:
    """The supported dtype that `dtype` names (a name, a NumPy dtype or scalar type). Any other
    is a DTypeError naming it, raised on behalf of the function `what`."""
    if dtype is None:
        raise DTypeError(f"{what}: dtype None is not a dtype; use one of {SUPPORTED_NAMES}")
    try:
        d = np.dtype(dtype)
    except (TypeError, ValueError):
        raise DTypeError(f"{what}: {dtype!r} is not a dtype; use one of {SUPPORTED_NAMES}") from None
    if d not in SUPPORTED:
        raise DTypeError(f"{what}: dtype {d} is not supported; use one of {SUPPORTED_NAMES}")
    return d


def is_supported(dtype) -> bool:
    return np.dtype(dtype) in SUPPORTED


def can_hold(src: np.dtype, dst: np.dtype) -> bool:
    """Whether casting any value of `src` to `dst` keeps it in range (floats may still round).
    Narrowing integers, float64 -> float32 and float -> int can overflow; nothing else can."""
    if dst.kind == "b" or src.kind == "b" or dst.kind == "f" and src.kind in "iu":
        return True
    if src.kind == "f":
        return dst.kind == "f" and dst.itemsize >= src.itemsize
    if dst.kind in "iu":
        s, d = np.iinfo(src), np.iinfo(dst)
        return d.min <= s.min and s.max <= d.max
    return False


def short_name(dtype: np.dtype) -> str:
    return _SHORT[np.dtype(dtype)]


def is_float(dtype) -> bool:
    return np.dtype(dtype).kind == "f"


def is_int(dtype) -> bool:
    return np.dtype(dtype).kind == "i"


def result_type(*dtypes: np.dtype) -> np.dtype:
    """The promoted dtype of strongly typed operands."""
    best = max(dtypes, key=lambda d: (_KIND_RANK[d.kind], d.itemsize))
    return best


def scalar_dtype(value) -> np.dtype:
    """The dtype a Python scalar gets on its own."""
    if isinstance(value, (bool, np.bool_)):
        return bool_
    if isinstance(value, (int, np.integer)):
        return DEFAULT_INT
    if isinstance(value, (float, np.floating)):
        return DEFAULT_FLOAT
    raise DTypeError(f"expected a Python number, got {type(value).__name__}")


def weak_result_type(strong: np.dtype, scalar) -> np.dtype:
    """The dtype of a tensor of dtype `strong` combined with a weak Python scalar."""
    weak = scalar_dtype(scalar)
    if _KIND_RANK[weak.kind] <= _KIND_RANK[strong.kind]:
        return strong
    return weak
