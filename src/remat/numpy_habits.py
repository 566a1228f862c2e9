"""NumPy habits on tensors: `np.exp(t)`, `np.sum(t, axis=0)`, `y[0] = v`.

NumPy hands a call with a tensor among its arguments to the tensor (NEP 13 for ufuncs, NEP 18 for
other functions). A function remat has under the same name runs as that remat function, so
`np.exp(t)` is `rm.exp(t)`: traced, differentiable, on any backend. Any other NumPy function runs
on a concrete tensor's value and returns NumPy's result, as it would on an array; on a traced (or
vectorized) tensor it raises, since its value does not exist yet and a NumPy result would carry
no gradient. Item assignment raises too: tensors are immutable, and the message names the
`.at[...]` update to write. This module installs the three methods on `Tensor` when imported.
"""

from __future__ import annotations

import functools
import inspect

import numpy as np

from remat import linalg, ops
from remat.errors import ArgumentTypeError, TracerError
from remat.tensor import Tensor

# NOTE: rm.pad takes (x, lo, hi), not NumPy's (array, pad_width, mode): np.pad is not remat's.
_NOT_NUMPYS = {"pad"}
_ALIASES = {"amax": "max", "amin": "min", "around": "round"}  # NumPy's older names


def _table() -> dict:
    """`{NumPy function or ufunc: (remat's name, remat's function)}` for every remat op whose
    name NumPy also has (`np.pow` is `np.power`, so `rm.pow` serves both), and rm.linalg."""
    names = {name: name for name in ops.__all__ if name not in _NOT_NUMPYS}
    names.update(_ALIASES)
    table = {}
    for np_name, name in names.items():
        np_fn = getattr(np, np_name, None)
        if callable(np_fn) and not isinstance(np_fn, type):
            table[np_fn] = (f"rm.{name}", getattr(ops, name))
    for name in linalg.__all__:
        if callable(getattr(np.linalg, name, None)):
            table[getattr(np.linalg, name)] = (f"rm.linalg.{name}", getattr(linalg, name))
    # Not ops, but known without a value: NumPy's own versions would read the data of a traced tensor.
    table[np.shape] = ("x.shape", lambda a: a.shape)
    table[np.ndim] = ("x.ndim", lambda a: a.ndim)
    table[np.size] = ("x.size", lambda a, axis=None: a.size if axis is None else a.shape[axis])
    return table


_REMAT = _table()

# What to write instead of NumPy functions remat lacks, when the tensor is traced.
_HINTS = {
    "dot": "write a @ b (rm.matmul) or rm.tensordot(a, b, axes=1)",
    "copy": "use the tensor itself: tensors are immutable, so nothing needs a copy",
    "nonzero": "the number of nonzeros is not known when tracing; keep the shape with rm.where(mask, x, 0)",
    "argwhere": "the number of nonzeros is not known when tracing; keep the shape with rm.where(mask, x, 0)",
    "isclose": "write rm.abs(a - b) <= atol + rtol * rm.abs(b)",
    "where": "np.where(mask) is np.nonzero(mask), whose size is not known when tracing; keep the shape with "
             "rm.where(mask, x, 0)",
    "allclose": "write rm.all(rm.abs(a - b) <= atol + rtol * rm.abs(b))",
}
_REDUCE = {"add": "rm.sum", "multiply": "rm.prod", "maximum": "rm.max", "minimum": "rm.min",
           "logical_and": "rm.all", "logical_or": "rm.any"}
_ACCUMULATE = {"add": "rm.cumsum", "multiply": "rm.cumprod"}
_UPDATE = {"add": "add", "multiply": "multiply", "divide": "divide", "power": "power", "minimum": "min",
           "maximum": "max"}


# ---------------------------------------------------------------- the protocols


