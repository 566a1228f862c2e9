"""Jacobians and Hessians as compositions: `jacfwd` is `vmap` of `jvp` over the columns of the
identity, `jacrev` is `vmap` of the function `vjp` returns over its rows, and `hessian` is
`jacfwd(jacrev(f))` (forward over reverse), as in JAX.

The result has JAX's layout: for each output leaf, the structure of the differentiated
arguments, each leaf of shape `output.shape + argument.shape`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from remat import argcheck, dtypes, tree
from remat.autodiff import check_aux_pair
from remat.errors import ArgumentTypeError, DTypeError, callable_name
from remat.forward import jvp
from remat.gradients import vjp  # plans the regions of rm.memory_budget, as rm.grad does
from remat.ops.shape import reshape
from remat.tensor import Tensor, is_tensor_like
from remat.trace import argument, asarray
from remat.vectorize import vmap


def jacfwd(fn: Callable, argnums: int | tuple[int, ...] = 0, has_aux: bool = False) -> Callable:
    """The Jacobian of `fn` with respect to the arguments `argnums`, column by column in
    forward mode (one `jvp` per input element, vectorized): best for few inputs, many outputs.

    >>> import remat as rm
    >>> rm.jacfwd(lambda x: x * x)(rm.asarray([1.0, 2.0]))
    Tensor([[2., 0.],
            [0., 4.]], dtype=float32)
    """
    return _jacobian(fn, argnums, has_aux, "jacfwd", _columns)


def jacrev(fn: Callable, argnums: int | tuple[int, ...] = 0, has_aux: bool = False) -> Callable:
    """The Jacobian of `fn` with respect to the arguments `argnums`, row by row in reverse mode
    (the function `vjp` returns, vectorized over the rows): best for many inputs, few outputs.

    >>> import remat as rm
    >>> rm.jacrev(lambda x: rm.sum(x * x))(rm.asarray([1.0, 2.0]))
    Tensor([2., 4.], dtype=float32)
    """
    return _jacobian(fn, argnums, has_aux, "jacrev", _rows)


def hessian(fn: Callable, argnums: int | tuple[int, ...] = 0, has_aux: bool = False) -> Callable:
    """The Hessian of a scalar `fn`: `jacfwd(jacrev(fn))`, forward over reverse.

    >>> import remat as rm
    >>> rm.hessian(lambda x: rm.sum(x ** 3.0))(rm.asarray([1.0, 2.0]))
    Tensor([[ 6.,  0.],
            [ 0., 12.]], dtype=float32)
    """
    argcheck.check_callable(fn, "hessian")
    return jacfwd(jacrev(fn, argnums, has_aux), argnums, has_aux)


def _jacobian(fn: Callable, argnums, has_aux: bool, where: str, compute: Callable) -> Callable:
    argcheck.check_callable(fn, where)
    requested = argcheck.argnums(argnums, where, fn)

    @functools.wraps(fn, updated=())
    def wrapped(*args):
        nums = argcheck.resolve(requested, len(args), where, "argnums", argnums, fn)
        diff = tuple(args[i] for i in nums)
        _check_inputs(where, diff, [f"argument {i}" for i in nums])

        def partial(*xs):
            full = list(args)
            for i, x in zip(nums, xs):
                full[i] = x

            out = fn(*full)
            out, aux = check_aux_pair(out, where, fn) if has_aux else (out, None)
            _check_outputs(where, fn, out)
            return out, aux

        jac, aux = compute(partial, diff, argcheck.is_int(argnums))
        return (jac, aux) if has_aux else jac

    return wrapped


def _check_inputs(where: str, diff: tuple, names: list[str]) -> None:
    for arg, name in zip(diff, names):
        for leaf, path in zip(tree.leaves(arg), argcheck.leaf_paths(arg, name)):
            if not is_tensor_like(leaf):
                raise ArgumentTypeError(f"{where}: {path} is {argcheck.describe(leaf)}, not a tensor; mark it "
                                        "out of argnums or pass it through a closure")
            if not dtypes.is_float(asarray(leaf).dtype):
                raise DTypeError(f"{where}: {path} has dtype {asarray(leaf).dtype}; only float inputs have "
                                 "derivatives (leave it out of argnums)")


def _check_outputs(where: str, fn, out) -> None:
    for leaf, path in zip(tree.leaves(out), argcheck.leaf_paths(out, "output")):
        if not isinstance(leaf, Tensor) and not is_tensor_like(leaf):
            raise ArgumentTypeError(f"{where}: {callable_name(fn)} returned {argcheck.describe(leaf)} as {path}; "
                                    "a Jacobian needs a pytree of float tensors")
        if not dtypes.is_float(asarray(leaf).dtype):
            raise DTypeError(f"{where}: {callable_name(fn)} returned {path} of dtype {asarray(leaf).dtype}; only "
                             "float outputs have derivatives")


def _basis(leaves: list[Tensor]) -> list[Tensor]:
    """The identity over all the leaves' elements, split per leaf: leaf i gets shape
    (total, *leaf.shape), each row a unit vector in one element."""
    total = sum(x.size for x in leaves)
    out, at = [], 0
    for x in leaves:
        rows = np.zeros((total, x.size), x.dtype)
        rows[at : at + x.size] = np.eye(x.size, dtype=x.dtype)
        out.append(asarray(rows.reshape((total, *x.shape))))
        at += x.size
    return out


def _columns(partial: Callable, diff: tuple, single: bool):
    """jacfwd: the tangents of the outputs along every input element, stacked last. With one
    argument (`single`), its structure is the Jacobian's inner one; else the tuple of them."""

    leaves, in_tree = tree.flatten(diff[0] if single else diff)
    leaves = [argument(x) for x in leaves]
    basis = _basis(leaves)

    def column(*t_leaves):
        t = tree.unflatten(in_tree, list(t_leaves))
        _, tangent, _ = jvp(partial, diff, (t,) if single else t, has_aux=True)
        return tangent

    out, aux = partial(*diff)
    cols = vmap(column, out_axes=-1)(*basis)  # each output leaf: (*out.shape, total)
    return _split(cols, leaves, in_tree), aux


def _rows(partial: Callable, diff: tuple, single: bool):
    """jacrev: the cotangents of the inputs for every output element, stacked first."""

    out, back, aux = vjp(partial, *diff, has_aux=True)
    out_leaves, out_tree = tree.flatten(out)
    out_leaves = [asarray(o) for o in out_leaves]
    basis = _basis(out_leaves)
    rows = vmap(lambda *cts: back(tree.unflatten(out_tree, list(cts))))(*basis)  # (total_out, *x.shape)
    rows = rows[0] if single else rows
    per_output = []
    at = 0
    for o in out_leaves:
        per_output.append(tree.map(lambda r, o=o, at=at: _reshape_rows(r, o, at), rows))
        at += o.size
    return tree.unflatten(out_tree, per_output), aux


def _reshape_rows(r: Tensor, o: Tensor, at: int) -> Tensor:
    return reshape(r[at : at + o.size], (*o.shape, *r.shape[1:]))


def _split(cols, leaves: list[Tensor], in_tree):
    """Each output leaf `(*out.shape, total)` as the inputs' structure of `(*out.shape, *x.shape)`."""
    def per_output(c: Tensor):
        parts, at = [], 0
        for x in leaves:
            part = c[..., at : at + x.size]
            parts.append(reshape(part, (*c.shape[:-1], *x.shape)))
            at += x.size
        return tree.unflatten(in_tree, parts)

    return tree.map(per_output, cols)

