"""The memory picture (`remat demo`, `rm.memory.plot`): on XLA a curve node by node inside each
stage, predicted by the evaluator's count, with each stage's measured figures; the plotted peak is
the peak the demo prints; labels that never overlap."""

import contextlib
import io
import re

import numpy as np
import pytest

import remat as rm
from remat import demo, memory, timeline
from remat.models import residual_mlp_loss, residual_mlp_params

MiB = 2**20
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def plotted(ax) -> list[float]:
    """Every memory figure drawn in a panel, in MiB: lines and fills in data coordinates (not the
    phase marks, which span the axes)."""
    ys = [y for line in ax.lines if line.get_transform() is ax.transData for y in line.get_ydata()]
    ys += [y for c in ax.collections for path in c.get_paths() for y in path.vertices[:, 1]]
    return ys


def step_program(fn, *args):
    return memory._program(fn, args, None, True, "memory.profile")


def measured_and_predicted(prog) -> tuple[list, list]:
    """(live, high) per node: as the NumPy evaluator counted them running, and as predicted."""
    measured = [(e.live, e.high) for e in memory._profile_numpy(prog).timeline]
    predicted = [(p.live, p.high) for p in timeline.predict(prog.graph)]
    return measured, predicted


def mlp(depth=4, width=32, batch=64):
    params = residual_mlp_params(depth, width)
    x = rm.asarray(np.random.default_rng(1).normal(size=(batch, width)), "float32")
    return params, x


# ---------------------------------------------------------------- the prediction


@pytest.mark.parametrize("plan", demo.PLANS, ids=lambda p: p.name)
def test_prediction_is_the_evaluators_count_on_every_demo_plan(plan):
    sizes = demo.QUICK
    (x, y), _ = demo.digits()
    params = demo.init(sizes)
    prog = step_program(lambda p: demo.loss(p, x[:64], y[:64], plan), params)
    measured, predicted = measured_and_predicted(prog)
    assert len(measured) > 100
    assert predicted == measured


def test_prediction_follows_views_donation_and_blocks(rng):
    w = rm.asarray(rng.normal(size=(16, 16)), "float32")

    def body(h):
        t = rm.transpose(h @ w)  # a transposed view; reshaping it copies
        flat = rm.reshape(t, (-1,))
        row = rm.reshape(rm.broadcast_to(rm.sum(h), (32,)), (32, 1))  # unit axes: still a view
        return rm.sum(rm.exp(flat[::2])) + rm.sum(rm.stop_gradient(row)) + rm.sum(rm.tanh(h) * 2.0)

    @rm.custom_vjp
    def softsign(x):
        return x / (1.0 + rm.abs(x))

    softsign.defvjp(lambda x: (x / (1.0 + rm.abs(x)), 1.0 + rm.abs(x)), lambda d, g: (g / (d * d),))

    def loss(h):
        return rm.checkpoint(body, softsign(h))

    h = rm.asarray(rng.normal(size=(32, 16)), "float32")
    for grad in (True, False):  # the gradient step, and the forward pass that keeps the custom_vjp block
        prog = memory._program(loss, (h,), None, grad, "memory.profile")
        measured, predicted = measured_and_predicted(prog)
        assert len(measured) > 15
        assert predicted == measured
    ops = {n.op for n in step_program(loss, h).graph.walk()} | {n.op for n in prog.graph.walk()}
    assert {"permute_dims", "reshape", "broadcast_to", "slice", "stop_gradient"} <= ops
    assert {"checkpoint", "custom_vjp", "barrier"} <= ops


def test_prediction_counts_neither_arguments_nor_constants():
    g = rm.make_graph(lambda x: rm.reshape(x, (8, 8)) + rm.full((8, 8), 2.0))(rm.ones((64,)))
    assert [(p.label.split()[0], p.live, p.high, p.node) for p in timeline.predict(g)] == [
        ("reshape", 0, 0, 0), ("add", 256, 256, 1)]


# ---------------------------------------------------------------- the XLA profile


def test_xla_profile_is_node_by_node_under_the_executables_report():
    params, x = mlp()
    report = rm.memory.profile(lambda p: residual_mlp_loss(p, x, "layer"), params, backend="xla")
    measured = report.xla
    assert measured.temp > 0 and measured.outputs > 0 and report.peak_bytes == measured.high
    assert len(report.timeline) > 50 and max(e.high for e in report.timeline) <= measured.high
    b = report.backward_start
    ramp = [e.live for e in report.timeline[:b]]
    assert ramp[-1] > 3 * ramp[0]  # the forward pass keeps each layer's input
    assert report.predicted and not rm.memory.profile(lambda p: residual_mlp_loss(p, x, "layer"), params).predicted
    assert str(report).startswith("Profile(xla: peak") and f"backward from node {b}" in str(report)


