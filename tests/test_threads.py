"""Tracing from several threads and asyncio tasks at once: each sees only its own traces, and
every result is a concrete, correct tensor."""

import asyncio
import sys
import threading
import traceback

import numpy as np
import pytest

import remat as rm
from remat.backends import numpy as numpy_backend
from remat.errors import TracerError, source_of, user_source
from remat.trace import current_trace, new_trace

N_THREADS = 8
STEPS = 16  # per thread: 128 checked calls, a few seconds on 2 cores
W = np.random.default_rng(99).normal(size=(3, 5)).astype(np.float32)


def _layer(x):
    return rm.tanh(x @ rm.asarray(W))


def _loss(x):
    return rm.sum(_layer(x) * 2.0)


def _checkpointed_loss(x):
    return rm.sum(rm.checkpoint(_layer, x) * 2.0)


def _row_loss(row):
    return rm.sum(_layer(row))


# NumPy references, in float64: d/dx sum(2 tanh(x W)) = 2 (1 - tanh²(x W)) Wᵀ
def _ref_layer(x):
    return np.tanh(x.astype(np.float64) @ W)


def _ref_grad(x):
    t = _ref_layer(x)
    return 2.0 * (1.0 - t * t) @ W.T.astype(np.float64)


def _ref_double(x):
    return 2.0 * _ref_layer(x)


def _ref_rows(x):
    return _ref_layer(x).sum(axis=1)


# name -> (the call, its NumPy reference, the dtype of its input and result). float64 XLA runs
# turn on JAX's x64 mode for their duration: the float32 runs beside them must not see it.
def _tasks(warm: dict) -> dict:
    def cold(fn, backend):
        return lambda x: rm.jit(fn, backend=backend)(x)

    tasks = {
        "eager": (lambda x: _layer(rm.asarray(x)) * 2.0, _ref_double, np.float32),
        "grad": (rm.grad(_loss), _ref_grad, np.float32),
        "grad of checkpoint": (rm.grad(_checkpointed_loss), _ref_grad, np.float32),
        "vmap": (rm.vmap(_row_loss), _ref_rows, np.float32),
        "cold jit float64 xla": (cold(lambda x: _layer(x) * 2.0, "xla"), _ref_double, np.float64),
        "warm jit float64 xla": (warm["xla", "layer"], _ref_double, np.float64),
    }
    for b in ("numpy", "xla"):
        tasks[f"cold jit {b}"] = (cold(lambda x: _layer(x) * 2.0, b), _ref_double, np.float32)
        tasks[f"cold jit grad of checkpoint {b}"] = (cold(rm.grad(_checkpointed_loss), b), _ref_grad, np.float32)
        tasks[f"warm jit {b}"] = (warm[b, "layer"], _ref_double, np.float32)
        tasks[f"warm jit grad of checkpoint {b}"] = (warm[b, "grad"], _ref_grad, np.float32)
        tasks[f"warm jit vmap {b}"] = (warm[b, "vmap"], _ref_rows, np.float32)
    return tasks


def _warm_jits() -> dict:
    """Shared jitted functions, each called once per input dtype so the threads find them compiled."""
    warm = {}
    for b in ("numpy", "xla"):
        warm[b, "layer"] = rm.jit(lambda x: _layer(x) * 2.0, backend=b)
        warm[b, "grad"] = rm.jit(rm.grad(_checkpointed_loss), backend=b)
        warm[b, "vmap"] = rm.jit(rm.vmap(_row_loss), backend=b)
        for name in ("layer", "grad", "vmap"):
            warm[b, name](np.zeros((4, 3), np.float32))
    warm["xla", "layer"](np.zeros((4, 3), np.float64))
    return warm


def _run_threads(target, n: int) -> None:
    """Run `target(i, barrier)` in `n` threads; re-raise the first exception any of them hit."""
    barrier = threading.Barrier(n)
    errors: list[str] = []

    def guarded(i):
        try:
            target(i, barrier)
        except BaseException:  # noqa: BLE001  (a failing thread must fail the test)
            errors.append(traceback.format_exc())
            barrier.abort()

    threads = [threading.Thread(target=guarded, args=(i,)) for i in range(n)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)  # switch threads often, so that the traces interleave finely
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    finally:
        sys.setswitchinterval(interval)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    if errors:
        pytest.fail(f"{len(errors)} thread(s) failed; the first:\n{errors[0]}")


def _check(name: str, out, ref, dtype=np.float32) -> None:
    assert isinstance(out, rm.Tensor), f"{name}: got a {type(out).__name__}"
    assert out.is_concrete, f"{name}: returned a traced tensor {out!r}"
    assert out.dtype == dtype, f"{name}: dtype {out.dtype}, expected {np.dtype(dtype)}"
    np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-4, atol=1e-5, err_msg=name)


