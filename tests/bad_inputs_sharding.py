"""Bad inputs to sharding (issue 16): `rm.shard` and `rm.jit(..., in_shardings=, out_shardings=)`.
These run on this process's one device (a one-device mesh); those that need a mesh axis of
several devices (a dimension the axis does not divide) are in tests/multidevice_sharding.py."""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import remat as rm
from bad_inputs import Case

MESH = Mesh(np.array(jax.devices()[:1]), ("d",))
ROWS = NamedSharding(MESH, P("d"))
X = np.ones((4, 3), np.float32)
PARAMS = {"w": X, "b": np.ones(3, np.float32)}


def on_mesh(call):
    with jax.set_mesh(MESH):
        return call()


def double(x):
    return x * 2.0


def affine(params, x):
    return x @ params["w"].T + params["b"][0]


CASES: list[Case] = [
    Case("sharding-in_shardings-on-numpy", lambda: rm.jit(double, in_shardings=ROWS), rm.ArgumentValueError,
         (r"^jit:", r"in_shardings given with backend='numpy'", r"only the XLA backend", r'backend="xla"')),
    Case("sharding-out_shardings-on-numpy", lambda: rm.jit(double, backend="numpy", out_shardings=P()),
         rm.ArgumentValueError, (r"^jit:", r"out_shardings given with backend='numpy'", r"rm\.shard is a no-op")),
    Case("sharding-in_shardings-not-a-sharding", lambda: rm.jit(double, backend="xla", in_shardings="d"),
         rm.ArgumentTypeError, (r"^jit:", r"in_shardings must be a jax\.sharding\.NamedSharding", r"'d'")),
    Case("sharding-in_shardings-leaf-not-a-sharding",
         lambda: rm.jit(affine, backend="xla", in_shardings=({"w": ROWS, "b": 3}, None)),
         rm.ArgumentTypeError, (r"^jit:", r"in_shardings\[0\]\['b'\] must be", r"got a int 3")),
    Case("sharding-in_shardings-axis-the-mesh-lacks",
         lambda: rm.jit(affine, backend="xla", in_shardings=(None, P("data")))(PARAMS, jax.device_put(X, ROWS)),
         rm.ArgumentValueError, (r"^jit: in_shardings for argument x:", r"P\('data'\)",
                                 r"mesh axis 'data', which the mesh lacks \(its axes: 'd'\)")),
    Case("sharding-out_shardings-axis-the-mesh-lacks",
         lambda: rm.jit(affine, backend="xla", in_shardings=(None, ROWS), out_shardings=P(None, "model"))(PARAMS, X),
         rm.ArgumentValueError, (r"^jit: out_shardings for the output:", r"P\(None, 'model'\)",
                                 r"mesh axis 'model', which the mesh lacks")),
    Case("sharding-shard-axis-the-mesh-lacks", lambda: on_mesh(lambda: rm.shard(rm.asarray(X), P(None, "model"))),
         rm.ArgumentValueError, (r"^shard: x:", r"P\(None, 'model'\)", r"mesh axis 'model', which the mesh lacks",
                                 r"\(its axes: 'd'\)")),
    Case("sharding-shard-axis-the-mesh-lacks-traced",
         lambda: rm.jit(lambda x: rm.shard(x, P("batch")), backend="xla", in_shardings=ROWS)(X),
         rm.ArgumentValueError, (r"^shard: x:", r"P\('batch'\)", r"mesh axis 'batch', which the mesh lacks")),
    Case("sharding-shard-axis-used-twice", lambda: on_mesh(lambda: rm.shard(rm.asarray(X), P("d", "d"))),
         rm.ArgumentValueError, (r"^shard: x:", r"P\('d', 'd'\)", r"uses mesh axis 'd' twice")),
    Case("sharding-shard-more-entries-than-dimensions", lambda: rm.shard(rm.ones((4,)), P(None, None)),
         rm.ShapeError, (r"^shard: x:", r"P\(None, None\) has 2 entries",
                         r"the array has 1 dimension \(shape \(4,\)\)")),
    Case("sharding-in_shardings-more-entries-than-dimensions",
         lambda: rm.jit(affine, backend="xla", in_shardings=({"w": None, "b": NamedSharding(MESH, P("d", None))},
                                                               None))(PARAMS, X),
         rm.ShapeError, (r"^jit: in_shardings for argument params\['b'\]:", r"P\('d', None\) has 2 entries",
                         r"shape \(3,\)")),
    Case("sharding-shard-spec-not-a-spec", lambda: rm.shard(rm.asarray(X), ("d", None)), rm.ArgumentTypeError,
         (r"^shard:", r"spec must be a jax\.sharding\.NamedSharding or PartitionSpec", r"a tuple of 2",
          r"\('d', None\)")),
    Case("sharding-shard-bad-spec-entry", lambda: rm.shard(rm.asarray(X), P(1.5)), rm.ArgumentTypeError,
         (r"^shard: spec:", r"PartitionSpec entry must be None, a mesh axis name", r"got 1\.5")),
    Case("sharding-shard-bare-spec-without-a-mesh-on-xla",
         lambda: rm.jit(lambda x: rm.shard(x, P("d")), backend="xla")(X), rm.ArgumentValueError,
         (r"^shard:", r"P\('d'\) is a bare PartitionSpec", r"no mesh", r"jax\.set_mesh")),
    Case("sharding-in_shardings-bare-spec-without-a-mesh",
         lambda: rm.jit(double, backend="xla", in_shardings=P("d"))(X), rm.ArgumentValueError,
         (r"^jit: in_shardings for argument x:", r"P\('d'\) is a bare PartitionSpec", r"jax\.set_mesh")),
    Case("sharding-in_shardings-too-many-entries",
         lambda: rm.jit(double, backend="xla", in_shardings=(ROWS, ROWS))(X), rm.ArgumentValueError,
         (r"^jit: in_shardings has a tuple of 2", r"takes 1 positional argument that is not static \(x\)",
          r"one entry per argument")),
    Case("sharding-in_shardings-static-arguments-aside",
         lambda: rm.jit(lambda x, n: x * n, backend="xla", static_argnums=1, in_shardings=(ROWS, None))(X, 2),
         rm.ArgumentValueError, (r"^jit: in_shardings has a tuple of 2",
                                 r"takes 1 positional argument that is not static \(x\)")),
    Case("sharding-in_shardings-pytree-does-not-match",
         lambda: rm.jit(affine, backend="xla", in_shardings=({"w": ROWS, "c": None}, ROWS))(PARAMS, X),
         rm.ArgumentValueError, (r"^jit: in_shardings does not match the arguments:",
                                 r"in_shardings\[0\] is a dict with keys \['c', 'w'\]",
                                 r"params is a dict with keys \['b', 'w'\]")),
    Case("sharding-in_shardings-list-for-a-tuple",
         lambda: rm.jit(lambda xs: xs[0] + xs[1], backend="xla", in_shardings=([ROWS, ROWS],))((X, X)),
         rm.ArgumentValueError, (r"^jit: in_shardings does not match", r"in_shardings\[0\] is a list of 2",
                                 r"xs is a tuple of 2")),
    Case("sharding-out_shardings-pytree-does-not-match",
         lambda: rm.jit(lambda x: (x, x), backend="xla", out_shardings=(ROWS, ROWS, ROWS))(X),
         rm.ArgumentValueError, (r"^jit: out_shardings does not match the output of <lambda>:",
                                 r"out_shardings is a tuple of 3", r"the output is a tuple of 2")),
    # Issue 26: a repeated axis is remat's error, naming the function, the spec, the axis and the
    # mesh's axes, wherever the spec is given (JAX's own is a DuplicateSpecError naming none of them).
    Case("sharding-shard-axis-used-twice-traced",
         lambda: rm.jit(lambda x: rm.shard(x, P("d", "d")), backend="xla", in_shardings=ROWS)(X),
         rm.ArgumentValueError, (r"^shard: x:", r"P\('d', 'd'\)", r"uses mesh axis 'd' twice",
                                 r"the mesh's axes: 'd'")),
    Case("sharding-shard-axis-used-twice-in-one-entry",
         lambda: on_mesh(lambda: rm.jit(lambda x: rm.shard(x, P(("d", "d"))), backend="xla")(X)),
         rm.ArgumentValueError, (r"^shard: x:", r"P\(\('d', 'd'\)\)", r"uses mesh axis 'd' twice",
                                 r"the mesh's axes: 'd'")),
    Case("sharding-in_shardings-axis-used-twice",
         lambda: on_mesh(lambda: rm.jit(double, backend="xla", in_shardings=P("d", "d"))(X)),
         rm.ArgumentValueError, (r"^jit: in_shardings for argument x:", r"P\('d', 'd'\)",
                                 r"uses mesh axis 'd' twice", r"the mesh's axes: 'd'")),
    Case("sharding-out_shardings-axis-used-twice",
         lambda: rm.jit(affine, backend="xla", in_shardings=(None, ROWS), out_shardings=P("d", "d"))(PARAMS, X),
         rm.ArgumentValueError, (r"^jit: out_shardings for the output:", r"P\('d', 'd'\)",
                                 r"uses mesh axis 'd' twice", r"the mesh's axes: 'd'")),
    Case("sharding-shard-axis-the-mesh-lacks-under-set-mesh",
         lambda: on_mesh(lambda: rm.jit(lambda x: rm.shard(x, P("zz", None)), backend="xla")(X)),
         rm.ArgumentValueError, (r"^shard: x:", r"P\('zz', None\)", r"mesh axis 'zz', which the mesh lacks",
                                 r"\(its axes: 'd'\)")),
]
