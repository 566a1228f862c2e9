"""Gradients of every differentiable op and composite, from one table of specs (as JAX's
LAX_GRAD_OPS): each row is checked against central finite differences in float64, against
`jax.grad` on the same inputs, in float32, to second order, and inside a checkpoint. Then the
transformations themselves: argnums, pytrees, has_aux, dtypes, errors, nesting, long chains.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.ad_checkpoint
import jax.numpy as jnp
import jax.scipy.linalg
import numpy as np
import pytest

import remat as rm
from remat.core import Aval
from remat.ops import OPS, barrier, index_add

# ---------------------------------------------------------------- input domains


def normal(rng, shape):
    return rng.normal(size=shape)


def positive(rng, shape):
    return rng.uniform(0.5, 2.0, size=shape)


def nonzero(rng, shape):
    return rng.choice([-1.0, 1.0], size=shape) * rng.uniform(0.5, 2.0, size=shape)


def above_minus_one(rng, shape):
    return rng.uniform(-0.5, 2.0, size=shape)


def unit(rng, shape):
    return rng.uniform(-0.9, 0.9, size=shape)


def spread(rng, shape):
    """Values at least 0.1 apart, so no max, min or sort order is near a tie."""
    n = int(np.prod(shape))
    return rng.permutation(np.linspace(-2.0, 2.0, n) + 0.1 * rng.uniform(size=n)).reshape(shape)


@dataclasses.dataclass(frozen=True)
class Spec:
    """One row: `fn` (remat) and `jfn` (jax.numpy) take the same float inputs, one per shape."""

    name: str  # the primitive in OPS (or the composite) this row tests
    fn: Callable
    jfn: Callable
    shapes: tuple
    domain: Callable | tuple = normal  # one sampler, or one per input
    dtypes: tuple = ("float64", "float32")
    tol: float = 1e-6  # float64 relative tolerance against FD and JAX
    second_order: bool = True
    fd_eps: float = 1e-6
    params: dict = dataclasses.field(default_factory=dict)  # extra keyword arguments of both fns
    tag: str = ""

    @property
    def id(self) -> str:
        return f"{self.name}[{self.tag}]" if self.tag else self.name

    def sample(self, rng) -> list[np.ndarray]:
        doms = self.domain if isinstance(self.domain, tuple) else (self.domain,) * len(self.shapes)
        return [np.asarray(d(rng, s), np.float64) for d, s in zip(doms, self.shapes)]

    def rfn(self, *xs):
        return self.fn(*xs, **self.params)

    def jaxfn(self, *xs):
        return self.jfn(*xs, **self.params)


def S(name, fn, jfn, *shapes, **kw) -> Spec:
    return Spec(name, fn, jfn, shapes, **kw)


IDX = np.array([2, 0, -1, 2])  # repeated and negative indices
MASK = np.array([[True, False, True, True], [False, False, True, False], [True, True, False, True]])
KEY = rm.random.key(7)
DROP_MASK = np.asarray(rm.random.bernoulli(KEY, 0.7, (3, 4)))


def _other_float(x):
    return "float32" if x.dtype == np.float64 else "float64"


def _tie(sin, a, b):
    return a * b + sin(a)


def _jax_ln(x, g, b, axis=-1, eps=1e-5):
    mu = jnp.mean(x, axis=axis, keepdims=True)
    var = jnp.mean((x - mu) ** 2, axis=axis, keepdims=True)
    return (x - mu) / jnp.sqrt(var + eps) * g + b


def _jax_ce(logits, labels):
    lp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(lp, labels[..., None], axis=-1))


LABELS = np.array([[1, 0, 3], [2, 2, 0]])
# rm.shard's row: a layout on this process's one device (tests/test_sharding.py runs on eight).
ONE_DEVICE = jax.sharding.NamedSharding(jax.sharding.Mesh(np.array(jax.devices()[:1]), ("d",)),
                                        jax.sharding.PartitionSpec("d", None))

UNARY = [
    S("negative", rm.negative, jnp.negative, (3, 4)),
    S("abs", rm.abs, jnp.abs, (3, 4), domain=nonzero),
    S("exp", rm.exp, jnp.exp, (3, 4)),
    S("log", rm.log, jnp.log, (3, 4), domain=positive),
    S("log1p", rm.log1p, jnp.log1p, (3, 4), domain=above_minus_one),
    S("sqrt", rm.sqrt, jnp.sqrt, (3, 4), domain=positive),
    S("sin", rm.sin, jnp.sin, (3, 4)),
    S("cos", rm.cos, jnp.cos, (3, 4)),
    S("tanh", rm.tanh, jnp.tanh, (3, 4)),
    S("square", rm.square, jnp.square, (3, 4)),
    S("clip", rm.clip, jnp.clip, (3, 4), domain=spread, params=dict(min=-1.05, max=0.95)),
    S("convert", lambda x: rm.astype(x, _other_float(x)) * 2.0,
      lambda x: x.astype(_other_float(x)) * 2.0, (3, 4), fd_eps=1e-2, tol=1e-5),
    S("checkpoint_name", lambda x: rm.checkpoint_name(rm.sin(x), "s"),
      lambda x: jax.ad_checkpoint.checkpoint_name(jnp.sin(x), "s"), (3,)),
    S("shard", lambda x: rm.shard(rm.sin(x), ONE_DEVICE),
      lambda x: jax.lax.with_sharding_constraint(jnp.sin(x), ONE_DEVICE), (3, 4)),
]

BROADCASTS = [((3, 4), (3, 4)), ((3, 4), (4,)), ((3, 1), (1, 4)), ((), (2, 3)), ((2, 1, 4), (3, 1))]


def _binary(name, fn, jfn, domain=normal):
    return [S(name, fn, jfn, a, b, domain=domain, tag=f"{a}x{b}") for a, b in BROADCASTS]


BINARY = [
    *_binary("add", rm.add, jnp.add),
    *_binary("subtract", rm.subtract, jnp.subtract),
    *_binary("multiply", rm.multiply, jnp.multiply),
    *_binary("divide", rm.divide, jnp.divide, (normal, nonzero)),
    *_binary("pow", rm.pow, jnp.power, (positive, normal)),
    *_binary("maximum", rm.maximum, jnp.maximum, spread),
    *_binary("minimum", rm.minimum, jnp.minimum, spread),
    S("where", lambda x, y: rm.where(MASK, x, y), lambda x, y: jnp.where(MASK, x, y), (3, 4), (3, 4)),
    S("where", lambda x, y: rm.where(MASK[0], x, y), lambda x, y: jnp.where(MASK[0], x, y),
      (3, 1), (), tag="broadcast"),
    S("barrier", lambda x, y: _tie(rm.sin, *barrier(x, y)),
      lambda x, y: _tie(jnp.sin, *jax.lax.optimization_barrier((x, y))), (3,), (3,)),
]


REDUCE = [
    S("sum", rm.sum, jnp.sum, (3, 4)),
    S("sum", rm.sum, jnp.sum, (2, 3, 4), params=dict(axis=(0, 2), keepdims=True), tag="axes"),
    S("mean", rm.mean, jnp.mean, (2, 3, 4), params=dict(axis=1)),
    S("prod", rm.prod, jnp.prod, (3, 4), domain=nonzero, params=dict(axis=1)),
    S("max", rm.max, jnp.max, (3, 4), domain=spread, params=dict(axis=0)),
    S("max", rm.max, jnp.max, (3, 4), domain=spread, tag="all"),
    S("min", rm.min, jnp.min, (2, 3, 4), domain=spread, params=dict(axis=(1, 2), keepdims=True)),
]

SHAPE = [
    S("reshape", rm.reshape, jnp.reshape, (3, 4), params=dict(shape=(2, 6))),
    S("permute_dims", rm.permute_dims, jnp.transpose, (2, 3, 4), params=dict(axes=(2, 0, 1))),
    S("transpose", rm.transpose, jnp.transpose, (2, 3, 4)),
    S("matrix_transpose", rm.matrix_transpose, jnp.matrix_transpose, (2, 3, 4)),
    S("broadcast_to", rm.broadcast_to, jnp.broadcast_to, (3, 1), params=dict(shape=(2, 3, 4))),
    S("expand_dims", rm.expand_dims, jnp.expand_dims, (3, 4), params=dict(axis=1)),
    S("squeeze", rm.squeeze, jnp.squeeze, (3, 1, 4), params=dict(axis=1)),
    S("concat", lambda x, y, z: rm.concat([x, y, z], axis=1),
      lambda x, y, z: jnp.concatenate([x, y, z], axis=1), (2, 1), (2, 3), (2, 2)),
    S("stack", lambda x, y: rm.stack([x, y], axis=1), lambda x, y: jnp.stack([x, y], axis=1),
      (3, 4), (3, 4)),
    S("slice", rm.slice, lambda x, start, stop, step: x[1:3:1, 0:4:3],
      (3, 4), params=dict(start=(1, 0), stop=(3, 4), step=(1, 3))),
    S("pad", rm.pad, lambda x, lo, hi, interior: jax.lax.pad(x, 0.0, list(zip(lo, hi, interior))),
      (3, 4), params=dict(lo=(1, 0), hi=(0, 2), interior=(1, 2))),
    S("flip", rm.flip, jnp.flip, (3, 4), params=dict(axis=1)),
    S("getitem", lambda x: x[1:, ::-2], lambda x: x[1:, ::-2], (3, 4), tag="slices"),
    S("getitem", lambda x: x[None, 0, ...], lambda x: x[None, 0, ...], (3, 4), tag="int-none"),
    S("getitem", lambda x: x[:, IDX], lambda x: x[:, IDX], (3, 4), tag="tensor"),
]

LINALG = [
    S("matmul", rm.matmul, jnp.matmul, (3, 4), (4, 2)),
    S("matmul", rm.matmul, jnp.matmul, (2, 3, 4), (4, 5), tag="batch"),
    S("matmul", rm.matmul, jnp.matmul, (2, 1, 3, 4), (5, 4, 2), tag="broadcast"),
    S("matmul", rm.matmul, jnp.matmul, (4,), (3, 4, 2), tag="vector"),
    S("matmul", rm.matmul, jnp.matmul, (3, 4), (4,), tag="matvec"),
    S("tensordot", rm.tensordot, jnp.tensordot, (2, 3, 4), (4, 3, 5),
      params=dict(axes=([1, 2], [1, 0]))),
]

INDEXING = [
    S("take", lambda x: rm.take(x, IDX, axis=1), lambda x: x[:, IDX], (3, 4)),
    S("take", lambda x: rm.take(x, IDX.reshape(2, 2)), lambda x: x.reshape(-1)[IDX.reshape(2, 2)],
      (3, 4), tag="flat"),
    S("index_add", lambda x, u: index_add(x, IDX, u, axis=0), lambda x, u: x.at[IDX].add(u),
      (3, 2), (4, 2)),
]


def _rm_ck(x, w):
    return rm.checkpoint(lambda h: rm.tanh(h @ w), x)


def _jax_ck(x, w):
    return jax.checkpoint(lambda h, w: jnp.tanh(h @ w))(x, w)


@rm.custom_vjp
def _sin_times(x, y):
    return rm.sin(x) * y


# x' = g y cos x,  y' = g sin x
_sin_times.defvjp(lambda x, y: (rm.sin(x) * y, (x, y)), lambda r, g: (g * r[1] * rm.cos(r[0]), g * rm.sin(r[0])))


@rm.custom_jvp
def _sin_times_jvp(x, y):
    return rm.sin(x) * y


# d(sin x y) = y cos x dx + sin x dy; reverse mode transposes it
_sin_times_jvp.defjvp(lambda p, t: (_sin_times_jvp(*p), t[0] * p[1] * rm.cos(p[0]) + rm.sin(p[0]) * t[1]))

NN = [
    S("custom_jvp", _sin_times_jvp, lambda x, y: jnp.sin(x) * y, (3,), (3,)),
    S("checkpoint", _rm_ck, _jax_ck, (2, 3), (3, 3)),
    S("custom_vjp", _sin_times, lambda x, y: jnp.sin(x) * y, (3,), (3,)),
    S("checkpoint", lambda x: rm.checkpoint(lambda: rm.sin(x) * x), lambda x: jnp.sin(x) * x,
      (3,), tag="no-inputs"),
    S("relu", rm.nn.relu, jax.nn.relu, (3, 4), domain=nonzero),
    S("gelu", rm.nn.gelu, jax.nn.gelu, (3, 4)),
    S("gelu", functools.partial(rm.nn.gelu, approximate=False),
      functools.partial(jax.nn.gelu, approximate=False), (3, 4), tol=1e-6, tag="exact"),
    S("sigmoid", rm.nn.sigmoid, jax.nn.sigmoid, (3, 4)),
    S("softmax", rm.nn.softmax, jax.nn.softmax, (3, 4)),
    S("softmax", rm.nn.softmax, jax.nn.softmax, (3, 4), params=dict(axis=0), tag="axis0"),
    S("log_softmax", rm.nn.log_softmax, jax.nn.log_softmax, (3, 4)),
    S("logsumexp", rm.nn.logsumexp, jax.nn.logsumexp, (3, 4)),
    S("logsumexp", rm.nn.logsumexp, jax.nn.logsumexp, (2, 3, 4), params=dict(axis=(0, 2), keepdims=True),
      tag="axes"),
    S("layer_norm", rm.nn.layer_norm, _jax_ln, (3, 4), (4,), (4,)),
    S("layer_norm", rm.nn.layer_norm, _jax_ln, (2, 3, 4), (3, 1), (1,), params=dict(axis=(1, 2)),
      tag="axes"),
    S("cross_entropy", lambda z: rm.nn.cross_entropy(z, LABELS), lambda z: _jax_ce(z, LABELS),
      (2, 3, 5)),
    S("dropout", lambda x: rm.nn.dropout(KEY, x, 0.3), lambda x: jnp.where(DROP_MASK, x / 0.7, 0.0),
      (3, 4)),
]


def zeros_among(rng, shape):
    """Normal values with exact zeros mixed in (where a cumulative product's naive gradient,
    out / x, divides by zero)."""
    x = rng.normal(size=shape)
    x.reshape(-1)[:: max(1, x.size // 3)] = 0.0
    return x


WHERE = np.array([[0, 2], [1, 1]])  # repeated positions for the functional updates


def _jax_rms(x, g, axis=-1, eps=1e-6):
    return x / jnp.sqrt(jnp.mean(x * x, axis=axis, keepdims=True) + eps) * g


def _well_conditioned(rng, shape):
    return rng.normal(size=shape) + shape[-1] * np.eye(shape[-1])


def _spd(rng, shape):
    m = rng.normal(size=shape)
    return m @ np.swapaxes(m, -1, -2) + shape[-1] * np.eye(shape[-1])


NAMES = [  # issue 11: the names NumPy and JAX users type, primitives and compositions
    S("cumsum", rm.cumsum, jnp.cumsum, (3, 4), params=dict(axis=1)),
    S("cumsum", rm.cumsum, jnp.cumsum, (2, 3), tag="flat"),
    S("cumprod", rm.cumprod, jnp.cumprod, (3, 5), params=dict(axis=1)),
    S("cumprod", rm.cumprod, jnp.cumprod, (2, 7), domain=zeros_among, params=dict(axis=-1), tag="zeros"),
    S("sort", rm.sort, jnp.sort, (3, 4), domain=spread),
    S("sort", rm.sort, jnp.sort, (3, 4), domain=spread, params=dict(axis=0, descending=True), tag="descending"),
    S("remainder", rm.remainder, jnp.remainder, (3, 4), (4,), domain=(spread, positive)),
    S("var", rm.var, jnp.var, (3, 4), params=dict(axis=1, ddof=1)),
    S("std", rm.std, jnp.std, (2, 3, 4), params=dict(axis=(0, 2))),
    S("einsum", lambda a, b: rm.einsum("bij,jk->bki", a, b), lambda a, b: jnp.einsum("bij,jk->bki", a, b),
      (2, 3, 4), (4, 5)),
    S("einsum", lambda a: rm.einsum("ii->i", a), lambda a: jnp.einsum("ii->i", a), (3, 3), tag="diagonal"),
    S("einsum", lambda a, b, c: rm.einsum("ij,jk,k->i", a, b, c), lambda a, b, c: jnp.einsum("ij,jk,k->i", a, b, c),
      (2, 3), (3, 4), (4,), tag="three"),
    S("outer", rm.outer, jnp.outer, (3,), (2, 2)),
    S("norm", rm.linalg.norm, jnp.linalg.norm, (3, 4)),
    S("norm", rm.linalg.norm, jnp.linalg.norm, (3, 4), domain=nonzero, params=dict(ord=1, axis=1), tag="l1"),
    S("norm", rm.linalg.norm, jnp.linalg.norm, (3, 4), domain=positive, params=dict(ord=3, axis=0), tag="p3"),
    S("norm", rm.linalg.norm, jnp.linalg.norm, (3, 4), domain=spread, params=dict(ord=np.inf), tag="matrix-inf"),
    S("silu", rm.nn.silu, jax.nn.silu, (3, 4)),
    S("softplus", rm.nn.softplus, jax.nn.softplus, (3, 4)),
    S("rms_norm", rm.nn.rms_norm, _jax_rms, (3, 4), (4,)),
    S("at_set", lambda x, v: x.at[WHERE].set(v), lambda x, v: x.at[WHERE].set(v), (3, 4), (2, 2, 4)),
    S("at_add", lambda x, v: x.at[:, WHERE].add(v), lambda x, v: x.at[:, WHERE].add(v), (3, 4), (3, 2, 2)),
    S("at_multiply", lambda x, v: x.at[1:, 2].multiply(v), lambda x, v: x.at[1:, 2].multiply(v), (3, 4), (2,)),
    S("mask", lambda x: x[MASK] * 2.0, lambda x: x[MASK] * 2.0, (3, 4)),
    S("split", lambda x: rm.split(x, [1, 3], axis=1)[1] * 3.0, lambda x: jnp.split(x, [1, 3], axis=1)[1] * 3.0,
      (3, 4)),
    # primitives for more of NumPy's and SciPy's names (their compositions are rows of tests/test_names.py)
    S("expm1", rm.expm1, jnp.expm1, (3, 4)),
    S("sinh", rm.sinh, jnp.sinh, (3, 4)),
    S("cosh", rm.cosh, jnp.cosh, (3, 4)),
    S("asinh", rm.arcsinh, jnp.arcsinh, (3, 4)),
    S("asin", rm.arcsin, jnp.arcsin, (3, 4), domain=unit),
    S("acos", rm.arccos, jnp.arccos, (3, 4), domain=unit),
    S("atan", rm.arctan, jnp.arctan, (3, 4)),
    S("atan2", rm.arctan2, jnp.arctan2, (3, 4), (4,), domain=(normal, nonzero)),
    S("erf", rm.special.erf, jax.scipy.special.erf, (3, 4)),
    S("erfc", rm.special.erfc, jax.scipy.special.erfc, (3, 4)),
    S("lgamma", rm.special.gammaln, jax.scipy.special.gammaln, (3, 4), domain=positive),
    S("digamma", rm.special.digamma, jax.scipy.special.digamma, (3, 4), domain=positive),
    S("polygamma", lambda x: rm.special.polygamma(1, x), lambda x: jax.scipy.special.polygamma(1, x), (3, 4),
      domain=positive),
    # rm.linalg's decompositions and solvers (each output squared or one taken where signs are free)
    S("solve", rm.linalg.solve, jnp.linalg.solve, (3, 3), (3, 2), domain=(_well_conditioned, normal)),
    S("triangular_solve", lambda a, b: rm.linalg.solve_triangular(a, b, lower=True),
      lambda a, b: jax.scipy.linalg.solve_triangular(a, b, lower=True), (3, 3), (3,),
      domain=(_well_conditioned, normal)),
    S("cholesky", rm.linalg.cholesky, jnp.linalg.cholesky, (3, 3), domain=_spd),
    S("qr", lambda a: rm.linalg.qr(a, mode="r") ** 2, lambda a: jnp.linalg.qr(a, mode="r") ** 2, (4, 3)),
    S("eigh", lambda a: rm.linalg.eigh(a)[1] ** 2, lambda a: jnp.linalg.eigh(a)[1] ** 2, (3, 3)),
    S("svd", lambda a: rm.linalg.svd(a, full_matrices=False)[0] ** 2,
      lambda a: jnp.linalg.svd(a, full_matrices=False)[0] ** 2, (4, 3)),
    S("slogdet", lambda a: rm.linalg.slogdet(a)[1], lambda a: jnp.linalg.slogdet(a)[1], (3, 3),
      domain=_well_conditioned),
    S("det", rm.linalg.det, jnp.linalg.det, (2, 3, 3)),
]


def _rm_scan(c, xs, w, reverse=False):  # w is read from scope: a loop-invariant input
    return rm.scan(lambda h, x: (rm.tanh(h * x + w), rm.sin(h) * w), c, xs, reverse=reverse)


def _jax_scan(c, xs, w, reverse=False):
    return jax.lax.scan(lambda h, x: (jnp.tanh(h * x + w), jnp.sin(h) * w), c, xs, reverse=reverse)


def _branches(x, y):  # y is read from scope by one branch only
    return (lambda a: rm.sin(a) * y, lambda a: a * a) if isinstance(x, rm.Tensor) else \
        (lambda a: jnp.sin(a) * y, lambda a: a * a)


LOOPS = [
    S("scan", _rm_scan, _jax_scan, (3,), (5, 3), (3,)),
    S("scan", _rm_scan, _jax_scan, (3,), (5, 3), (3,), params=dict(reverse=True), tag="reverse"),
    S("cond", lambda x, y: rm.cond(rm.sum(x) > 0, *_branches(x, y), x),
      lambda x, y: jax.lax.cond(jnp.sum(x) > 0, *_branches(x, y), x), (3,), (3,), domain=positive, tag="true"),
    S("cond", lambda x, y: rm.cond(rm.sum(x) < 0, *_branches(x, y), x),
      lambda x, y: jax.lax.cond(jnp.sum(x) < 0, *_branches(x, y), x), (3,), (3,), domain=positive, tag="false"),
]
FORWARD_ONLY = {"while", "scan_binomial"}  # reverse mode raises (tests/test_loops.py checks the error)

SPECS = UNARY + BINARY + REDUCE + SHAPE + LINALG + INDEXING + NN + NAMES + LOOPS
IDS = [s.id for s in SPECS]

# ---------------------------------------------------------------- helpers


@pytest.fixture
def x64():
    """JAX in float64 for the comparison, restored afterwards."""
    with jax.enable_x64(True):
        yield


def _inputs(spec: Spec, dtype="float64", seed=0):
    return [rm.asarray(x, dtype) for x in spec.sample(np.random.default_rng(seed))]


def _cotangents(spec: Spec, xs, seed=1):
    """A random cotangent for every output leaf, in the leaf's dtype."""
    rng = np.random.default_rng(seed)
    return [rng.normal(size=o.shape).astype(o.dtype) for o in rm.tree.leaves(spec.rfn(*xs))]


