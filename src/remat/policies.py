"""Checkpoint policies: which values of a checkpointed body are saved instead of recomputed.

A policy is asked once per node of the body, `policy(op, inputs, outputs, params) -> bool`
(`op` is the op's name, `inputs`/`outputs` its Vars with `shape` and `dtype`, `params` a dict);
True saves the node's outputs. Saved values become extra outputs of the forward block (its
residuals), and the gradient reuses them instead of recomputing their producers. Only values
the gradient needs are saved, whatever the policy says.

The built-in policies are frozen dataclasses: hashable, comparable and printed by name.

>>> import remat as rm
>>> rm.policies.save_only_these_names("attn", "mlp")
save_only_these_names('attn', 'mlp')
>>> rm.policies.dots_saveable("matmul", (), (), {})
True
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from remat.core import OPS
from remat.errors import ArgumentTypeError, ArgumentValueError


@dataclasses.dataclass(frozen=True)
class _Named:
    """A built-in policy; its repr is the name a user writes (`rm.policies.<name>`)."""

    def __repr__(self) -> str:
        return type(self).name

    __str__ = __repr__


@dataclasses.dataclass(frozen=True, repr=False)
class NothingSaveable(_Named):
    """Save nothing: recompute the whole body (the default, the least memory)."""

    name = "nothing_saveable"

    def __call__(self, op, inputs, outputs, params) -> bool:
        return False


@dataclasses.dataclass(frozen=True, repr=False)
class EverythingSaveable(_Named):
    """Save every value the gradient needs: no recomputation (as without a checkpoint)."""

    name = "everything_saveable"

    def __call__(self, op, inputs, outputs, params) -> bool:
        return True


@dataclasses.dataclass(frozen=True, repr=False)
class DotsSaveable(_Named):
    """Save matrix products (matmul, tensordot); recompute the cheap elementwise ops."""

    name = "dots_saveable"

    def __call__(self, op, inputs, outputs, params) -> bool:
        return _is_dot(op)


@dataclasses.dataclass(frozen=True, repr=False)
class DotsWithNoBatchDimsSaveable(_Named):
    """Save matrix products without batch dimensions: those with a matrix (or vector) operand,
    such as `h @ w` for any leading shape of `h`, not a batched `q @ k.T` of attention."""

    name = "dots_with_no_batch_dims_saveable"

    def __call__(self, op, inputs, outputs, params) -> bool:
        # JAX's dot_general has batch dimensions when both operands carry leading axes.
        return _is_dot(op) and min(len(v.shape) for v in inputs) <= 2


@dataclasses.dataclass(frozen=True, repr=False)
class SaveFromBothPolicies(_Named):
    """Save what either of two policies saves."""

    first: Callable
    second: Callable
    name = "save_from_both_policies"

    def __call__(self, op, inputs, outputs, params) -> bool:
        return _answer(self.first, op, inputs, outputs, params) or _answer(self.second, op, inputs, outputs, params)

    def __repr__(self) -> str:
        return f"{self.name}({self.first!r}, {self.second!r})"

    def __str__(self) -> str:  # as graphs print params: no spaces
        return f"{self.name}({self.first},{self.second})"


class _ByNames(_Named):
    """A policy over the names `rm.checkpoint_name` gives; it prints as it is written."""

    names: tuple[str, ...]

    def __repr__(self) -> str:
        return f"{self.name}({', '.join(map(repr, self.names))})"

    def __str__(self) -> str:  # as graphs print params: no spaces
        return f"{self.name}({','.join(map(repr, self.names))})"


@dataclasses.dataclass(frozen=True, repr=False)
class SaveOnlyTheseNames(_ByNames):
    """Save the values tagged by `rm.checkpoint_name` with one of `names`."""

    names: tuple[str, ...]
    name = "save_only_these_names"

    def __call__(self, op, inputs, outputs, params) -> bool:
        return op == "checkpoint_name" and params["name"] in self.names


@dataclasses.dataclass(frozen=True, repr=False)
class SaveAnyNamesButThese(_ByNames):
    """Save every value tagged by `rm.checkpoint_name` except those with one of `names`."""

    names: tuple[str, ...]
    name = "save_any_names_but_these"

    def __call__(self, op, inputs, outputs, params) -> bool:
        return op == "checkpoint_name" and params["name"] not in self.names


nothing_saveable = NothingSaveable()
everything_saveable = EverythingSaveable()
dots_saveable = DotsSaveable()
dots_with_no_batch_dims_saveable = DotsWithNoBatchDimsSaveable()


def _is_dot(op: str) -> bool:
    """A matrix product (`Op.traits`): tensordot and einsum are composed from matmul, so theirs are too."""
    found = OPS.get(op)
    return found is not None and "dot" in found.traits


class UnusedNameWarning(UserWarning):
    """A name policy (`save_only_these_names`, `save_any_names_but_these`) names a value that
    the checkpoint body does not have: likely a typo, and the policy cannot do what it says."""


def _names(what: str, names: tuple) -> tuple[str, ...]:
    for n in names:
        if not isinstance(n, str):
            raise ArgumentTypeError(f"{what}: names must be str, got {type(n).__name__} ({n!r})")
    return tuple(names)


def save_only_these_names(*names: str) -> SaveOnlyTheseNames:
    """A policy saving only the values named (with `rm.checkpoint_name`) in `names`.

    >>> save_only_these_names("a") == save_only_these_names("a")
    True
    """
    return SaveOnlyTheseNames(_names("save_only_these_names", names))


def save_any_names_but_these(*names: str) -> SaveAnyNamesButThese:
    """A policy saving every named value except those named in `names`."""
    return SaveAnyNamesButThese(_names("save_any_names_but_these", names))


def save_from_both_policies(first, second) -> SaveFromBothPolicies:
    """A policy saving what `first` or `second` saves (each a policy, as `policy=` takes).

    >>> save_from_both_policies(dots_saveable, save_only_these_names("attn"))
    save_from_both_policies(dots_saveable, save_only_these_names('attn'))
    """
    for which, p in (("first", first), ("second", second)):
        if p is None:
            raise ArgumentTypeError(f"save_from_both_policies: {which} is None; pass a policy such as "
                                    "rm.policies.nothing_saveable")
        resolve(p, f"save_from_both_policies: {which}")
    return SaveFromBothPolicies(first, second)


_BUILTIN = {p.name: p for p in (nothing_saveable, everything_saveable, dots_saveable,
                                dots_with_no_batch_dims_saveable)}
_FACTORIES = (save_only_these_names, save_any_names_but_these, save_from_both_policies)


def resolve(policy, where: str = "checkpoint") -> Callable:
    """The policy to apply for `policy=` (None is `nothing_saveable`), or an error naming it."""
    if policy is None:
        return nothing_saveable
    if isinstance(policy, str):
        hint = f"rm.policies.{policy}" if policy in _BUILTIN else "one of rm.policies"
        raise ArgumentValueError(f"{where}: policy={policy!r} is a string; pass {hint} instead")
    if any(policy is f for f in _FACTORIES):  # `is`: a stray tensor's == would be an op
        raise ArgumentTypeError(
            f"{where}: policy=rm.policies.{policy.__name__} is the policy factory, not a policy; call it "
            f"with the names of the values to save: policy=rm.policies.{policy.__name__}('name', ...)"
        )
    if not callable(policy):
        raise ArgumentTypeError(
            f"{where}: policy must be one of rm.policies or a callable "
            f"(op, inputs, outputs, params) -> bool, got {type(policy).__name__}"
        )
    try:
        hash(policy)
    except TypeError:
        raise ArgumentTypeError(
            f"{where}: policy must be hashable (compiled programs are cached by it), "
            f"got an unhashable {type(policy).__name__}"
        ) from None
    return policy


def decide(policy: Callable, node) -> bool:
    """Whether `policy` saves `node`'s outputs; a policy must answer with a bool."""
    return _answer(policy, node.op, node.inputs, node.outputs, node.params)


def _answer(policy: Callable, op: str, inputs, outputs, params) -> bool:
    answer = policy(op, inputs, outputs, params)
    if not isinstance(answer, bool) and type(answer).__name__ != "bool_":
        raise ArgumentTypeError(
            f"checkpoint: policy {policy!r} returned {type(answer).__name__} for {op}; "
            "a policy must return True (save) or False (recompute)"
        )
    return bool(answer)


def names_in(policy) -> list:
    """The name policies `policy` is made of (itself, or the parts of save_from_both_policies)."""
    if isinstance(policy, SaveFromBothPolicies):
        return names_in(policy.first) + names_in(policy.second)
    return [policy] if isinstance(policy, (SaveOnlyTheseNames, SaveAnyNamesButThese)) else []


__all__ = [
    "nothing_saveable", "everything_saveable", "dots_saveable", "dots_with_no_batch_dims_saveable",
    "save_only_these_names", "save_any_names_but_these", "save_from_both_policies", "UnusedNameWarning",
]
