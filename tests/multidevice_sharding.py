"""The sharding checks that need several devices, run by tests/test_sharding.py in one process
started with 8 CPU devices (tests/multidevice.py). Prints one JSON object: check name -> result;
the test file asserts on them. Run it by hand with
`XLA_FLAGS=--xla_force_host_platform_device_count=8 python tests/multidevice_sharding.py [quick|rest]`."""

from __future__ import annotations

import json
import re
import sys
import traceback
import unittest.mock

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import remat as rm
from remat import parallel
from remat.backends import xla
from remat.models import residual_mlp_loss, residual_mlp_params, scanned_mlp_loss, stack_params

# Set by `run`, in the subprocess: this module is also imported where there is one device (pytest
# collects it for doctests).
MESH = BATCH = REPLICATED = None
B, D, L = 16, 8, 4
X = np.random.default_rng(0).standard_normal((B, D)).astype(np.float32)
PARAMS = residual_mlp_params(L, D)
CHECKS: dict = {}
QUICK = ("outputs_keep_their_sharding", "sharded_arguments_are_taken_as_they_are", "bad_inputs_on_a_mesh")


def check(fn):
    CHECKS[fn.__name__] = fn
    return fn


def run(names) -> dict:
    """`{name: result}` of the checks named, an error (type, message, traceback) as a result."""
    global MESH, BATCH, REPLICATED
    MESH = Mesh(np.array(jax.devices()).reshape(4, 2), ("data", "model"))
    BATCH = NamedSharding(MESH, P("data", None))
    REPLICATED = NamedSharding(MESH, P())
    results = {}
    for name in names:
        try:
            results[name] = CHECKS[name]()
        except Exception as e:  # reported to the test, which names the check that failed
            results[name] = {"error": type(e).__name__, "message": str(e), "trace": traceback.format_exc()[-2000:]}
    return results


def spec(t) -> str:
    return str(t._value.sharding.spec)


def gap(a, b) -> float:
    return float(max(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64)))
                     for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b))))


def grad_step(plan: str):
    return rm.value_and_grad(lambda p, x: residual_mlp_loss(p, x, plan))


def lowering(branches: bool):
    """XLA's lowering of backward blocks: conditionals (the CPU's) or inline (accelerators')."""
    return unittest.mock.patch.object(xla, "default_branches", lambda: branches)


LOWERINGS = {"branches": True, "inline": False}


@check
def outputs_keep_their_sharding():
    f = rm.jit(lambda x, w: rm.tanh(x @ w), backend="xla", in_shardings=(BATCH, None),
               out_shardings=NamedSharding(MESH, P("data", "model")))
    w = np.asarray(PARAMS[0][0])
    y = f(X, w)
    return {"spec": spec(y), "gap": gap(y, np.tanh(X @ w)), "devices": len(y._value.sharding.device_set)}


@check
def sharded_arguments_are_taken_as_they_are():
    x = jax.device_put(X, BATCH)
    f = rm.jit(lambda x: rm.tanh(x) * 2.0, backend="xla")
    y = f(x)
    return {"spec": spec(y), "gap": gap(y, np.tanh(X) * 2.0)}


@check
def explicit_mesh_arrays_and_bare_specs_on_the_jit_mesh():
    emesh = jax.make_mesh((4, 2), ("data", "model"))  # Explicit axes by default
    x = jax.device_put(X, NamedSharding(emesh, P("data")))
    f = rm.jit(lambda x: rm.shard(rm.sin(x), P("data", "model")), backend="xla")  # the argument's mesh
    y = f(x)
    return {"spec": spec(y), "gap": gap(y, np.sin(X))}


@check
def bare_specs_on_the_set_mesh():
    f = rm.jit(lambda x: rm.shard(x * 3.0, P(None, "model")), backend="xla", in_shardings=P("data"))
    with jax.set_mesh(MESH):
        y = f(X)
    return {"spec": spec(y), "gap": gap(y, X * 3.0)}


