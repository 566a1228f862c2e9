"""Eager checkpoint calls: traced once per signature, as JAX traces an eager `jax.checkpoint`.

Outside any trace there is nothing to differentiate, so `rm.checkpoint(fn, x)` computes
`fn(x)`, by running a traced program of `fn` on the NumPy evaluator. The program is kept per
signature (the structure, shapes, dtypes and vectorized axes of the inputs, and the Python
values passed along) and reused only while `fn` would read the same objects as when it was
traced: those in its closure, its defaults, the globals its code names (and, through the
functions it names, theirs), a method's `self` and a callable object's attributes, and the
arrays held in containers among them. Rebinding any of them traces again (names the function
assigns itself, such as a call counter, do not count). As in `rm.jit`, the program keeps the
*values* of the arrays it read: a NumPy array mutated in place afterwards is not seen.
"""

from __future__ import annotations

import dis
import functools
import inspect
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path

import numpy as np

from remat import tree
from remat.backends import numpy as evaluator
from remat.tensor import Tensor, is_array
from remat.trace import asarray, trace_function

MAX_SIGNATURES = 16  # programs kept per function, the least recently used dropped first
_LOCK = threading.Lock()
_CACHES: dict[int, OrderedDict] = {}  # id(function) -> signature -> _Program
_PACKAGE = str(Path(__file__).resolve().parent)


class _Program:
    def __init__(self, call, reads: list):
        explicit = [asarray(x) for x in call.arrays.picked]
        self.traced = trace_function(call.body, explicit, name=call.name)
        self.outputs = call.outputs  # where the Python values among the results go
        self.run = evaluator.compile(self.traced.graph)
        self.reads = reads

    def __call__(self, call):
        outs = self.run(*[np.asarray(asarray(x)._value) for x in call.arrays.picked])
        return self.outputs.rebuild(self.traced.wrap_outputs([Tensor._concrete(o) for o in outs]))


def run_eagerly(call):
    """The result of `call` (a `checkpoint._Call`) outside any trace."""
    owner = _owner(call.fn)
    reads = _reads(call.fn)
    key = _signature(call, reads)
    cache = _cache_of(owner) if owner is not None else None
    with _LOCK:
        hit = cache.get(key) if cache is not None else None
        if hit is not None and _same(hit.reads, reads):
            cache.move_to_end(key)
            program = hit
        else:
            program = None
    if program is None:
        program = _Program(call, reads)
        if cache is not None:
            with _LOCK:
                cache[key] = program
                while len(cache) > MAX_SIGNATURES:
                    cache.popitem(last=False)
    return program(call)


def clear() -> None:
    """Forget every eager program (the next eager call traces again)."""
    with _LOCK:
        for cache in _CACHES.values():
            cache.clear()


def _owner(fn: Callable):
    # A bound method is a new object at every attribute access: its function owns the cache
    # (its `self` is among what it reads).
    return fn.__func__ if inspect.ismethod(fn) else fn


def _cache_of(owner) -> OrderedDict | None:
    key = id(owner)
    with _LOCK:
        cache = _CACHES.get(key)
        if cache is not None:
            return cache
        try:
            weakref.finalize(owner, _CACHES.pop, key, None)
        except TypeError:  # cannot be weakly referenced: nothing tells when it dies, so no cache
            return None
        cache = _CACHES[key] = OrderedDict()
        return cache


def _signature(call, reads: list) -> tuple:
    """What selects a program besides the objects `fn` reads: the explicit inputs' types and
    every other value passed along (by value when hashable, else by identity, via `reads`)."""
    arrays = tuple((t._full_shape, t.dtype, t._vaxes, t.weak_type) for t in map(asarray, call.arrays.picked))
    picked = set(call.arrays.positions)
    others = [x for i, x in enumerate(call.arrays.flat) if i not in picked]
    others += [call.args[i] for i in sorted(call.static)]
    return arrays, call.arrays.treedef, tuple(sorted(call.static)), tuple(_value_key(x, reads) for x in others)


def _value_key(x, reads: list):
    if type(x) is tuple:
        return tuple, tuple(_value_key(v, reads) for v in x)
    try:
        hash(x)
    except TypeError:
        reads.append(x)  # compared by identity
        return "unhashable", type(x)
    return type(x), x


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


def _reads(fn, depth: int = 3, seen: set | None = None) -> list:
    """The objects `fn` can read besides its arguments (see the module docstring)."""
    seen = set() if seen is None else seen
    if depth < 0 or id(fn) in seen or _is_library(fn):
        return []
    seen.add(id(fn))
    if isinstance(fn, functools.partial):
        return _expand([fn.func, *fn.args, *fn.keywords.values()]) + _reads(fn.func, depth, seen)
    if inspect.ismethod(fn):
        return _expand([fn.__self__, *_attributes(fn.__self__)]) + _reads(fn.__func__, depth, seen)
    if inspect.isfunction(fn):
        # Names the function itself rebinds (`nonlocal calls; calls += 1`) are its own state, not
        # inputs of the program: each call changes them.
        own = _stored(fn.__code__)
        cells = zip(fn.__code__.co_freevars, fn.__closure__ or ())
        found = [c.cell_contents for name, c in cells if name not in own and _filled(c)]
        found += list(fn.__defaults__ or ()) + list((fn.__kwdefaults__ or {}).values())
        found += [fn.__globals__[n] for n in _names(fn.__code__) if n in fn.__globals__ and n not in own]
        nested = [r for o in found if _is_function(o) for r in _reads(o, depth - 1, seen)]
        return _expand(found) + nested
    if callable(fn) and not isinstance(fn, type):
        return _expand(_attributes(fn)) + _reads(type(fn).__call__, depth, seen)
    return []


def _names(code) -> list[str]:
    """Global names `code` and the code nested in it (lambdas, comprehensions) refer to."""
    names = list(code.co_names)
    for c in code.co_consts:
        if inspect.iscode(c):
            names += _names(c)
    return names


def _stored(code) -> set[str]:
    """Global and closure names `code` (and the code nested in it) assigns or deletes."""
    names = {i.argval for i in dis.get_instructions(code) if i.opname in _STORES}
    for c in code.co_consts:
        if inspect.iscode(c):
            names |= _stored(c)
    return names


_STORES = {"STORE_GLOBAL", "STORE_DEREF", "DELETE_GLOBAL", "DELETE_DEREF"}


def _filled(cell) -> bool:
    try:
        cell.cell_contents  # noqa: B018  (an empty cell raises)
    except ValueError:
        return False
    return True


def _attributes(obj) -> list:
    return list(getattr(obj, "__dict__", {}).values())


def _expand(objs: list) -> list:
    """Each object, and the array leaves of those that are containers (a list of weights; not
    the counters a dict of statistics holds)."""
    out = []
    for o in objs:
        out.append(o)
        if tree._children(o) is not None:
            out += [leaf for leaf in tree.leaves(o) if is_array(leaf)]
    return out


def _is_function(o) -> bool:
    return inspect.isfunction(o) or inspect.ismethod(o) or isinstance(o, functools.partial)


def _is_library(fn) -> bool:
    """remat's own functions read nothing a user can rebind."""
    return inspect.isfunction(fn) and fn.__code__.co_filename.startswith(_PACKAGE)
