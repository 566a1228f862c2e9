"""`rm.jit`: trace once per input signature, hand the Graph to a backend, cache the result.

Each jitted function keeps its compiled programs in a least-recently-used cache of
`Jitted.cache_size` entries (64 by default), like `functools.lru_cache`. A training step sees one
or a few signatures; 64 leaves room for bucketed shapes (sequence lengths, a last short batch)
while bounding what a program that keeps producing new shapes can hold: an XLA entry costs about
3 MB of executables, so 64 entries stay under ~200 MB. `Jitted.clear_cache()` empties one cache,
`rm.clear_caches()` every one. A cache entry holds the program, never a call's arguments or
outputs.
"""

from __future__ import annotations

import collections
import functools
import inspect
import threading
import weakref
from collections.abc import Callable

import numpy as np

from remat import argcheck, backends, dtypes, sharding, tree
from remat import precision as matmul_precision
from remat.autodiff import slices_outside_blocks
from remat.backends.capped import Cap
from remat.backends.host_slices import host_slices
from remat.backends.numpy import SCOPED_CAP
from remat.backends.xla_offsets import offsets_at_run_time
from remat.budget import misplaced, parse_cap
from remat.errors import ArgumentTypeError, ArgumentValueError, callable_name
from remat.graph import type_str
from remat.planner.cost import WEIGHTS, node_cost
from remat.planner.target import Target
from remat.planner.target import running_on as planned_for
from remat.tensor import Tensor, check_argument_leaf, is_device_array, is_tensor_like
from remat.trace import Traced, argument, asarray, current_trace, trace_function


def _signature(leaves) -> tuple:
    return tuple(map(_leaf_signature, leaves))


def _leaf_signature(x) -> tuple:
    """(shape, dtype, vectorized axes, weakly typed) of an argument leaf. An array of a supported
    dtype is read as it is: making a Tensor of every leaf on every call cost more than XLA's own
    call. A Python number is weakly typed (`2.0` and `np.float32(2.0)` trace apart, as in JAX)."""
    if (type(x) is np.ndarray or is_device_array(x)) and dtypes.is_supported(x.dtype):
        return x.shape, x.dtype, (), False
    check_argument_leaf(x)
    t = argument(x)
    return t.shape, t.dtype, t.vectorized_axes, t.weak_type


def _typed(value):
    """A static value as a cache key: with its type, so that `1` and `1.0` (equal, and of equal
    hash) key different programs, as in JAX; inside tuples too."""
    if type(value) is tuple:
        return tuple, tuple(_typed(v) for v in value)
    return type(value), value


class Lowered:
    """A traced and lowered program: `.as_text()` shows it, `.compile()` makes it runnable.
    `in_tree` and `in_signature` are the structure and types of the (non-static) arguments it
    was traced for."""

    def __init__(self, traced: Traced, backend: str, options: dict, in_tree: tree.TreeDef,
                 in_signature: tuple, name: str, has_static: bool = False, shardings: tuple | None = None,
                 donated: tuple[int, ...] = (), memory_cap: Cap | None = None):
        self.traced = traced
        self.graph = traced.graph
        self.backend = backend
        self.in_tree = in_tree
        self.in_signature = in_signature
        self.name = name
        self.has_static = has_static
        self._on_compile: Callable[[Compiled], Compiled] | None = None  # set by Jitted.lower
        graph, self._host = self.graph, None
        # Stacked weights read W[i]: see backends/host_slices.py and xla_offsets.py. Not for a
        # sharded program (`shardings`: one per input, one per output), which takes its
        # arguments whole, where they lie on the devices.
        if backend == "xla" and shardings is None:
            graph, _ = slices_outside_blocks(graph)  # a block's slices of an argument are the host's too
            graph, self._host = host_slices(graph, donated)
            graph = offsets_at_run_time(graph)
        placed = {} if shardings is None else {"in_shardings": shardings[0], "out_shardings": shardings[1]}
        # Donated arguments: the program's inputs that are whole donated arguments (a slice the
        # host made of one is not the caller's buffer).
        if self._host is not None:
            donated = tuple(k for k, (pos, axis, _, _) in enumerate(self._host.inputs)
                            if axis is None and pos in donated)
        extra = {"donated": donated} if donated else {}
        if memory_cap is not None:
            extra["memory_cap"] = memory_cap
        self._program = backends.get(backend).lower(graph, **options, **placed, **extra)

    def as_text(self) -> str:
        """The program handed to the backend: the graph for NumPy, StableHLO for XLA."""
        return str(self._program)

    def compile(self) -> Compiled:
        """The runnable program. Lowered from a jitted function, it also becomes that function's
        cache entry for this signature, so calling the function next does not trace again."""
        compiled = Compiled(self)
        return compiled if self._on_compile is None else self._on_compile(compiled)


