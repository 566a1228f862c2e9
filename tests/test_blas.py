"""The BLAS thread limit of the NumPy backend: on during an evaluation that multiplies matrices,
off (the previous setting back) after it, whatever the threads and errors."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

import remat as rm
from remat.backends import blas
from remat.backends import numpy as numpy_backend
from remat.errors import ArgumentTypeError, ArgumentValueError

OUTSIDE = 3  # BLAS threads around each test: above the limit it sets, whatever the machine


def blas_threads() -> list[int]:
    return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]


@pytest.fixture
def limit(monkeypatch):
    """remat's limit set to 2, inside BLAS set to OUTSIDE threads; the setting comes back after."""
    monkeypatch.setattr(blas, "_setting", 2)
    with threadpool_limits(OUTSIDE, user_api="blas"):
        assert blas_threads() and set(blas_threads()) == {OUTSIDE}
        yield 2


def spy(monkeypatch, op: str, seen: list, fail: bool = False):
    """Replace `op`'s NumPy implementation with one that records the BLAS threads it runs under."""
    real = numpy_backend.IMPLS[op]

    def impl(*args, **kwargs):
        seen.append(blas_threads())
        if fail:
            raise FloatingPointError("from inside the evaluation")
        return real(*args, **kwargs)

    monkeypatch.setitem(numpy_backend.IMPLS, op, impl)


def operands():
    return rm.asarray(np.ones((8, 8)), "float32"), rm.asarray(np.full((8, 8), 0.5), "float32")


def test_a_numpy_evaluation_with_matrix_products_runs_under_the_limit_and_restores_it(limit, monkeypatch):
    seen = []
    spy(monkeypatch, "matmul", seen)
    a, b = operands()
    out = rm.jit(lambda a, b: rm.tanh(a @ b))(a, b)
    np.testing.assert_allclose(out, np.tanh(np.full((8, 8), 4.0)), rtol=1e-6)
    assert seen and all(set(s) == {limit} for s in seen)
    assert set(blas_threads()) == {OUTSIDE}


def test_gradients_through_checkpoints_are_limited_too(limit, monkeypatch):
    seen = []
    spy(monkeypatch, "matmul", seen)
    a, b = operands()
    g = rm.grad(lambda a: rm.sum(rm.checkpoint(lambda h: rm.tanh(h @ b), a)))(a)
    np.testing.assert_allclose(g, np.full((8, 8), (1 - np.tanh(4.0) ** 2) * 4), rtol=1e-3)  # float32 1 - tanh²
    # eager grad runs no unused forward: the recomputation and the backward matmul remain
    assert len(seen) == 2 and all(set(s) == {limit} for s in seen)
    assert set(blas_threads()) == {OUTSIDE}


def test_a_graph_without_matrix_products_leaves_blas_alone(limit, monkeypatch):
    seen = []
    spy(monkeypatch, "tanh", seen)
    a, _ = operands()
    rm.jit(lambda a: rm.tanh(a + 1))(a)
    assert seen == [[OUTSIDE] * len(blas_threads())]


def test_the_setting_comes_back_when_the_evaluation_raises(limit, monkeypatch):
    seen = []
    spy(monkeypatch, "matmul", seen, fail=True)
    a, b = operands()
    with pytest.raises(FloatingPointError):
        rm.jit(lambda a, b: a @ b)(a, b)
    assert set(seen[0]) == {limit}
    assert set(blas_threads()) == {OUTSIDE}


def test_concurrent_evaluations_share_the_limit_and_the_last_one_restores_it(limit, monkeypatch):
    seen = []
    spy(monkeypatch, "matmul", seen)
    a, b = operands()
    f = rm.jit(lambda a, b: rm.sum(a @ b))
    f(a, b)  # compiled once, before the threads start
    start = threading.Barrier(8)
    errors = []

    def work():
        try:
            start.wait()
            for _ in range(40):
                assert float(f(a, b)) == 256.0
        except Exception as e:  # reported below, from the main thread
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(seen) == 1 + 8 * 40 and all(set(s) == {limit} for s in seen)
    assert set(blas_threads()) == {OUTSIDE}


def test_no_limit_leaves_blas_alone(monkeypatch):
    monkeypatch.setattr(blas, "_setting", None)
    seen = []
    spy(monkeypatch, "matmul", seen)
    a, b = operands()
    with threadpool_limits(OUTSIDE, user_api="blas"):
        rm.jit(lambda a, b: a @ b)(a, b)
    assert seen == [[OUTSIDE] * len(blas_threads())]


@pytest.mark.parametrize(("cores", "default"), [(1, 1), (2, 1), (3, 1), (4, 2), (16, 8)])
def test_the_default_is_half_the_cores_at_least_one(monkeypatch, cores, default):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    monkeypatch.setattr("os.cpu_count", lambda: cores)
    assert blas.default_threads() == default


@pytest.mark.parametrize(("text", "threads"), [(None, "default"), ("", "default"), ("4", 4), (" none ", None)])
def test_the_environment_variable_sets_the_limit(monkeypatch, text, threads):
    if text is None:
        monkeypatch.delenv(blas.ENV, raising=False)
    else:
        monkeypatch.setenv(blas.ENV, text)
    monkeypatch.setattr(blas, "_setting", blas._UNSET)
    assert blas.threads() == (blas.default_threads() if threads == "default" else threads)


def test_set_threads_takes_a_positive_int_or_none(monkeypatch):
    monkeypatch.setattr(blas, "_setting", blas._UNSET)
    blas.set_threads(3)
    assert blas.threads() == 3
    blas.set_threads(None)
    assert blas.threads() is None
    with pytest.raises(ArgumentValueError, match=r"blas.set_threads: n must be at least 1, got 0; None means"):
        blas.set_threads(0)
    with pytest.raises(ArgumentTypeError, match=r"blas.set_threads: n must be a positive int or None, got 2.0"):
        blas.set_threads(2.0)
