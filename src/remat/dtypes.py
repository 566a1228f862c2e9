"""The five dtypes remat supports, and how they promote.

Promotion follows NumPy's lattice within a kind (int32 < int64, float32 < float64) and, like JAX,
lets a float win over any integer without widening it: ``int64 + float32 -> float32``. Python
scalars are *weak*: they take the dtype of the tensor they meet, so ``x_f32 * 2.0`` stays float32.
"""

from __future__ import annotations

import numpy as np

float32 = np.dtype("float32")
float64 = np.dtype("float64")
int32 = np.dtype("int32")
int64 = np.dtype("int64")
bool_ = np.dtype("bool")

SUPPORTED = (bool_, int32, int64, float32, float64)
DEFAULT_FLOAT = float32
DEFAULT_INT = int32

_SHORT = {bool_: "bool", int32: "i32", int64: "i64", float32: "f32", float64: "f64"}
_KIND_RANK = {"b": 0, "i": 1, "f": 2}


def canonical(dtype) -> np.dtype:
    """The supported dtype that `dtype` names; other NumPy dtypes map to their nearest kin."""
    d = np.dtype(dtype)
    if d in SUPPORTED:
        return d
    if d.kind == "f":
        return float64 if d.itemsize > 4 else float32
    if d.kind in "iu":
        return int64 if d.itemsize > 4 else int32
    if d.kind == "b":
        return bool_
    raise TypeError(f"remat does not support dtype {d}; use one of {', '.join(map(str, SUPPORTED))}")


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
    raise TypeError(f"expected a Python number, got {type(value).__name__}")


def weak_result_type(strong: np.dtype, scalar) -> np.dtype:
    """The dtype of a tensor of dtype `strong` combined with a weak Python scalar."""
    weak = scalar_dtype(scalar)
    if _KIND_RANK[weak.kind] <= _KIND_RANK[strong.kind]:
        return strong
    return weak