def _loss(spec: Spec, cts):
    """The scalar `sum(out * ct)` whose gradient is the VJP of `spec` at `cts`."""

    def loss(*xs):
        return functools.reduce(
            lambda a, b: a + b, [rm.sum(o * c) for o, c in zip(rm.tree.leaves(spec.rfn(*xs)), cts)]
        )

    return loss


def _jax_loss(spec: Spec, cts):
    def loss(*xs):
        return sum(jnp.sum(o * c) for o, c in zip(jax.tree_util.tree_leaves(spec.jaxfn(*xs)), cts))

    return loss


def _all(n: int) -> tuple[int, ...]:
    return tuple(range(n))


def _grads(spec, xs, cts):
    return rm.grad(_loss(spec, cts), argnums=_all(len(xs)))(*xs)


def _directional_fd(f, xs, vs, eps):
    """(f(x + eps v) - f(x - eps v)) / 2 eps, all inputs moved at once."""
    plus = f(*[x + eps * v for x, v in zip(xs, vs)])
    minus = f(*[x - eps * v for x, v in zip(xs, vs)])
    return (float(plus) - float(minus)) / (2 * eps)


def _dot(gs, vs) -> float:
    return sum(float(np.vdot(np.asarray(g), np.asarray(v))) for g, v in zip(gs, vs))


