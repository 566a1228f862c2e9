"""Checkpointing lowers the measured peak memory of a training step on the NumPy backend."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from numpy_memory import measure  # noqa: E402


@pytest.mark.slow
def test_residual_mlp_peak_memory_per_plan():
    rows = {plan: measure(plan, depth=32, width=128, batch=1024) for plan in ("none", "layer", "sqrt")}
    for r in rows.values():  # the evaluator's own count agrees with an outside measure
        assert abs(r["evaluator_peak"] - r["tracemalloc_peak"]) <= 0.10 * r["tracemalloc_peak"]
    none = rows["none"]["evaluator_peak"]
    assert rows["layer"]["evaluator_peak"] <= 0.60 * none
    assert rows["sqrt"]["evaluator_peak"] <= 0.35 * none
    # Without checkpoints the step keeps two activations per layer (h and tanh's output).
    assert none >= 64 * rows["none"]["activation_bytes"]
    losses = {r["loss"] for r in rows.values()}
    assert max(losses) - min(losses) <= 1e-6 * max(losses)
