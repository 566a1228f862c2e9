"""Issue 11: the names a NumPy or JAX user types first, against NumPy and JAX.

One table row per name (or variant): its values, dtype and shape eagerly and inside `rm.jit` on
both backends against jax.numpy (the dtype against JAX's default 32-bit mode, the values in
float64), and its gradient against `jax.grad` in float64, eagerly and jitted on both backends.
Then what a table cannot say: orders and ties of sort, integer division by zero, functional
updates with repeated indices, boolean masks, iteration, and the distributions of rm.random.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from scipy import stats  # noqa: E402

import remat as rm  # noqa: E402

MODES = ["eager", "numpy", "xla"]


def normal(rng, shape):
    return rng.normal(size=shape)


def positive(rng, shape):
    return rng.uniform(0.5, 2.0, size=shape)


def spread(rng, shape):
    """Values at least 0.1 apart: no ties near the sort order or a maximum."""
    n = int(np.prod(shape))
    return rng.permutation(np.linspace(-2.0, 2.0, n) + 0.1 * rng.uniform(size=n)).reshape(shape)


def with_zeros(rng, shape):
    x = rng.normal(size=shape)
    x.reshape(-1)[::3] = 0.0
    return x


def unit(rng, shape):
    return rng.uniform(-0.9, 0.9, size=shape)


def probability(rng, shape):
    return rng.uniform(0.05, 0.95, size=shape)


def nonfinite(rng, shape):
    """Normal values with nan, inf and -inf mixed in."""
    x = rng.normal(size=shape)
    flat = x.reshape(-1)
    flat[::3], flat[1::5], flat[2::7] = np.nan, np.inf, -np.inf
    return x


@dataclasses.dataclass(frozen=True)
class Row:
    """`fn` (remat) and `ref` (jax.numpy) take the same float arrays, one per shape."""

    id: str
    fn: Callable
    ref: Callable
    shapes: tuple
    domain: Callable = normal
    grad: bool = True
    tol: float = 1e-9  # float64, relative to the largest value

    def sample(self, dtype="float64", seed=0) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        return [np.asarray(self.domain(rng, s), dtype) for s in self.shapes]


def R(id, fn, ref, *shapes, **kw) -> Row:
    return Row(id, fn, ref, shapes, **kw)


I3 = np.array([2, 0, 1])
HALVES = np.array([-1.5, -0.5, 0.5, 2.5], np.float32)  # to even: -2, -0, 0, 2
I32 = np.array([[2, 0], [1, -1], [3, 3]])
NANS = np.array([np.nan, 1.0, np.nan, -0.5], np.float32)
MASK = np.array([[True, False, True, True], [False, False, True, False], [True, True, False, True]])

ROWS = [
    # ---- functions
    R("einsum-matmul", lambda a, b: rm.einsum("ij,jk->ik", a, b), lambda a, b: jnp.einsum("ij,jk->ik", a, b),
      (3, 4), (4, 2)),
    R("einsum-batch-transposed", lambda a, b: rm.einsum("bij,bkj->bki", a, b),
      lambda a, b: jnp.einsum("bij,bkj->bki", a, b), (2, 3, 4), (2, 5, 4)),
    R("einsum-trace", lambda a: rm.einsum("ii", a), lambda a: jnp.einsum("ii", a), (4, 4)),
    R("einsum-implicit", lambda a, b: rm.einsum("ba,ca", a, b), lambda a, b: jnp.einsum("ba,ca", a, b),
      (2, 3), (4, 3)),
    R("einsum-ellipsis-broadcast", lambda a, b: rm.einsum("...ij,...jk->...ik", a, b),
      lambda a, b: jnp.einsum("...ij,...jk->...ik", a, b), (3, 1, 2, 4), (5, 4, 2)),
    R("einsum-chain", lambda a, b, c: rm.einsum("ij,jk,kl->li", a, b, c),
      lambda a, b, c: jnp.einsum("ij,jk,kl->li", a, b, c), (2, 3), (3, 4), (4, 5)),
    R("einsum-sum-out", lambda a: rm.einsum("ijk->j", a), lambda a: jnp.einsum("ijk->j", a), (2, 3, 4)),
    R("concatenate", lambda a, b: rm.concatenate([a, b], axis=1), lambda a, b: jnp.concatenate([a, b], axis=1),
      (2, 3), (2, 1)),
    R("var", lambda x: rm.var(x, axis=0), lambda x: jnp.var(x, axis=0), (4, 3)),
    R("var-ddof-keepdims", lambda x: rm.var(x, axis=(0, 2), ddof=1, keepdims=True),
      lambda x: jnp.var(x, axis=(0, 2), ddof=1, keepdims=True), (2, 3, 4)),
    R("std", rm.std, jnp.std, (3, 4)),
    R("std-ddof", lambda x: rm.std(x, axis=-1, ddof=1), lambda x: jnp.std(x, axis=-1, ddof=1), (3, 4)),
    R("cumsum", lambda x: rm.cumsum(x, axis=1), lambda x: jnp.cumsum(x, axis=1), (3, 5)),
    R("cumsum-flat", rm.cumsum, jnp.cumsum, (2, 3)),
    R("cumprod", lambda x: rm.cumprod(x, axis=0), lambda x: jnp.cumprod(x, axis=0), (6, 2)),
    R("cumprod-zeros", lambda x: rm.cumprod(x, axis=-1), lambda x: jnp.cumprod(x, axis=-1), (2, 9),
      domain=with_zeros),
    R("sort", rm.sort, jnp.sort, (3, 5), domain=spread),
    R("sort-axis0-descending", lambda x: rm.sort(x, axis=0, descending=True),
      lambda x: jnp.sort(x, axis=0, descending=True), (4, 3), domain=spread),
    R("sort-flat", lambda x: rm.sort(x, axis=None), lambda x: jnp.sort(x, axis=None), (3, 4), domain=spread),
    R("argsort", lambda x: rm.argsort(x, axis=0), lambda x: jnp.argsort(x, axis=0), (4, 3), domain=spread,
      grad=False),
    R("argsort-descending", lambda x: rm.argsort(x, descending=True), lambda x: jnp.argsort(x, descending=True),
      (3, 5), domain=spread, grad=False),
    R("split-sections", lambda x: rm.split(x, 3), lambda x: jnp.split(x, 3), (6, 2)),
    R("split-points", lambda x: rm.split(x, [1, 4], axis=1), lambda x: jnp.split(x, [1, 4], axis=1), (2, 5)),
    R("linspace", lambda a, b: rm.linspace(a, b, 5), lambda a, b: jnp.linspace(a, b, 5), (), ()),
    R("linspace-arrays-axis", lambda a, b: rm.linspace(a, b, 4, endpoint=False, axis=-1),
      lambda a, b: jnp.linspace(a, b, 4, endpoint=False, axis=-1), (3,), (2, 3)),
    R("outer", rm.outer, jnp.outer, (3,), (2, 2)),
    R("norm", rm.linalg.norm, jnp.linalg.norm, (3, 4)),
    R("norm-vector-axis", lambda x: rm.linalg.norm(x, axis=1, keepdims=True),
      lambda x: jnp.linalg.norm(x, axis=1, keepdims=True), (3, 4)),
    R("norm-inf", lambda x: rm.linalg.norm(x, ord=np.inf, axis=0), lambda x: jnp.linalg.norm(x, ord=np.inf, axis=0),
      (3, 4), domain=spread),
    R("norm-0", lambda x: rm.linalg.norm(x, ord=0, axis=0), lambda x: jnp.linalg.norm(x, ord=0, axis=0), (3, 4),
      grad=False),
    R("norm-p", lambda x: rm.linalg.norm(x, ord=3.5, axis=-1), lambda x: jnp.linalg.norm(x, ord=3.5, axis=-1),
      (3, 4), domain=positive),
    R("norm-matrix-1", lambda x: rm.linalg.norm(x, ord=1), lambda x: jnp.linalg.norm(x, ord=1), (3, 4),
      domain=spread),
    R("norm-matrix-minus-inf-axes", lambda x: rm.linalg.norm(x, ord=-np.inf, axis=(2, 0)),
      lambda x: jnp.linalg.norm(x, ord=-np.inf, axis=(2, 0)), (3, 2, 4), domain=spread),
    R("norm-fro-batched", lambda x: rm.linalg.norm(x, ord="fro", axis=(1, 2)),
      lambda x: jnp.linalg.norm(x, ord="fro", axis=(1, 2)), (2, 3, 4)),
    R("floor_divide", rm.floor_divide, jnp.floor_divide, (3, 4), (4,), domain=spread, grad=False),
    R("floordiv-operator", lambda x: 7.5 // x, lambda x: 7.5 // x, (5,), domain=spread, grad=False),
    R("remainder", rm.remainder, jnp.remainder, (3, 4), (4,), domain=spread),
    R("mod-operator", lambda x, y: x % y, lambda x, y: x % y, (3, 4), (3, 1), domain=spread),
    R("divmod", lambda x: divmod(x, 0.7), lambda x: divmod(x, 0.7), (4,), domain=spread),
    # ---- rm.nn
    R("silu", rm.nn.silu, jax.nn.silu, (3, 4)),
    R("softplus", rm.nn.softplus, jax.nn.softplus, (3, 4)),
    R("gelu-tanh", rm.nn.gelu, jax.nn.gelu, (3, 4)),
    R("gelu-tanh-keyword", lambda x: rm.nn.gelu(x, approximate=True),
      lambda x: jax.nn.gelu(x, approximate=True), (3, 4)),
    R("gelu-exact", lambda x: rm.nn.gelu(x, approximate=False), lambda x: jax.nn.gelu(x, approximate=False),
      (3, 4), tol=2e-7),
    R("rms_norm", lambda x, g: rm.nn.rms_norm(x, g),
      lambda x, g: x / jnp.sqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * g, (3, 4), (4,)),
    R("rms_norm-axes", lambda x: rm.nn.rms_norm(x, axis=(0, 2), eps=1e-3),
      lambda x: x / jnp.sqrt(jnp.mean(x * x, axis=(0, 2), keepdims=True) + 1e-3), (2, 3, 4)),
    # ---- tensor methods and properties
    R("T", lambda x: x.T, lambda x: x.T, (2, 3, 4)),
    R("mT", lambda x: x.mT, lambda x: x.mT, (2, 3, 4)),
    R("transpose-method", lambda x: x.transpose(1, 0, 2), lambda x: x.transpose(1, 0, 2), (2, 3, 4)),
    R("transpose-method-tuple", lambda x: x.transpose((2, 0, 1)), lambda x: x.transpose((2, 0, 1)), (2, 3, 4)),
    R("reshape-method", lambda x: x.reshape(4, -1), lambda x: x.reshape(4, -1), (2, 3, 4)),
    R("flatten", lambda x: x.flatten(), lambda x: x.flatten(), (2, 3)),
    R("squeeze-method", lambda x: x.squeeze(), lambda x: x.squeeze(), (1, 3, 1)),
    R("sum-method", lambda x: x.sum(axis=0), lambda x: x.sum(axis=0), (3, 4)),
    R("mean-method", lambda x: x.mean(axis=1, keepdims=True), lambda x: x.mean(axis=1, keepdims=True), (3, 4)),
    R("max-method", lambda x: x.max(axis=1), lambda x: x.max(axis=1), (3, 4), domain=spread),
    R("min-method", lambda x: x.min(), lambda x: x.min(), (3, 4), domain=spread),
    R("prod-method", lambda x: x.prod(axis=0), lambda x: x.prod(axis=0), (3, 4)),
    R("argmax-method", lambda x: x.argmax(axis=1), lambda x: x.argmax(axis=1), (3, 4), domain=spread, grad=False),
    R("argmin-method", lambda x: x.argmin(), lambda x: x.argmin(), (3, 4), domain=spread, grad=False),
    R("clip-method", lambda x: x.clip(-0.55, 0.95), lambda x: x.clip(-0.55, 0.95), (3, 4), domain=spread),
    R("astype-method", lambda x: x.astype("float32") * 2.0, lambda x: x.astype("float32") * 2.0, (3,),
      grad=False),
    R("var-method", lambda x: x.var(axis=0, ddof=1), lambda x: x.var(axis=0, ddof=1), (3, 4)),
    R("cumsum-method", lambda x: x.cumsum(axis=0), lambda x: x.cumsum(axis=0), (3, 4)),
    R("sort-method", lambda x: x.sort(axis=0), lambda x: x.sort(axis=0), (3, 4), domain=spread),
    # ---- functional updates and boolean masks
    R("at-get", lambda x: x.at[1, ::2].get(), lambda x: x.at[1, ::2].get(), (3, 4)),
    R("at-set", lambda x, v: x.at[I3[:2], 1:].set(v), lambda x, v: x.at[I3[:2], 1:].set(v), (3, 4), (2, 3)),
    R("at-set-broadcast", lambda x: x.at[:, 2].set(5.0), lambda x: x.at[:, 2].set(5.0), (3, 4)),
    R("at-add", lambda x, v: x.at[[0, 2, 0]].add(v), lambda x, v: x.at[jnp.array([0, 2, 0])].add(v), (3, 4), (4,)),
    R("at-multiply", lambda x, v: x.at[..., I3].multiply(v),
      lambda x, v: x.at[..., I3].multiply(v, unique_indices=True), (2, 3), (2, 3)),
    R("mask", lambda x: x[MASK], lambda x: x[MASK], (3, 4)),
    R("mask-after-int", lambda x: x[1, MASK[:, 0]], lambda x: x[1, MASK[:, 0]], (2, 3, 4)),
    R("mask-after-ellipsis", lambda x: x[..., MASK[:, :2]], lambda x: x[..., MASK[:, :2]], (2, 3, 2)),
    # ---- more of NumPy's names: shapes and arrays
    R("swapaxes", lambda x: rm.swapaxes(x, 0, -1), lambda x: jnp.swapaxes(x, 0, -1), (2, 3, 4)),
    R("swapaxes-method", lambda x: x.swapaxes(1, 0), lambda x: x.swapaxes(1, 0), (2, 3)),
    R("moveaxis", lambda x: rm.moveaxis(x, 0, -1), lambda x: jnp.moveaxis(x, 0, -1), (2, 3, 4)),
    R("moveaxis-many", lambda x: rm.moveaxis(x, (0, 1), (2, 0)), lambda x: jnp.moveaxis(x, (0, 1), (2, 0)),
      (2, 3, 4)),
    R("tril", rm.tril, jnp.tril, (3, 4)),
    R("tril-k-batched", lambda x: rm.tril(x, k=-1), lambda x: jnp.tril(x, k=-1), (2, 3, 4)),
    R("triu", lambda x: rm.triu(x, k=1), lambda x: jnp.triu(x, k=1), (4, 3)),
    R("diag-vector", rm.diag, jnp.diag, (3,)),
    R("diag-vector-k", lambda x: rm.diag(x, k=-2), lambda x: jnp.diag(x, k=-2), (3,)),
    R("diag-matrix-k", lambda x: rm.diag(x, k=1), lambda x: jnp.diag(x, k=1), (3, 4)),
    R("diagonal-axes", lambda x: rm.diagonal(x, offset=-1, axis1=2, axis2=0),
      lambda x: jnp.diagonal(x, offset=-1, axis1=2, axis2=0), (3, 2, 4)),
    R("diagonal-method", lambda x: x.diagonal(), lambda x: x.diagonal(), (3, 4)),
    R("roll", lambda x: rm.roll(x, 2, axis=1), lambda x: jnp.roll(x, 2, axis=1), (3, 5)),
    R("roll-flat", lambda x: rm.roll(x, -4), lambda x: jnp.roll(x, -4), (3, 5)),
    R("roll-axes", lambda x: rm.roll(x, (1, -2), axis=(0, 2)), lambda x: jnp.roll(x, (1, -2), axis=(0, 2)),
      (2, 3, 4)),
    R("repeat", lambda x: rm.repeat(x, 2, axis=1), lambda x: jnp.repeat(x, 2, axis=1), (2, 3)),
    R("repeat-flat", lambda x: rm.repeat(x, 3), lambda x: jnp.repeat(x, 3), (2, 2)),
    R("repeat-counts", lambda x: rm.repeat(x, [1, 0, 2], axis=0), lambda x: jnp.repeat(x, np.array([1, 0, 2]), axis=0),
      (3, 2)),
    R("repeat-method", lambda x: x.repeat(2), lambda x: x.repeat(2), (2, 2)),
    R("tile", lambda x: rm.tile(x, (2, 1, 3)), lambda x: jnp.tile(x, (2, 1, 3)), (2, 3)),
    R("tile-int", lambda x: rm.tile(x, 2), lambda x: jnp.tile(x, 2), (3,)),
    R("meshgrid", rm.meshgrid, jnp.meshgrid, (3,), (2,), (4,)),
    R("meshgrid-ij-sparse", lambda a, b: rm.meshgrid(a, b, indexing="ij", sparse=True),
      lambda a, b: jnp.meshgrid(a, b, indexing="ij", sparse=True), (3,), (2,)),
    R("take_along_axis", lambda x: rm.take_along_axis(x, I32, axis=1), lambda x: jnp.take_along_axis(x, I32, axis=1),
      (3, 4)),
    R("take_along_axis-broadcast", lambda x: rm.take_along_axis(x, I32[:1], axis=1),
      lambda x: jnp.take_along_axis(x, I32[:1], axis=1), (3, 4)),
    R("take_along_axis-flat", lambda x: rm.take_along_axis(x, I3, axis=None),
      lambda x: jnp.take_along_axis(x, I3, axis=None), (2, 2)),
    R("take_along_axis-argsort", lambda x: rm.take_along_axis(x, rm.argsort(x, axis=0), axis=0),
      lambda x: jnp.take_along_axis(x, jnp.argsort(x, axis=0), axis=0), (3, 4), domain=spread),
    R("atleast_1d", rm.atleast_1d, jnp.atleast_1d, ()),
    R("atleast_2d-many", rm.atleast_2d, jnp.atleast_2d, (), (3,), (2, 3)),
    R("atleast_3d", rm.atleast_3d, jnp.atleast_3d, (2, 3)),
    R("ravel", rm.ravel, jnp.ravel, (2, 3)),
    R("ravel-F", lambda x: rm.ravel(x, order="F"), lambda x: jnp.ravel(x, order="F"), (2, 3, 2)),
    R("full_like", lambda x: rm.full_like(x, 2.5) * x, lambda x: jnp.full_like(x, 2.5) * x, (2, 3)),
    R("full_like-int", lambda x: rm.full_like(x, 3, dtype="int32"), lambda x: jnp.full_like(x, 3, dtype="int32"),
      (2, 3), grad=False),
    R("arange-float", lambda: rm.arange(0.0, 1.0, 0.25), lambda: jnp.arange(0.0, 1.0, 0.25), grad=False),
    R("eye-M-k", lambda: rm.eye(3, M=4, k=-1), lambda: jnp.eye(3, M=4, k=-1), grad=False),
    # ---- elementwise
    R("floor", rm.floor, jnp.floor, (3, 4)),
    R("ceil", rm.ceil, jnp.ceil, (3, 4)),
    R("round", lambda x: rm.round(x * 2.0), lambda x: jnp.round(x * 2.0), (3, 4)),
    R("round-halves", lambda x: rm.round(x * 0.0 + HALVES), lambda x: jnp.round(x * 0.0 + HALVES), (4,)),
    R("round-decimals", lambda x: rm.round(x, 2), lambda x: jnp.round(x, 2), (3, 4)),
    R("round-method", lambda x: (x * 3.0).round(), lambda x: (x * 3.0).round(), (3, 4)),
    R("trunc", lambda x: rm.trunc(x * 2.0), lambda x: jnp.trunc(x * 2.0), (3, 4)),
    R("isnan", rm.isnan, jnp.isnan, (3, 5), domain=nonfinite, grad=False),
    R("isinf", rm.isinf, jnp.isinf, (3, 5), domain=nonfinite, grad=False),
    R("isfinite", rm.isfinite, jnp.isfinite, (3, 5), domain=nonfinite, grad=False),
    R("nan_to_num", rm.nan_to_num, jnp.nan_to_num, (3, 5), domain=nonfinite),
    R("nan_to_num-values", lambda x: rm.nan_to_num(x, nan=1.5, posinf=9.0, neginf=-9.0),
      lambda x: jnp.nan_to_num(x, nan=1.5, posinf=9.0, neginf=-9.0), (3, 5), domain=nonfinite),
    R("expm1", rm.expm1, jnp.expm1, (3, 4)),
    R("log2", rm.log2, jnp.log2, (3, 4), domain=positive),
    R("log10", rm.log10, jnp.log10, (3, 4), domain=positive),
    R("exp2", rm.exp2, jnp.exp2, (3, 4)),
    R("reciprocal", rm.reciprocal, jnp.reciprocal, (3, 4), domain=positive),
    R("arctan2", rm.arctan2, jnp.arctan2, (3, 4), (4,)),
    R("arcsin", rm.arcsin, jnp.arcsin, (3, 4), domain=unit),
    R("arccos", rm.arccos, jnp.arccos, (3, 4), domain=unit),
    R("arctan", rm.arctan, jnp.arctan, (3, 4)),
    R("sinh", rm.sinh, jnp.sinh, (3, 4)),
    R("cosh", rm.cosh, jnp.cosh, (3, 4)),
    R("tan", rm.tan, jnp.tan, (3, 4), domain=unit),
    R("arcsinh", rm.arcsinh, jnp.arcsinh, (3, 4)),
    R("arctanh", rm.arctanh, jnp.arctanh, (3, 4), domain=unit),
    R("hypot", rm.hypot, jnp.hypot, (3, 4), (3, 1)),
    R("logaddexp", rm.logaddexp, jnp.logaddexp, (3, 4), (4,)),
    R("sinc", rm.sinc, jnp.sinc, (3, 4)),
    R("fmax", lambda x: rm.fmax(x, NANS), lambda x: jnp.fmax(x, NANS), (3, 4)),
    R("fmin", lambda x: rm.fmin(NANS, x), lambda x: jnp.fmin(NANS, x), (3, 4)),
    # a tie's gradient goes to the second operand, as in JAX
    R("fmax-ties", lambda x: rm.fmax(x, rm.stop_gradient(rm.where(MASK, x, NANS))),
      lambda x: jnp.fmax(x, jax.lax.stop_gradient(jnp.where(MASK, x, NANS))), (3, 4)),
    R("fmin-ties", lambda x: rm.fmin(x, rm.stop_gradient(x)), lambda x: jnp.fmin(x, jax.lax.stop_gradient(x)), (3, 4)),
    R("clip-a_min-a_max", lambda x: rm.clip(x, a_min=-0.55, a_max=0.95), lambda x: jnp.clip(x, -0.55, 0.95), (3, 4),
      domain=spread),
    # ---- reductions
    R("all", lambda x: rm.all(x > -1.0, axis=1), lambda x: jnp.all(x > -1.0, axis=1), (3, 4), grad=False),
    R("any-keepdims", lambda x: rm.any(x > 1.0, axis=0, keepdims=True),
      lambda x: jnp.any(x > 1.0, axis=0, keepdims=True), (3, 4), grad=False),
    R("all-any-methods", lambda x: (x.all(), (x > 1.5).any(axis=1)), lambda x: (x.all(), (x > 1.5).any(axis=1)),
      (3, 4), domain=with_zeros, grad=False),
    R("count_nonzero", lambda x: rm.count_nonzero(x, axis=0), lambda x: jnp.count_nonzero(x, axis=0), (3, 4),
      domain=with_zeros, grad=False),
    R("nansum", lambda x: rm.nansum(x, axis=1), lambda x: jnp.nansum(x, axis=1), (3, 5), domain=nonfinite),
    R("average", lambda x: rm.average(x, axis=0), lambda x: jnp.average(x, axis=0), (3, 4)),
    R("average-weights", lambda x, w: rm.average(x, axis=1, weights=w * w + 0.5),
      lambda x, w: jnp.average(x, axis=1, weights=w * w + 0.5), (3, 4), (4,)),
    R("average-returned", lambda x, w: rm.average(x, axis=(0, 1), weights=w * w + 0.5, returned=True, keepdims=True),
      lambda x, w: jnp.average(x, axis=(0, 1), weights=w * w + 0.5, returned=True, keepdims=True), (2, 3), (2, 3)),
    # ---- rm.nn
    R("relu6", lambda x: rm.nn.relu6(x * 4.0), lambda x: jax.nn.relu6(x * 4.0), (3, 4)),
    R("leaky_relu", lambda x: rm.nn.leaky_relu(x, 0.2), lambda x: jax.nn.leaky_relu(x, 0.2), (3, 4)),
    R("elu", lambda x: rm.nn.elu(x, 0.7), lambda x: jax.nn.elu(x, 0.7), (3, 4)),
    R("selu", rm.nn.selu, jax.nn.selu, (3, 4)),
    R("celu", lambda x: rm.nn.celu(x, 1.5), lambda x: jax.nn.celu(x, 1.5), (3, 4)),
    R("soft_sign", rm.nn.softsign, jax.nn.soft_sign, (3, 4)),
    R("swish", rm.nn.swish, jax.nn.swish, (3, 4)),
    R("hard_sigmoid", lambda x: rm.nn.hard_sigmoid(x * 3.0), lambda x: jax.nn.hard_sigmoid(x * 3.0), (3, 4)),
    R("hard_swish", lambda x: rm.nn.hard_swish(x * 3.0), lambda x: jax.nn.hard_swish(x * 3.0), (3, 4)),
    R("hard_tanh", lambda x: rm.nn.hard_tanh(x * 2.0), lambda x: jax.nn.hard_tanh(x * 2.0), (3, 4)),
    R("log_sigmoid", rm.nn.log_sigmoid, jax.nn.log_sigmoid, (3, 4)),
    R("standardize", rm.nn.standardize, jax.nn.standardize, (3, 4)),
    R("standardize-stable-axes", lambda x: rm.nn.standardize(x, axis=(0, 2), algorithm="stable"),
      lambda x: jax.nn.standardize(x, axis=(0, 2), algorithm="stable"), (2, 3, 4)),
    # ---- rm.special (a reference made of many jax.numpy ops is jitted: op by op, JAX takes seconds)
    R("erf", rm.special.erf, jax.scipy.special.erf, (3, 4)),
    R("erfc", rm.special.erfc, jax.scipy.special.erfc, (3, 4)),
    R("gammaln", rm.special.gammaln, jax.scipy.special.gammaln, (3, 4), domain=positive, tol=1e-8),
    R("gammaln-negative", lambda x: rm.special.gammaln(x - 3.0), lambda x: jax.scipy.special.gammaln(x - 3.0), (3, 4),
      domain=unit, tol=1e-8),
    R("digamma", rm.special.digamma, jax.scipy.special.digamma, (3, 4), domain=positive, tol=1e-8),
    R("polygamma", lambda x: rm.special.polygamma(2, x), lambda x: jax.scipy.special.polygamma(2, x), (3, 4),
      domain=positive, tol=1e-8),
    R("logsumexp-b", lambda a, b: rm.special.logsumexp(a, axis=1, b=b * b),
      jax.jit(lambda a, b: jax.scipy.special.logsumexp(a, axis=1, b=b * b)), (3, 4), (4,)),
    R("logsumexp-sign", lambda a, b: rm.special.logsumexp(a, axis=0, b=b, keepdims=True, return_sign=True),
      jax.jit(lambda a, b: jax.scipy.special.logsumexp(a, axis=0, b=b, keepdims=True, return_sign=True)), (3, 4),
      (3, 4)),
    R("xlogy", lambda x, y: rm.special.xlogy(x, y * y + 0.1), lambda x, y: jax.scipy.special.xlogy(x, y * y + 0.1),
      (3, 4), (3, 4), domain=with_zeros),
    R("xlog1py", lambda x, y: rm.special.xlog1py(x, y * y), lambda x, y: jax.scipy.special.xlog1py(x, y * y),
      (3, 4), (4,), domain=with_zeros),
    R("expit", rm.special.expit, jax.scipy.special.expit, (3, 4)),
    R("logit", rm.special.logit, jax.scipy.special.logit, (3, 4), domain=probability),
]


def _leaves(out) -> list[np.ndarray]:
    out = list(out) if isinstance(out, (tuple, list)) else [out]
    return [np.asarray(o) for o in out]


def _run(row: Row, mode: str, arrays):
    if mode == "eager":
        return _leaves(row.fn(*[rm.asarray(a) for a in arrays]))
    return _leaves(rm.jit(row.fn, backend=mode)(*arrays))


@functools.cache
def _reference(row: Row, x64: bool) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The row's inputs and JAX's outputs, in float64 or (x64 off) float32: once per row, as
    JAX's op-by-op dispatch is what costs here."""
    arrays = row.sample() if x64 else [x.astype(np.float32) for x in row.sample()]
    with jax.enable_x64(x64):
        return arrays, _leaves(row.ref(*[jnp.asarray(a) for a in arrays]))