def _directions(xs, seed=2):
    rng = np.random.default_rng(seed)
    return [rm.asarray(rng.normal(size=x.shape), x.dtype) for x in xs]


def _close(actual, expected, rtol, atol=None):
    expected = np.asarray(expected)
    scale = max(1.0, float(np.max(np.abs(expected), initial=0.0)))
    np.testing.assert_allclose(np.asarray(actual), expected, rtol=rtol, atol=(atol or rtol) * scale)


# ---------------------------------------------------------------- (a)-(d): the table


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_against_finite_differences(spec: Spec):
    xs = _inputs(spec)
    cts = _cotangents(spec, xs)
    loss = _loss(spec, cts)
    vs = _directions(xs)
    fd = _directional_fd(loss, xs, vs, spec.fd_eps)
    assert _dot(_grads(spec, xs, cts), vs) == pytest.approx(fd, rel=max(spec.tol, 1e-6) * 10, abs=1e-6)


_JAX_CACHE: dict[str, tuple] = {}


def _jax_reference(spec: Spec, xs, cts, vs):
    """JAX's gradient and its second-order counterpart (the gradient of <gradient, vs>) in
    float64, from one jitted program per spec (compiling is what costs here), cached."""
    if spec.id not in _JAX_CACHE:
        n = len(xs)
        jvs = [np.asarray(v) for v in vs]

        def both(*ys):
            first = jax.grad(_jax_loss(spec, cts), argnums=_all(n))
            phi = lambda *zs: sum(jnp.sum(g * v) for g, v in zip(first(*zs), jvs))  # noqa: E731
            return first(*ys), jax.grad(phi, argnums=_all(n))(*ys)

        with jax.enable_x64(True):
            out = jax.jit(both)(*[jnp.asarray(np.asarray(x)) for x in xs])
            _JAX_CACHE[spec.id] = jax.tree_util.tree_map(np.asarray, out)
    return _JAX_CACHE[spec.id]


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_against_jax(spec: Spec):
    xs = _inputs(spec)
    cts = _cotangents(spec, xs)
    expected, _ = _jax_reference(spec, xs, cts, _directions(xs, seed=3))
    for g, e in zip(_grads(spec, xs, cts), expected):
        assert g.dtype == np.float64
        _close(g, e, spec.tol)


