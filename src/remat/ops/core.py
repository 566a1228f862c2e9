"""What an op is: a name, a shape/dtype rule and a VJP rule, declared together once.

Backends never compute shapes: they look the op up by name in their own table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np


class Aval(NamedTuple):
    """The abstract value of a tensor: what the shape rule sees."""

    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)


class _NotDifferentiable:
    def __repr__(self) -> str:
        return "NOT_DIFFERENTIABLE"


#: The VJP of an op whose outputs carry no gradient (comparisons, argmax, integer results).
NOT_DIFFERENTIABLE: Any = _NotDifferentiable()


class Op:
    """A primitive. `rule(*avals, **params)` gives the output aval(s); `vjp(g, *inputs, out=...,
    **params)` gives one cotangent per input (None for none), built from differentiable ops."""

    def __init__(self, name: str, rule: Callable, vjp: Callable | Any, multiple_results: bool):
        self.name = name
        self.rule = rule
        self.vjp = vjp
        self.multiple_results = multiple_results

    @property
    def differentiable(self) -> bool:
        return self.vjp is not NOT_DIFFERENTIABLE

    def abstract_eval(self, avals, params: dict) -> list[Aval]:
        out = self.rule(*(Aval(tuple(s), np.dtype(d)) for s, d in avals), **params)
        outs = list(out) if self.multiple_results else [out]
        return [Aval(tuple(int(n) for n in a.shape), np.dtype(a.dtype)) for a in outs]

    def __repr__(self) -> str:
        return f"Op({self.name})"


OPS: dict[str, Op] = {}


def declare(name: str, rule: Callable, vjp: Callable | Any, multiple_results: bool = False) -> Op:
    """Register a primitive. Every primitive of remat is declared through this one function."""
    if name in OPS:
        raise ValueError(f"op {name!r} is declared twice")
    op = Op(name, rule, vjp, multiple_results)
    OPS[name] = op
    return op
