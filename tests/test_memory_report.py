"""rm.memory: the saved-residual report, the memory profile and its plot."""

import inspect
import tracemalloc

import numpy as np
import pytest

import remat as rm
from remat.models import residual_mlp_loss, residual_mlp_params

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def f32(rng, *shape):
    return rm.asarray(rng.normal(0, 0.5, shape), "float32")


def line_of(fn, marker: str) -> str:
    """`file.py:N` of the line of `fn`'s source holding `marker`."""
    lines, start = inspect.getsourcelines(fn)
    n = next(i for i, text in enumerate(lines) if marker in text)
    return f"{inspect.getsourcefile(fn).rsplit('/', 1)[-1]}:{start + n}"


# ---------------------------------------------------------------- saved residuals


def model(params, batch):
    h = batch["x"]
    for w, b in params:
        h = rm.tanh(h @ w + b)  # layer
    attn = rm.checkpoint_name(rm.sin(h), "attn")
    return rm.sum(attn * attn)


def test_provenance_names_arguments_by_path_values_by_name_and_line(rng):
    params = [(f32(rng, 4, 4), f32(rng, 4)) for _ in range(2)]
    batch = {"x": f32(rng, 3, 4)}
    got = [(r.kind, r.provenance) for r in rm.memory.saved_residuals(model, params, batch)]
    layer = line_of(model, "# layer")
    assert got == [
        ("argument", "argument params[0][0]"),
        ("argument", "argument params[1][0]"),
        ("argument", "argument batch['x']"),
        ("output", f"output of tanh at {layer}"),
        ("output", f"output of tanh at {layer}"),
        ("named", "named 'attn'"),
    ]


def test_residuals_report_shape_dtype_and_bytes(rng):
    x, w = f32(rng, 8, 16), f32(rng, 16, 32)
    (out,) = [r for r in rm.memory.saved_residuals(lambda x, w: rm.sum(rm.tanh(x @ w)), x, w)
              if r.kind == "output"]
    assert (out.shape, out.dtype, out.nbytes) == ((8, 32), np.float32, 8 * 32 * 4)
    assert out.source is not None and out.source.startswith("test_memory_report.py:")


def test_a_checkpoint_keeps_only_its_inputs(rng):
    params = residual_mlp_params(4, 8)
    x = f32(rng, 5, 8)
    plain = rm.memory.saved_residuals(lambda p: residual_mlp_loss(p, x, "none"), params)
    ck = rm.memory.saved_residuals(lambda p: residual_mlp_loss(p, x, "layer"), params)
    assert sum(r.kind == "output" for r in plain) == 4 + 4  # tanh outputs and residual streams
    # each block's input (the first is the constant x), and the last output (the loss reads it)
    assert [r.kind for r in ck if r.kind != "argument"] == ["constant"] + ["output"] * 4
    assert sum(r.nbytes for r in ck) < sum(r.nbytes for r in plain)


def test_argnums_restricts_what_is_differentiated(rng):
    x, w = f32(rng, 3, 4), f32(rng, 4, 4)
    loss = lambda x, w: rm.sum(rm.sin(x @ w))  # noqa: E731
    both = {r.provenance for r in rm.memory.saved_residuals(loss, x, w)}
    only_w = {r.provenance for r in rm.memory.saved_residuals(loss, x, w, argnums=1)}
    assert {"argument x", "argument w"} <= both
    assert "argument x" in only_w and "argument w" not in only_w  # gw = xᵀ g reads x only


def test_print_saved_residuals_prints_a_table_with_the_total(rng, capsys):
    x, w = f32(rng, 64, 32), f32(rng, 32, 32)
    rm.memory.print_saved_residuals(lambda x, w: rm.sum(rm.tanh(x @ w)), x, w)
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["value", "size", "saved", "because"]
    assert out[1].split()[:3] == ["f32[64,32]", "8.0", "KiB"]
    assert "argument x" in out[1]
    assert out[-1] == "3 residuals, 20.0 KiB in all"


# ---------------------------------------------------------------- profile