@pytest.mark.parametrize("spec", [s for s in SPECS if "float32" in s.dtypes],
                         ids=[s.id for s in SPECS if "float32" in s.dtypes])
def test_float32_gradient_keeps_dtype_and_value(spec: Spec):
    xs64 = _inputs(spec)
    cts64 = _cotangents(spec, xs64)
    xs = [x.astype("float32") for x in xs64]
    cts = [c.astype(o.dtype) for c, o in zip(cts64, rm.tree.leaves(spec.rfn(*xs)))]
    for g, x, e in zip(_grads(spec, xs, cts), xs, _grads(spec, xs64, cts64)):
        assert g.dtype == x.dtype == np.float32
        assert g.shape == x.shape
        _close(g, e, 2e-4, 1e-5)


SECOND = [s for s in SPECS if s.second_order]


@pytest.mark.parametrize("spec", SECOND, ids=[s.id for s in SECOND])
def test_second_order(spec: Spec):
    """grad of <grad f, v> (grad of grad along a random direction v), checked against finite
    differences of it and against JAX."""
    xs = _inputs(spec)
    cts = _cotangents(spec, xs)
    n = len(xs)
    vs = _directions(xs, seed=3)
    first = rm.grad(_loss(spec, cts), argnums=_all(n))

    def phi(*ys):
        return functools.reduce(lambda a, b: a + b, [rm.sum(g * v) for g, v in zip(first(*ys), vs)])

    hvp = rm.grad(phi, argnums=_all(n))(*xs)
    us = _directions(xs, seed=4)
    fd = _directional_fd(phi, xs, us, 1e-5)
    assert _dot(hvp, us) == pytest.approx(fd, rel=max(spec.tol, 1e-6) * 10, abs=1e-6)
    _, expected = _jax_reference(spec, xs, cts, vs)
    for g, e in zip(hvp, expected):
        _close(g, e, spec.tol)