def _array_function(self, func, types, args, kwargs):
    """NEP 18: `np.sum(t)`, `np.concatenate([t, u])`, `np.where(c, t, 0)`."""
    if not all(issubclass(t, (Tensor, np.ndarray)) for t in types):
        return NotImplemented  # another library's array: let it (or NumPy) answer
    name = _numpy_name(func)
    if func in _REMAT:
        return _call(func, name, *_REMAT[func], args, kwargs)
    return _on_numpy(func, args, kwargs, f"{name} has no remat equivalent", _HINTS.get(func.__name__))


def _array_ufunc(self, ufunc, method, *inputs, **kwargs):
    """NEP 13: `np.exp(t)`, `np.add(a, t)`, `a + t` for a NumPy `a`, `np.add.reduce(t)`."""
    out = kwargs.get("out", ())
    if any(_foreign(x) for x in inputs + out):
        return NotImplemented
    name = f"np.{ufunc.__name__}"
    if any(isinstance(o, Tensor) for o in out):
        raise ArgumentTypeError(f"{name}(..., out=...): remat tensors are immutable, so nothing can be written "
                                f"into one; drop out= and bind the result: y = {name}(...)")
    if method == "at" and isinstance(inputs[0], Tensor):
        update = _UPDATE.get(ufunc.__name__)
        fix = f".{update}(v)" if update else f".set({name}(x[idx], v))"
        raise ArgumentTypeError(f"{name}.at(x, idx, v) updates x in place, and remat tensors are immutable; "
                                f"write x = x.at[idx]{fix}")
    if method == "__call__" and not out and ufunc in _REMAT:
        return _call(ufunc, name, *_REMAT[ufunc], inputs, kwargs)
    if method != "__call__":
        return _on_numpy(getattr(ufunc, method), inputs, kwargs, f"remat does not run {name}.{method}",
                         _method_hint(ufunc.__name__, method))
    if out:  # `a += t` for a NumPy array `a` comes here too
        return _on_numpy(ufunc, inputs, kwargs, f"{name}(..., out=a) writes into the NumPy array a in place",
                         f"drop out= and bind the result (`a = a + t` for `a += t`): y = {name}(...)")
    return _on_numpy(ufunc, inputs, kwargs, f"{name} has no remat equivalent")


def _setitem(self, index, value) -> None:
    """`y[0] = v`: tensors are immutable; the message spells out the `.at` update."""
    shown = _index_text(index)
    v = repr(value) if isinstance(value, (bool, int, float)) else "v"
    raise ArgumentTypeError(f"x[{shown}] = {v}: remat tensors are immutable (as JAX arrays are), so they "
                            f"cannot be assigned into; write x = x.at[{shown}].set({v}), which returns the "
                            "updated tensor")


Tensor.__array_function__ = _array_function  # type: ignore[attr-defined]
Tensor.__array_ufunc__ = _array_ufunc  # type: ignore[attr-defined]
Tensor.__setitem__ = _setitem  # type: ignore[method-assign]


# ---------------------------------------------------------------- running the call


def _call(func, name: str, rm_name: str, fn, args, kwargs):
    """`fn(*args, **kwargs)`, remat's version of NumPy's `func`. A keyword NumPy has and remat
    lacks (`dtype=`, `out=`, `where=`) is an error: ignoring it would change the result (one set
    to None is NumPy's default spelled out, and is dropped). Positional arguments remat's function
    cannot take ask for another form of NumPy's (`np.where(c)` is `np.nonzero(c)`): NumPy's."""
    signature = _signature(fn)
    kwargs = {k: v for k, v in kwargs.items() if v is not None or k in signature.parameters}
    try:
        signature.bind(*args, **kwargs)
    except TypeError as e:
        extra = [k for k in kwargs if k not in signature.parameters]
        if not extra:
            return _on_numpy(func, args, kwargs, f"{name} with these arguments has no remat equivalent "
                             f"({rm_name}{signature}: {e})", _HINTS.get(func.__name__))
        fix = ("remat tensors are immutable: drop out= and bind the result" if "out" in extra
               else f"call {rm_name} with the arguments it takes")
        raise ArgumentTypeError(f"{name} runs as {rm_name} on a remat tensor: {', '.join(k + '=' for k in extra)} "
                                f"is not an argument of {rm_name}{signature}; {fix}") from None
    return fn(*args, **kwargs)


