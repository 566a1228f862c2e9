"""The `remat` command: `remat demo` (what checkpointing buys, on a model you can train in a
minute), `remat bench` (remat beside jax.checkpoint and torch.utils.checkpoint),
`remat bench --planner` (the memory-budget planner against hand-placed checkpoints) and
`remat fit` (the largest batch, depth or sequence that trains under a hard memory cap)."""

from __future__ import annotations

import argparse
import importlib.util
import sys

from remat import __version__


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="remat", description=__doc__)
    parser.add_argument("--version", action="version", version=f"remat {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="train a residual MLP on digits under each checkpoint plan")
    demo.add_argument("--quick", action="store_true", help="a small model and three epochs (for CI)")
    demo.add_argument("--backend", choices=("auto", "numpy", "xla"), default="auto",
                      help="where the steps run: auto is xla when JAX is installed, else numpy")
    demo.add_argument("--epochs", type=int, help="override the number of epochs")
    demo.add_argument("--plot", default="remat-demo-memory.png", help="where to write the memory timeline PNG")
    demo.add_argument("--no-plot", action="store_true", help="write no PNG")
    demo.add_argument("--no-progress", action="store_true", help="no progress bars")
    bench = sub.add_parser("bench", help="remat (NumPy, XLA) beside jax.checkpoint and torch.utils.checkpoint")
    bench.add_argument("--quick", action="store_true", help="small sizes (for CI)")
    bench.add_argument("--out", help="also write the markdown table to this file")
    bench.add_argument("--frameworks", help="comma-separated subset of: remat-numpy,remat-xla,jax,torch")
    bench.add_argument("--models", help="comma-separated subset of: mlp,gpt,scanned-mlp,scanned-gpt,rnn")
    bench.add_argument("--planner", action="store_true",
                       help="the memory-budget planner against the hand-placed plans (models mlp, gpt; "
                            "frameworks remat-numpy, remat-xla, torch)")
    bench.add_argument("--plot", help="with --planner: also write the picture (budget -> peak, peak -> time) here")
    fit = sub.add_parser("fit", help="the largest batch (depth, sequence) that trains under a hard memory cap:"
                         " remat, PyTorch, JAX")
    fit.add_argument("--cap", help="the memory cap of each try's process, e.g. 512MiB (default; --quick: 160MiB)")
    fit.add_argument("--model", choices=("mlp", "gpt", "rnn"), default="mlp",
                     help="what to fit: the residual MLP or the GPT-style model (batch), the RNN (sequence length)")
    fit.add_argument("--vary", choices=("batch", "depth", "seq", "steps"),
                     help="what the search varies: batch (mlp, gpt: the default), depth (mlp: layers), seq (gpt: "
                          "sequence length), steps (rnn: the default)")
    fit.add_argument("--frameworks", help="comma-separated subset of: remat-numpy,remat-xla,torch,jax "
                                          "(default: remat-numpy,torch,jax; --quick: remat-numpy)")
    fit.add_argument("--quick", action="store_true", help="a small model, cap and search (under two minutes)")
    fit.add_argument("--out", help="also write the markdown table to this file")
    fit.add_argument("--plot", help="also write the picture (size that fits, time per sample) here")
    return parser


def demo_backend(choice: str) -> str:
    """The backend `remat demo --backend choice` runs on: "auto" is XLA when JAX is installed."""
    if choice != "auto":
        return choice
    return "xla" if importlib.util.find_spec("jax") else "numpy"


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "demo":
        from remat.demo import run

        plot = None if args.no_plot else args.plot
        return run(quick=args.quick, backend=demo_backend(args.backend), plot=plot, epochs=args.epochs,
                   progress=not args.no_progress)
    split = lambda s: s.split(",") if s else None  # noqa: E731
    if args.command == "fit":
        from remat.fit import QUICK_CAP, QUICK_FRAMEWORKS
        from remat.fit import run as fit

        frameworks = split(args.frameworks) or (list(QUICK_FRAMEWORKS) if args.quick else None)
        fit(cap=args.cap or (QUICK_CAP if args.quick else "512MiB"), model=args.model, frameworks=frameworks,
            quick=args.quick, out=args.out, plot=args.plot, vary=args.vary)
        return 0
    if args.planner:
        from remat.bench.planner import run as planner

        return planner(quick=args.quick, out=args.out, png=args.plot, models=split(args.models),
                       frameworks=split(args.frameworks))
    from remat.bench import run as bench

    return bench(quick=args.quick, out=args.out, frameworks=split(args.frameworks), models=split(args.models))


if __name__ == "__main__":
    sys.exit(main())