@check
def gradients_equal_one_device():
    """A checkpointed residual MLP, batch split over 'data', weights replicated: value and
    gradients equal the single-device ones, backward blocks as conditionals and inline, for
    every checkpoint plan."""
    out = {}
    for plan in ("none", "layer", "sqrt", 2):
        ref = rm.jit(grad_step(plan), backend="xla")(PARAMS, X)
        for name, branches in LOWERINGS.items():
            with lowering(branches):
                got = rm.jit(grad_step(plan), backend="xla", in_shardings=(None, BATCH))(PARAMS, X)
            out[f"{plan}-{name}"] = gap(got, ref)
    return out


@check
def tensor_parallel_gradients_equal_one_device():
    """Weights split over 'model' (columns), the batch over 'data', with an rm.shard inside the
    checkpointed layers: the gradient equals one device's, with either lowering."""
    cols = NamedSharding(MESH, P(None, "model"))

    def loss(params, x):
        def layer(p, h):
            w, b = p
            return h + rm.shard(rm.tanh(h @ w + b), P("data", "model"))
        h = x
        for p in params:
            h = rm.checkpoint(layer, p, h)
        return rm.mean(h * h)

    ref = rm.jit(rm.grad(loss))(PARAMS, X)  # NumPy: rm.shard is a no-op there, bare specs need no mesh
    shardings = ([(cols, NamedSharding(MESH, P("model")))] * L, BATCH)
    out = {}
    for name, branches in LOWERINGS.items():
        with lowering(branches):
            got = rm.jit(rm.grad(loss), backend="xla", in_shardings=shardings)(PARAMS, X)
        out[name], out["w-spec-" + name] = gap(got, ref), spec(got[0][0])
    return out


@check
def the_step_is_one_executable_that_gathers_nothing():
    """A data-parallel step checkpointed per layer: one executable, taking the batch split over
    'data', whose only collectives sum the weights' gradients (nothing batch-shaped is gathered)."""
    step = rm.jit(grad_step("layer"), backend="xla", in_shardings=(None, BATCH))
    (executable,) = parallel.executables(step, PARAMS, X)
    text = executable.as_text()
    return {"x_spec": str(executable.input_shardings[0][-1].spec),
            "all_gathers": parallel.count_collectives(text)["all-gather"],
            "all_reduces": parallel.count_collectives(text)["all-reduce"],
            "conditionals": text.count(" conditional(")}


@check
def memory_is_per_device():
    """`last_memory` of a sharded run counts one device's bytes: the batch-shaped values a
    quarter (split over 'data', 4 ways), the replicated weights' gradients whole."""
    x = np.random.default_rng(1).standard_normal((256, D)).astype(np.float32)
    out = {}
    for name, shardings in (("one", None), ("data", (None, BATCH))):
        step = rm.jit(grad_step("layer"), backend="xla", in_shardings=shardings)
        compiled = step.lower(PARAMS, x).compile()
        compiled(PARAMS, x)
        m = compiled.last_memory
        out[name] = {"temp": m.temp, "outputs": m.outputs, "peak": m.peak}
    out["params_bytes"] = sum(np.asarray(a).nbytes for a in jax.tree.leaves(PARAMS))
    out["batch_bytes"] = x.nbytes
    return out


@check
def shard_in_graph_and_hlo():
    def f(x):
        return rm.sum(rm.shard(rm.tanh(x), P("data", None)))

    graph = str(rm.make_graph(f)(X))
    jitted = rm.jit(rm.grad(f), backend="xla")
    with jax.set_mesh(MESH):
        text = jitted.lower(X).as_text()
    return {"graph": graph, "constraints": len(re.findall(r"sharding_constraint|@Sharding", text)),
            "mentions_data": '"data"' in text or "{devices=" in text}


@check
def collectives_are_no_more_than_jax():
    """The data-parallel gradient all-reduces, as jax.jit of the same model does, no more."""
    step = rm.jit(grad_step("none"), backend="xla", in_shardings=(None, BATCH))
    (ours,) = [e.as_text() for e in parallel.executables(step, PARAMS, X)]

    def jloss(params, x):
        h = x
        for w, b in params:
            h = h + jnp.tanh(h @ w + b)
        return jnp.mean(h * h)

    theirs = jax.jit(jax.value_and_grad(jloss), in_shardings=(REPLICATED, BATCH)).lower(PARAMS, X).compile().as_text()
    count = lambda text, op: len(re.findall(rf"\s{op}(?:-start)?\(", text))  # noqa: E731  (the instruction, not its name)
    ops = ("all-reduce", "all-gather", "all-to-all", "collective-permute", "reduce-scatter")
    return {"ours": {op: count(ours, op) for op in ops}, "jax": {op: count(theirs, op) for op in ops}}