class Compiled:
    """A compiled program: call it with the non-static arguments it was lowered for, of the same
    structure, shapes and dtypes; anything else is an error naming both signatures."""

    def __init__(self, lowered: Lowered):
        self.lowered = lowered
        self._run = lowered._program.compile()
        if lowered._host is not None:
            self._run = lowered._host.wrap(self._run)
        self._wrap = lowered.traced.wrap_outputs
        self._xla = lowered.backend == "xla"

    @property
    def last_memory(self):
        return getattr(self._run, "last_memory", None)

    def __call__(self, *args, **kwargs):
        leaves, treedef = tree.flatten((args, kwargs))
        low = self.lowered
        if treedef != low.in_tree or not _matches(leaves, low.in_signature):
            expected = _call_text(low.in_tree, [_entry_text(*e) for e in low.in_signature])
            got = _call_text(treedef, [_leaf_text(x) for x in leaves])
            hint = " (static arguments were fixed by lower(): leave them out)" if low.has_static else ""
            raise ArgumentTypeError(
                f"{low.name}: the compiled program takes {expected} but was called with {got}{hint}; "
                "lower and compile again for these arguments, or call the jitted function, which "
                "traces once per signature"
            )
        return self.call_flat(leaves)

    def call_flat(self, leaves: list):
        """Run on argument leaves already known to match the signature (no checks)."""
        if self._xla and SCOPED_CAP.get() is not None:
            raise ArgumentValueError(
                f"{self.lowered.name}: an XLA program called inside `with rm.memory.cap(...)`; the cap is the NumPy "
                "evaluator's, which runs node by node and can evict and recompute: XLA allocates its buffers itself. "
                "Call it outside the scope, or jit it with backend='numpy'")
        outs = self._run(*[_raw(x) for x in leaves])
        return self._wrap([Tensor._concrete(_array(o)) for o in outs])


def _matches(leaves, signature: tuple) -> bool:
    return all(is_tensor_like(x) for x in leaves) and _signature(leaves) == signature


def _entry_text(shape, dtype, vaxes, weak: bool = False) -> str:
    text = ("weak " if weak else "") + type_str(shape, dtype)
    return text + "{" + ",".join(f"{n}:{k}" for n, k in vaxes) + "}" if vaxes else text


def _leaf_text(x) -> str:
    if not is_tensor_like(x):
        return type(x).__name__
    return _entry_text(*_leaf_signature(x))


def _call_text(treedef: tree.TreeDef, texts: list[str]) -> str:
    """`(f32[3], (f32[2], f32[2]), scale=f32[])`: the types of a call `f(*args, **kwargs)`,
    given the structure of `(args, kwargs)` and one text per leaf."""
    it = iter(texts)
    args, kwargs = treedef.children
    parts = [_tree_text(c, it) for c in args.children]
    parts += [f"{k}={_tree_text(c, it)}" for k, c in zip(kwargs.data, kwargs.children)]
    return "(" + ", ".join(parts) + ")"


