"""Sharding (issue 16): the `shard` op on both backends and through every transformation, and
`rm.jit(..., backend="xla", in_shardings=, out_shardings=)`. This process has one CPU device;
the checks that need several run in one subprocess with 8 (tests/multidevice_sharding.py):
a few quick ones in `make test`, the rest in the claims tier (`make check`)."""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")

from jax.sharding import Mesh, NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import remat as rm  # noqa: E402
from multidevice import run_file  # noqa: E402

CHECKS = __file__.replace("test_sharding.py", "multidevice_sharding.py")
MESH = Mesh(np.array(jax.devices()[:1]), ("data",))
ROWS = NamedSharding(MESH, P("data", None))
X = np.arange(12.0, dtype=np.float32).reshape(4, 3)


# ---------------------------------------------------------------- the op, on one device


def test_the_printer_shows_the_spec():
    graph = rm.make_graph(lambda x: rm.shard(rm.tanh(x), P("data", None)))(X)
    assert str(graph) == (
        "graph(a:f32[4,3]) {\n"
        "  b:f32[4,3] = tanh a\n"
        "  c:f32[4,3] = shard[spec=P('data', None)] b\n"
        "  return c\n"
        "}")


def test_the_printer_shows_tuples_of_axes():
    graph = rm.make_graph(lambda x: rm.shard(x, P(("data", "model"))))(X)
    assert "shard[spec=P(('data', 'model'))] a" in str(graph)


@pytest.mark.parametrize("backend", ["numpy", "xla"])
def test_shard_is_the_identity_in_value(backend):
    f = rm.jit(lambda x: rm.shard(x * 2.0, ROWS), backend=backend)
    np.testing.assert_array_equal(np.asarray(f(X)), X * 2.0)
    np.testing.assert_array_equal(np.asarray(rm.shard(rm.asarray(X), P("data"))), X)  # eager, no mesh needed


def test_the_gradient_shards_the_cotangent_the_same_way():
    spec = P("data", None)
    graph = rm.make_graph(rm.value_and_grad(lambda x: rm.sum(rm.shard(x * x, spec))))(X)
    shards = [n for n in graph.walk() if n.op == "shard"]
    assert len(shards) == 2 and {str(n.params["spec"]) for n in shards} == {"P('data', None)"}
    np.testing.assert_allclose(np.asarray(rm.grad(lambda x: rm.sum(rm.shard(x * x, spec)))(X)), 2 * X)


def test_the_tangent_is_sharded_the_same_way():
    f = lambda x: rm.shard(rm.sin(x), P(None, "data"))  # noqa: E731
    graph = rm.make_graph(lambda x, t: rm.jvp(f, (x,), (t,)))(X, X)
    assert sum(n.op == "shard" for n in graph.walk()) == 2
    y, t = rm.jvp(f, (X,), (np.ones_like(X),))
    np.testing.assert_allclose(np.asarray(t), np.cos(X), rtol=1e-6)


def test_vmap_leaves_the_mapped_axis_unsplit():
    graph = rm.make_graph(rm.vmap(lambda row: rm.shard(row * 2.0, P("data"))))(X)
    (node,) = [n for n in graph.walk() if n.op == "shard"]
    assert str(node.params["spec"]) == "P(None, 'data')"
    out = rm.vmap(lambda row: rm.shard(row * 2.0, P("data")), in_axes=1)(X)
    np.testing.assert_array_equal(np.asarray(out), (X * 2.0).T)


def test_shard_takes_a_pytree():
    out = rm.shard({"a": rm.asarray(X), "b": [rm.ones((2,))]}, P())
    assert set(out) == {"a", "b"} and out["b"][0].shape == (2,)


