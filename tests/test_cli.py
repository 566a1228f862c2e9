"""The `remat` command: `remat demo` and `remat bench`, run as a user runs them."""

import importlib.util
import re
import subprocess
import sys

import numpy as np
import pytest

from remat.cli import demo_backend, main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def table_rows(text: str) -> dict[str, list[str]]:
    """The rows of the markdown table(s) in `text`, keyed by their first cell."""
    rows = {}
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("| plan"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0]] = cells[1:]
    return rows


@pytest.mark.parametrize("backend", ["numpy", pytest.param("xla", marks=pytest.mark.claims)])
def test_demo_quick_trains_every_plan_to_the_same_result(tmp_path, capsys, backend):
    assert main(["demo", "--quick", "--backend", backend, "--plot", str(tmp_path / "memory.png")]) == 0
    captured = capsys.readouterr()
    rows = table_rows(captured.out)
    assert list(rows) == ["none", "per layer", "√L", "dots_saveable"]
    peak = {plan: float(cells[0]) for plan, cells in rows.items()}
    assert peak["√L"] < peak["per layer"] < 0.8 * peak["none"]
    assert rows["none"][1] == "1.00x" and rows["none"][2] == "1.00x"
    final = {tuple(cells[3:6]) for cells in rows.values()}  # loss, accuracy, max Δw
    assert len(final) == 1  # the same training run whatever the plan
    loss, accuracy, delta = final.pop()
    assert float(accuracy) > 0.5 and float(delta) == 0.0
    assert "scikit-learn digits" in captured.out
    assert re.search(r"none.*100%.*step", captured.err)  # a tqdm progress bar per plan
    assert (tmp_path / "memory.png").read_bytes()[:8] == PNG_MAGIC


def test_demo_runs_on_xla_when_jax_is_installed(monkeypatch):
    assert demo_backend("auto") == "xla"  # JAX is a test dependency
    assert demo_backend("numpy") == "numpy"
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "jax" else real(name, *a))
    assert demo_backend("auto") == "numpy"


@pytest.mark.claims
def test_bench_quick_on_numpy_prints_and_writes_the_table(tmp_path, capsys):
    out = tmp_path / "bench.md"
    assert main(["bench", "--quick", "--frameworks", "remat-numpy", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert out.read_text().strip() == printed.strip()
    assert printed.count("| plan | remat · NumPy peak MiB | time |") == 5  # MLP, GPT, both scanned, RNN
    assert "**residual MLP: 8 layers" in printed and "**GPT-style: 2 blocks" in printed
    assert re.search(r"tracemalloc agrees within \d+\.\d%", printed)
    for plan in ("none", "per layer", "√L", "dots_saveable"):
        assert plan in table_rows(printed)
    assert re.search(r"\| per layer \| \d+\.\d \(0\.\d\dx\) \|", printed)  # less than without checkpoints


def test_bench_names_an_unknown_framework():
    with pytest.raises(ValueError, match="unknown framework 'tensorflow'"):
        main(["bench", "--quick", "--frameworks", "tensorflow"])


def test_the_console_script_lists_its_commands():
    done = subprocess.run([sys.executable, "-m", "remat.cli", "--help"], capture_output=True, text=True, check=True)
    assert "demo" in done.stdout and "bench" in done.stdout


@pytest.mark.claims
def test_bench_quick_with_every_installed_framework(tmp_path, capsys):
    assert main(["bench", "--quick", "--out", str(tmp_path / "bench.md")]) == 0
    printed = capsys.readouterr().out
    assert "remat · NumPy peak MiB" in printed
    assert "remat · XLA peak MiB" in printed and "jax.checkpoint peak MiB" in printed  # JAX: a test dependency
    assert "remat · XLA ÷ JAX time" in printed
    if importlib.util.find_spec("torch"):  # no dots_saveable in PyTorch
        assert "torch.utils.checkpoint peak MiB" in printed
        assert table_rows(printed)["dots_saveable"][-3:-1] == ["n/a", "n/a"]
    else:
        assert "Not run: torch.utils.checkpoint (PyTorch is not installed)" in printed
    assert "in every framework and plan" in printed


@pytest.mark.claims
@pytest.mark.parametrize("model", ["mlp", "gpt"])
def test_bench_models_have_the_gradients_of_their_jax_twins(model):
    import jax

    import remat as rm
    from remat import models
    from remat.bench import impl_jax
    from remat.bench.config import inputs, size_of

    size = size_of(model, quick=True)
    params, data = inputs(size)
    if model == "mlp":
        ours = lambda p: models.residual_mlp_loss(p, data, "sqrt")  # noqa: E731
        theirs = lambda p: impl_jax.mlp_loss(p, data, "none")  # noqa: E731
    else:
        ours = lambda p: models.gpt_loss(p, data, "dots", size.heads)  # noqa: E731
        theirs = lambda p: impl_jax.gpt_loss(p, data, "none", size.heads)  # noqa: E731
    got = rm.jit(rm.grad(ours))(params)
    want = jax.grad(theirs)(params)
    for a, b in zip(rm.tree.leaves(got), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-4, atol=2e-6)


def test_demo_without_its_extra_names_the_install_command(monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in ("sklearn", "tqdm") else
                        real(name, *a))
    assert main(["demo", "--quick", "--no-plot"]) == 1
    err = capsys.readouterr().err
    assert "remat demo needs scikit-learn, tqdm, which are not installed: pip install 'remat[demo]'" in err