def _tree_text(td: tree.TreeDef, it) -> str:
    if td.kind == "leaf":
        return next(it)
    if td.kind == "none":
        return "None"
    kids = [_tree_text(c, it) for c in td.children]
    if td.kind == "tuple":
        return "(" + ", ".join(kids) + ("," if len(kids) == 1 else "") + ")"
    if td.kind == "list":
        return "[" + ", ".join(kids) + "]"
    if td.kind == "dict":
        return "{" + ", ".join(f"{k!r}: {c}" for k, c in zip(td.data, kids)) + "}"
    cls = td.data if td.kind == "namedtuple" else td.data[0]
    return f"{cls.__name__}({', '.join(kids)})"


def _array(x):
    """A backend's result as a tensor's value: device arrays (XLA) stay on their device."""
    return x if isinstance(x, np.ndarray) or is_device_array(x) else np.asarray(x)


def _raw(x):
    """An argument as backends take it: a NumPy or device array, not copied."""
    if isinstance(x, np.ndarray) or is_device_array(x):
        return x
    return asarray(x)._value


_ALL: weakref.WeakSet[Jitted] = weakref.WeakSet()  # every live jitted function, for clear_caches
_ALL_LOCK = threading.Lock()


class Jitted:
    """The result of `rm.jit(fn)`: call it like `fn`; `.lower(*args)` exposes the program.

    Compiled programs are cached per signature, the `cache_size` most recently used ones
    (an LRU; set it on the instance to change it). Concurrent calls are safe: a signature
    being traced by one thread is waited for by the others, so each is traced once and
    `trace_count` counts the traces made."""

    cache_size = 64  # see the module docstring for why 64

    def __init__(self, fn: Callable, backend: str, static_argnums: tuple[int, ...],
                 static_argnames: tuple[str, ...], options: dict,
                 shardings: sharding.JitShardings | None = None,
                 donate: tuple[tuple[int, ...], tuple[str, ...]] = ((), ()), memory_cap: Cap | None = None):
        backends.get(backend)
        self.memory_cap = memory_cap
        self.fn = fn
        self.donate_argnums, self.donate_argnames = donate
        self.shardings = shardings
        self.backend = backend
        self.static_argnums = static_argnums
        self.static_argnames = static_argnames
        self.options = options
        self.trace_count = 0
        self._name = f"jit({callable_name(fn)})"
        self._cache: collections.OrderedDict = collections.OrderedDict()
        self._filling: dict = {}  # key -> (thread id, Event) of a fill in progress
        self._lock = threading.Lock()
        functools.update_wrapper(self, fn, updated=())  # not fn's __dict__: a Jitted fn's cache is its own
        with _ALL_LOCK:
            _ALL.add(self)

    def _split(self, args, kwargs):
        """(static values, dynamic positional arguments, dynamic keyword arguments)."""
        static = tuple((i, args[i]) for i in self.static_argnums if i < len(args))
        static += tuple(sorted((k, v) for k, v in kwargs.items() if k in self.static_argnames))
        dynamic = tuple(a for i, a in enumerate(args) if i not in self.static_argnums)
        return static, dynamic, {k: v for k, v in kwargs.items() if k not in self.static_argnames}

    def _traceable(self, static):
        """`fn` as a function of (dynamic positional arguments, keyword arguments), with the
        static arguments put back in their places."""
        positional = {k: v for k, v in static if isinstance(k, int)}
        named = {k: v for k, v in static if isinstance(k, str)}

        def fn(dynamic, kwargs):
            it = iter(dynamic)
            full = [positional[i] if i in positional else next(it) for i in range(len(dynamic) + len(positional))]
            return self.fn(*full, **kwargs, **named)

        return fn

    def lower(self, *args, **kwargs) -> Lowered:
        """Trace for these arguments (always: as in JAX, `lower` does not read the cache); the
        `.compile()` of the result fills the cache, unless a call filled it first."""
        static, dynamic, dynamic_kwargs = self._split(args, kwargs)
        self._check_hashable(static)
        leaves, treedef = tree.flatten((dynamic, dynamic_kwargs))
        signature = _signature(leaves)
        key = self._key(treedef, signature, static, leaves)
        lowered = self._lower(static, dynamic, dynamic_kwargs, treedef, signature)
        lowered._on_compile = lambda compiled: self._store(key, compiled)
        return lowered

    def _key(self, treedef, signature, static, leaves) -> tuple:
        """What a compiled program is for. On XLA also the layouts of the sharded arguments and
        the mesh of `jax.set_mesh` (bare PartitionSpecs are read on it), as in `jax.jit`."""
        key = (treedef, signature, tuple((k, _typed(v)) for k, v in static), self._precision(), dtypes.x64_enabled())
        if self.backend != "xla":
            return key
        return *key, self.shardings.placements(treedef, leaves), sharding.context_mesh()

    def _lower(self, static, dynamic, kwargs, treedef, signature) -> Lowered:
        with self._lock:
            self.trace_count += 1
        mesh, ins = self._input_layout(dynamic, kwargs, signature)
        with sharding.tracing(self.backend, mesh), planned_for(Target(self.backend, **self.options)):
            traced = trace_function(self._traceable(static), (dynamic, kwargs), name=self._name)
        placed = None
        if ins is not None:
            shapes = [v.shape for v in traced.graph.outputs]
            placed = ins, self.shardings.outputs(traced.out_tree, shapes, mesh, callable_name(self.fn))
        return Lowered(traced, self.backend, self.options, treedef, signature, self._name, bool(static), placed,
                       self._donated(dynamic, kwargs), self.memory_cap)

    def _donated(self, dynamic, kwargs) -> tuple[int, ...]:
        """The positions, among the argument leaves (the program's inputs), of the donated ones."""
        if not (self.donate_argnums or self.donate_argnames):
            return ()
        positions = [i for i in range(len(dynamic) + len(self.static_argnums)) if i not in self.static_argnums]
        flags = [i in self.donate_argnums for i, a in zip(positions, dynamic) for _ in tree.leaves(a)]
        flags += [k in self.donate_argnames for k, v in kwargs.items() for _ in tree.leaves(v)]
        return tuple(k for k, f in enumerate(flags) if f)

    def _input_layout(self, dynamic, kwargs, signature) -> tuple:
        """(the mesh bare PartitionSpecs are read on, one NamedSharding or None per argument leaf);
        the latter None for a program on one device (nothing given, no argument sharded)."""
        if self.shardings is None:
            return None, None
        leaves = tree.leaves((dynamic, kwargs))
        mesh = self.shardings.mesh(leaves)
        shapes = [tuple(k for _, k in vaxes) + shape for shape, _, vaxes, _ in signature]
        ins = self.shardings.inputs(self._dynamic_names(len(dynamic)), dynamic, kwargs, shapes, leaves, mesh)
        if all(s is None for s in ins) and self.shardings.given_out is None:
            return mesh, None
        return mesh, ins

    def _dynamic_names(self, n: int) -> list[str]:
        """The names of the first `n` positional parameters that are not static, for messages."""
        params = argcheck.positional_params(self.fn) or []
        positions = [i for i in range(n + len(self.static_argnums)) if i not in self.static_argnums][:n]
        return [params[i] if i < len(params) else f"args[{i}]" for i in positions]

    def __call__(self, *args, **kwargs):
        if current_trace() is not None:  # inside another transformation: inline
            return self.fn(*args, **kwargs)
        static, dynamic, dynamic_kwargs = self._split(args, kwargs)
        leaves, treedef = tree.flatten((dynamic, dynamic_kwargs))
        signature = _signature(leaves)
        key = self._key(treedef, signature, static, leaves)
        try:
            compiled = self._compiled(
                key, lambda: self._lower(static, dynamic, dynamic_kwargs, treedef, signature).compile())
        except TypeError:
            self._check_hashable(static)
            raise
        return compiled.call_flat(leaves)

    def _store(self, key, compiled: Compiled) -> Compiled:
        """Put `compiled` in the cache under `key`, keeping an entry already there (the programs
        are the same, and callers may hold that one): the one now cached is returned."""
        with self._lock:
            kept = self._cache.setdefault(key, compiled)
            self._cache.move_to_end(key)
            while len(self._cache) > max(self.cache_size, 0):
                self._cache.popitem(last=False)
        return kept

    def _compiled(self, key, make: Callable[[], Compiled]) -> Compiled:
        """The cache entry for `key`, made by `make()` on a miss. Tracing and compiling run
        outside the lock; a thread that misses on a key another thread is filling waits for
        it instead of tracing the same signature again."""
        me = threading.get_ident()
        while True:
            with self._lock:
                hit = self._cache.get(key)
                if hit is not None:
                    self._cache.move_to_end(key)
                    return hit
                filling = self._filling.get(key)
                if filling is None or filling[0] == me:  # `me`: a fill re-entered on its own thread
                    mine = (me, threading.Event())
                    self._filling[key] = mine
                    break
            filling[1].wait()  # then look again: the fill may also have failed
        try:
            return self._store(key, make())
        finally:
            with self._lock:
                if self._filling.get(key) is mine:
                    del self._filling[key]
            mine[1].set()

    def _precision(self) -> str | None:
        """The matmul precision a call lowers with on XLA, this one's or the global one (see
        remat/precision.py): it keys the cache, so a scope asking for another compiles anew."""
        return matmul_precision.effective(self.options["precision"]) if "precision" in self.options else None

    def _check_hashable(self, static) -> None:
        """Static arguments key the cache: an unhashable one is an error naming it."""
        for k, v in static:
            try:
                hash(_typed(v))
            except TypeError:
                raise ArgumentTypeError(
                    f"jit: static argument {self._describe_argument(k)} of {callable_name(self.fn)} is "
                    f"{argcheck.describe(v)} {argcheck.short_repr(v)}, which is not hashable; static "
                    "arguments key the cache of compiled programs: pass a tuple (or another hashable "
                    "value) instead"
                ) from None

    def _describe_argument(self, k) -> str:
        if isinstance(k, str):
            return repr(k)
        params = argcheck.positional_params(self.fn)
        return f"{params[k]!r} (position {k})" if params and k < len(params) else f"at position {k}"

    def clear_cache(self) -> None:
        """Drop this function's compiled programs: the next call traces again."""
        with self._lock:
            self._cache.clear()


