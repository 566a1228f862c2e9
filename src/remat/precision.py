"""The precision of matrix products on the XLA backend, set per call or for a scope, as JAX's
`jax.default_matmul_precision` sets it.

A program's precision is, first found: `rm.jit(..., precision=...)`; the innermost
`with rm.default_matmul_precision(...)` on this thread (or asyncio task); JAX's own setting
(`jax.default_matmul_precision`, `jax.config.update("jax_default_matmul_precision", ...)` or the
`JAX_DEFAULT_MATMUL_PRECISION` environment variable), which is how to set it for a process.
When none is set, JAX's default applies: float32 products in float32 on the CPU, TF32 tensor
cores on recent NVIDIA GPUs, bfloat16 passes on TPUs, exactly as `jax.jit` computes them.

Every op that lowers to a dot (`matmul`, and `einsum`, `tensordot`, `outer`, which are composed
of it, in loops and checkpoints alike) is traced inside JAX's setting, so the precision reaches
each one. The NumPy backend always computes in the operands' dtype and ignores it.
"""

from __future__ import annotations

import sys
from contextvars import ContextVar, Token

from remat.errors import ArgumentTypeError, ArgumentValueError

# JAX's names: the aliases name what the product is computed in on a GPU.
_NAMES = {"default": "default", "high": "high", "highest": "highest",
          "bfloat16": "default", "tensorfloat32": "high", "float32": "highest"}
_ACCEPTED = ("'default', 'high', 'highest' (or JAX's aliases 'bfloat16', 'tensorfloat32', 'float32'), "
             "a jax.lax.Precision, or None (the global setting)")

# Per thread and asyncio task, as JAX's own context manager: one thread's scope never changes
# what another thread compiles.
_SCOPED: ContextVar[str | None] = ContextVar("remat_matmul_precision", default=None)


def canonical(precision, where: str) -> str | None:
    """`precision` as one of "default", "high", "highest" (None stays None), or an error naming
    `where` and listing the accepted values."""
    if precision is None:
        return None
    if isinstance(precision, str):
        if precision in _NAMES:
            return _NAMES[precision]
        hint = f"; did you mean {precision.lower()!r}?" if precision.lower() in _NAMES else ""
        raise ArgumentValueError(f"{where}: precision={precision!r} is not a matmul precision; use "
                                 f"{_ACCEPTED}{hint}")
    if _is_lax_precision(precision):
        return precision.name.lower()
    raise ArgumentTypeError(f"{where}: precision must be {_ACCEPTED}, got {type(precision).__name__} "
                            f"{precision!r}")


def _is_lax_precision(value) -> bool:
    if "jax" not in sys.modules:  # then no jax.lax.Precision exists to be passed
        return False
    from jax import lax

    return isinstance(value, lax.Precision)


def effective(precision: str | None) -> str | None:
    """The precision an XLA program lowers with, given the per-call one (canonical or None):
    it keys the compiled programs, so a scope asking for another precision compiles anew."""
    if precision is not None:
        return precision
    scoped = _SCOPED.get()
    if scoped is not None:
        return scoped
    import jax

    setting = jax.config.jax_default_matmul_precision  # also a DotAlgorithmPreset name, kept as it is
    return _NAMES.get(setting, setting)


def lowering(precision: str | None):
    """The scope in which to trace a program for JAX, so that every dot in it (matmul's
    `precision=None` reads JAX's setting) gets `precision`; None: JAX's default, whatever is
    set around the call that lowers it later."""
    import jax

    return jax.default_matmul_precision(precision)


class default_matmul_precision:
    """Within `with rm.default_matmul_precision(p):`, programs that `rm.jit(..., backend="xla")`
    compiles on this thread compute matrix products at precision `p`: "highest" (float32
    products in float32), "high", "default", JAX's aliases "float32", "tensorfloat32",
    "bfloat16", a `jax.lax.Precision`, or None (back to JAX's own setting). A jitted function
    given `precision=` keeps its own. The NumPy backend is always exact and ignores it. For a
    whole process, set JAX's: `jax.config.update("jax_default_matmul_precision", "highest")`.

    >>> import remat as rm
    >>> f = rm.jit(lambda a, b: a @ b, backend="xla")
    >>> with rm.default_matmul_precision("highest"):
    ...     "precision = [HIGHEST, HIGHEST]" in f.lower(rm.ones((2, 2)), rm.ones((2, 2))).as_text()
    True
    """

    def __init__(self, precision) -> None:
        self.precision = canonical(precision, "default_matmul_precision")
        self._tokens: list[Token] = []  # one per enter: the same object may be entered again inside

    def __enter__(self) -> None:
        self._tokens.append(_SCOPED.set(self.precision))

    def __exit__(self, *exc) -> None:
        _SCOPED.reset(self._tokens.pop())
