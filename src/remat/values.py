"""Numbers as tensor values: the dtype a Python value or an array takes, and a conversion to it
that keeps every value or says why it cannot. `asarray`, `full`, `arange` and Python scalars
meeting a tensor all follow these rules:

- A Python bool, int or float, or a nested list or tuple of them, takes bool, int32 or float32
  by the kind NumPy infers (bool < int < float), unless `dtype=` names another. With a dtype the
  exact Python value goes straight to it, never through float32 or int32:
  `asarray(0.1, "float64")` is the double nearest 0.1, `asarray(2**40, "int64")` is 2**40.
- A NumPy array or scalar (or a JAX array) keeps its dtype, which must be one of remat's seven
  (bool, int32, int64, float16, bfloat16, float32, float64); any other (uint8, int16, float128,
  ...) is a DTypeError unless `dtype=` asks for a conversion.
- A conversion rounds a float (or an integer) to the nearest value of the target dtype, once:
  float64 to bfloat16 is not float64 to float32 to bfloat16, which can round twice. It truncates a
  float toward zero when asked for an integer dtype; nothing else changes a value. An integer
  outside the target's range, a finite number beyond it (1e300 as float32, 70000 as float16), or
  NaN or an infinity as an integer is a ValueOverflow naming the value and the dtype: integers
  never wrap and finite numbers never become infinite.
- A ragged nested list, or one nested more than 64 deep, is a ShapeError; a value of another
  type (None, a string, a dict) is an ArgumentTypeError and a complex one a DTypeError.
"""

from __future__ import annotations

import numpy as np

from remat import dtypes, rounding
from remat.errors import ArgumentTypeError, DTypeError, RematError, ShapeError, ValueOverflow

MAX_RANK = 64  # the most dimensions a tensor may have: NumPy's limit, which its arrays cannot exceed

# The fix a ValueOverflow suggests, given the dtype that would hold the value.
PASS_DTYPE = 'pass dtype="{dtype}"'
CAST_OPERAND = ('cast the tensor it meets first (x.astype("{dtype}")), or make the number a tensor with '
                'rm.asarray(..., dtype="{dtype}")')

_PYTHON_NUMBERS = (bool, int, float)


def array(x, dtype=None, what: str = "asarray", fix: str = PASS_DTYPE) -> np.ndarray:
    """`x` (a Python number, a nested list of them, a NumPy or other array) as a NumPy array of
    a supported dtype: `dtype` if given, else the one the rules above give. `what` names the
    function for messages; `fix` is the advice for a value that does not fit."""
    target = None if dtype is None else dtypes.canonical(dtype, what)
    if isinstance(x, (np.ndarray, np.generic)):  # before Python numbers: np.float64 is a float
        a = np.asarray(x)
    elif isinstance(x, _PYTHON_NUMBERS + (list, tuple)):
        a = _python_array(x, what)
        return convert(a, target or default_dtype(a), what, fix, python=True)
    else:
        a = _foreign_array(x, what)
    return convert(a, target or supported(a.dtype, f"{what}: "), what, fix)


def default_dtype(a: np.ndarray) -> np.dtype:
    """The dtype Python values of NumPy's inferred kind take: bool, int32 or float32."""
    if a.dtype.kind == "b":
        return dtypes.bool_
    if a.dtype.kind in "iu" or a.dtype == object and all(isinstance(v, (int, np.integer)) for v in a.flat):
        return dtypes.DEFAULT_INT
    return dtypes.DEFAULT_FLOAT


def supported(dtype: np.dtype, what: str, subject: str = "arrays of dtype {dtype} are",
              convert: str = 'pass dtype="{to}"') -> np.dtype:
    """`dtype` itself, when it is one of remat's; else a DTypeError naming it, the supported
    ones and how to convert (`subject` and `convert` word the message for the caller)."""
    if dtypes.is_supported(dtype):
        return np.dtype(dtype)
    to = "float32" if dtypes.is_float(dtype) else "int32" if dtype.kind in "iu" else None
    how = f"; convert it first (x.astype(np.{to})) or {convert.format(to=to)}" if to else ""
    raise DTypeError(f"{what}{subject.format(dtype=dtype)} not supported (remat takes "
                     f"{dtypes.SUPPORTED_NAMES}){how}")


