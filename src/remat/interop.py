"""Tensors in other array libraries and theirs in remat, sharing memory wherever it can be shared.

- **NumPy**: `np.asarray(t)` is the tensor's own array (`Tensor.__array__`).
- **JAX**: `jnp.sum(t)`, `jnp.asarray(t)` use JAX's `__jax_array__` protocol, and `jax.jit(f)(t)`,
  `jax.grad(f)(t)` see a tensor as a pytree with one leaf, its array, because JAX no longer calls
  `__jax_array__` on arguments of a transformation. Inside them `f` gets JAX's own traced array;
  results that are concrete arrays come back as tensors (`jax.grad(f)(t)` is a tensor). A NumPy
  value goes to JAX with `jax.device_put`, which on the CPU keeps an aligned buffer uncopied.
- **DLPack** (`torch.from_dlpack(t)`, `np.from_dlpack(t)`, `rm.from_dlpack(x)`): the buffer itself,
  except that a read-only tensor (one `rm.asarray` made: tensors are values, and programs take them
  as constants uncopied) goes only to consumers that can be told it is read-only (DLPack 1.0, as
  NumPy and PyTorch ask for); others (JAX) get a copy, so nothing can write into it.

A traced tensor has no value yet: giving one to another library raises `TracerError`. Dtypes
follow the other library's rules for NumPy arrays: without JAX's x64 mode, JAX reads a float64
tensor as float32, as it reads a float64 NumPy array.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys

import numpy as np

from remat import dtypes
from remat.errors import ArgumentTypeError, DTypeError, TracerError
from remat.tensor import Tensor, is_device_array

_KDL_CPU = 1  # DLPack's device type of host memory


def _value(t: Tensor, where: str):
    if t._trace is not None:
        raise TracerError(
            f"{where}: a tensor traced inside `{t._trace.name}` has no value to hand to another "
            "library; use remat's ops inside traced functions (rm.sum, rm.tanh, ...), or call the "
            "other library on concrete tensors, outside rm.jit, rm.grad and the like",
            _user_line(),
        )
    return t._value


def _user_line() -> str | None:
    """The innermost line outside remat and JAX: JAX's own frames stand between the user's call
    (`jnp.sum(t)`) and the protocol method that finds the tensor traced."""
    frame = sys._getframe(1)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.partition(".")[0] not in ("remat", "jax", "jaxlib"):
            return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"
        frame = frame.f_back
    return None


def jax_array(t: Tensor):
    """`t` as a JAX array: its own if it has one; a NumPy value is put on JAX's default device
    (no copy on the CPU where the buffer is aligned as XLA needs)."""
    import jax

    value = _value(t, "__jax_array__")
    return value if is_device_array(value) else jax.device_put(value)


def _jax_array_protocol(t: Tensor):
    """JAX's protocol: `jnp.sum(t)` reads a concrete tensor as a JAX array. JAX's operators are
    not offered it, so `jax_array + t` comes to `Tensor.__radd__` and is a tensor, traced or not,
    as `numpy_array + t` is."""
    if sys._getframe(1).f_globals.get("__name__") == "jax._src.numpy.array_methods":
        raise AttributeError("__jax_array__")
    return lambda: jax_array(t)


def dlpack(t: Tensor, **kwargs):
    """DLPack, `t.__dlpack__(**kwargs)`: the value's own capsule, uncopied, unless it is a
    read-only NumPy buffer and the consumer cannot be told so (DLPack before 1.0): then a
    capsule of a copy."""
    value = _value(t, "__dlpack__")
    told = tuple(kwargs.get("max_version") or (0,)) >= (1, 0)
    if isinstance(value, np.ndarray) and not value.flags.writeable and not told:
        value = value.copy()
    return value.__dlpack__(**kwargs)


def dlpack_device(t: Tensor) -> tuple[int, int]:
    value = _value(t, "__dlpack_device__")
    return value.__dlpack_device__() if is_device_array(value) else (_KDL_CPU, 0)


Tensor.__jax_array__ = property(_jax_array_protocol)  # type: ignore[attr-defined]
Tensor.__dlpack__ = dlpack  # type: ignore[attr-defined]
Tensor.__dlpack_device__ = dlpack_device  # type: ignore[attr-defined]


def from_dlpack(x) -> Tensor:
    """A tensor sharing memory with `x`, any object with `__dlpack__` (a PyTorch, JAX or NumPy
    array; a CuPy one with JAX installed): no copy. Host memory becomes a NumPy-backed tensor;
    device memory a JAX array on its device. The dtype must be one of remat's.

    >>> import numpy as np, remat as rm
    >>> a = np.arange(3.0, dtype=np.float32)
    >>> t = rm.from_dlpack(a)
    >>> a[0] = 7.0  # the same memory
    >>> t
    Tensor([7., 1., 2.], dtype=float32)
    """
    if isinstance(x, Tensor):
        return x
    if not hasattr(x, "__dlpack__") or not hasattr(x, "__dlpack_device__"):
        raise ArgumentTypeError(
            f"from_dlpack: x is a {type(x).__name__}, which has no __dlpack__ and __dlpack_device__; "
            "pass an array of a library that speaks DLPack (PyTorch, JAX, NumPy, CuPy), or use rm.asarray"
        )
    if is_device_array(x):
        value = x  # stays on its device
    elif x.__dlpack_device__()[0] == _KDL_CPU:
        value = np.from_dlpack(x)
    else:
        value = _device_value(x, x.__dlpack_device__()[0])
    if not dtypes.is_supported(value.dtype):
        raise DTypeError(f"from_dlpack: x has dtype {value.dtype}, which remat does not take (it takes "
                         f"{dtypes.SUPPORTED_NAMES}); convert it first in its own library")
    return Tensor._concrete(value)


def _device_value(x, device: int):
    try:
        import jax
    except ImportError:
        raise ArgumentTypeError(
            f"from_dlpack: x lives on a device (DLPack device type {device}), and remat keeps device "
            "memory in JAX arrays, but JAX is not installed; install jax for that device, or move x "
            "to the host first"
        ) from None
    return jax.dlpack.from_dlpack(x)


# ---------------------------------------------------------------- tensors as JAX pytrees


def _flatten(t: Tensor):
    return (_value(t, "JAX"),), t._vaxes


def _unflatten(vaxes: tuple, children):
    # JAX rebuilds a pytree from its traced arrays inside its transformations (and from other
    # placeholders): those stay as they are; concrete arrays of remat's dtypes become tensors.
    (child,) = children
    concrete = isinstance(child, np.ndarray) or is_device_array(child) and _is_concrete_jax(child)
    if not concrete or not dtypes.is_supported(child.dtype):
        return child
    sizes = tuple(k for _, k in vaxes)
    return Tensor._concrete(child, vaxes if tuple(child.shape[: len(sizes)]) == sizes else ())


def _is_concrete_jax(x) -> bool:
    import jax

    return not isinstance(x, jax.core.Tracer)


def _register(jax_module) -> None:
    jax_module.tree_util.register_pytree_node(Tensor, _flatten, _unflatten)


class _RegisterAfterImport(importlib.abc.MetaPathFinder):
    """Finds `jax` as the other finders do, with a loader that registers Tensor as a pytree once
    JAX has been imported: remat does not import JAX itself (it is optional and slow to import)."""

    def __init__(self):
        self._finding = False

    def find_spec(self, fullname, path, target=None):
        if fullname != "jax" or self._finding:
            return None
        self._finding = True
        try:
            spec = importlib.util.find_spec(fullname)  # every finder but this one, which declines
        finally:
            self._finding = False
        if spec is not None and spec.loader is not None:
            spec.loader = _RegisteringLoader(spec.loader)
        return spec


class _RegisteringLoader(importlib.abc.Loader):
    """JAX's own loader, registering Tensor after it has run JAX's package."""

    def __init__(self, loader):
        self._loader = loader

    def __getattr__(self, name):  # resource readers and the like: the real loader's
        return getattr(self._loader, name)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        _register(module)


def register_with_jax() -> None:
    """Make tensors JAX pytrees now if JAX is imported, else as soon as it is."""
    if "jax" in sys.modules:
        _register(sys.modules["jax"])
    elif not any(isinstance(f, _RegisterAfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _RegisterAfterImport())


register_with_jax()