@pytest.mark.parametrize("spec", SPECS, ids=IDS)
def test_checkpointed_gradient_equals_plain(spec: Spec):
    xs = _inputs(spec)
    cts = _cotangents(spec, xs)
    plain = _grads(spec, xs, cts)
    ck = Spec(spec.name, lambda *ys: rm.checkpoint(spec.rfn, *ys), spec.jfn, spec.shapes)
    for g, e in zip(_grads(ck, xs, cts), plain):
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=1e-12, atol=1e-14)


# ---------------------------------------------------------------- (e): coverage of the op table


def test_spec_ids_are_unique():
    assert len(set(IDS)) == len(IDS)


def test_every_op_has_a_vjp_rule_or_is_declared_not_differentiable():
    for name, op in OPS.items():
        assert op.vjp is rm.ops.NOT_DIFFERENTIABLE or callable(op.vjp), name


def test_every_differentiable_op_has_a_gradient_spec():
    tested = {s.name for s in SPECS}
    missing = sorted(name for name, op in OPS.items()
                     if op.differentiable and name not in tested and name not in FORWARD_ONLY)
    assert not missing, f"differentiable ops without a row in SPECS: {missing}"


@pytest.mark.parametrize("spec", [s for s in SPECS if s.name in OPS], ids=[s.id for s in SPECS if s.name in OPS])
def test_spec_really_runs_its_op(spec: Spec):
    graph = rm.make_graph(spec.rfn)(*_inputs(spec))
    assert graph.count(spec.name) > 0, f"{spec.id} never runs {spec.name}:\n{graph}"