def _close(got, expected, tol):
    scale = max(1.0, float(np.max(np.abs(expected), initial=0.0)))
    np.testing.assert_allclose(got, expected, rtol=tol, atol=tol * scale)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_values_dtypes_and_shapes_match_jax(row: Row, mode: str):
    xs64, expected = _reference(row, x64=True)
    got = _run(row, mode, xs64)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.shape == e.shape
        if e.dtype.kind == "f":
            _close(g, e, max(row.tol, 1e-12 * 1e3))
        else:
            np.testing.assert_array_equal(g, e)
    xs32, expected32 = _reference(row, x64=False)
    got32 = _run(row, mode, xs32)
    assert [g.dtype for g in got32] == [e.dtype for e in expected32]  # JAX's default dtypes
    for g, e in zip(got32, expected32):
        if e.dtype.kind == "f":
            _close(g, e, 2e-5)


GRAD_ROWS = [r for r in ROWS if r.grad]


def _cotangents(row: Row, xs):
    rng = np.random.default_rng(1)
    return [rng.normal(size=o.shape) for o in _leaves(row.fn(*[rm.asarray(x) for x in xs]))]


def _rm_loss(row: Row, cts):
    def loss(*xs):
        outs = row.fn(*xs)
        outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
        return functools.reduce(lambda a, b: a + b, [rm.sum(o * c) for o, c in zip(outs, cts)])

    return loss


