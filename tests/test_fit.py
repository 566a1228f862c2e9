"""`remat fit`: the search, the limit each try runs under, and the command end to end."""

from __future__ import annotations

import json
import math
import os

import pytest

import remat as rm
from remat import cli, fit
from remat.errors import ArgumentValueError
from remat.fit import Entry, MiB, Row, Try, largest

# ---------------------------------------------------------------- the search


@pytest.mark.parametrize("answer", [1, 2, 3, 37, 64, 65, 1000, 4097])
def test_largest_finds_the_exact_answer_in_few_tries(answer):
    n, tried = largest(lambda k: k <= answer)
    assert n == answer
    assert len(tried) <= 2 * math.ceil(math.log2(answer + 1)) + 2  # doubling, then bisection
    assert len(set(tried)) == len(tried)  # no size tried twice


def test_largest_with_a_tolerance_stops_close_and_sooner():
    exact = largest(lambda k: k <= 5000, start=64)
    n, tried = largest(lambda k: k <= 5000, start=64, tolerance=0.1)
    assert n <= 5000 < n * 1.1 + 1
    assert len(tried) < len(exact[1])


def test_largest_when_nothing_fits_or_everything_does():
    assert largest(lambda k: False, start=8) == (0, [8])
    assert largest(lambda k: k < 8, start=8) == (0, [8])
    n, tried = largest(lambda k: True, start=3, limit=100)
    assert n == 100 and tried == [3, 6, 12, 24, 48, 96, 100]


def test_largest_starting_above_the_answer_does_not_search_below_start():
    # the start is a floor: below it the search would have to halve, which it does not
    assert largest(lambda k: k <= 10, start=16)[0] == 0


# ---------------------------------------------------------------- the limit


ALLOCATE = """
import numpy as np, sys
blocks = []
for _ in range(int(sys.argv[1])):
    blocks.append(np.ones(8 * 2**20 // 8))  # 8 MiB, every page touched
print("survived")
"""


def test_a_child_past_the_cap_is_killed_and_the_parent_survives():
    code, out, err, seen, killed = fit.run_child(["-c", ALLOCATE, "100"], 128 * MiB, timeout=60)  # 800 MiB
    assert killed and code == -9
    assert "survived" not in out
    assert 120 * MiB < seen <= 128 * MiB + 64 * MiB  # caught within a few blocks of the cap


def test_a_child_under_the_cap_runs_to_the_end():
    code, out, _, seen, killed = fit.run_child(["-c", ALLOCATE, "4"], 256 * MiB, timeout=60)  # 32 MiB
    assert (code, killed, out.strip()) == (0, False, "survived")
    assert 32 * MiB < seen < 256 * MiB


def test_the_kernel_backstop_refuses_what_the_watchdog_cannot_see():
    # reserved at once, so resident memory stays low: only RLIMIT_DATA stops it
    grab = "import numpy as np\ntry:\n    np.empty(4 * 2**30, np.uint8)\nexcept MemoryError:\n    print('refused')"
    code, out, _, _, killed = fit.run_child(["-c", grab], 128 * MiB, timeout=60)
    assert (code, killed, out.strip()) == (0, False, "refused")
    assert fit.backstop(128 * MiB) == 512 * MiB


def test_a_try_over_the_cap_does_not_fit_and_says_why():
    # the interpreter with remat and NumPy loaded is about 45 MiB resident: 20 MiB cannot hold it
    t = fit.try_size("mlp", Entry("remat-numpy", "none", "x"), 64, 20 * MiB, quick=True, timeout=60)
    assert not t.fits and "killed by the watchdog" in t.why
    assert t.watchdog_peak > 20 * MiB


def test_a_try_whose_high_water_mark_passed_the_cap_does_not_fit(monkeypatch):
    """The watchdog reads every 2 ms; the child's own VmHWM sees what it missed."""
    def child_peaking_at(peak: int):
        line = json.dumps({"times": [0.1], "peak": peak, "runtime": 1, "budget": None, "loss": 0.5})
        monkeypatch.setattr(fit, "run_child", lambda *a, **k: (0, line, "", 99 * MiB, False))
        return fit.try_size("mlp", Entry("remat-numpy", "none", "x"), 4, 100 * MiB, quick=True)

    t = child_peaking_at(100 * MiB + 1)
    assert not t.fits and "past the cap between the watchdog's readings" in t.why
    assert child_peaking_at(100 * MiB).fits


def test_a_try_that_fits_reports_its_figures():
    t = fit.try_size("mlp", Entry("remat-numpy", "budget", "x"), 256, 256 * MiB, quick=True, steps=2, timeout=120)
    assert t.fits, t.why
    assert len(t.times) == 2 and all(s > 0 for s in t.times)
    assert 20 * MiB < t.runtime < t.peak <= 256 * MiB
    assert t.budget is not None and 0 < t.budget < 256 * MiB
    assert math.isfinite(t.loss) and t.per_sample == pytest.approx(sum(t.times) / 2 / 256)  # the median of two


def test_a_try_of_a_longer_sequence_trains_that_sequence():
    t = fit.try_size("gpt", Entry("remat-numpy", "layer", "x"), 96, 256 * MiB, quick=True, steps=1, timeout=120,
                     vary="seq")
    assert t.fits, t.why
    assert t.per_sample == pytest.approx(t.times[0] / 96) and math.isfinite(t.loss)