@pytest.mark.parametrize(
    "fn, jfn",
    [
        (rm.sign, jnp.sign),
        (lambda x: rm.floor(x * 3.0), lambda x: jnp.floor(x * 3.0)),
        (lambda x: rm.ceil(x * 3.0), lambda x: jnp.ceil(x * 3.0)),
        (lambda x: rm.round(x * 3.0), lambda x: jnp.round(x * 3.0)),
        (rm.stop_gradient, jax.lax.stop_gradient),
        (lambda x: rm.argmax(x, axis=1, keepdims=True).astype("float64"),
         lambda x: jnp.argmax(x, axis=1, keepdims=True).astype(x.dtype)),
        (lambda x: rm.where(x > 0.0, 1.0, 0.0).astype("float64"), lambda x: jnp.where(x > 0, 1.0, 0.0)),
        (lambda x: (x * 3.0).astype("int32").astype("float64"), lambda x: (x * 3.0).astype(jnp.int32).astype(x.dtype)),
    ],
    ids=["sign", "floor", "ceil", "round", "stop_gradient", "argmax", "comparison", "convert-to-int"],
)
def test_non_differentiable_ops_give_zero_gradient(fn, jfn, x64):
    x = np.random.default_rng(0).normal(size=(3, 4))
    g = rm.grad(lambda x: rm.sum(fn(x) * x))(rm.asarray(x))
    e = jax.grad(lambda x: jnp.sum(jfn(x) * x))(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=1e-12)


@pytest.mark.parametrize(
    "fn, jfn, x",
    [
        (rm.max, jnp.max, [1.0, 3.0, 3.0, 0.0]),
        (lambda x: rm.maximum(x, 1.0), lambda x: jnp.maximum(x, 1.0), [1.0, 0.0, 2.0]),
        (lambda x: rm.clip(x, 0.0, 1.0), lambda x: jnp.clip(x, 0.0, 1.0), [0.0, 1.0, 0.5, 2.0]),
        (rm.nn.relu, jax.nn.relu, [0.0, -1.0, 1.0]),
        (rm.nn.sigmoid, jax.nn.sigmoid, [0.0, -40.0, 40.0]),
        (rm.prod, jnp.prod, [0.0, 2.0, 3.0]),
        (rm.prod, jnp.prod, [0.0, 2.0, 0.0]),
    ],
    ids=["max-tie", "maximum-tie", "clip-edges", "relu-at-0", "sigmoid-0-and-tails", "prod-one-zero",
         "prod-two-zeros"],
)
def test_gradient_at_kinks_and_ties_matches_jax(fn, jfn, x, x64):
    g = rm.grad(lambda x: rm.sum(fn(x)))(rm.asarray(x, "float64"))
    e = jax.grad(lambda x: jnp.sum(jfn(x)))(jnp.asarray(x, jnp.float64))
    np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=1e-12, atol=1e-17)


@pytest.mark.parametrize("x", [[0.0, 2.0, 3.0], [0.0, -1.5, 0.0, 2.0], [0.0, 0.0, 0.0]])
def test_prod_hessian_at_zeros_matches_jax(x, x64):
    x = np.asarray(x)
    first = rm.grad(rm.prod)
    hess = np.stack([np.asarray(rm.grad(lambda y, i=i: first(y)[i])(rm.asarray(x))) for i in range(len(x))])
    np.testing.assert_allclose(hess, jax.hessian(jnp.prod)(x), rtol=1e-12)


def test_abs_gradient_at_zero_matches_jax():
    # The subgradient at the kink is +1, as in JAX.
    x = np.array([-2.0, 0.0, 3.0], np.float32)
    got = rm.grad(lambda x: rm.sum(rm.abs(x)))(x)
    np.testing.assert_array_equal(got, jax.grad(lambda x: jnp.sum(jnp.abs(x)))(x))
    np.testing.assert_array_equal(got, [-1.0, 1.0, 1.0])


# ---------------------------------------------------------------- the transformations


def f3(x, y, z):
    return rm.sum(rm.sin(x) * y) + rm.sum(z * z)


X, Y, Z = (rm.asarray(np.arange(n, n + 3, dtype=np.float32) / 3) for n in (1, 2, 3))


