"""`memory_budget=` and `strategy=`, checked and parsed once, where the gradient is made.

A budget is what the whole step may hold at once: its inputs and constants (`peak.base_bytes`,
live whatever the plan) plus the arrays it allocates (`peak.step_peak`, the figure
`rm.memory.profile(...).peak_bytes` reports). It is written as

- bytes: an int (`300_000_000`) or a string with a unit, SI or IEC (`"300MB"`, `"300MiB"`,
  `"1.5 GB"`, `"512KiB"`, `"2 GiB"`, `"1000 B"`), or
- a fraction of the step's activation memory: a float in (0, 1] or a percentage string
  (`0.5`, `"50%"`), meaning `base + fraction × activation`, where activation is what the step
  allocates without checkpoints. `1.0` is the unplanned step; `0.25` asks for a quarter of it.

>>> parse_budget("300MiB"), parse_budget("1.5GB"), parse_budget(0.5), parse_budget("50%")
(Budget(bytes=314572800), Budget(bytes=1500000000), Budget(fraction=0.5), Budget(fraction=0.5))
>>> Budget(fraction=0.5).resolve(base=1000, activation=600)
1300
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from remat.errors import ArgumentTypeError, ArgumentValueError

STRATEGIES = ("auto", "sqrt", "chain", "milp")

_UNITS = {"b": 1, "byte": 1, "bytes": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_TEXT = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)(?:[eE]([+-]?\d+))?\s*([A-Za-z]*|%)\s*$")
_FORMS = "an int of bytes, a string such as '300MiB' or '1.5GB', or a fraction in (0, 1] such as 0.5"


@dataclass(frozen=True)
class Budget:
    """A parsed budget: absolute `bytes`, or a `fraction` of the activation memory."""

    bytes: int | None = None
    fraction: float | None = None

    def resolve(self, base: int, activation: int) -> int:
        """The budget in bytes for a step whose inputs and constants take `base` bytes and which
        allocates `activation` bytes without checkpoints."""
        if self.bytes is not None:
            return self.bytes
        return base + math.floor(self.fraction * activation)

    def __repr__(self) -> str:
        return f"Budget(bytes={self.bytes})" if self.bytes is not None else f"Budget(fraction={self.fraction:g})"


def parse_budget(value, where: str = "grad", name: str = "memory_budget") -> Budget:
    """`value` as a Budget, or an error naming `where`, the parameter `name`, the value, and the
    forms it takes."""
    at = f"{where}: {name}="
    if isinstance(value, (bool, np.bool_)):
        raise ArgumentTypeError(f"{at}{value!r} is a bool; pass {_FORMS}")
    if isinstance(value, (int, np.integer)):
        return _bytes(int(value), f"{at}{int(value)!r}")
    if isinstance(value, (float, np.floating)):
        return _fraction(float(value), f"{at}{float(value)!r}")
    if isinstance(value, str):
        return _text(value, f"{at}{value!r}")
    raise ArgumentTypeError(f"{at}{_short(value)} has type {type(value).__name__}; pass {_FORMS}")


def _bytes(n: int, said: str) -> Budget:
    if n <= 0:
        raise ArgumentValueError(f"{said} is not a positive number of bytes; pass {_FORMS}")
    return Budget(bytes=n)


def _fraction(f: float, said: str) -> Budget:
    if math.isnan(f):
        raise ArgumentValueError(f"{said} is not a number; pass {_FORMS}")
    if f <= 0:
        raise ArgumentValueError(f"{said} is not positive; a fraction of the activation memory must be in "
                                 "(0, 1], e.g. 0.5")
    if f > 1:
        hint = f"the int {int(f)}" if f.is_integer() and f < 2**63 else "a string such as '1.5GB'"
        raise ArgumentValueError(f"{said} is a float above 1; a float is a fraction of the activation memory, "
                                 f"in (0, 1]; for bytes pass {hint}")
    return Budget(fraction=f)


def _text(text: str, said: str) -> Budget:
    m = _TEXT.match(text)
    unit = m.group(3).lower() if m else ""
    if not m or unit not in (*_UNITS, "%", ""):
        raise ArgumentValueError(f"{said} is not an amount of memory; write a number and a unit (B, KB, MB, GB, "
                                 "TB or KiB, MiB, GiB, TiB), e.g. '300MiB', or a percentage such as '50%'")
    number = float(m.group(1) + (f"e{m.group(2)}" if m.group(2) else ""))
    if unit == "%":
        if not 0 < number <= 100:
            raise ArgumentValueError(f"{said} is not a percentage in (0, 100]; e.g. '50%'")
        return Budget(fraction=number / 100)
    if not m.group(3):
        raise ArgumentValueError(f"{said} has no unit; write e.g. '{m.group(1)}MiB'"
                                 + (f", or pass the int {int(number)} for bytes" if number.is_integer() else ""))
    if math.isinf(number * _UNITS[unit]):
        raise ArgumentValueError(f"{said} is too large to be an amount of memory")
    return _bytes(math.floor(number * _UNITS[unit]), said)


def parse_cap(value, where: str) -> int:
    """`memory_cap=` in bytes: written as a budget's bytes are, never as a fraction (a cap holds
    while the program runs, where there is no unplanned peak to take a fraction of).

    >>> parse_cap("200MiB", "jit"), parse_cap(4096, "jit")
    (209715200, 4096)
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer, float, np.floating, str)):
        raise ArgumentTypeError(f"{where}: memory_cap={_short(value)} has type {type(value).__name__}; pass an int "
                                "of bytes or a string such as '200MiB'")
    if isinstance(value, (float, np.floating)) or isinstance(value, str) and value.strip().endswith("%"):
        raise ArgumentValueError(f"{where}: memory_cap={value!r} is a fraction; a cap is bytes, an int or a string "
                                 "such as '200MiB': it holds while the program runs, where there is no unplanned "
                                 "peak to take a fraction of")
    return parse_budget(value, where, "memory_cap").bytes