def clear_caches() -> None:
    """Drop the compiled programs of every jitted function (`Jitted.clear_cache` on each)."""
    with _ALL_LOCK:
        jitted = list(_ALL)
    for j in jitted:
        j.clear_cache()


def jit(fn: Callable, backend: str = "numpy", static_argnums=(), static_argnames=(),
        precision: str | None = None, in_shardings=None, out_shardings=None, donate_argnums=(),
        donate_argnames=(), memory_budget=None, strategy=None, memory_cap=None) -> Jitted:
    """Trace `fn` once per signature (pytree structure, shapes, dtypes, static values with their
    types) and run it on `backend` ("numpy" or "xla"; on XLA, one executable).
    A static argument may be given by position or by name whichever list names it.
    `precision` is the XLA matmul precision ("highest", "high", "default", JAX's aliases or a
    `jax.lax.Precision`); None follows `rm.default_matmul_precision` and then JAX's own setting
    (exact float32 on the CPU, TF32 on recent GPUs). NumPy is always exact and ignores it.
    `in_shardings`/`out_shardings` (XLA only) lay arrays out over devices as in `jax.jit`: one
    `jax.sharding.NamedSharding` or `PartitionSpec` per positional argument that is not static
    (a pytree prefix of it; None: unspecified, a sharded jax.Array keeping its own layout), or
    one for them all; likewise for the output. See remat/sharding.py for the mesh of a bare
    PartitionSpec. `donate_argnums`/`donate_argnames` give up the arguments' buffers, as in
    `jax.jit`: the program may write its results into them (on XLA a donated `jax.Array` is
    deleted by the call; on NumPy the evaluator writes elementwise results into a donated array
    once nothing else reads it, and counts it among the run's buffers).
    `memory_cap` (NumPy only: bytes, `"200MiB"`) bounds the buffers a call holds: when a node's
    results would cross it, the evaluator evicts values it can recompute and recomputes them
    when read again, with no plan and no checkpoint (remat/backends/capped.py); a cap too small
    for some point of the program raises `rm.CapTooSmall`. Called inside another traced
    function, a jitted function is inlined, and runs under that program's cap.

    >>> import remat as rm
    >>> f = rm.jit(lambda x: x * 2.0)
    >>> f(rm.ones((2,)))
    Tensor([2., 2.], dtype=float32)
    """
    argcheck.check_callable(fn, "jit")
    check_backend(backend, "jit")

    misplaced("jit", memory_budget, strategy)  # rm.jit(rm.grad(f, memory_budget=...)) is the place
    nums, names = _static_arguments(fn, static_argnums, static_argnames)
    precision = matmul_precision.canonical(precision, "jit")  # checked on NumPy too, which is always exact
    options = {} if backend == "numpy" else {"precision": precision}
    donate = _donated_arguments(fn, donate_argnums, donate_argnames, nums, names)
    return Jitted(fn, backend, nums, names, options, _shardings(backend, in_shardings, out_shardings), donate,
                  memory_cap_of(memory_cap, "jit", backend))