def test_a_weights_gradient_under_batch_axes_is_one_product_over_all_rows():
    # x (16, 8, 5) @ w (5, 3): w's gradient contracts the 128 rows in one product, never making
    # a (16, 5, 3) product per batch entry to sum afterwards.
    rng = np.random.default_rng(0)
    x, w = rng.normal(size=(16, 8, 5)), rng.normal(size=(5, 3))
    graph = rm.make_graph(rm.grad(lambda w, x: rm.sum(rm.tanh(x @ w))))(w, x)
    assert [n.outputs[0].shape for n in graph.nodes if n.op == "matmul"][-1] == (5, 3)
    assert not [n for n in graph.nodes if n.outputs and n.outputs[0].shape == (16, 5, 3)]
    got = rm.grad(lambda w, x: rm.sum(rm.tanh(x @ w)))(w, x)
    want = np.einsum("bri,brj->ij", x, 1 - np.tanh(x @ w) ** 2)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12)


def test_argnums_int():
    np.testing.assert_allclose(rm.grad(f3, argnums=1)(X, Y, Z), np.sin(np.asarray(X)), rtol=1e-6)


def test_argnums_tuple():
    gx, gz = rm.grad(f3, argnums=(0, 2))(X, Y, Z)
    np.testing.assert_allclose(gx, np.cos(np.asarray(X)) * np.asarray(Y), rtol=1e-6)
    np.testing.assert_allclose(gz, 2 * np.asarray(Z), rtol=1e-6)


def test_argnums_one_tuple_gives_a_tuple():
    (gx,) = rm.grad(f3, argnums=(0,))(X, Y, Z)
    assert gx.shape == (3,)


def test_value_and_grad_with_argnums():
    value, (gy, gz) = rm.value_and_grad(f3, argnums=(1, 2))(X, Y, Z)
    np.testing.assert_allclose(value, f3(X, Y, Z), rtol=1e-6)
    np.testing.assert_allclose(gz, 2 * np.asarray(Z), rtol=1e-6)
    assert gy.shape == (3,)


def test_argnums_out_of_range_is_a_type_error():
    with pytest.raises(TypeError, match="argnums"):
        rm.grad(f3, argnums=3)(X, Y, Z)


def test_vjp_of_several_inputs_and_outputs():
    out, back = rm.vjp(lambda x, y: (x * y, rm.sin(x)), X, Y)
    gx, gy = back((rm.ones((3,)), rm.ones((3,))))
    np.testing.assert_allclose(gx, np.asarray(Y) + np.cos(np.asarray(X)), rtol=1e-6)
    np.testing.assert_allclose(gy, np.asarray(X), rtol=1e-6)
    assert len(out) == 2


def test_vjp_rejects_a_cotangent_of_another_structure():
    _, back = rm.vjp(lambda x: (x, x), X)
    with pytest.raises(TypeError, match="structure"):
        back(rm.ones((3,)))


class Pair(NamedTuple):
    w: Any
    b: Any


@dataclasses.dataclass
class Layer:
    w: Any
    b: Any


def _affine_loss(p, x):
    return rm.sum(rm.tanh(x @ p["w"] if isinstance(p, dict) else x @ p.w) * 2.0) + rm.sum(
        (p["b"] if isinstance(p, dict) else p.b) ** 2
    )


@pytest.mark.parametrize("make", [lambda w, b: {"w": w, "b": b}, Pair, Layer], ids=["dict", "namedtuple", "dataclass"])
def test_pytree_arguments_give_gradients_of_the_same_structure(make):
    rng = np.random.default_rng(0)
    w, b = rm.asarray(rng.normal(size=(3, 2)), "float32"), rm.asarray(rng.normal(size=(2,)), "float32")
    x = rm.asarray(rng.normal(size=(4, 3)), "float32")
    g = rm.grad(_affine_loss)(make(w, b), x)
    assert type(g) is type(make(w, b))
    gw, gb = (g["w"], g["b"]) if isinstance(g, dict) else (g.w, g.b)
    np.testing.assert_allclose(gb, 2 * np.asarray(b), rtol=1e-6)
    jw = jax.grad(lambda w: jnp.sum(jnp.tanh(np.asarray(x) @ w) * 2.0))(jnp.asarray(np.asarray(w)))
    np.testing.assert_allclose(gw, jw, rtol=1e-5, atol=1e-6)


def test_pytree_with_none_and_lists():
    g = rm.grad(lambda p: rm.sum(p[0][0] * p[0][1]) + 0.0 * rm.sum(p[1]["c"]))(
        ([X, Y], {"c": Z, "n": None})
    )
    assert g[1]["n"] is None
    np.testing.assert_allclose(g[0][0], Y)
    np.testing.assert_allclose(g[1]["c"], np.zeros(3))


def test_has_aux():
    def f(x):
        return rm.sum(x * x), {"double": x * 2.0}

    g, aux = rm.grad(f, has_aux=True)(X)
    np.testing.assert_allclose(g, 2 * np.asarray(X), rtol=1e-6)
    np.testing.assert_allclose(aux["double"], 2 * np.asarray(X), rtol=1e-6)
    (value, aux2), g2 = rm.value_and_grad(f, has_aux=True)(X)
    np.testing.assert_allclose(value, np.sum(np.asarray(X) ** 2), rtol=1e-6)
    np.testing.assert_allclose(aux2["double"], aux["double"])
    out, back, aux3 = rm.vjp(lambda x: (x * 3.0, x + 1.0), X, has_aux=True)
    np.testing.assert_allclose(back(rm.ones((3,)))[0], np.full(3, 3.0))
    np.testing.assert_allclose(aux3, np.asarray(X) + 1.0, rtol=1e-6)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gradient_dtype_is_the_primal_dtype(dtype):
    x = rm.asarray([1.0, 2.0], dtype)
    # The function computes in the other precision; the gradient still comes back as `dtype`.
    g = rm.grad(lambda x: rm.sum(rm.sin(x.astype(_other_float(x)))))(x)
    assert g.dtype == np.dtype(dtype)
    g2 = rm.grad(lambda x, y: rm.sum(x) + rm.sum(y).astype(dtype), argnums=1)(x, rm.asarray([1.0], "float64"))
    assert g2.dtype == np.float64