@functools.cache
def _signature(fn) -> inspect.Signature:
    """`fn`'s signature without annotations, as messages show it."""
    signature = inspect.signature(fn)
    params = [p.replace(annotation=p.empty) for p in signature.parameters.values()]
    return signature.replace(parameters=params, return_annotation=signature.empty)


def _on_numpy(func, args, kwargs, what: str, fix: str | None = None):
    """NumPy's `func` on the tensors' values, if they have values; else an error that says why
    not (`what`) and what to write instead (`fix`)."""
    for t in _tensors((args, kwargs)):
        if t._trace is not None or t._vaxes:
            where = (f"traced inside `{t._trace.name}`" if t._trace is not None else
                     f"vectorized over {', '.join(repr(n) for n, _ in t._vaxes)} (rm.vmap or rm.vectorize)")
            fix = fix or "write it with remat's functions (rm.*), or call it on a concrete tensor outside"
            raise TracerError(f"{what}, so it cannot be traced: NumPy needs a concrete value, but this "
                              f"tensor is {where}; {fix}")
    return func(*_values(args), **_values(kwargs))


def _tensors(x):
    if isinstance(x, Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from _tensors(v)
    elif isinstance(x, dict):
        for v in x.values():
            yield from _tensors(v)


def _values(x):
    """`x` with every (concrete) tensor in it a NumPy array."""
    if isinstance(x, Tensor):
        return np.asarray(x)
    if isinstance(x, list):
        return [_values(v) for v in x]
    if isinstance(x, tuple):
        return tuple(_values(v) for v in x)
    if isinstance(x, dict):
        return {k: _values(v) for k, v in x.items()}
    return x


def _foreign(x) -> bool:
    """An array of another library taking part in NumPy's dispatch."""
    return hasattr(type(x), "__array_ufunc__") and not isinstance(x, (Tensor, np.ndarray, np.generic))


# ---------------------------------------------------------------- messages


def _numpy_name(func) -> str:
    module = getattr(func, "__module__", None) or "numpy"
    prefix = "np" + module[len("numpy"):] if module.startswith("numpy") else module
    return f"{prefix}.{func.__name__}"


def _method_hint(ufunc: str, method: str) -> str | None:
    if method == "reduce" and ufunc in _REDUCE:
        return f"write {_REDUCE[ufunc]}(x, axis=0) (np.{ufunc}.reduce's default axis is 0)"
    if method == "accumulate" and ufunc in _ACCUMULATE:
        return f"write {_ACCUMULATE[ufunc]}(x, axis=0)"
    if method == "outer":
        call = "rm.outer(a, b) for 1-d a and b, or " if ufunc == "multiply" else ""
        return f"write {call}np.{ufunc}(a.reshape(a.shape + (1,) * b.ndim), b), which broadcasts"
    if method == "at":
        return "make the array a tensor and update it: x = rm.asarray(a).at[idx].add(v)"
    return None


def _index_text(index) -> str:
    """`index` as the user wrote it inside `[...]`, or `idx` when it is not simple to show."""
    if isinstance(index, tuple) and not index:
        return "()"
    items = [_item_text(i) for i in (index if isinstance(index, tuple) else (index,))]
    return "idx" if None in items else ", ".join(items)


def _item_text(item) -> str | None:
    if item is Ellipsis:
        return "..."
    if item is None:
        return "None"
    if _is_int(item):
        return str(int(item))
    if isinstance(item, slice) and all(b is None or _is_int(b) for b in (item.start, item.stop, item.step)):
        text = ":".join("" if b is None else str(int(b)) for b in (item.start, item.stop))
        return text if item.step is None else f"{text}:{int(item.step)}"
    return None


def _is_int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))