def test_shard_inside_checkpoint_and_its_gradient():
    spec = NamedSharding(MESH, P("data"))
    w = rm.asarray(np.eye(3, dtype=np.float32))

    def loss(x):
        return rm.sum(rm.checkpoint(lambda h: rm.shard(rm.tanh(h @ w), spec), x))

    got = rm.jit(rm.grad(loss), backend="xla")(X / 10)
    np.testing.assert_allclose(np.asarray(got), np.asarray(rm.grad(loss)(X / 10)), rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- rm.jit's shardings, on one device


def test_in_and_out_shardings_on_a_one_device_mesh():
    f = rm.jit(lambda p, x: rm.tanh(x @ p["w"]), backend="xla",
               in_shardings=({"w": None}, ROWS), out_shardings=NamedSharding(MESH, P(None, "data")))
    y = f({"w": np.eye(3, dtype=np.float32)}, X)
    assert isinstance(y, rm.Tensor) and y._value.sharding.spec == P(None, "data")
    np.testing.assert_allclose(np.asarray(y), np.tanh(X), rtol=1e-6)


def test_a_program_with_no_sharding_is_unchanged():
    lowered = rm.jit(lambda x: x * 2.0, backend="xla").lower(X)
    assert lowered._program.layout is None


def test_a_sharded_program_keeps_arguments_whole():
    """Stacked weights are sliced on the host (backends/host_slices.py) only where nothing is
    sharded: a sharded program takes its arguments where they lie, on the devices."""
    w = np.ones((3, 3, 3), np.float32)

    def f(w, x):
        return x @ w[0] + x @ w[1] + x @ w[2]

    plain = rm.jit(f, backend="xla").lower(w, X)
    sharded = rm.jit(f, backend="xla", in_shardings=(None, ROWS)).lower(w, X)
    assert plain._host is not None and sharded._host is None
    np.testing.assert_allclose(np.asarray(sharded.compile()(w, X)), X @ w.sum(0), rtol=1e-6)


def test_the_mesh_of_jax_set_mesh_keys_the_cache():
    """A bare PartitionSpec is read on the mesh of `jax.set_mesh`: a call outside it must not
    reuse the program traced inside it."""
    f = rm.jit(lambda x: rm.shard(x + 1.0, P("data")), backend="xla")
    with jax.set_mesh(MESH):
        np.testing.assert_array_equal(np.asarray(f(X)), X + 1.0)
    with pytest.raises(rm.ArgumentValueError, match="bare PartitionSpec"):
        f(X)
    assert f.trace_count == 2


def test_a_sharded_argument_keys_the_cache():
    f = rm.jit(lambda x: x * 2.0, backend="xla")
    f(X)
    y = f(jax.device_put(X, ROWS))
    assert f.trace_count == 2 and y._value.sharding.spec == P("data", None)


def test_the_results_of_a_sharded_step_feed_the_next_one():
    step = rm.jit(lambda x: rm.shard(x * 0.5, ROWS), backend="xla", in_shardings=ROWS)
    x = step(X)
    x = step(x)
    np.testing.assert_array_equal(np.asarray(x), X * 0.25)
    assert step.trace_count == 1


# ---------------------------------------------------------------- on 8 devices (a subprocess)


def _assert_ran(results: dict) -> None:
    failed = {k: v["trace"] for k, v in results.items() if isinstance(v, dict) and "trace" in v}
    assert not failed, "\n\n".join(f"{k}:\n{t}" for k, t in failed.items())


@pytest.fixture(scope="module")
def quick():
    results = run_file(CHECKS, "quick")
    _assert_ran(results)
    return results


@pytest.fixture(scope="module")
def rest():
    results = run_file(CHECKS, "rest")
    _assert_ran(results)
    return results


def test_outputs_keep_the_requested_sharding(quick):
    r = quick["outputs_keep_their_sharding"]
    assert r["spec"] == "P('data', 'model')" and r["devices"] == 8 and r["gap"] < 1e-6


def test_sharded_arguments_keep_their_sharding(quick):
    r = quick["sharded_arguments_are_taken_as_they_are"]
    assert r["spec"] == "P('data', None)" and r["gap"] < 1e-6


@pytest.mark.parametrize("case,words", [
    ("shard-indivisible", [r"^shard: x: spec P\('data'\) splits dimension 0 \(size 6, shape \(6, 8\)\)",
                           r"mesh axis 'data' of size 4, which does not divide 6"]),
    ("in-indivisible", [r"^jit: in_shardings for argument x: spec P\('data', None\) splits dimension 0",
                        r"mesh axis 'data' of size 4"]),
    ("in-indivisible-tuple-axes", [r"splits dimension 1 \(size 4, shape \(4, 4\)\)",
                                   r"mesh axes \('data', 'model'\) of size 8"]),
    ("out-indivisible", [r"^jit: out_shardings for the output: spec P\('data', None\) splits dimension 0"]),
    ("unknown-axis", [r"^jit: in_shardings for argument y: spec P\('batch'\)",
                      r"mesh axis 'batch', which the mesh lacks \(its axes: 'data', 'model'\)"]),
    ("shard-unknown-axis-grad", [r"^shard: x: spec P\('rows'\) names mesh axis 'rows'"]),
    ("two-meshes", [r"^jit: .* on 2 different meshes", r"a program runs on one mesh"]),
])
def test_bad_layouts_on_a_mesh_are_remat_errors(quick, case, words):
    import re

    r = quick["bad_inputs_on_a_mesh"][case]
    assert "RematError" in r["bases"], r
    assert ("ValueError" in r["bases"]), r
    for w in words:
        assert re.search(w, r["message"]), (w, r["message"])


@pytest.mark.claims
def test_gradients_equal_one_device_for_every_plan_and_lowering(rest):
    gaps = rest["gradients_equal_one_device"]
    assert len(gaps) == 8 and max(gaps.values()) < 1e-5, gaps


@pytest.mark.claims
def test_tensor_parallel_gradients_equal_one_device(rest):
    r = rest["tensor_parallel_gradients_equal_one_device"]
    assert r["branches"] < 1e-5 and r["inline"] < 1e-5, r
    assert r["w-spec-branches"] == r["w-spec-inline"] == "P(None, 'model')"  # the gradient laid out as its weight


@pytest.mark.claims
def test_a_sharded_checkpointed_step_is_one_executable_that_gathers_nothing(rest):
    r = rest["the_step_is_one_executable_that_gathers_nothing"]
    assert r["x_spec"] == "P('data', None)", r
    assert r["all_gathers"] == 0 and r["all_reduces"] >= 1, r
    assert r["conditionals"] >= 4, r  # a backward block per checkpointed layer, in the partitioned program


@pytest.mark.claims
def test_last_memory_counts_one_devices_bytes(rest):
    """Data parallel over 4 ways: the peak is at most a quarter of one device's activations plus
    the replicated weights and gradients, plus 10%."""
    r = rest["memory_is_per_device"]
    one, data = r["one"], r["data"]
    assert data["outputs"] == one["outputs"]  # the loss and the gradients, replicated
    assert data["peak"] <= 1.1 * ((one["peak"] - 2 * r["params_bytes"]) / 4 + 2 * r["params_bytes"]), r


@pytest.mark.claims
def test_shard_is_a_sharding_constraint_in_the_hlo(rest):
    r = rest["shard_in_graph_and_hlo"]
    assert "shard[spec=P('data', None)]" in r["graph"]
    assert r["constraints"] >= 1 and r["mentions_data"]


@pytest.mark.claims
def test_data_parallel_collectives_are_jaxs(rest):
    r = rest["collectives_are_no_more_than_jax"]
    assert r["ours"]["all-reduce"] >= 1  # the gradients summed over 'data'
    assert all(r["ours"][op] <= r["jax"][op] for op in r["ours"]), r


@pytest.mark.claims
def test_more_layouts(rest):
    assert rest["explicit_mesh_arrays_and_bare_specs_on_the_jit_mesh"]["spec"] == "P('data', 'model')"
    assert rest["bare_specs_on_the_set_mesh"]["spec"] == "P(None, 'model')"
    assert rest["arguments_laid_out_otherwise_are_resharded"]["spec"] == "P('data', None)"
    loops = rest["loops_take_sharded_inputs"]
    assert loops["branches"] < 1e-5 and loops["inline"] < 1e-5 and loops["while"] == 0.0
    assert loops["while-spec"] == "P('data', None)"
    vm = rest["vmap_leaves_the_mapped_axis_whole"]
    assert vm["gap"] < 1e-6 and "shard[spec=P(None, 'model')]" in vm["graph"]
    for name in ("explicit_mesh_arrays_and_bare_specs_on_the_jit_mesh", "bare_specs_on_the_set_mesh",
                 "arguments_laid_out_otherwise_are_resharded"):
        assert rest[name]["gap"] < 1e-6, name