def test_integer_input_is_a_clear_error():
    with pytest.raises(TypeError, match="int32.*only float inputs have gradients"):
        rm.grad(lambda x: rm.sum(x * 1.0))(rm.asarray([1, 2]))


def test_integer_python_scalar_is_a_clear_error():
    with pytest.raises(TypeError, match="float"):
        rm.grad(lambda x: x * 1.0)(3)


def test_non_scalar_output_is_a_clear_type_error():
    with pytest.raises(TypeError, match=r"float scalar.*shape \(3,\).*rm.vjp"):
        rm.grad(lambda x: x * 2.0)(X)


def test_non_tensor_output_is_a_clear_type_error():
    with pytest.raises(TypeError, match="float scalar"):
        rm.grad(lambda x: (rm.sum(x), rm.sum(x)))(X)


def test_integer_output_is_a_clear_type_error():
    with pytest.raises(TypeError, match="float scalar"):
        rm.grad(lambda x: rm.argmax(x))(X)


def test_python_float_argument_is_differentiable():
    assert float(rm.grad(lambda x: x * x)(3.0)) == pytest.approx(6.0)


def test_stop_gradient_blocks_only_its_path():
    g = rm.grad(lambda x: rm.sum(x * rm.stop_gradient(x)))(X)
    np.testing.assert_allclose(g, X)
    assert float(rm.grad(lambda x: rm.sum(rm.stop_gradient(x * x)))(rm.asarray(2.0))) == 0.0


def test_unused_inputs_get_zeros_of_their_shape_and_dtype():
    x64 = rm.asarray(np.ones((2, 3)))
    gx, gy, gz = rm.grad(lambda x, y, z: rm.sum(y), argnums=(0, 1, 2))(x64, Y, rm.asarray(5.0))
    assert (gx.shape, gx.dtype) == ((2, 3), np.float64)
    assert (gz.shape, gz.dtype) == ((), np.float32)
    np.testing.assert_array_equal(gx, 0.0)
    np.testing.assert_array_equal(gz, 0.0)
    np.testing.assert_array_equal(gy, 1.0)


def test_constant_function_has_zero_gradient():
    g = rm.grad(lambda x: rm.asarray(1.0))(X)
    np.testing.assert_array_equal(g, np.zeros(3, np.float32))


def test_grad_of_grad():
    f = lambda x: rm.sum(x * x * x)  # noqa: E731
    np.testing.assert_allclose(rm.grad(lambda x: rm.sum(rm.grad(f)(x)))(X), 6 * np.asarray(X), rtol=1e-6)
    d3 = rm.grad(rm.grad(rm.grad(lambda x: x * x * x)))(rm.asarray(2.0))
    assert float(d3) == pytest.approx(6.0)


def test_grad_of_a_function_that_calls_vjp():
    def f(x):
        y, back = rm.vjp(rm.sin, x)
        (ct,) = back(rm.ones_like(y))  # cos x
        return rm.sum(ct * y)  # sin x cos x = sin(2x) / 2

    np.testing.assert_allclose(rm.grad(f)(X), np.cos(2 * np.asarray(X)), rtol=1e-5)


def test_grad_inside_jit_and_eagerly_agree():
    f = lambda x, y: rm.sum(rm.tanh(x @ y))  # noqa: E731
    rng = np.random.default_rng(0)
    x, y = (rm.asarray(rng.normal(size=s), "float32") for s in [(3, 4), (4, 2)])
    eager = rm.grad(f, argnums=(0, 1))(x, y)
    jitted = rm.jit(rm.grad(f, argnums=(0, 1)))(x, y)
    jv = rm.jit(rm.value_and_grad(f))(x, y)
    for a, b in zip(eager, jitted):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    np.testing.assert_allclose(jv[1], eager[0], rtol=1e-6)


def test_jit_inside_grad():
    f = rm.jit(lambda x: rm.sum(rm.sin(x)))
    np.testing.assert_allclose(rm.grad(f)(X), np.cos(np.asarray(X)), rtol=1e-6)


def test_long_chain_differentiates_without_recursion_error():
    def f(x):
        for i in range(1000):  # 3,000 ops
            x = rm.sin(x) * 0.5 + 0.1 * i / 1000
        return rm.sum(x)

    x0 = np.linspace(-1, 1, 4)
    assert len(rm.make_graph(f)(rm.asarray(x0)).nodes) >= 3000
    g = rm.grad(f)(rm.asarray(x0))
    x, expected = x0, np.ones(4)
    for i in range(1000):  # the chain rule by hand: d x_{i+1} / d x_i = cos(x_i) / 2
        expected, x = expected * np.cos(x) * 0.5, np.sin(x) * 0.5 + 0.1 * i / 1000
    np.testing.assert_allclose(g, expected, rtol=1e-10)


def test_an_op_declared_without_rules_names_itself_in_reverse_and_forward_mode(declare_op):
    from remat.trace import bind

    op = declare_op("test_grad_ops_ruleless", lambda x: Aval(x.shape, x.dtype), None)
    x = rm.ones((3,))
    with pytest.raises(TypeError, match=r"^grad: the op test_grad_ops_ruleless has no VJP rule"):
        rm.grad(lambda x: rm.sum(bind(op, x)))(x)
    with pytest.raises(TypeError, match=r"^jvp: the op test_grad_ops_ruleless has no JVP rule"):
        rm.jvp(lambda x: bind(op, x), (x,), (x,))
