"""`remat bench` measures every framework the same way: the same step, the same memory figure,
runtimes timed apart, medians with their spread."""

from __future__ import annotations

import numpy as np
import pytest

from remat.bench import FRAMEWORKS, _subprocess, missing, worker
from remat.bench.config import MLP, PLANS, inputs, size_of, size_to_dict
from remat.bench.jobs import TIME_GROUPS, phases
from remat.bench.report import ratio, table

MiB = 2**20
RUNTIME = {"remat-numpy": "numpy", "remat-xla": "xla", "jax": "xla", "torch": "torch"}


def test_memory_jobs_come_first_and_each_time_job_runs_alone_on_one_runtime():
    memory, *timing = phases("mlp", True, list(FRAMEWORKS))
    assert memory.name == "memory" and memory.processes == 2
    assert {(j["framework"], j["plan"]) for j in memory.jobs} == {(f, p) for f in FRAMEWORKS for p in PLANS}
    assert all(j["job"] == "memory" for j in memory.jobs)
    assert [p.name for p in timing] == ["time remat-numpy", "time remat-xla + jax", "time torch"]
    timed = []
    for phase in timing:
        assert phase.processes == 1 and len(phase.jobs) == 1
        (job,) = phase.jobs
        assert job["job"] == "time" and job["rounds"] == 3
        assert len({RUNTIME[f] for f, _ in job["entries"]}) == 1  # one runtime per process
        timed += job["entries"]
    assert sorted(timed) == sorted((f, p) for f in FRAMEWORKS for p in PLANS)  # each timed once


def test_time_phases_are_only_for_the_frameworks_asked_for():
    assert [p.name for p in phases("gpt", False, ["jax", "remat-numpy"])] == [
        "memory", "time remat-numpy", "time jax"]
    (job,) = phases("gpt", False, ["jax"])[1].jobs
    assert job["rounds"] == 7 and job["size"] == size_to_dict(size_of("gpt", False))
    assert {f for group in TIME_GROUPS for f in group} == set(FRAMEWORKS)


def test_time_job_times_every_step_each_round_in_rotated_order(monkeypatch):
    order = []

    def build(framework, size, plan):
        def step():
            order.append(f"{framework}/{plan}")
            return plan

        return step, lambda out: len(out)

    monkeypatch.setattr(worker, "build", build)
    entries = [("jax", "none"), ("jax", "layer"), ("remat-xla", "none")]
    out = worker.time_job({"size": size_to_dict(size_of("mlp", True)), "rounds": 3, "entries": entries})
    keys = ["jax/none", "jax/layer", "remat-xla/none"]
    assert order[3:] == keys + keys[1:] + keys[:1] + keys[2:] + keys[:2]  # after one warm-up step each
    assert {k: len(v) for k, v in out["times"].items()} == dict.fromkeys(keys, 3)
    assert out["losses"] == {"jax/none": 4, "jax/layer": 5, "remat-xla/none": 4}


def test_a_time_cell_is_the_median_of_per_round_ratios_with_their_spread():
    base = {"times": [1.0, 1.0, 2.0, 1.0]}
    assert ratio({"times": [2.0, 3.0, 4.0, 1.5]}, base) == "2.00x (1.50–3.00)"
    assert ratio(base, base) == "1.00x"
    assert ratio({"peak": 1}, base) == "n/a" and ratio(None, base) == "n/a"


def test_the_table_shows_peaks_ratios_and_spreads():
    rows = {
        ("jax", "none"): {"peak": 8 * MiB, "times": [1.0, 1.0, 1.0], "loss": 2.0},
        ("jax", "layer"): {"peak": 4 * MiB, "times": [1.2, 1.1, 1.5], "loss": 2.0},
        ("remat-xla", "none"): {"peak": 6 * MiB, "times": [0.9, 1.0, 1.1], "loss": 2.0},
        ("remat-xla", "layer"): {"peak": 3 * MiB, "times": [1.2, 1.3, 1.2], "loss": 2.0},
    }
    text = table("mlp", True, rows, ["remat-xla", "jax"])
    assert "| none | 6.0 (1.00x) | 1.00x | 8.0 (1.00x) | 1.00x | 1.00x (0.90–1.10) |" in text
    per_layer = "| per layer | 3.0 (0.50x) | 1.30x (1.09–1.33) | 4.0 (0.50x) | 1.20x (1.10–1.50) | 1.00x (0.80–1.18) |"
    assert per_layer in text
    assert "| √L | n/a | n/a | n/a | n/a | n/a |" in text


