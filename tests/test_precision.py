"""The matmul precision setting: per call (`rm.jit(..., precision=)`), per scope
(`rm.default_matmul_precision`), else JAX's own setting. Read from the lowered StableHLO, where
each `dot_general` carries its operands' precision."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading

import jax
import numpy as np
import pytest
from jax import lax

import remat as rm

A = rm.asarray(np.arange(12.0, dtype=np.float32).reshape(3, 4) / 7)
B = rm.asarray(np.arange(20.0, dtype=np.float32).reshape(4, 5) / 3)


def dots(text: str) -> list[str]:
    """The precision of every dot in `text` ("none" where a dot has no precision config)."""
    found = []
    for line in text.splitlines():
        if "dot_general" in line:
            m = re.search(r"precision = \[(\w+), (\w+)\]", line)
            assert m is None or m[1] == m[2], line
            found.append(m[1] if m else "none")
    return found


def lowered_dots(fn, *args, **jit_options) -> list[str]:
    return dots(rm.jit(fn, backend="xla", **jit_options).lower(*args).as_text())


def matmul(a, b):
    return a @ b


def einsum(a, b):
    return rm.einsum("ij,jk->ik", a, b)


def tensordot(a, b):
    return rm.tensordot(a, b, axes=1)


@pytest.mark.parametrize("fn", [matmul, einsum, tensordot])
@pytest.mark.parametrize(("precision", "hlo"), [
    ("highest", "HIGHEST"), ("high", "HIGH"), ("default", "DEFAULT"),
    ("float32", "HIGHEST"), ("tensorfloat32", "HIGH"), ("bfloat16", "DEFAULT"),
    (lax.Precision.HIGHEST, "HIGHEST"), (lax.Precision.HIGH, "HIGH"), (lax.Precision.DEFAULT, "DEFAULT"),
])
def test_a_calls_precision_reaches_every_dot(fn, precision, hlo):
    assert lowered_dots(fn, A, B, precision=precision) == [hlo]


def test_the_precision_reaches_the_dots_of_gradients_checkpoints_and_loops():
    w = rm.asarray(np.eye(4, dtype=np.float32))

    def loss(x):
        h = rm.checkpoint(lambda h: rm.tanh(h @ w), x)
        h, _ = rm.scan(lambda c, _: (rm.tanh(c @ w), None), h, None, length=3)
        return rm.sum(rm.vmap(lambda r: r @ w)(h))

    found = lowered_dots(rm.grad(loss), rm.ones((2, 4)), precision="high")
    assert len(found) >= 5 and set(found) == {"HIGH"}  # 3 forward, more backward


def test_low_precision_operands_take_the_precision_too():
    a = rm.astype(A, rm.bfloat16)
    assert lowered_dots(matmul, a, rm.astype(B, rm.bfloat16), precision="highest") == ["HIGHEST"]


# ---------------------------------------------------------------- the default and the scope


def test_with_nothing_set_remat_follows_jax():
    with jax.default_matmul_precision(None):  # JAX's default (the test session sets "highest")
        assert lowered_dots(matmul, A, B) == ["DEFAULT"]
        assert dots(jax.jit(lambda a, b: a @ b).lower(np.asarray(A), np.asarray(B)).as_text()) == ["DEFAULT"]
    with jax.default_matmul_precision("tensorfloat32"):
        assert lowered_dots(matmul, A, B) == ["HIGH"]


def test_the_test_session_compares_backends_at_the_highest_precision():
    # conftest.py: without it, tests comparing XLA with NumPy or JAX would see TF32 on GPUs.
    assert os.environ["JAX_DEFAULT_MATMUL_PRECISION"] == "highest"
    assert jax.config.jax_default_matmul_precision == "highest"
    assert lowered_dots(matmul, A, B) == ["HIGHEST"]


def test_the_scope_sets_the_precision_and_is_restored_after():
    with jax.default_matmul_precision(None):
        with rm.default_matmul_precision("highest"):
            assert lowered_dots(matmul, A, B) == ["HIGHEST"]
            with rm.default_matmul_precision("high"):
                assert lowered_dots(einsum, A, B) == ["HIGH"]
            with rm.default_matmul_precision(None):  # back to JAX's setting
                assert lowered_dots(matmul, A, B) == ["DEFAULT"]
            assert lowered_dots(matmul, A, B) == ["HIGHEST"]
        assert lowered_dots(matmul, A, B) == ["DEFAULT"]


def test_the_scope_is_restored_after_an_error():
    with jax.default_matmul_precision(None):
        with pytest.raises(RuntimeError, match="inside"), rm.default_matmul_precision("highest"):
            raise RuntimeError("inside the scope")
        assert lowered_dots(matmul, A, B) == ["DEFAULT"]


def test_one_scope_object_may_be_entered_inside_itself():
    scope = rm.default_matmul_precision("high")
    with jax.default_matmul_precision(None):
        with scope:
            with rm.default_matmul_precision("highest"), scope:
                assert lowered_dots(matmul, A, B) == ["HIGH"]
            assert lowered_dots(matmul, A, B) == ["HIGH"]
        assert lowered_dots(matmul, A, B) == ["DEFAULT"]


def test_a_calls_precision_wins_over_the_scope_and_jax():
    with jax.default_matmul_precision("highest"), rm.default_matmul_precision("high"):
        assert lowered_dots(matmul, A, B, precision="default") == ["DEFAULT"]


def test_a_lowered_program_keeps_the_precision_it_was_lowered_in():
    f = rm.jit(matmul, backend="xla")
    with rm.default_matmul_precision("high"):
        lowered = f.lower(A, B)  # StableHLO is made later, outside the scope
    assert dots(lowered.as_text()) == ["HIGH"]
    # TF32's tolerance: "high" may use it on a GPU (the CPU is exact at every precision).
    np.testing.assert_allclose(lowered.compile()(A, B), np.asarray(A) @ np.asarray(B), rtol=1e-2)


def test_each_thread_has_its_own_scope():
    """Two threads in different scopes, interleaved: each lowers with its own, and a thread in
    none gets JAX's process-wide setting ("highest" in the test session)."""
    f = rm.jit(matmul, backend="xla")
    both_inside = threading.Barrier(2)
    found: dict[str, list[str]] = {}

    def lower_in(name, precision):
        with rm.default_matmul_precision(precision):
            both_inside.wait(timeout=30)
            found[name] = dots(f.lower(A, B).as_text())
            both_inside.wait(timeout=30)

    threads = [threading.Thread(target=lower_in, args=(p, p)) for p in ("default", "high")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    outside = threading.Thread(target=lambda: found.setdefault("none", dots(f.lower(A, B).as_text())))
    with rm.default_matmul_precision("default"):
        outside.start()
        outside.join()
    assert found == {"default": ["DEFAULT"], "high": ["HIGH"], "none": ["HIGHEST"]}


# ---------------------------------------------------------------- the cache


def test_the_jit_cache_keys_on_the_precision():
    f = rm.jit(matmul, backend="xla")
    f(A, B)
    with rm.default_matmul_precision("high"):
        f(A, B)
        f(A, B)
    with jax.default_matmul_precision("tensorfloat32"):  # JAX's own setting keys it too: JAX's alias of "high"
        f(A, B)
    f(A, B)
    assert f.trace_count == 2
    assert sorted(dots(c.lowered.as_text())[0] for c in f._cache.values()) == ["HIGH", "HIGHEST"]


def test_a_fixed_precision_ignores_the_scope_and_compiles_once():
    f = rm.jit(matmul, backend="xla", precision="highest")
    f(A, B)
    with rm.default_matmul_precision("default"):
        f(A, B)
    assert f.trace_count == 1


def test_numpy_is_exact_whatever_the_precision_and_compiles_once():
    f = rm.jit(matmul, precision="default")
    exact = rm.jit(matmul)(A, B)
    with rm.default_matmul_precision("bfloat16"):
        np.testing.assert_array_equal(f(A, B), exact)
    np.testing.assert_array_equal(f(A, B), exact)
    assert f.trace_count == 1


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="a claim about XLA on the CPU")
def test_on_the_cpu_every_precision_computes_float32_products_in_float32():
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((64, 256)).astype(np.float32) for _ in range(2))
    results = {p: np.asarray(rm.jit(matmul, backend="xla", precision=p)(a, b.T)) for p in ("default", "highest")}
    np.testing.assert_array_equal(results["default"], results["highest"])
    np.testing.assert_allclose(results["default"], a.astype(np.float64) @ b.T, rtol=0, atol=1e-4)