def _numpy_time(node) -> float:
    return node_cost(node, WEIGHTS["numpy"])


def memory_cap_of(value, where: str, backend: str = "numpy") -> Cap | None:
    """`memory_cap=` as the evaluator takes it (None: no cap): the bytes, and what recomputing a
    node costs by the planner's model of the NumPy evaluator (one function: its costs are cached
    per graph). Only the NumPy evaluator keeps a cap."""
    if value is None:
        return None
    if backend != "numpy":
        raise ArgumentValueError(
            f"{where}: memory_cap given with backend={backend!r}; a cap is kept by the NumPy evaluator, which runs "
            "node by node and can evict and recompute: XLA allocates its buffers itself. Pass backend='numpy', or "
            "plan the step for XLA with rm.grad(f, memory_budget=...)")
    return Cap(parse_cap(value, where), _numpy_time)


def _donated_arguments(fn, donate_argnums, donate_argnames, static_nums, static_names):
    """(positions, names) of the donated arguments, checked as the static ones are, and never
    static (a static argument is a Python value, with no buffer to give up)."""
    nums, names = _static_arguments(fn, donate_argnums, donate_argnames, "donate")
    both = sorted(set(nums) & set(static_nums)) + sorted(set(names) & set(static_names))
    if both:
        raise ArgumentValueError(f"jit: {both[0]!r} is both static and donated; a static argument is a Python "
                                 "value with no buffer to give up: leave it out of donate_argnums/donate_argnames")
    return nums, names


