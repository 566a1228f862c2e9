"""The benchmarks' timing helpers (`remat.bench.timing`): rotated rounds, waiting for results, ratios."""

from __future__ import annotations

import numpy as np
import pytest

import remat as rm
from remat.bench import timing


class Pending:
    """An array computed asynchronously: counts the waits on it."""

    def __init__(self):
        self.waits = 0

    def block_until_ready(self):
        self.waits += 1
        return self


@pytest.fixture
def clock(monkeypatch):
    """A fake `time.perf_counter`: `clock[0]` seconds, moved on by the steps themselves."""
    now = [0.0]
    monkeypatch.setattr(timing.time, "perf_counter", lambda: now[0])
    return now


def test_each_round_starts_one_key_later():
    assert [timing.rotated("abc", r) for r in range(4)] == [list("abc"), list("bca"), list("cab"), list("abc")]
    assert [timing.rotated(("x", "y"), r) for r in range(3)] == [["x", "y"], ["y", "x"], ["x", "y"]]


def test_round_robin_calls_each_run_once_a_round_in_rotated_order():
    calls = []
    runs = {k: (lambda k=k: calls.append(k) or f"{k}{len(calls)}") for k in "abc"}
    got = timing.round_robin(runs, 3)
    assert calls == list("abc") + list("bca") + list("cab")
    assert got == {"a": ["a1", "a6", "a8"], "b": ["b2", "b4", "b9"], "c": ["c3", "c5", "c7"]}
    assert timing.round_robin({}, 3) == {}


def test_interleaved_times_each_step_once_a_round_until_the_wait_returns(clock):
    waited = []

    def step(seconds: float, name: str):
        def run():
            clock[0] += seconds
            return name

        return run

    def wait(out):
        clock[0] += 0.5  # the wait is inside the clock
        waited.append(out)

    times = timing.interleaved({"a": step(1.0, "a"), "b": step(2.0, "b")}, 3, wait=wait)
    assert times == {"a": [1.5, 1.5, 1.5], "b": [2.5, 2.5, 2.5]}
    assert waited == ["a", "b", "b", "a", "a", "b"]


def test_interleaved_pairs_waits_with_each_steps_own_finish(clock):
    finished = []
    steps = {k: (lambda k=k: k, lambda out: finished.append(out)) for k in ("x", "y")}
    assert timing.interleaved_pairs(steps, 2) == {"x": [0.0, 0.0], "y": [0.0, 0.0]}
    assert finished == ["x", "y", "y", "x"]


def test_ready_waits_for_every_array_of_a_pytree_and_returns_it():
    pending = [Pending(), Pending()]
    tree = {"a": [pending[0], np.ones(2)], "b": (rm.ones((2,)), pending[1]), "c": None}
    assert timing.ready(tree) is tree
    assert [p.waits for p in pending] == [1, 1]


def test_ready_waits_for_the_jax_array_inside_a_remat_tensor():
    pytest.importorskip("jax")
    out = rm.jit(lambda x: (x * 2.0, rm.sum(x)), backend="xla")(rm.ones((3,)))
    assert timing.ready(out) is out
    np.testing.assert_array_equal(np.asarray(out[0]), [2.0, 2.0, 2.0])


def test_seconds_applies_the_wait_to_the_result(clock):
    def fn():
        clock[0] += 2.0
        return [Pending()]

    out = []
    assert timing.seconds(fn, wait=out.append) == 2.0
    assert timing.seconds(fn) == 2.0  # `ready` by default
    assert out[0][0].waits == 0


def test_ratios_are_taken_round_by_round():
    times, base = [2.0, 3.0, 8.0], [1.0, 3.0, 2.0]
    assert timing.ratios(times, base) == [2.0, 1.0, 4.0]
    assert timing.median_ratio(times, base) == 2.0
    assert timing.best_and_median({"t / b": (times, base)}) == {"best": {"t / b": 2.0}, "median": {"t / b": 1.5}}