def test_prediction_never_goes_above_what_the_executable_was_measured_to_hold():
    # The evaluator builds the 512 x 512 sum before exp; XLA fuses both into the reduction.
    def f(x):
        return rm.sum(rm.exp(rm.reshape(x, (-1, 1)) + rm.reshape(x, (1, -1))))

    x = rm.ones((512,))
    report = rm.memory.profile(f, x, backend="xla", grad=False)
    assert max(p.high for p in timeline.predict(rm.make_graph(f)(x))) == 512 * 512 * 4 + 4  # and the sum
    assert report.xla.high < 1024 and report.peak_bytes == report.xla.high
    assert max(e.high for e in report.timeline) == report.xla.high


# ---------------------------------------------------------------- the demo's picture


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """`remat demo --quick --epochs 1` on XLA: what it prints, its PNG, and the figure drawn."""
    path = tmp_path_factory.mktemp("demo") / "memory.png"
    figures = []
    draw = memory._figure

    def keep(profiles, title):
        figures.append((profiles, draw(profiles, title)))
        return figures[-1][1]

    out = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out):
        patch.setattr(memory, "_figure", keep)
        assert demo.run(quick=True, backend="xla", plot=str(path), epochs=1, progress=False) == 0
    ((profiles, fig),) = figures
    return out.getvalue(), path, profiles, fig


@pytest.mark.claims
def test_demo_picture_has_a_curve_per_panel_under_the_measured_figure(demo_run):
    _, path, profiles, fig = demo_run
    assert path.read_bytes()[:8] == PNG_MAGIC
    assert list(profiles) == ["none", "per layer", "√L", "dots_saveable"]
    for name, prof in profiles.items():
        assert prof.xla is not None and len(prof.timeline) > 100, name
        b = prof.backward_start
        live = [e.live for e in prof.timeline]
        assert live[b - 1] > 2 * live[0], name  # the forward ramp
        assert live[-1] < 0.6 * max(live[b:]), name  # the backward descent


@pytest.mark.claims
def test_demo_plotted_peak_is_the_printed_peak(demo_run):
    out, _, profiles, fig = demo_run
    printed = {line.split("|")[1].strip(): line.split("|")[2].strip()
               for line in out.splitlines() if line.startswith("| ") and not line.startswith("| plan")}
    for ax, (name, prof) in zip(fig.axes, profiles.items()):
        top = max(plotted(ax))
        assert top * MiB == pytest.approx(prof.peak_bytes, rel=1e-12), name
        assert f"{top:.2f}" == printed[name]
        assert ax.get_title(loc="left").startswith(f"{name}: peak {printed[name]} MiB, measured")


@pytest.mark.claims
def test_demo_says_which_figures_are_measured_and_which_predicted(demo_run):
    out, _, _, fig = demo_run
    assert re.search(r"peak: measured, .*XLA's buffer report.*temporary buffers", out)
    assert "predicted" in out and "memory timeline:" in out
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any(t.startswith("live after each node: predicted") for t in legend)
    assert any(t.startswith("held while the step runs: measured, XLA's buffer report") for t in legend)
    assert fig.axes[-1].get_xlabel().startswith("node of the step")


def test_numpy_picture_says_its_curve_is_measured():
    params, x = mlp()
    prof = rm.memory.profile(lambda p: residual_mlp_loss(p, x, "layer"), params)
    fig = memory._figure({"layer": prof}, "t")
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend and all(": measured" in t for t in legend)
    assert max(plotted(fig.axes[0])) * MiB == pytest.approx(prof.peak_bytes, rel=1e-12)


# ---------------------------------------------------------------- labels


def phase_labels(ax):
    return {t.get_text().strip(): t for t in ax.texts if t.get_text().strip() in ("forward", "backward")}


def test_phase_labels_never_overlap_when_the_forward_pass_is_short():
    timeline_ = [rm.memory.Event("f", 100, 100, "forward")] + [rm.memory.Event("b", 50, 60, "backward")] * 80
    fig = memory._figure({"short": rm.memory.Profile(100, timeline_, "numpy")}, None)
    labels = phase_labels(fig.axes[0])
    renderer = fig.canvas.get_renderer()
    forward, backward = (labels[k].get_window_extent(renderer) for k in ("forward", "backward"))
    assert not forward.overlaps(backward)


def test_phase_labels_share_a_line_when_there_is_room():
    params, x = mlp()
    prof = rm.memory.profile(lambda p: residual_mlp_loss(p, x, "layer"), params)
    labels = phase_labels(memory._figure({"layer": prof}, None).axes[0])
    assert labels["forward"].get_position()[1] == labels["backward"].get_position()[1]