# ---------------------------------------------------------------- the pieces


def test_available_is_the_cap_minus_what_the_process_holds():
    with open("/proc/self/statm") as f:
        rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    left = rm.memory.available("8GiB")
    assert abs(left - (8 * 2**30 - rss)) < 16 * MiB
    assert rm.memory.available(1024) == 0  # a cap below what is held leaves nothing
    assert 0 < rm.memory.available() < 2**50
    with pytest.raises(ArgumentValueError, match="fraction"):
        rm.memory.available(0.5)


def test_sizes_and_entries():
    assert fit.size_at("gpt", 12).batch == 12 and fit.size_at("rnn", 300).steps == 300
    assert fit.size_at("mlp", 96, vary="depth").depth == 96 and fit.size_at("gpt", 256, vary="seq").seq == 256
    assert fit.size_at("gpt", 256, vary="seq").batch == fit.BASE["gpt", "seq", False].batch
    assert fit.describe("gpt", False, "seq").count("sequence N") == 1
    assert fit.describe("mlp", True, "depth").startswith("residual MLP: N layers")
    with pytest.raises(ArgumentValueError, match="the rnn model cannot vary 'batch'; it varies 'steps'"):
        fit.size_at("rnn", 4, vary="batch")
    with pytest.raises(ArgumentValueError, match="cannot vary 'seq'; it varies 'batch' or 'depth'"):
        fit.run(model="mlp", vary="seq")
    assert type(fit.size_at("mlp", 5, scanned=True)).__name__ == "ScannedMLP"
    rows = fit.entries("gpt", ["remat-numpy", "torch", "jax"])
    assert [(e.framework, e.plan, e.scanned) for e in rows] == [
        ("remat-numpy", "none", False), ("remat-numpy", "layer", False), ("remat-numpy", "budget", False),
        ("torch", "none", False), ("torch", "layer", False), ("jax", "none", False), ("jax", "step", True)]
    assert [e.plan for e in fit.entries("rnn", ["remat-numpy"])] == ["none", "step", "binomial"]
    assert fit.parse_cap("512MiB") == 512 * MiB
    with pytest.raises(ArgumentValueError, match="fraction"):
        fit.parse_cap(0.5)


def test_report_states_sizes_ratios_and_the_limit():
    def row(plan, n, t):
        return Row(Entry("remat-numpy", plan, f"remat · {plan}"), n,
                   [Try(n, True, times=[t], peak=100 * MiB, runtime=40 * MiB), Try(2 * n, False, "killed")])

    rows = [row("none", 10, 0.1), row("budget", 50, 0.6)]
    ref = Try(50, True, times=[0.5], peak=300 * MiB)
    text = fit.report("mlp", 128 * MiB, False, rows, {"torch": "torch is not installed"}, ref)
    assert "| remat · budget | 50 | 5.00x | 12.000 | 100 | 40 | 2 | killed |" in text
    assert "| remat · none | 10 | 1.00x | 10.000 |" in text
    assert "1.20x the time per sample" in text
    assert fit.LIMIT in text and "Not run: torch (torch is not installed)." in text
    deep = fit.report("mlp", 128 * MiB, False, rows, {}, ref, vary="depth")
    assert "remat fit --model mlp --vary depth --cap 128MiB: the largest depth N" in deep
    assert "| framework · plan | largest depth | × remat none | ms per layer |" in deep
    assert "1.20x the time per layer" in deep


def test_cli_passes_its_options(monkeypatch):
    seen = {}
    monkeypatch.setattr(fit, "run", lambda **kw: seen.update(kw) or ("", []))
    assert cli.main(["fit", "--model", "gpt", "--cap", "300MiB", "--frameworks", "remat-numpy,jax"]) == 0
    assert seen == {"cap": "300MiB", "model": "gpt", "frameworks": ["remat-numpy", "jax"], "quick": False,
                    "out": None, "plot": None, "vary": None}
    cli.main(["fit", "--model", "mlp", "--vary", "depth"])
    assert (seen["model"], seen["vary"]) == ("mlp", "depth")
    cli.main(["fit", "--quick"])
    assert (seen["cap"], seen["frameworks"], seen["quick"]) == (fit.QUICK_CAP, list(fit.QUICK_FRAMEWORKS), True)


# ---------------------------------------------------------------- end to end


@pytest.mark.claims
def test_fit_quick_end_to_end(tmp_path, capsys):
    import time

    start = time.perf_counter()
    out, png = tmp_path / "fit.md", tmp_path / "fit.png"
    assert cli.main(["fit", "--quick", "--out", str(out), "--plot", str(png)]) == 0
    assert time.perf_counter() - start < 120
    text = out.read_text()
    assert fit.LIMIT in text and png.stat().st_size > 10_000
    sizes = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| remat ·"):
            sizes[cells[0]] = int(cells[1])
            assert float(cells[4]) <= 160  # every peak under the cap
    none, layer, planned = sizes["remat · none"], sizes["remat · per layer"], sizes[
        "remat · planner (budget from the cap)"]
    assert 1024 <= none < layer < planned  # checkpoints fit more; the planner the most
    assert planned >= 2 * none