def convert(a: np.ndarray, target: np.dtype, what: str, fix: str = PASS_DTYPE,
            python: bool = False) -> np.ndarray:
    """`a` as `target`, rounding floats but never overflowing (see the module's rules)."""
    if a.dtype == target:
        return a
    if a.dtype == object:
        return _convert_python_ints(a, target, what, fix)
    if not dtypes.is_numeric(a.dtype):
        raise DTypeError(f"{what}: values of dtype {a.dtype} cannot become {target}")
    if dtypes.can_hold(a.dtype, target):
        return cast(a, target)
    if dtypes.is_float(target):
        with np.errstate(over="ignore"):
            out = cast(a, target)
        _raise_if_any(np.isinf(out) & np.isfinite(a), a, target, what, fix, python)
        return out
    _check_int_range(a, target, what, fix, python)
    return a.astype(target)


def cast(a: np.ndarray, target: np.dtype) -> np.ndarray:
    """`a.astype(target)`, except that a value reaching bfloat16 is rounded once (ml_dtypes
    rounds float64 and integers twice, through float32: see remat/rounding.py)."""
    if target == dtypes.bfloat16:
        return np.asarray(rounding.to_bfloat16(np, np.asarray(a)))
    return a.astype(target)


# ---------------------------------------------------------------- range checks


def _check_int_range(a: np.ndarray, target: np.dtype, what: str, fix: str, python: bool) -> None:
    info = np.iinfo(target)
    if a.dtype.kind == "f":
        # Floats truncate toward zero; -2**(n-1) <= t < 2**(n-1) are exact bounds in floating point.
        t = np.trunc(a)
        _raise_if_any(~np.isfinite(a) | (t < float(info.min)) | (t >= -float(info.min)), a, target, what, fix, python)
    elif a.size:
        lo, hi = int(a.min()), int(a.max())
        if lo < info.min or hi > info.max:
            _overflow(hi if hi > info.max else lo, target, what, fix, python)


def _raise_if_any(bad: np.ndarray, a: np.ndarray, target, what: str, fix: str, python: bool) -> None:
    if bad.any():
        value = a[bad].flat[0]
        _overflow(float(value) if dtypes.is_float(a.dtype) else value.item(), target, what, fix, python)


def _overflow(value, target: np.dtype, what: str, fix: str, python: bool) -> None:
    kind = f"the Python {type(value).__name__}" if python else "the value"
    raise ValueOverflow(f"{what}: {kind} {value!r} does not fit {target}{_advice(value, target, fix)}")


def _advice(value, target: np.dtype, fix: str) -> str:
    if isinstance(value, float) and not np.isfinite(value):
        return f"; {value!r} has no integer value"
    if dtypes.is_float(target):
        return "; " + fix.format(dtype="float32" if target in dtypes.LOW_PRECISION and abs(value) < 3e38
                                 else "float64")
    if not -(2.0**63) <= value < 2.0**63:
        return ('; it is beyond int64, the widest integer dtype: pass it as a float (dtype="float64") if '
                "rounding it is acceptable")
    return "; " + fix.format(dtype="int64")


def _fits(value: int, dtype: np.dtype) -> bool:
    info = np.iinfo(dtype)
    return info.min <= value <= info.max


# ---------------------------------------------------------------- Python values


def _python_array(x, what: str) -> np.ndarray:
    """NumPy's array of a Python value, with remat errors for the ones that have no array."""
    try:
        a = np.asarray(x)
    except ValueError as e:
        if isinstance(e, RematError):
            raise
        raise ShapeError(f"{what}: {_shape_problem(x) or e}") from None
    if a.dtype.kind == "c":
        raise DTypeError(f"{what}: complex values are not supported (remat takes {dtypes.SUPPORTED_NAMES})")
    if a.dtype.kind not in "biufO":
        raise ArgumentTypeError(f"{what}: cannot make a tensor of {_element_type(x)} values (NumPy sees "
                                f"dtype {a.dtype}); remat takes bools, ints and floats")
    if a.dtype == object:
        odd = [v for v in a.flat if not isinstance(v, _PYTHON_NUMBERS + (np.number, np.bool_))]
        if odd:
            raise ArgumentTypeError(f"{what}: cannot make a tensor from a {type(x).__name__} holding a "
                                    f"{type(odd[0]).__name__} ({_short(odd[0])}); remat takes bools, ints and floats")
    return a