def mlp_step_args(depth=8, width=128, batch=256):
    params = residual_mlp_params(depth, width)
    x = rm.asarray(np.random.default_rng(1).normal(size=(batch, width)), "float32")
    return params, x


@pytest.mark.parametrize("plan", ["none", "layer", "sqrt"])
def test_profile_peak_agrees_with_tracemalloc(plan):
    params, x = mlp_step_args()
    loss = lambda p: residual_mlp_loss(p, x, plan)  # noqa: E731
    rm.memory.profile(loss, params)  # warm up: first-call allocations are not the step's
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        report = rm.memory.profile(loss, params)
        traced = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert abs(report.peak_bytes - traced) <= 0.10 * traced


def test_profile_matches_the_evaluator_and_marks_the_backward_pass():
    params, x = mlp_step_args(depth=4, width=32, batch=64)
    loss = lambda p: residual_mlp_loss(p, x, "layer")  # noqa: E731
    report = rm.memory.profile(loss, params)
    compiled = rm.jit(rm.value_and_grad(loss)).lower(params).compile()
    compiled(params)
    assert report.peak_bytes == compiled.last_memory.peak
    b = report.backward_start
    assert 0 < b < len(report.timeline)
    assert {e.phase for e in report.timeline[:b]} == {"forward"}
    assert {e.phase for e in report.timeline[b:]} == {"backward"}
    assert max(e.high for e in report.timeline) == report.peak_bytes
    assert all(e.high >= e.live for e in report.timeline)
    assert [e.label.split(" ")[0] for e in report.timeline[:5]] == ["matmul", "add", "tanh", "add", "checkpoint"]
    assert "peak" in str(report) and "backward from node" in str(report)


@pytest.mark.parametrize("backend", ["numpy", "xla"])
def test_checkpoint_plans_lower_the_profiled_peak(backend):
    params, x = mlp_step_args(depth=16, width=32, batch=256)
    peak = {plan: rm.memory.profile(lambda p, plan=plan: residual_mlp_loss(p, x, plan), params,
                                    backend=backend).peak_bytes
            for plan in ("none", "layer", "sqrt")}
    assert peak["sqrt"] < peak["layer"] < 0.7 * peak["none"]


def test_profile_without_grad_runs_the_function_as_it_is(rng):
    x = f32(rng, 256)
    report = rm.memory.profile(lambda x: rm.sum(rm.tanh(x)), x, grad=False)
    assert report.backward_start is None
    assert report.peak_bytes == 256 * 4 + 4  # tanh's output, then the sum
    assert len(report.timeline) == 2


def test_profile_names_an_unknown_backend(rng):
    with pytest.raises(ValueError, match="tpu"):
        rm.memory.profile(lambda x: rm.sum(x), f32(rng, 3), backend="tpu")


def test_profile_on_xla_gives_one_event_per_node_and_measures_the_executable():
    params, x = mlp_step_args(depth=4, width=32, batch=64)
    report = rm.memory.profile(lambda p: residual_mlp_loss(p, x, "layer"), params, backend="xla")
    assert report.xla is not None and len(report.timeline) > 5 * 10
    assert report.timeline[0].phase == "forward" and report.timeline[-1].phase == "backward"
    assert report.peak_bytes >= max(e.live for e in report.timeline) > 0


# ---------------------------------------------------------------- plots


def test_plot_writes_a_png(tmp_path):
    params, x = mlp_step_args(depth=4, width=32, batch=64)
    report = rm.memory.profile(lambda p: residual_mlp_loss(p, x, "layer"), params)
    path = report.plot(tmp_path / "memory.png")
    assert path.read_bytes()[:8] == PNG_MAGIC
    assert path.stat().st_size > 5000


def test_plot_of_several_profiles_writes_one_png(tmp_path):
    params, x = mlp_step_args(depth=4, width=32, batch=64)
    reports = {plan: rm.memory.profile(lambda p, plan=plan: residual_mlp_loss(p, x, plan), params)
               for plan in ("none", "layer")}
    path = rm.memory.plot(reports, tmp_path / "sub" / "plans.png", title="residual MLP")
    assert path.read_bytes()[:8] == PNG_MAGIC