def _shardings(backend: str, in_shardings, out_shardings) -> sharding.JitShardings | None:
    if backend == "xla":
        return sharding.JitShardings(in_shardings, out_shardings)
    given = [name for name, value in (("in_shardings", in_shardings), ("out_shardings", out_shardings))
             if value is not None]
    if given:
        raise ArgumentValueError(
            f"jit: {' and '.join(given)} given with backend={backend!r}; shardings lay arrays out over "
            "devices, which only the XLA backend has: pass backend=\"xla\", or leave them out (rm.shard "
            "is a no-op on NumPy)")
    return None


def bind_static(fn: Callable, args: tuple, static_argnums, argnums, where: str):
    """`(fn', dynamic args, argnums')` for tools that run `fn(*args)` once, as `rm.jit` would
    with `static_argnums`: the static arguments are fixed in `fn'` as the Python values they
    are (never traced), and `argnums`, counted over all of `fn`'s arguments, is renumbered
    over the rest. A position both static and differentiated is an error."""
    nums = argcheck.argnums(static_argnums, where, fn, "static_argnums")
    if not nums:
        return fn, args, argnums
    static = set(argcheck.resolve(nums, len(args), where, "static_argnums", static_argnums, fn))
    dynamic = [i for i in range(len(args)) if i not in static]
    if argnums is not None:
        wanted = argcheck.resolve(argcheck.argnums(argnums, where, fn), len(args), where, "argnums", argnums, fn)
        both = [i for i in wanted if i in static]
        if both:
            raise ArgumentValueError(
                f"{where}: argnums={argcheck.short_repr(argnums)} names argument {both[0]}, which "
                f"static_argnums={argcheck.short_repr(static_argnums)} makes static; a static argument "
                "has no gradient: leave it out of one of them")
        renumbered = tuple(dynamic.index(i) for i in wanted)
        argnums = renumbered[0] if argcheck.is_int(argnums) else renumbered

    def with_static(*xs):
        it = iter(xs)
        return fn(*[args[i] if i in static else next(it) for i in range(len(args))])

    with_static.__name__ = with_static.__qualname__ = callable_name(fn)  # for messages and trace names
    return with_static, tuple(args[i] for i in dynamic), argnums