def _element_type(x) -> str:
    while isinstance(x, (list, tuple)) and x:
        x = x[0]
    return type(x).__name__


def _shape_problem(x) -> str | None:
    """What makes nested list `x` no array: rows of different lengths, or too deep a nesting."""
    shown = f"nested {type(x).__name__} {_short(x)}"
    level, depth = [x], 0
    while True:
        rows = [isinstance(v, (list, tuple)) or isinstance(v, np.ndarray) and v.ndim > 0 for v in level]
        if not any(rows):
            return None
        if not all(rows):
            return (f"the {shown} is ragged: at depth {depth} it mixes numbers and sequences; every entry "
                    "at one depth must be a number, or a sequence of one length")
        lengths = list(dict.fromkeys(len(v) for v in level))
        if len(lengths) > 1:
            return (f"the {shown} is ragged: its rows at depth {depth} have lengths {lengths[0]} and "
                    f"{lengths[1]}; every row at one depth must have the same length")
        depth += 1
        if depth > MAX_RANK:
            return (f"the {shown} is more than {MAX_RANK} deep; a tensor has at most {MAX_RANK} dimensions "
                    "(NumPy's limit)")
        level = [v for row in level for v in row]


def _short(x) -> str:
    text = repr(x)
    return text if len(text) <= 60 else text[:57] + "..."


def _convert_python_ints(a: np.ndarray, target: np.dtype, what: str, fix: str) -> np.ndarray:
    """An object array of Python numbers (ints beyond 64 bits among them) as `target`, exactly."""
    values = [v.item() if isinstance(v, np.generic) else v for v in a.flat]
    if target.kind == "b":
        return np.array([bool(v) for v in values], target).reshape(a.shape)
    if dtypes.is_float(target):
        exact = np.array([_int_to_float(v, target, what, fix) for v in values], np.float64)
        return cast(exact, target).reshape(a.shape)
    ints = np.array([float(v) if isinstance(v, float) else 0 for v in values])
    _check_int_range(ints, target, what, fix, python=True)  # the floats among them
    for v in values:
        if isinstance(v, int) and not _fits(v, target):
            _overflow(v, target, what, fix, python=True)
    return np.array([int(v) for v in values], target).reshape(a.shape)


def _int_to_float(v, target: np.dtype, what: str, fix: str) -> float:
    """`v` rounded once, to the nearest `target` value (float(v) then float32 would round twice)."""
    exact = v if isinstance(v, (float, bool)) else _round_to_bits(v, dtypes.finfo(target).nmant + 1)
    try:
        f = float(exact)
    except OverflowError:
        _overflow(v, target, what, fix, python=True)
    with np.errstate(over="ignore"):
        out = cast(np.asarray(f), target)
    if np.isinf(out) and np.isfinite(f):
        _overflow(v, target, what, fix, python=True)
    return f


def _round_to_bits(v: int, bits: int) -> int:
    """`v` rounded to `bits` significant bits, ties to even."""
    shift = abs(v).bit_length() - bits
    if shift <= 0:
        return v
    q, r = divmod(abs(v), 1 << shift)
    half = 1 << (shift - 1)
    q += r > half or (r == half and q & 1)
    return (q << shift) * (1 if v > 0 else -1)


def _foreign_array(x, what: str) -> np.ndarray:
    """An array-like that is neither a Python value nor a NumPy one (a memoryview, a PyTorch
    tensor): NumPy's view of it, unless NumPy sees only an object."""
    try:
        a = np.asarray(x)
    except Exception:
        a = None
    if a is None or a.dtype.kind in "OUSV":
        raise ArgumentTypeError(f"{what}: cannot make a tensor from a value of type {type(x).__name__}; "
                                "pass a number, a nested list of numbers, an array or a tensor")
    return a