@pytest.mark.torch
def test_torch_step_returns_the_gradients_and_keeps_no_grad_buffers(monkeypatch):
    import remat as rm
    from remat.bench import impl_torch
    from remat.models import residual_mlp_loss

    made = []  # (requires grad, tree): every tree of tensors build makes, innermost first
    real = impl_torch._tensors
    monkeypatch.setattr(impl_torch, "_tensors", lambda tree, grad: made.append((grad, real(tree, grad))) or made[-1][1])
    size = size_of("mlp", True)
    params, x = inputs(size)
    step, finish = impl_torch.build(size, "sqrt", params, x)
    torch_params = impl_torch._leaves([tree for grad, tree in made if grad][-1])
    loss, grads = step()
    want = rm.grad(lambda p: residual_mlp_loss(p, x, "none"))(params)
    assert len(grads) == 2 * size.depth
    for got, w in zip(grads, rm.tree.leaves(want)):
        np.testing.assert_allclose(got.numpy(), np.asarray(w), rtol=1e-4, atol=1e-6)
    assert finish((loss, grads)) == pytest.approx(float(rm.jit(residual_mlp_loss, static_argnums=2)(params, x, "none")))
    assert len(torch_params) == 2 * size.depth
    assert all(p.grad is None for p in torch_params)  # else the next step's baseline would hold them


@pytest.mark.claims
@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_every_framework_counts_the_gradients_and_nothing_else_of_its_runtime(framework):
    """A step whose memory is nearly all gradients (16 MiB of weights, a batch of 8): every
    framework's figure must hold them, and not its runtime's one-time set-up."""
    if missing(framework):
        pytest.skip(missing(framework))
    size = MLP(depth=4, width=1024, batch=8)
    grads = sum(w.nbytes + b.nbytes for w, b in inputs(size)[0])
    res = _subprocess({"job": "memory", "framework": framework, "plan": "none", "size": size_to_dict(size)})
    # Resident memory moves by pages: eight runs of each framework read from 108 KiB under the
    # gradients' bytes to 240 KiB over them, so the bounds keep 1 MiB clear of that spread.
    assert grads - 1 * MiB <= res["peak"] <= grads + 3 * MiB, (res["peak"] / MiB, grads / MiB)


# ---------------------------------------------------------------- the loop models


LOOP_MODELS = ("scanned-mlp", "scanned-gpt", "rnn")


def test_loop_models_run_the_scan_schedules():
    from remat.bench.config import LOOP_PLANS, MODELS, plan_name, plans_of

    assert set(LOOP_MODELS) <= set(MODELS)
    for model in LOOP_MODELS:
        assert plans_of(model) == LOOP_PLANS == ("none", "step", "sqrt", "binomial")
        memory, *timing = phases(model, True, list(FRAMEWORKS))
        assert {(j["framework"], j["plan"]) for j in memory.jobs} == {(f, p) for f in FRAMEWORKS for p in LOOP_PLANS}
        assert sorted(e for p in timing for e in p.jobs[0]["entries"]) == sorted(memory_entry(j) for j in memory.jobs)
        assert size_of(model, False).scanned and size_of(model, True).scanned
    assert [plan_name("rnn", p) for p in LOOP_PLANS] == ["none", "per step", "√T segments", "binomial"]
    assert plans_of("mlp") == PLANS and size_to_dict(size_of("rnn", False)) == {
        "kind": "RNN", "steps": 1000, "width": 256, "inputs": 32, "batch": 128}


def memory_entry(job: dict) -> tuple[str, str]:
    return job["framework"], job["plan"]


