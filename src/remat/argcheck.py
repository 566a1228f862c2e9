"""Checks of the arguments remat's transformations take (the function, `argnums`,
`static_argnums`), made once when the transformation is created wherever the answer is already
known, so that a mistake fails on the user's line rather than deep inside a later call."""

from __future__ import annotations

import inspect
import reprlib

import numpy as np

from remat import tree
from remat.errors import ArgumentTypeError, ArgumentValueError, callable_name
from remat.graph import type_str
from remat.tensor import Tensor

_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 60


def short_repr(x) -> str:
    """`repr(x)` cut short, so that a message never dumps a large value."""
    return _SHORT.repr(x)


def check_callable(fn, where: str, what: str = "") -> None:
    if not callable(fn):
        raise ArgumentTypeError(f"{where}: expected a callable{' ' + what if what else ''}, "
                                f"got {type(fn).__name__} {short_repr(fn)}")


def positional_params(fn) -> list[str] | None:
    """The names of `fn`'s positional parameters, or None when it takes `*args` or its
    signature cannot be read (then only a call can tell how many arguments it takes)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
        return None
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return [p.name for p in params if p.kind in positional]


def is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def argnums(value, where: str, fn, name: str = "argnums") -> tuple[int, ...]:
    """`value` (an int or a sequence of ints) as a tuple of positions, negative ones counting
    from the end as in Python indexing. Where `fn`'s signature says how many positional
    arguments it takes, positions outside it are an error now rather than at the first call."""
    items = (value,) if is_int(value) else value
    if not isinstance(items, (tuple, list)) or not all(is_int(i) for i in items):
        raise ArgumentTypeError(f"{where}: {name} must be an int or a tuple of ints, got {short_repr(value)}")
    nums = tuple(int(i) for i in items)
    _no_repeats(nums, where, name, value)
    params = positional_params(fn)
    if params is not None:
        resolve(nums, len(params), where, name, value, fn, creation=True)
    return nums


def resolve(nums, n_args: int, where: str, name: str, value, fn, creation: bool = False) -> tuple[int, ...]:
    """Positions `nums` counted against `n_args` positional arguments (negative ones from the
    end). One out of range is a TypeError, as a call with the wrong number of arguments is in
    Python (and `argnums` beyond the arguments in JAX), naming `name` as the user wrote it."""
    out = tuple(i + n_args if i < 0 else i for i in nums)
    bad = [i for i, j in zip(nums, out) if not 0 <= j < n_args]
    if not bad:
        _no_repeats(out, where, name, value)
        return out
    fname = callable_name(fn)
    if creation:
        params = positional_params(fn) or []
        takes = (f"takes {n_args} positional argument{'s' if n_args != 1 else ''} ({', '.join(params)}), "
                 f"so positions go from {-n_args} to {n_args - 1}" if n_args else "takes no positional arguments")
        raise ArgumentTypeError(f"{where}: {name}={short_repr(value)} is out of range: {fname} {takes}")
    need = max(i + 1 if i >= 0 else -i for i in bad)
    raise ArgumentTypeError(
        f"{where}: {name}={short_repr(value)} needs at least {need} positional arguments, "
        f"but {fname} was called with {n_args}"
    )


def _no_repeats(nums: tuple[int, ...], where: str, name: str, value) -> None:
    repeated = sorted({i for i in nums if nums.count(i) > 1})
    if repeated:
        raise ArgumentValueError(
            f"{where}: {name}={short_repr(value)} names argument {repeated[0]} more than once; "
            "list each position once"
        )


def describe(x) -> str:
    """What a value is, for messages: `a tensor f32[3]`, `a tuple of 3`, `a str`."""
    if isinstance(x, Tensor):
        return f"a tensor {type_str(x.shape, x.dtype)}"
    if isinstance(x, (tuple, list, dict)):
        return f"a {type(x).__name__} of {len(x)}"
    return f"a {type(x).__name__}"


def leaf_paths(x, prefix: str) -> list[str]:
    """`prefix[0]`, `prefix['w'].b`: the path of every leaf of `x`, in flattening order."""
    node = tree._children(x)
    if node is None:
        return [prefix]
    kind, data, kids = node
    if kind == "dict":
        keys = [f"[{k!r}]" for k in data]
    elif kind in ("namedtuple", "dataclass"):
        fields = data._fields if kind == "namedtuple" else data[1]
        keys = [f".{f}" for f in fields]
    else:
        keys = [f"[{i}]" for i in range(len(kids))]
    return [p for key, kid in zip(keys, kids) for p in leaf_paths(kid, prefix + key)]
