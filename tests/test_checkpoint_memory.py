"""Checkpointing lowers the measured peak memory of a training step on the NumPy backend."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from numpy_memory import measure  # noqa: E402


@pytest.mark.claims
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


@pytest.mark.claims
def test_grad_of_grad_of_the_residual_mlp_peaks_lower_with_checkpoints():
    # Hessian-vector-product style: the gradient of <grad loss(p), v>. Its first-order backward
    # pass is made of checkpoint blocks, which its own backward pass recomputes (issue 13).
    import numpy as np

    import remat as rm
    from remat.models import residual_mlp_loss, residual_mlp_params

    params = residual_mlp_params(depth=32, width=64)
    x = rm.asarray(np.random.default_rng(1).normal(size=(256, 64)), "float32")
    v = [(rm.ones(w.shape) * 0.01, rm.ones(b.shape) * 0.01) for w, b in params]

    def hvp_loss(plan):
        def f(p, x):
            g = rm.grad(lambda p: residual_mlp_loss(p, x, plan))(p)
            return sum(rm.sum(gw * vw) + rm.sum(gb * vb) for (gw, gb), (vw, vb) in zip(g, v))

        return f

    peak = {plan: rm.memory.profile(hvp_loss(plan), params, x, argnums=0).peak_bytes for plan in ("none", "layer")}
    assert peak["layer"] <= 0.6 * peak["none"]  # measured: 0.46