def test_hammer_eight_threads_mixing_transformations_on_both_backends():
    tasks = _tasks(_warm_jits())
    names = sorted(tasks)
    done = [0] * N_THREADS

    def worker(i, barrier):
        rng = np.random.default_rng(i)
        order = [names[k] for k in rng.integers(len(names), size=STEPS)]
        barrier.wait()  # start together so that the traces really overlap
        for name in order:
            run, ref, dtype = tasks[name]
            x = rng.normal(size=(4, 3)).astype(dtype)
            _check(name, run(x), ref(x), dtype)
            done[i] += 1

    _run_threads(worker, N_THREADS)
    assert done == [STEPS] * N_THREADS


def test_warm_jit_stays_concrete_while_other_threads_trace():
    """The reported failure: a warm jit saw another thread's trace and inlined itself there."""
    warm = rm.jit(lambda x: x * 3.0)
    warm(np.ones(2, np.float32))
    x = np.arange(2, dtype=np.float32)

    def worker(i, barrier):
        barrier.wait()
        for _ in range(200):
            if i % 2:
                _check("warm jit", warm(x), 3.0 * x)
            else:
                _check("grad", rm.grad(lambda v: rm.sum(v * v))(x), 2.0 * x)

    _run_threads(worker, 4)


def test_a_thread_started_inside_a_trace_sees_no_trace():
    seen = {}

    def other_thread():
        seen["trace"] = current_trace()
        seen["value"] = rm.ones((2,)) * 2.0

    def traced(x):
        t = threading.Thread(target=other_thread)
        t.start()
        t.join()
        return x + 1.0

    graph = rm.make_graph(traced)(np.zeros(2, np.float32))
    assert [n.op for n in graph.nodes] == ["add"]  # the other thread's multiply ran eagerly
    assert seen["trace"] is None
    assert seen["value"].is_concrete
    np.testing.assert_allclose(np.asarray(seen["value"]), [2.0, 2.0])


def test_asyncio_tasks_each_see_their_own_traces():
    """Tasks that open traces and switch at `await` points inside them keep separate stacks."""

    async def trace_in_steps(k: int, opened: asyncio.Event, others_open: asyncio.Event):
        with new_trace(f"task{k}") as t:
            x = t.new_input((2,), np.float32)
            opened.set()
            await others_open.wait()  # every task's trace is open now
            assert current_trace() is t
            y = x * float(k)
            await asyncio.sleep(0)
            assert current_trace() is t
            graph = t.to_graph([y + 1.0])
        assert current_trace() is None
        # while the others still trace, an eager op here is eager
        assert (rm.ones((2,)) * 2.0).is_concrete
        return graph

    async def cold_jit_in_a_thread(k: int):
        x = np.full((4, 3), float(k), np.float32)
        out = await asyncio.to_thread(rm.jit(rm.grad(_checkpointed_loss), backend="xla"), x)
        _check("to_thread jit", out, _ref_grad(x))

    async def main():
        opened = [asyncio.Event() for _ in range(4)]
        all_open = asyncio.Event()

        async def release():
            for e in opened:
                await e.wait()
            all_open.set()

        results = await asyncio.gather(
            *[trace_in_steps(k, opened[k], all_open) for k in range(4)],
            release(),
            *[cold_jit_in_a_thread(k) for k in range(3)],
        )
        return results[:4]

    for k, graph in enumerate(asyncio.run(main())):
        assert [n.op for n in graph.nodes] == ["multiply", "add"]
        (out,) = numpy_backend.compile(graph)(np.ones(2, np.float32))
        np.testing.assert_allclose(out, [k + 1.0, k + 1.0])  # each task kept its own k
    assert current_trace() is None


def test_a_trace_closed_out_of_order_is_a_tracer_error():
    outer = new_trace("outer")
    inner = new_trace("inner")
    outer.__enter__()
    inner.__enter__()
    with pytest.raises(TracerError, match="trace `outer` closed while `inner`.*still open"):
        outer.__exit__(None, None, None)
    inner.__exit__(None, None, None)
    outer.__exit__(None, None, None)
    assert current_trace() is None


def test_a_task_made_inside_a_trace_that_runs_after_it_is_a_tracer_error():
    """A task copies the context it is made in; if it runs ops after that trace ended, it must
    not record into the dead trace (a silent escaped tracer) but say what happened."""
    made = {}

    async def later():
        return rm.ones((2,)) * 2.0

    async def main():
        def traced(x):
            made["task"] = asyncio.get_running_loop().create_task(later())
            return x + 1.0

        rm.jit(traced)(np.zeros(2, np.float32))
        with pytest.raises(TracerError, match=r"jit\(traced\)` ended.*outside the traced function"):
            await made["task"]

    asyncio.run(main())


def test_source_overrides_are_per_thread():
    inside = threading.Event()
    leave = threading.Event()

    def attributed():
        with source_of("model.py:7"):
            inside.set()
            leave.wait(timeout=30)

    t = threading.Thread(target=attributed)
    t.start()
    inside.wait(timeout=30)
    try:
        assert user_source() is not None and user_source().startswith("test_threads.py:")
    finally:
        leave.set()
        t.join()