# ---------------------------------------------------------------- bad values


@pytest.mark.parametrize("where", ["jit", "default_matmul_precision"])
def test_a_bad_precision_names_the_argument_and_lists_the_accepted_values(where):
    make = (lambda p: rm.jit(matmul, backend="xla", precision=p)) if where == "jit" else rm.default_matmul_precision
    with pytest.raises(rm.ArgumentValueError, match=rf"^{where}: precision='fastest' is not a matmul precision; use "
                       r"'default', 'high', 'highest' \(or JAX's aliases 'bfloat16', 'tensorfloat32', 'float32'\), "
                       r"a jax.lax.Precision, or None"):
        make("fastest")
    with pytest.raises(rm.ArgumentTypeError, match=rf"^{where}: precision must be .* got tuple \('high', 'high'\)"):
        make(("high", "high"))


# ---------------------------------------------------------------- the prepared GPU check, tiny on the CPU


@pytest.mark.claims
def test_the_gpu_check_script_runs_and_reports_on_a_tiny_model():
    script = os.path.join(os.path.dirname(__file__), os.pardir, "benchmarks", "gpu_check.py")
    done = subprocess.run([sys.executable, script, "--tiny", "--plans", "none", "layer", "--rounds", "1"],
                          capture_output=True, text=True, timeout=540)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    grads, memory, speed = report["gradients"], report["memory"]["plans"], report["speed"]
    assert grads["ok"] and set(grads["worst_relative_error"]) == {"none", "layer"}
    assert max(grads["worst_relative_error"].values()) < grads["tolerance"] == 1e-4
    if report["platform"]["backend"] == "cpu":  # exact there at every precision; conditionals save memory
        assert grads["default_precision_error"] < 1e-4 and report["default_lowering"] == "conditionals"
        assert memory["layer"]["remat_peak"] < memory["none"]["remat_peak"]
        assert memory["layer"]["other_lowering_peak"] >= memory["none"]["other_lowering_peak"]  # barriers dropped
    assert all(v > 0 for row in memory.values() for k, v in row.items() if not k.endswith("ratio"))
    assert speed["dot_precisions"] == ["DEFAULT"]  # JAX's default, though the test session sets "highest"
    assert all(0 < r < 100 for r in speed["remat_over_jax"]["median"].values())
    assert all(0 < r < 100 for r in speed["other_lowering_over_jax"]["median"].values())