@check
def loops_take_sharded_inputs():
    stacked = stack_params(PARAMS)
    ref = rm.jit(rm.grad(lambda s, x: scanned_mlp_loss(s, x, "step")), backend="xla")(stacked, X)
    out = {}
    for name, branches in LOWERINGS.items():
        with lowering(branches):
            step = rm.jit(rm.grad(lambda s, x: scanned_mlp_loss(s, x, "step")), backend="xla",
                          in_shardings=(None, BATCH))
            out[name] = gap(step(stacked, X), ref)

    def halve_until_small(x):
        return rm.while_loop(lambda c: rm.max(rm.abs(c)) > 0.1, lambda c: rm.shard(c * 0.5, P("data")), x)

    y = rm.jit(halve_until_small, backend="xla", in_shardings=BATCH)(X)
    expected = X.copy()
    while np.abs(expected).max() > 0.1:
        expected = expected * 0.5
    out["while"], out["while-spec"] = gap(y, expected), spec(y)
    return out


@check
def vmap_leaves_the_mapped_axis_whole():
    f = rm.jit(rm.vmap(lambda row: rm.shard(rm.sin(row), P("model"))), backend="xla",
               in_shardings=NamedSharding(MESH, P(None, "model")))
    y = f(X)
    graph = str(rm.make_graph(rm.vmap(lambda row: rm.shard(row, P("model"))))(X))
    return {"gap": gap(y, np.sin(X)), "graph": graph}


@check
def arguments_laid_out_otherwise_are_resharded():
    x = jax.device_put(X, NamedSharding(MESH, P(None, "model")))
    f = rm.jit(lambda x: x + 1.0, backend="xla", in_shardings=BATCH)
    y = f(x)
    return {"spec": spec(y), "gap": gap(y, X + 1.0)}


def error_of(call) -> dict:
    try:
        call()
    except Exception as e:
        return {"error": type(e).__name__, "bases": [c.__name__ for c in type(e).__mro__], "message": str(e)}
    return {"error": None}


@check
def bad_inputs_on_a_mesh():
    x6 = np.ones((6, 8), np.float32)
    return {
        "shard-indivisible": error_of(lambda: rm.jit(lambda x: rm.shard(x, NamedSharding(MESH, P("data"))),
                                                     backend="xla")(x6)),
        "in-indivisible": error_of(lambda: rm.jit(lambda x: x * 2.0, backend="xla", in_shardings=BATCH)(x6)),
        "in-indivisible-tuple-axes": error_of(lambda: rm.jit(
            lambda x: x * 2.0, backend="xla", in_shardings=NamedSharding(MESH, P(None, ("data", "model"))))(
                np.ones((4, 4), np.float32))),
        "out-indivisible": error_of(lambda: rm.jit(lambda x: x[:6], backend="xla",
                                                   out_shardings=BATCH)(X)),
        "unknown-axis": error_of(lambda: rm.jit(lambda x, y: x + y, backend="xla",
                                                in_shardings=(BATCH, P("batch")))(X, X)),
        "shard-unknown-axis-grad": error_of(lambda: rm.jit(rm.grad(lambda x: rm.sum(rm.shard(x, P("rows")))),
                                                           backend="xla", in_shardings=BATCH)(X)),
        "two-meshes": error_of(lambda: rm.jit(lambda x, y: x + y, backend="xla", in_shardings=(
            BATCH, NamedSharding(Mesh(np.array(jax.devices()[:4]), ("data",)), P("data"))))(X, X)),
    }


if __name__ == "__main__":
    # `quick`: the checks the fast test run makes; `rest`: the others; nothing: all.
    which = sys.argv[1] if len(sys.argv) > 1 else "all"
    names = {"quick": QUICK, "rest": [n for n in CHECKS if n not in QUICK], "all": list(CHECKS)}[which]
    print(json.dumps(run(names)))