def parse_strategy(value, where: str = "grad") -> str:
    """`strategy=` as one of STRATEGIES (None is "auto")."""
    choices = ", ".join(map(repr, STRATEGIES))
    if value is None:
        return "auto"
    if not isinstance(value, str):
        raise ArgumentTypeError(f"{where}: strategy={_short(value)} has type {type(value).__name__}; pass None or "
                                f"one of {choices}")
    if value not in STRATEGIES:
        raise ArgumentValueError(f"{where}: strategy={value!r} is not a planner strategy; pass None (the cheapest "
                                 f"plan that fits) or one of {choices}")
    return value


def check(memory_budget, strategy, where: str = "grad") -> tuple[Budget | None, str]:
    """Both settings checked where the gradient is made, so a bad one fails at once. A strategy
    without a budget has nothing to plan for: that is a mistake too."""
    name = parse_strategy(strategy, where)
    if memory_budget is None:
        if strategy is not None:
            raise ArgumentValueError(f"{where}: strategy={strategy!r} given without memory_budget; a strategy "
                                     "plans for a budget: pass memory_budget= too (e.g. memory_budget=0.5)")
        return None, name
    return parse_budget(memory_budget, where), name


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


__all__ = ["Budget", "STRATEGIES", "parse_budget", "parse_strategy", "check", "misplaced"]


def misplaced(where: str, memory_budget, strategy) -> None:
    """`memory_budget`/`strategy` given to a transformation that makes no gradient: say where
    they belong rather than ignore them."""
    given = [k for k, v in (("memory_budget", memory_budget), ("strategy", strategy)) if v is not None]
    if given:
        names = " and ".join(given)
        raise ArgumentTypeError(
            f"{where}: {names} belongs on the gradient, not here; a memory budget plans the checkpoints "
            f"of a gradient step: pass it to rm.grad, rm.value_and_grad or rm.vjp, e.g. "
            f"rm.jit(rm.grad(loss, {given[0]}=...))")