def test_a_loop_models_table_names_its_schedules_and_leaves_what_a_framework_lacks_blank():
    rows = {
        ("remat-xla", "none"): {"peak": 8 * MiB, "times": [1.0, 1.0, 1.0], "loss": 2.0},
        ("remat-xla", "binomial"): {"peak": 1 * MiB, "times": [3.0, 3.0, 3.0], "loss": 2.0},
        ("jax", "none"): {"peak": 8 * MiB, "times": [1.0, 1.0, 1.0], "loss": 2.0},
    }
    text = table("rnn", True, rows, ["remat-xla", "jax"])
    assert "**tanh RNN: 16 steps, width 32, 8 inputs, batch 4 (one carry: 0.5 KiB)**" in text
    assert "| binomial | 1.0 (0.12x) | 3.00x (3.00–3.00) | n/a | n/a | n/a |" in text
    assert "| per step | n/a | n/a | n/a | n/a | n/a |" in text and "√T segments" in text


def _ordered(tree, like) -> list:
    """The leaves of `tree` in the order of `like`'s (dicts in insertion order, as PyTorch's)."""
    if isinstance(like, dict):
        return [x for k in like for x in _ordered(tree[k], like[k])]
    if isinstance(like, (list, tuple)):
        return [x for t, lk in zip(tree, like) for x in _ordered(t, lk)]
    return [tree]


@pytest.mark.claims
@pytest.mark.parametrize("model", LOOP_MODELS)
def test_loop_models_have_the_same_loss_and_gradients_in_every_framework(model):
    """The bench's step of each loop model, per schedule: remat (NumPy) against JAX's lax.scan +
    jax.checkpoint and PyTorch's checkpointed Python loop, on the same numbers (float32)."""
    import jax

    import remat as rm
    from remat.bench import impl_jax, impl_remat
    from remat.bench.config import LOOP_PLANS

    size = size_of(model, True)
    params, data = inputs(size)
    torch_runs = missing("torch") is None  # PyTorch is optional

    for plan in LOOP_PLANS:
        loss, grads = rm.jit(rm.value_and_grad(impl_remat.loss_fn(size, plan)))(params, data)
        want = _ordered(grads, params)
        assert [np.shape(g) for g in want] == [np.shape(p) for p in _ordered(params, params)]
        if plan == "binomial":  # neither JAX nor PyTorch has it: the plain scan's gradient instead
            base = rm.jit(rm.value_and_grad(impl_remat.loss_fn(size, "none")))(params, data)
            assert_all_close([loss, *want], [base[0], *_ordered(base[1], params)])
            continue
        jl, jg = jax.jit(jax.value_and_grad(impl_jax.loss_fn(size, plan)))(params, data)
        assert_all_close([loss, *want], [jl, *_ordered(jg, params)])
        if torch_runs:
            from remat.bench import impl_torch

            step, _ = impl_torch.build(size, plan, params, data)
            tl, tg = step()
            assert_all_close([loss, *want], [tl.detach(), *tg])


def assert_all_close(got: list, want: list) -> None:
    assert len(got) == len(want)
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-4, atol=2e-6)


def test_only_memory_jobs_change_how_malloc_returns_memory(monkeypatch):
    """Timing under MALLOC_MMAP_THRESHOLD_ timed page faults: every large array fresh pages."""
    import remat.bench as bench

    seen = []

    def fake_run(cmd, env, **_):
        seen.append({k: env.get(k) for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_ARENA_MAX")})
        return type("Done", (), {"returncode": 0, "stdout": "{}\n"})()

    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    monkeypatch.setattr(bench.subprocess, "run", fake_run)
    for job in ("memory", "planner-memory", "time", "planner-time"):
        assert _subprocess({"job": job}) == {}
    memory, defaults = {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_ARENA_MAX": "1"}, dict.fromkeys(seen[0])
    assert seen == [memory, memory, defaults, defaults]


def test_inputs_are_drawn_in_slabs_without_a_float64_copy_yet_the_same_numbers():
    """`remat fit` counts every byte of a try's process: a long RNN sequence's inputs are drawn a
    slab at a time (about 8 MiB of float64), and are the numbers one draw gives."""
    from remat.bench import config

    got = config._normal32(np.random.default_rng(0), 0.5, 3000, 700)  # three slabs of 1497 rows
    want = np.random.default_rng(0).normal(0, 0.5, (3000, 700)).astype(np.float32)
    assert got.dtype == np.float32 and np.array_equal(got, want)