@functools.cache
def _jax_grads(row: Row) -> tuple[list, list, list[np.ndarray]]:
    """The row's float64 inputs, cotangents and JAX's gradient (once per row)."""
    xs = row.sample()
    cts = _cotangents(row, xs)

    def loss(*ys):
        outs = row.ref(*ys)
        outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
        return sum(jnp.sum(o * c) for o, c in zip(outs, cts))

    # One compiled program: op by op, JAX compiles each op of the gradient, which was most of this
    # file's time. (The values' references stay op by op: JAX 0.10 fails to lower a few of them
    # under jit, `take_along_axis` of 64-bit indices, `.at[].multiply` in float32.)
    with jax.enable_x64(True):
        grads = jax.jit(jax.grad(loss, argnums=tuple(range(len(xs)))))(*map(jnp.asarray, xs))
    return xs, cts, [np.asarray(g) for g in grads]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("row", GRAD_ROWS, ids=[r.id for r in GRAD_ROWS])
def test_gradients_match_jax_in_float64(row: Row, mode: str):
    xs, cts, expected = _jax_grads(row)
    grad = rm.grad(_rm_loss(row, cts), argnums=tuple(range(len(xs))))
    got = grad(*[rm.asarray(x) for x in xs]) if mode == "eager" else rm.jit(grad, backend=mode)(*xs)
    for g, e in zip(got, expected):
        assert np.asarray(g).dtype == np.float64
        _close(np.asarray(g), e, max(row.tol, 1e-9))


