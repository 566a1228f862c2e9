"""`remat demo`: train a residual MLP on scikit-learn's digits once per checkpoint plan and show
what each plan costs: peak memory of a training step, its time relative to no checkpoint, and
the final loss and accuracy — the same for every plan, because only the schedule changes.

Plans: `none`; `per layer` (one checkpoint per layer); `√L` (one per segment of about √L
layers); `dots_saveable` (one per layer, keeping the matrix products).
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

import remat as rm
from remat.bench.timing import interleaved
from remat.models import residual_mlp, residual_mlp_params

MiB = 2**20


@dataclass(frozen=True)
class Plan:
    name: str
    segment: str  # a plan of remat.models: "none", "layer" or "sqrt"
    policy: object = None


PLANS = (
    Plan("none", "none"),
    Plan("per layer", "layer"),
    Plan("√L", "sqrt"),
    Plan("dots_saveable", "layer", rm.policies.dots_saveable),
)


@dataclass(frozen=True)
class Sizes:
    depth: int
    width: int
    batch: int
    epochs: int
    lr: float


FULL = Sizes(depth=24, width=64, batch=256, epochs=12, lr=0.03)
QUICK = Sizes(depth=6, width=32, batch=128, epochs=3, lr=0.05)


# ---------------------------------------------------------------- data and model


def digits():
    """scikit-learn's 8x8 digits (shipped with the package, no download): features scaled to
    [0, 1], a fixed 80/20 split."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(x))
    x, y = (x[order] / 16.0).astype(np.float32), y[order].astype(np.int32)
    cut = int(0.8 * len(x))
    return (x[:cut], y[:cut]), (x[cut:], y[cut:])


def init(sizes: Sizes, features: int = 64, classes: int = 10, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "inp": rm.asarray(rng.normal(0, 1 / math.sqrt(features), (features, sizes.width)), "float32"),
        "layers": residual_mlp_params(sizes.depth, sizes.width, seed=seed + 1),
        # A zero classifier head starts every class at 1/10 (loss ln 10), so the deep residual
        # stack is not knocked off balance by large early gradients.
        "out": rm.zeros((sizes.width, classes)),
    }


def logits(params: dict, x, plan: Plan):
    h = residual_mlp(params["layers"], x @ params["inp"], plan.segment, plan.policy)
    return h @ params["out"]


def loss(params: dict, x, y, plan: Plan):
    return rm.nn.cross_entropy(logits(params, x, plan), y)


# ---------------------------------------------------------------- training


@dataclass
class Result:
    plan: Plan
    params: dict
    losses: list
    peak: int
    step_times: list
    profile: object = None


def batches(n: int, batch: int, epoch: int):
    order = np.random.default_rng(100 + epoch).permutation(n)
    for start in range(0, n - batch + 1, batch):  # whole batches only: one compiled signature
        yield order[start : start + batch]


