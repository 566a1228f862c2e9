"""Checkpointing a loop lowers the measured peak memory of a training step: the scanned 64-layer
residual MLP against the same MLP unrolled, on NumPy counted by the evaluator and checked against
tracemalloc, on XLA the sampled RSS of a child process and XLA's own buffer assignment (the
measurements are `benchmarks/loops.py`'s)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from loops import MLP_SIZE, RNN_SIZE, numpy_peak, xla_peak_in_child  # noqa: E402


def _activation(size: dict) -> int:
    return size["batch"] * size["width"] * 4


def assert_counts_agree(row: dict, activation: int) -> None:
    # What tracemalloc sees beside the evaluator's buffers: np.matmul's copy of a transposed
    # operand (about one activation, for a moment), and the Python objects of the run (a plain
    # run keeps no list per node run, and a binomial schedule's rows become Python ints a few at
    # a time: both had grown with the loop's length).
    slack = max(0.03 * row["tracemalloc"], 2.5 * activation)
    assert row["evaluator"] - slack <= row["tracemalloc"] <= row["evaluator"] + slack, row


@pytest.mark.claims
def test_scanned_mlp_peak_per_schedule():
    rows = {name: numpy_peak("mlp", name, MLP_SIZE) for name in ("unrolled", "plain", "body", "sqrt", "binomial")}
    act = _activation(MLP_SIZE)
    for row in rows.values():
        assert_counts_agree(row, act)
    unrolled = rows["unrolled"]["evaluator"]
    assert unrolled >= 2 * MLP_SIZE["depth"] * act  # h and tanh's output per layer
    assert rows["plain"]["evaluator"] <= 1.05 * unrolled  # the loop keeps what the unrolled step keeps
    assert rows["body"]["evaluator"] <= 0.55 * unrolled
    assert rows["sqrt"]["evaluator"] <= 0.25 * unrolled
    assert rows["binomial"]["evaluator"] <= 0.15 * unrolled
    losses = [r["loss"] for r in rows.values()]
    assert max(losses) - min(losses) <= 1e-6 * max(losses)


@pytest.mark.claims
def test_scanned_mlp_peak_per_schedule_on_xla():
    pytest.importorskip("jax")
    rows = {name: xla_peak_in_child("mlp", name, MLP_SIZE) for name in ("unrolled", "body", "sqrt")}
    act = _activation(MLP_SIZE)
    unrolled = rows["unrolled"]
    # XLA's buffer assignment: the unrolled step's 128 activations, the checkpointed body's 64
    # carries and 4 temporaries (as jax.lax.scan + jax.checkpoint: 68), √T segments' 8 carries and
    # one segment's 16 values.
    assert unrolled["buffers"] >= 2 * MLP_SIZE["depth"] * act
    assert unrolled["buffers"] <= unrolled["rss"] + 8 * act  # RSS rises at least as far, give or take
    for name, target in (("body", 0.55), ("sqrt", 0.25)):
        assert rows[name]["buffers"] <= target * unrolled["buffers"], (name, rows)
        assert rows[name]["rss"] <= target * unrolled["rss"], (name, rows)
    assert len({round(r["loss"], 4) for r in rows.values()}) == 1


@pytest.mark.claims
def test_rnn_over_1000_steps_peak_per_schedule():
    rows = {name: numpy_peak("rnn", name, RNN_SIZE) for name in ("plain", "sqrt", "binomial")}
    carry = _activation(RNN_SIZE)
    for row in rows.values():
        assert_counts_agree(row, carry)
    assert rows["plain"]["evaluator"] >= RNN_SIZE["steps"] * carry
    assert rows["sqrt"]["evaluator"] <= 0.15 * rows["plain"]["evaluator"]
    # ceil(log2 1000) = 10 snapshots, the current carry and the one an advance makes, the
    # cotangent, its seed and the step's temporaries; the weights' gradient summed over the steps
    # and one step's term. No cotangent of xs (as large as xs): only the weights' is asked for.
    width, inputs = RNN_SIZE["width"], 32
    weights = (width * width + inputs * width + width) * 4
    assert rows["binomial"]["evaluator"] <= 2 * weights + (10 + 8) * carry