# ---------------------------------------------------------------- integers


INT_ROWS = [
    ("cumsum", lambda x: rm.cumsum(x, axis=0), lambda x: jnp.cumsum(x, axis=0)),
    ("cumprod", lambda x: rm.cumprod(x, axis=1), lambda x: jnp.cumprod(x, axis=1)),
    ("sort", rm.sort, jnp.sort),
    ("argsort-ties", lambda x: rm.argsort(x, axis=0), lambda x: jnp.argsort(x, axis=0)),
    ("argsort-ties-descending", lambda x: rm.argsort(x, descending=True), lambda x: jnp.argsort(x, descending=True)),
    ("floordiv", lambda x: x // 3, lambda x: x // 3),
    ("floordiv-negative-divisor", lambda x: rm.floor_divide(x, -2), lambda x: jnp.floor_divide(x, -2)),
    ("mod", lambda x: x % 3, lambda x: x % 3),
    ("rmod", lambda x: 7 % (x * 0 + 4), lambda x: 7 % (x * 0 + 4)),
    ("einsum", lambda x: rm.einsum("ij,kj->ik", x, x), lambda x: jnp.einsum("ij,kj->ik", x, x)),
    ("outer", lambda x: rm.outer(x[0], x[1]), lambda x: jnp.outer(x[0], x[1])),
    ("var", rm.var, jnp.var),
    ("cumsum-bool", lambda x: rm.cumsum(x > 0, axis=1), lambda x: jnp.cumsum(x > 0, axis=1)),
    ("at-add", lambda x: x.at[0].add(2), lambda x: x.at[0].add(2)),
    ("mask", lambda x: x[x > 0], lambda x: x[x > 0]),
    ("floor-round-trunc", lambda x: (rm.floor(x), rm.round(x), x.round(1), rm.trunc(x > 0)),
     lambda x: (jnp.floor(x), jnp.round(x), x.round(1), jnp.trunc(x > 0))),
    ("isnan-isinf-isfinite", lambda x: (rm.isnan(x), rm.isinf(x > 0), rm.isfinite(x)),
     lambda x: (jnp.isnan(x), jnp.isinf(x > 0), jnp.isfinite(x))),
    ("promoted-to-float", lambda x: (rm.expm1(x), rm.log2(x * x + 1), rm.arctan2(x, 2), rm.hypot(x, x),
                                     rm.logaddexp(x, 1), rm.reciprocal(x + 6), rm.special.erf(x),
                                     rm.special.gammaln(x * x + 1), rm.special.xlogy(x, x * x + 1)),
     lambda x: (jnp.expm1(x), jnp.log2(x * x + 1), jnp.arctan2(x, 2), jnp.hypot(x, x), jnp.logaddexp(x, 1),
                jnp.reciprocal(x + 6), jax.scipy.special.erf(x), jax.scipy.special.gammaln(x * x + 1),
                jax.scipy.special.xlogy(x, x * x + 1))),
    ("arrays", lambda x: (rm.tril(x), rm.roll(x, 1, 1), rm.repeat(x, 2, 0), rm.tile(x, 2), rm.diag(x[0]),
                          rm.take_along_axis(x, rm.argsort(x, axis=1), 1)),
     lambda x: (jnp.tril(x), jnp.roll(x, 1, 1), jnp.repeat(x, 2, 0), jnp.tile(x, 2), jnp.diag(x[0]),
                jnp.take_along_axis(x, jnp.argsort(x, axis=1), 1))),
    ("reductions", lambda x: (rm.all(x, axis=0), rm.any(x > 4), rm.count_nonzero(x, axis=1), rm.nansum(x),
                              rm.average(x, axis=1, weights=x[0] * x[0] + 1)),
     lambda x: (jnp.all(x, axis=0), jnp.any(x > 4), jnp.count_nonzero(x, axis=1), jnp.nansum(x),
                jnp.average(x, axis=1, weights=x[0] * x[0] + 1))),
    ("fmax-nan_to_num-hard_tanh", lambda x: (rm.fmax(x, 0), rm.nan_to_num(x), rm.nn.hard_tanh(x), rm.nn.relu6(x)),
     lambda x: (jnp.fmax(x, 0), jnp.nan_to_num(x), jax.nn.hard_tanh(x), jax.nn.relu6(x))),
    ("full_like", lambda x: rm.full_like(x, 2.7), lambda x: jnp.full_like(x, 2.7)),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name,fn,ref", INT_ROWS, ids=[r[0] for r in INT_ROWS])
def test_integer_inputs_match_jax(name, fn, ref, mode):
    x = np.random.default_rng(0).integers(-5, 6, (4, 5)).astype(np.int32)
    if mode == "eager" or name == "mask":  # a mask read from the values is for eager use only
        got = fn(rm.asarray(x))
    else:
        got = rm.jit(fn, backend=mode)(x)
    for g, e in zip(_leaves(got), _leaves(ref(jnp.asarray(x)))):
        assert g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=1e-6, atol=1e-6)  # JAX's float32 lgamma(1) is 5e-7


# ---------------------------------------------------------------- sort: order, ties, vmap


@pytest.mark.parametrize("mode", MODES)
def test_sort_puts_nans_last_and_keeps_signed_zeros_in_order_as_numpy_and_jax(mode):
    x = np.array([np.nan, 0.0, -0.0, 1.0, -np.inf, -np.nan, np.inf, -1.0, 0.0, -0.0], np.float32)
    out = rm.sort(x) if mode == "eager" else rm.jit(rm.sort, backend=mode)(x)
    perm = rm.argsort(x) if mode == "eager" else rm.jit(rm.argsort, backend=mode)(x)
    for expected in (np.asarray(jnp.sort(x)), np.sort(x, kind="stable")):
        np.testing.assert_array_equal(np.asarray(out).view(np.int32), expected.view(np.int32))  # bit for bit
    np.testing.assert_array_equal(perm, jnp.argsort(x))
    np.testing.assert_array_equal(perm, np.argsort(x, kind="stable"))
    np.testing.assert_array_equal(perm[2:6], [1, 2, 8, 9])  # the zeros, -0.0 among them, in input order


def test_sort_gradient_goes_back_through_the_permutation_with_ties():
    x = rm.asarray([3.0, 1.0, 3.0, 2.0], "float64")
    w = rm.asarray([1.0, 10.0, 100.0, 1000.0], "float64")
    g = rm.grad(lambda x: rm.sum(rm.sort(x) * w))(x)
    e = jax.grad(lambda x: jnp.sum(jnp.sort(x) * np.asarray(w)))(np.asarray(x))
    np.testing.assert_array_equal(g, e)
    np.testing.assert_array_equal(g, [100.0, 1.0, 1000.0, 10.0])  # stable: the first 3 goes first


@pytest.mark.parametrize("name,fn", [
    ("sort", lambda x: rm.sort(x, axis=0)),
    ("argsort", lambda x: rm.argsort(x, descending=True)),
    ("cumsum", lambda x: rm.cumsum(x, axis=1)),
    ("cumprod", lambda x: rm.cumprod(x, axis=0)),
    ("remainder", lambda x: x % 0.3),
    ("at-set", lambda x: x.at[1].set(x[0])),
    ("einsum", lambda x: rm.einsum("ij,kj->ik", x, x)),
], ids=lambda v: v if isinstance(v, str) else "")
def test_vmap_equals_a_loop(name, fn):
    xs = np.random.default_rng(0).normal(size=(5, 3, 4))
    got = rm.vmap(fn)(rm.asarray(xs))
    np.testing.assert_allclose(got, np.stack([np.asarray(fn(rm.asarray(x))) for x in xs]), rtol=1e-12)
    grads = rm.vmap(rm.grad(lambda x: rm.sum(fn(x) * 1.5)))(rm.asarray(xs)) if name != "argsort" else None
    if grads is not None:
        loop = [np.asarray(rm.grad(lambda x: rm.sum(fn(x) * 1.5))(rm.asarray(x))) for x in xs]
        np.testing.assert_allclose(grads, np.stack(loop), rtol=1e-12)


@pytest.mark.parametrize("name,fn,jfn", [
    ("cumsum", lambda x: rm.cumsum(x, axis=1), lambda x: jnp.cumsum(x, axis=1)),
    ("cumprod-zeros", lambda x: rm.cumprod(x, axis=1), lambda x: jnp.cumprod(x, axis=1)),
    ("sort", lambda x: rm.sort(x, axis=0), lambda x: jnp.sort(x, axis=0)),
    ("remainder", lambda x: rm.remainder(x, 0.7), lambda x: jnp.remainder(x, 0.7)),
    # more of NumPy's, JAX's and SciPy's names, at zeros and ties (the inputs hold zeros)
    ("relu6", lambda x: rm.nn.relu6(x * 4.0), lambda x: jax.nn.relu6(x * 4.0)),
    ("elu-celu-leaky", lambda x: rm.nn.elu(x) + rm.nn.celu(x, 2.0) + rm.nn.leaky_relu(x),
     lambda x: jax.nn.elu(x) + jax.nn.celu(x, 2.0) + jax.nn.leaky_relu(x)),
    ("logaddexp-ties", lambda x: rm.logaddexp(x, x[::-1]), lambda x: jnp.logaddexp(x, x[::-1])),
    ("hypot", lambda x: rm.hypot(x, 1.5), lambda x: jnp.hypot(x, 1.5)),
    ("sinc-at-0", rm.sinc, jnp.sinc),
    ("xlogy-at-0", lambda x: rm.special.xlogy(x, x * x + 0.5), lambda x: jax.scipy.special.xlogy(x, x * x + 0.5)),
    ("round-nan_to_num", lambda x: rm.round(x * 3.0) + rm.nan_to_num(x),
     lambda x: jnp.round(x * 3.0) + jnp.nan_to_num(x)),
    ("tril-roll-repeat", lambda x: rm.repeat(rm.roll(rm.tril(x), 2, axis=1), 2, axis=0),
     lambda x: jnp.repeat(jnp.roll(jnp.tril(x), 2, axis=1), 2, axis=0)),
    ("take_along_axis", lambda x: rm.take_along_axis(x, rm.argsort(x, axis=1), axis=1),
     lambda x: jnp.take_along_axis(x, jnp.argsort(x, axis=1), axis=1)),
    ("gammaln-erf", lambda x: rm.special.gammaln(x * x + 0.5) * rm.special.erf(x),
     lambda x: jax.scipy.special.gammaln(x * x + 0.5) * jax.scipy.special.erf(x)),
    ("logsumexp-b", lambda x: rm.special.logsumexp(x, axis=0, b=x * x),
     lambda x: jax.scipy.special.logsumexp(x, axis=0, b=x * x)),
], ids=lambda v: v if isinstance(v, str) else "")
def test_forward_mode_matches_jax(name, fn, jfn):
    x = with_zeros(np.random.default_rng(0), (3, 5))
    t = np.random.default_rng(1).normal(size=(3, 5))
    out, tangent = rm.jvp(fn, (rm.asarray(x),), (rm.asarray(t),))
    with jax.enable_x64(True):
        e_out, e_tangent = jax.jvp(jfn, (jnp.asarray(x),), (jnp.asarray(t),))
    np.testing.assert_allclose(out, e_out, rtol=1e-12)
    np.testing.assert_allclose(tangent, e_tangent, rtol=1e-12, atol=1e-12)


def test_cumprod_second_derivative_at_zeros_matches_jax():
    x = np.array([2.0, 0.0, 3.0, 0.0, -1.5])

    def f(x):
        return rm.sum(rm.cumprod(x) * rm.asarray([1.0, 2.0, 3.0, 4.0, 5.0], "float64"))

    def row(v):  # the Hessian's rows, one per basis vector v (vmap traces once)
        return rm.grad(lambda y: rm.sum(rm.grad(f)(y) * v))(rm.asarray(x))

    hess = np.asarray(rm.vmap(row)(rm.asarray(np.eye(5))))
    with jax.enable_x64(True):
        expected = jax.hessian(lambda y: jnp.sum(jnp.cumprod(y) * jnp.arange(1.0, 6.0)))(jnp.asarray(x))
    np.testing.assert_allclose(hess, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("backend", ["numpy", "xla"])
def test_linspace_from_traced_bounds_to_an_integer_dtype_takes_the_floor(backend):
    got = rm.jit(lambda a, b: rm.linspace(a, b, 5, dtype="int32"), backend=backend)(np.float32(-2.5), np.float32(7))
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, np.linspace(-2.5, 7.0, 5, dtype=np.int32))  # [-3, -1, 2, 4, 7]
    np.testing.assert_array_equal(rm.linspace(-2.5, 7.0, 5, dtype="int32"), got)


# ---------------------------------------------------------------- division


def test_floor_division_of_floats_is_pythons():
    assert float(rm.asarray(1.0, "float64") // 0.1) == 1.0 // 0.1 == 9.0
    assert float(rm.asarray(-7.0) % 3.0) == -7.0 % 3.0 == 2.0
    assert float(rm.asarray(7.0) % -3.0) == 7.0 % -3.0 == -2.0


@pytest.mark.parametrize("backend", ["numpy", "xla"])
def test_traced_integer_division_by_zero_is_zero_on_both_backends(backend):
    x, y = np.array([7, -7, 0, 5], np.int32), np.array([2, 0, 0, 0], np.int32)
    q, r = rm.jit(lambda x, y: (x // y, x % y), backend=backend)(x, y)
    np.testing.assert_array_equal(q, [3, 0, 0, 0])
    np.testing.assert_array_equal(r, [1, 0, 0, 0])


def test_known_integer_division_by_zero_raises():
    with pytest.raises(rm.ArgumentValueError, match=r"^floor_divide: integer division by zero"):
        rm.asarray([1, 2]) // 0
    with pytest.raises(rm.ArgumentValueError, match=r"^remainder: integer division by zero"):
        rm.jit(lambda x: x % rm.asarray([1, 0]))(np.array([3, 4], np.int32))


def test_remainder_gradient_of_the_divisor_is_minus_the_quotient():
    g = rm.grad(lambda y: rm.sum(rm.asarray([7.0, -7.0]) % y))(rm.asarray(2.0))
    assert float(g) == -(3.0 + -4.0)


# ---------------------------------------------------------------- functional updates


@pytest.mark.parametrize("mode", MODES)
def test_set_with_repeated_indices_keeps_the_last_update_like_numpy(mode):
    x = np.zeros(4)
    idx, v = np.array([1, 3, 1, 1]), np.array([10.0, 20.0, 30.0, 40.0])
    expected = x.copy()
    expected[idx] = v
    fn = lambda x, i, v: x.at[i].set(v)  # noqa: E731
    if mode == "eager":
        got = fn(rm.asarray(x), idx, v)
    else:  # the index traced: duplicates sorted out in the graph
        got = rm.jit(fn, backend=mode)(x, idx, v)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("mode", MODES)
def test_add_and_multiply_combine_every_repeated_update(mode):
    x = np.arange(1.0, 5.0)
    idx, v = np.array([2, 0, 2, 2]), np.array([2.0, 3.0, 5.0, 7.0])
    fn = lambda x, i, v: (x.at[i].add(v), x.at[i].multiply(v))  # noqa: E731
    got = fn(rm.asarray(x), idx, v) if mode == "eager" else rm.jit(fn, backend=mode)(x, idx, v)
    np.testing.assert_array_equal(got[0], [4.0, 2.0, 17.0, 4.0])
    np.testing.assert_array_equal(got[1], [3.0, 2.0, 210.0, 4.0])


@pytest.mark.parametrize("traced", [False, True], ids=["static", "traced"])
def test_multiply_gradient_with_repeated_indices_and_zeros(traced):
    """JAX cannot differentiate a scatter-multiply with repeated indices; remat's is a product of
    gathered updates, exact at zeros. Checked against the gradient worked out by hand."""
    idx = np.array([1, 0, 1, 1])
    x, v = np.array([2.0, 3.0]), np.array([5.0, 7.0, 0.0, 11.0])

    def loss(x, v, i):
        return rm.sum(x.at[i].multiply(v) * rm.asarray([1.0, 10.0], "float64"))

    args = (rm.asarray(x), rm.asarray(v), idx)
    grad = rm.grad(loss, argnums=(0, 1))
    gx, gv = rm.jit(grad)(*args) if traced else grad(*args)
    # out = [x0 * 7, x1 * 5 * 0 * 11]: d/dx = [7, 0] * [1, 10]; d/dv = [x1*0*11, x0, x1*5*11, x1*5*0] * w
    np.testing.assert_array_equal(gx, [7.0, 0.0])
    np.testing.assert_array_equal(gv, [0.0, 2.0, 10 * 3.0 * 5 * 11, 0.0])


def test_set_keeps_negative_zero_and_signed_zeros_survive_traced_indices(backend):
    got = rm.asarray([1.0, 2.0]).at[0].set(-0.0)
    assert np.signbit(np.asarray(got)[0])
    # traced: a value is moved, never added onto a -0.0 base (XLA gave -0.0 for a set of +0.0)
    pos, neg = rm.jit(lambda x, i: (x.at[i].set(0.0), x.at[i].set(-0.0)), backend=backend)(np.ones(3), np.array([2]))
    assert not np.signbit(np.asarray(pos)[2]) and np.signbit(np.asarray(neg)[2])


# (name, remat update, the same in JAX, the index): repeated positions and out-of-range entries,
# which JAX's updates drop by default and clip with mode="clip"; its get clips by default and
# fills with mode="fill".
V3 = np.array([1.5, 2.0, 0.5], np.float32)
UPDATES = {
    "set": (lambda x, i: x.at[i].set(V3), lambda x, i: x.at[i].set(V3)),
    "add": (lambda x, i: x.at[i].add(V3), lambda x, i: x.at[i].add(V3)),
    "multiply": (lambda x, i: x.at[i].multiply(V3), lambda x, i: x.at[i].multiply(V3)),
    "divide": (lambda x, i: x.at[i].divide(V3), lambda x, i: x.at[i].divide(V3)),
    "power": (lambda x, i: x.at[i].power(V3), lambda x, i: x.at[i].power(V3)),
    "min": (lambda x, i: x.at[i].min(V3), lambda x, i: x.at[i].min(V3)),
    "max": (lambda x, i: x.at[i].max(V3), lambda x, i: x.at[i].max(V3)),
    "apply": (lambda x, i: x.at[i].apply(rm.sin), lambda x, i: x.at[i].apply(jnp.sin)),
    "set clip": (lambda x, i: x.at[i].set(V3, mode="clip"), lambda x, i: x.at[i].set(V3, mode="clip")),
    "add drop": (lambda x, i: x.at[i].add(V3, mode="drop"), lambda x, i: x.at[i].add(V3, mode="drop")),
    "get": (lambda x, i: x.at[i].get(), lambda x, i: x.at[i].get()),
    "get fill": (lambda x, i: x.at[i].get(mode="fill"), lambda x, i: x.at[i].get(mode="fill")),
    "get fill -1": (lambda x, i: x.at[i].get(mode="fill", fill_value=-1.0),
                    lambda x, i: x.at[i].get(mode="fill", fill_value=-1.0)),
}
INDICES = {"repeated": np.array([1, 3, 1], np.int32), "out of range": np.array([1, 9, -7], np.int32),
           "negative": np.array([-1, 0, -4], np.int32)}


@pytest.mark.parametrize("index", list(INDICES))
@pytest.mark.parametrize("name", list(UPDATES))
@pytest.mark.parametrize("mode", MODES)
def test_updates_match_jax(name, index, mode):
    f, jf = UPDATES[name]
    x, i = np.array([2.0, 3.0, -4.0, 5.0], np.float32), INDICES[index]
    if mode == "eager" and index == "out of range" and "clip" not in name and "fill" not in name and "drop" not in name:
        with pytest.raises(rm.IndexOutOfRange):  # known when tracing, asked for no mode: loud
            f(rm.asarray(x), i)
        return
    got = f(rm.asarray(x), i) if mode == "eager" else rm.jit(f, backend=mode)(x, i)  # traced under jit
    np.testing.assert_allclose(np.asarray(got), np.asarray(jf(jnp.asarray(x), jnp.asarray(i))), rtol=1e-6)


@pytest.mark.parametrize("name", ["divide", "power", "min", "max", "apply", "set clip", "add drop", "get fill"])
def test_update_gradients_match_jax(name, backend):
    """Unique in-range positions and one dropped entry (JAX's scatter gradients need unique ones;
    JAX cannot differentiate apply, whose reference is then a set of the function of a get)."""
    f, jf = UPDATES[name]
    if name == "apply":
        jf = lambda x, i: x.at[i].set(jnp.sin(x.at[i].get(mode="clip")))  # noqa: E731
    x, i = np.array([2.0, 3.0, 4.0, 5.0], np.float32), np.array([1, 3, 9], np.int32)
    def loss(x, i):  # the index traced: its out-of-range entry is dropped or filled, as JAX's
        y = f(x, i)
        return rm.sum(rm.where(y != y, 0.0, y) * rm.arange(1.0, 1.0 + y.size))  # NaN (filled) to 0


    def jloss(x):
        y = jf(x, i)
        return jnp.sum(jnp.where(y != y, 0.0, y) * jnp.arange(1.0, 1.0 + y.size))

    got = rm.jit(rm.grad(loss), backend=backend)(x, i)
    np.testing.assert_allclose(np.asarray(got), np.asarray(jax.grad(jloss)(jnp.asarray(x))), rtol=1e-5, atol=1e-6)


def test_repeated_positions_divide_and_raise_once_per_update():
    x, i = rm.asarray([2.0, 3.0, 4.0]), np.array([1, 1])
    np.testing.assert_allclose(np.asarray(x.at[i].divide(2.0)), [2.0, 0.75, 4.0])
    np.testing.assert_allclose(np.asarray(x.at[i].power(2.0)), [2.0, 81.0, 4.0])
    np.testing.assert_allclose(np.asarray(x.at[i].apply(lambda v: v * 10.0)), [2.0, 300.0, 4.0])


def test_updates_leave_the_tensor_unchanged_and_vmap():
    x = rm.zeros((2, 3))
    y = x.at[0, 1].set(1.0)
    np.testing.assert_array_equal(x, 0.0)
    np.testing.assert_array_equal(y, [[0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    rows = rm.vmap(lambda r: r.at[1].add(r[0]))(rm.asarray(np.arange(6.0).reshape(2, 3)))
    np.testing.assert_array_equal(rows, [[0.0, 1.0, 2.0], [3.0, 7.0, 5.0]])


# ---------------------------------------------------------------- boolean masks


@pytest.mark.parametrize("backend", ["numpy", "xla"])
def test_a_concrete_mask_works_inside_jit_and_grad(backend):
    x = np.random.default_rng(0).normal(size=(3, 4))
    got = rm.jit(lambda x: x[MASK] * 2.0, backend=backend)(x)
    np.testing.assert_allclose(got, x[MASK] * 2.0)
    g = rm.jit(rm.grad(lambda x: rm.sum(x[MASK] ** 2)), backend=backend)(x)
    np.testing.assert_allclose(g, np.where(MASK, 2 * x, 0.0))


def test_mask_from_the_values_of_a_concrete_tensor():
    x = rm.asarray([[1.0, -2.0], [-3.0, 4.0]])
    np.testing.assert_array_equal(x[x > 0], [1.0, 4.0])
    np.testing.assert_array_equal(x[[True, False]], [[1.0, -2.0]])
    assert x[x > 10].shape == (0,)


def test_a_traced_mask_points_to_where():
    with pytest.raises(rm.TracerError, match=r"^getitem: the boolean mask is traced .* rm\.where\(mask, x, 0\)"):
        rm.jit(lambda x: x[x > 0])(np.ones(3))


# ---------------------------------------------------------------- len and iteration


def test_len_and_iteration_over_the_leading_axis():
    x = rm.asarray(np.arange(6.0).reshape(3, 2))
    assert len(x) == 3
    rows = list(x)
    assert [r.shape for r in rows] == [(2,), (2,), (2,)]
    np.testing.assert_array_equal(rows[2], [4.0, 5.0])
    a, b = rm.random.split(rm.random.key(0))
    assert a.shape == b.shape == (2,)


def test_iterating_a_traced_tensor_unstacks_it_as_jax_does():
    """The leading size is known when tracing, so iteration works (JAX allows it too); keys are
    unpacked this way inside traced code."""

    def f(x):
        first, second = x
        return first * second

    np.testing.assert_array_equal(rm.jit(f)(np.array([[1.0, 2.0], [3.0, 4.0]])), [3.0, 8.0])
    with pytest.raises(rm.ArgumentTypeError, match=r"len\(\) of a 0-d tensor"):
        rm.jit(lambda x: list(x))(np.float32(1.0))


# ---------------------------------------------------------------- rm.random


def _chi2_uniform(counts) -> float:
    return float(stats.chisquare(counts).pvalue)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_randint_is_uniform_on_its_range(dtype):
    x = np.asarray(rm.random.randint(rm.random.key(1), (60000,), -3, 9, dtype=dtype))
    assert x.dtype == np.dtype(dtype) and x.shape == (60000,)
    assert x.min() == -3 and x.max() == 8
    assert _chi2_uniform(np.bincount(x + 3)) > 1e-4


def test_randint_bounds_broadcast_and_may_be_traced():
    lo, hi = np.array([0, 10, 100], np.int32), np.array([2, 20, 1000], np.int32)
    key = rm.random.key(3)
    x = np.asarray(rm.jit(lambda k, lo, hi: rm.random.randint(k, (5000, 3), lo, hi))(key, lo, hi))
    assert ((x >= lo) & (x < hi)).all()
    assert len(set(x[:, 0].tolist())) == 2 and len(set(x[:, 1].tolist())) == 10
    np.testing.assert_array_equal(x, rm.random.randint(key, (5000, 3), lo, hi))
    large = np.asarray(rm.random.randint(key, (1000,), 0, 2**40, dtype="int64"))
    assert large.max() > 2**39 and large.min() >= 0


def test_categorical_follows_the_softmax_of_the_logits():
    p = np.array([0.1, 0.2, 0.3, 0.4])
    draws = np.asarray(rm.random.categorical(rm.random.key(2), np.log(p), shape=(40000,)))
    assert draws.dtype == np.int32
    counts = np.bincount(draws, minlength=4)
    assert stats.chisquare(counts, 40000 * p).pvalue > 1e-4


def test_categorical_axis_batch_and_extra_samples():
    logits = np.log(np.array([[0.9, 0.05], [0.05, 0.05], [0.05, 0.9]]))  # categories on axis 0
    out = np.asarray(rm.random.categorical(rm.random.key(0), logits, axis=0, shape=(2000, 2)))
    assert out.shape == (2000, 2)
    assert abs(np.mean(out[:, 0] == 0) - 0.9) < 0.03 and abs(np.mean(out[:, 1] == 2) - 0.9) < 0.03
    assert (rm.random.categorical(rm.random.key(0), np.array([0.0, -np.inf])) == 0).item()


def test_permutation_is_a_uniform_shuffle():
    keys = rm.random.split(rm.random.key(0), 2400)
    perms = np.asarray(rm.vmap(lambda k: rm.random.permutation(k, 4))(keys))
    np.testing.assert_array_equal(perms[7], rm.random.permutation(keys[7], 4))  # vmap draws what one key does
    assert (np.sort(perms, axis=1) == np.arange(4)).all()
    assert _chi2_uniform(np.bincount(perms[:, 0], minlength=4)) > 1e-4
    orders = np.unique(perms, axis=0, return_counts=True)[1]
    assert len(orders) == 24 and _chi2_uniform(orders) > 1e-4


def test_permutation_of_a_tensor_along_an_axis_and_traced():
    x = np.arange(12.0).reshape(3, 4)
    key = rm.random.key(5)
    out = np.asarray(rm.random.permutation(key, x, axis=1))
    np.testing.assert_array_equal(np.sort(out, axis=1), x)
    assert (out[:, :1] - x[:, :1] == out[1:2, :1] - x[1:2, :1]).all()  # one order for every row
    np.testing.assert_array_equal(rm.jit(lambda k, x: rm.random.permutation(k, x, axis=1), backend="xla")(key, x), out)


@pytest.mark.parametrize("lower,upper", [(-1.0, 2.0), (5.0, 6.0), (-np.inf, -3.0), (0.5, np.inf)])
def test_truncated_normal_has_the_truncated_distribution(lower, upper):
    z = np.asarray(rm.random.truncated_normal(rm.random.key(7), lower, upper, (20000,), "float64"))
    assert z.dtype == np.float64 and ((z >= lower) & (z <= upper)).all()
    assert stats.kstest(z, stats.truncnorm(lower, upper).cdf).pvalue > 1e-4


def test_truncated_normal_dtype_shape_bounds_and_backends():
    key = rm.random.key(0)
    lo, hi = np.array([-1.0, 0.0, 2.0], np.float32), np.array([1.0, 0.5, 2.5], np.float32)
    z = rm.random.truncated_normal(key, lo, hi, (1000, 3))
    assert z.dtype == np.float32 and z.shape == (1000, 3)
    assert ((np.asarray(z) >= lo) & (np.asarray(z) <= hi)).all()
    for backend in ("numpy", "xla"):
        jitted = rm.jit(lambda k, lo, hi: rm.random.truncated_normal(k, lo, hi, (1000, 3)), backend=backend)
        np.testing.assert_allclose(jitted(key, lo, hi), z, rtol=1e-6)


@pytest.mark.parametrize("draw", [
    lambda k: rm.random.randint(k, (50,), 0, 7),
    lambda k: rm.random.categorical(k, rm.zeros((3, 5))),
    lambda k: rm.random.permutation(k, 9),
    lambda k: rm.random.truncated_normal(k, -2.0, 1.0, (50,)),
], ids=["randint", "categorical", "permutation", "truncated_normal"])
def test_the_same_key_gives_the_same_numbers_eagerly_and_on_both_backends(draw):
    key = rm.random.split(rm.random.key(11))[1]
    eager = np.asarray(draw(key))
    for backend in ("numpy", "xla"):
        np.testing.assert_array_equal(rm.jit(draw, backend=backend)(key), eager)
    assert not np.array_equal(np.asarray(draw(rm.random.key(12))), eager)
    assert math.isfinite(float(np.sum(eager)))
