"""The memory-budget planner against hand-placed checkpoints: `remat bench --planner` as a script.

    python benchmarks/planner.py                       # both models, both backends, the full sweep
    python benchmarks/planner.py --quick --models mlp  # small sizes, a minute
    python benchmarks/planner.py --plot docs/planner.png --out planner.md
    python benchmarks/planner.py --sweep 20 --plot docs/planner-sweep.png   # 20 budgets a model and backend

For the residual MLP (64 layers), the GPT-style model (8 blocks) and a U-Net-like MLP (32
layers, each up layer adding its mirror's output), on NumPy and XLA: the
hand-placed plans (none, per layer, √L, dots_saveable) and the planner at budgets of 15%–90% of
the activation memory. Per plan: the budget, the planner's predicted peak, the measured peak, the
step-time ratio to no checkpoint, the FLOPs ratio and whether the gradients equal the unplanned
ones; then the checks (peak within budget + 5%, prediction within 10%, Pareto against the
hand-placed plans). What is measured and how: `remat.bench.planner`. Exit status 1 when a check
fails.
"""

from __future__ import annotations

import argparse
import sys

from remat.bench.planner import run


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes (a smoke test, not the figures)")
    p.add_argument("--models", nargs="+", help="mlp, gpt, unet (default: all)")
    p.add_argument("--frameworks", nargs="+", help="remat-numpy, remat-xla (default: those installed)")
    p.add_argument("--out", help="also write the tables to this markdown file")
    p.add_argument("--plot", help="write the picture here (e.g. docs/planner.png)")
    p.add_argument("--sweep", type=int, metavar="N", help="N budgets from the smallest each backend meets to 100%%, "
                   "checked for monotone, within-budget, predicted peaks (no PyTorch)")
    a = p.parse_args(argv)
    return run(quick=a.quick, out=a.out, png=a.plot, models=a.models, frameworks=a.frameworks, sweep=a.sweep)


if __name__ == "__main__":
    sys.exit(main())
