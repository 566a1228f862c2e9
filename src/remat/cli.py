"""The `remat` command: `remat demo` and `remat bench`."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="remat", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="train a residual MLP with and without checkpoints")
    demo.add_argument("--quick", action="store_true", help="a smaller, faster run")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from remat.demo import run

        return run(quick=args.quick)
    return 1


if __name__ == "__main__":
    sys.exit(main())