def check_backend(backend, where: str) -> None:
    if not isinstance(backend, str) or backend not in backends.KNOWN:
        raise ArgumentValueError(
            f"{where}: unknown backend {backend!r}; known backends: {', '.join(backends.KNOWN)}")


def _static_arguments(fn, static_argnums, static_argnames,
                      kind: str = "static") -> tuple[tuple[int, ...], tuple[str, ...]]:
    """The static (or donated: `kind`) positions and names, checked against `fn`'s signature where
    it can be read, each completed with the other's parameters (a static parameter is static by
    position and by keyword alike)."""
    nums = argcheck.argnums(static_argnums, "jit", fn, f"{kind}_argnums")
    names = (static_argnames,) if isinstance(static_argnames, str) else static_argnames
    if not isinstance(names, (tuple, list)) or not all(isinstance(n, str) for n in names):
        raise ArgumentTypeError(f"jit: {kind}_argnames must be a str or a tuple of str, got "
                                f"{argcheck.short_repr(static_argnames)}")
    names = tuple(names)
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = None
    if params is not None and not any(p.kind is p.VAR_KEYWORD for p in params):
        known = [p.name for p in params if p.kind not in (p.POSITIONAL_ONLY, p.VAR_POSITIONAL)]
        for n in names:
            if n not in known:
                raise ArgumentValueError(f"jit: {kind}_argnames names {n!r}, which is not a parameter of "
                                         f"{callable_name(fn)} (its parameters: {', '.join(known) or 'none'})")
    positional = argcheck.positional_params(fn)
    if positional is None:
        if any(i < 0 for i in nums):
            raise ArgumentValueError(
                f"jit: {kind}_argnums={static_argnums!r} counts from the end, but how many positional "
                f"arguments {callable_name(fn)} takes cannot be read (it takes *args or has no "
                "signature); count from the start instead")
        return nums, names
    nums = tuple(i % len(positional) for i in nums)  # in range: checked by argcheck.argnums
    keyword = {p.name for p in params or () if p.kind is p.POSITIONAL_OR_KEYWORD}
    names += tuple(positional[i] for i in nums if positional[i] in keyword and positional[i] not in names)
    nums += tuple(positional.index(n) for n in names if n in positional and positional.index(n) not in nums)
    return nums, names