def train(plan: Plan, sizes: Sizes, data, backend: str, progress: bool) -> Result:
    from tqdm import tqdm

    (x, y), _ = data
    params = init(sizes)
    step = rm.jit(rm.value_and_grad(lambda p, xb, yb: loss(p, xb, yb, plan)), backend=backend)
    steps = sizes.epochs * (len(x) // sizes.batch)
    bar = tqdm(total=steps, desc=f"{plan.name:>13}", unit="step", disable=not progress,
               file=sys.stderr, leave=True, ncols=90)
    losses, times = [], []
    for epoch in range(sizes.epochs):
        for idx in batches(len(x), sizes.batch, epoch):
            start = time.perf_counter()
            value, grads = step(params, x[idx], y[idx])
            params = rm.tree.map(lambda p, g: rm.asarray(np.asarray(p) - sizes.lr * np.asarray(g)), params, grads)
            times.append(time.perf_counter() - start)
            losses.append(float(value))
            bar.update()
            bar.set_postfix(loss=f"{losses[-1]:.4f}")
    bar.close()
    return Result(plan, params, losses, 0, times)


def measure(results: list[Result], sizes: Sizes, data, backend: str, rounds: int) -> None:
    """Peak memory of one step per plan (rm.memory.profile), and step times interleaved across
    plans so that every plan sees the same machine load."""
    (x, y), _ = data
    xb, yb = x[: sizes.batch], y[: sizes.batch]
    params = init(sizes)
    for r in results:
        f = lambda p, plan=r.plan: loss(p, xb, yb, plan)  # noqa: E731
        r.profile = rm.memory.profile(f, params, backend=backend, argnums=0)
        r.peak = r.profile.peak_bytes
    steps = [partial(rm.jit(rm.value_and_grad(lambda p, plan=r.plan: loss(p, xb, yb, plan)), backend=backend), params)
             for r in results]
    for s in steps:
        s()  # compile
    times = interleaved(dict(enumerate(steps)), rounds)
    for i, r in enumerate(results):
        r.step_times = times[i]


def evaluate(params: dict, data, backend: str) -> tuple[float, float]:
    (x, y), (xt, yt) = data
    f = rm.jit(lambda p, x, y: (loss(p, x, y, PLANS[0]), logits(p, x, PLANS[0])), backend=backend)
    train_loss, _ = f(params, x, y)
    _, out = f(params, xt, yt)
    return float(train_loss), float(np.mean(np.argmax(np.asarray(out), -1) == yt))


# ---------------------------------------------------------------- the report

# What the printed figures and the picture are, per backend: the table's peaks are measured.
PEAK = {
    "numpy": "peak: measured, the evaluator's exact count of live bytes in one training step (arguments excluded)",
    "xla": "peak: measured, what one training step's executable holds as XLA's buffer report says: its "
           "temporary buffers and its outputs (arguments excluded), and any scratch its library fusions allocate",
}
PICTURE = {
    "numpy": "live bytes after each node, measured",
    "xla": "live bytes per node predicted from shapes by the evaluator's count, under the executable's "
           "measured figure; each panel's highest point is the peak above",
}


def table(results: list[Result], data, backend: str) -> str:
    base = results[0]
    t0 = min(base.step_times)
    rows = [("plan", "peak MiB", "vs none", "step time vs none", "final loss", "test accuracy", "max Δw vs none")]
    flat0 = [np.asarray(p) for p in rm.tree.leaves(base.params)]
    for r in results:
        train_loss, acc = evaluate(r.params, data, backend)
        flat = [np.asarray(p) for p in rm.tree.leaves(r.params)]
        delta = max(float(np.max(np.abs(a - b))) for a, b in zip(flat, flat0))
        rows.append((
            r.plan.name, f"{r.peak / MiB:.2f}", f"{r.peak / base.peak:.2f}x",
            f"{min(r.step_times) / t0:.2f}x", f"{train_loss:.6f}", f"{acc:.4f}", f"{delta:.1e}",
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    line = lambda row: "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |"  # noqa: E731
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(rows[0]), sep, *map(line, rows[1:])])


#: What the demo imports beyond remat: (module, the package that provides it, needed when).
_NEEDS = (("sklearn", "scikit-learn", "always"), ("tqdm", "tqdm", "progress"), ("matplotlib", "matplotlib", "plot"))


def missing_packages(progress: bool, plot) -> list[str]:
    """The packages of the demo extra that this run needs and this environment lacks."""
    import importlib.util

    wanted = {"always": True, "progress": progress, "plot": bool(plot)}
    return [package for module, package, when in _NEEDS if wanted[when] and importlib.util.find_spec(module) is None]


def run(quick: bool = False, backend: str = "numpy", plot: str | None = "remat-demo-memory.png",
        epochs: int | None = None, progress: bool = True) -> int:
    missing = missing_packages(progress, plot)
    if missing:
        print(f"remat demo needs {', '.join(missing)}, which are not installed: pip install 'remat[demo]'",
              file=sys.stderr)
        return 1
    sizes = QUICK if quick else FULL
    if epochs is not None:
        sizes = Sizes(sizes.depth, sizes.width, sizes.batch, epochs, sizes.lr)
    data = digits()
    (x, _), (xt, _) = data
    print(f"remat demo: residual MLP ({sizes.depth} layers of width {sizes.width}) on scikit-learn digits "
          f"({len(x)} train / {len(xt)} test images), batch {sizes.batch}, {sizes.epochs} epochs, "
          f"SGD lr {sizes.lr}, backend {backend}")
    start = time.perf_counter()
    results = [train(plan, sizes, data, backend, progress) for plan in PLANS]
    measure(results, sizes, data, backend, rounds=5 if quick else 15)
    print(table(results, data, backend))
    print(PEAK[backend] + "; step time: the fastest of interleaved steps")
    if plot:
        title = f"one training step, {sizes.depth}-layer residual MLP, batch {sizes.batch} ({backend})"
        path = rm.memory.plot({r.plan.name: r.profile for r in results}, Path(plot), title=title)
        print(f"memory timeline: {path} ({PICTURE[backend]})")
    print(f"done in {time.perf_counter() - start:.1f} s")
    return 0
