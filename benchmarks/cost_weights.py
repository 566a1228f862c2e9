"""Measures the planner's cost model (`remat.planner.cost.WEIGHTS`) on this machine: how long each
backend takes per unit of work of each class of op, in nanoseconds.

Each class is timed as a chain of `k` ops of it on arrays the size of the benchmark models'
activations (`rm.jit` on the backend; on XLA the chain is one executable, as recomputation inside a
backward block is part of the step's). Only differences are used: the time of `high` ops less the time of
`low` ops, over `high - low`, is one op's time without the call around it. Per-node time
(`call`) comes from a chain of ops on one-element arrays; the others are per element (per FLOP
for matrix products) with `call` taken off:

- call: one node run, what the NumPy evaluator spends around an op whatever its size;
- flop / batched_flop: a FLOP of a 2-D matrix product, and of a batched one;
- element: an element an add, multiply or maximum makes;
- transcendental: an element tanh or exp makes;
- reduced: an element a sum reads;
- moved: an element a gather (`take`) moves.

The constants in `remat/planner/cost.py` are this script's output on the development machine
(2 cores): plans stay deterministic, and only the ratios between weights matter to a plan.

    python benchmarks/cost_weights.py [--backend numpy xla] [--rounds 15] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from functools import partial

import numpy as np

from remat.bench.timing import interleaved

ROWS, WIDTH = 1024, 128  # the residual MLP's activations: 512 KiB of float32
BATCH, SIDE = 64, 64  # the batched product: (64, 128, 64) @ (64, 64, 64), as attention's


def _chains(k: int):
    """Each class's chain of `k` ops, as a function of the inputs `_inputs` makes."""
    import remat as rm

    def repeat(op):
        def run(x, *rest):
            for _ in range(k):
                x = op(x, *rest)
            return x
        return run

    return {
        "call": repeat(lambda x: x + 1.0),
        "element": repeat(lambda x, y: rm.maximum(x * y, y) + y),  # three ops a round
        "transcendental": repeat(lambda x: rm.tanh(rm.exp(x * -1.0) * 0.5)),  # two (and one multiply)
        "reduced": repeat(lambda x: x - rm.sum(x, axis=-1, keepdims=True) * (1 / WIDTH)),  # and two ops
        "moved": repeat(lambda x, i: rm.take(x, i, axis=0)),
        "flop": repeat(lambda x, w: x @ w),
        "batched_flop": repeat(lambda x, w: x @ w),
    }


def _inputs(name: str) -> tuple:
    rng = np.random.default_rng(0)
    act = lambda *shape: (rng.normal(size=shape) * 0.1).astype(np.float32)  # noqa: E731
    return {
        "call": (np.ones((1,), np.float32),),
        "element": (act(ROWS, WIDTH), act(ROWS, WIDTH)),
        "transcendental": (act(ROWS, WIDTH),),
        "reduced": (act(ROWS, WIDTH),),
        "moved": (act(ROWS, WIDTH), rng.permutation(ROWS).astype(np.int32)),
        "flop": (act(ROWS, WIDTH), act(WIDTH, WIDTH)),
        "batched_flop": (act(BATCH, 2 * SIDE, SIDE), act(BATCH, SIDE, SIDE)),
    }[name]


# A chain round: how many nodes it runs, and the units of its class's work they do.
_S = ROWS * WIDTH
_ROUND = {"call": (1, 1), "element": (3, 3 * _S), "transcendental": (3, 2 * _S), "reduced": (3, _S),
          "moved": (1, _S), "flop": (1, 2 * ROWS * WIDTH * WIDTH), "batched_flop": (1, 2 * BATCH * 2 * SIDE**3)}
_BESIDE = {"transcendental": ("element", _S), "reduced": ("element", _S)}  # other work a round does


def _seconds_per_round(backend: str, name: str, low: int, high: int, rounds: int) -> float:
    import remat as rm

    args = _inputs(name)
    fns = {k: rm.jit(_chains(k)[name], backend=backend) for k in (low, high)}
    for f in fns.values():
        np.asarray(f(*args))  # compile, warm
    t = interleaved({k: partial(f, *args) for k, f in fns.items()}, rounds, wait=np.asarray)
    diffs = [(h - lo) / (high - low) for lo, h in zip(t[low], t[high])]
    return max(statistics.median(diffs), 0.0)


def measure(backend: str, rounds: int = 15, low: int = 8, high: int = 40) -> dict[str, float]:
    """The weights for `backend`, nanoseconds per unit (see the module docstring)."""
    per_round = {name: _seconds_per_round(backend, name, low, high, rounds) * 1e9 for name in _ROUND}
    out = {"call": per_round["call"]}
    for name, (nodes, work) in _ROUND.items():
        if name != "call":
            other, units = _BESIDE.get(name, ("call", 0))
            out[name] = max(per_round[name] - nodes * out["call"] - units * out[other], 0.0) / work
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", nargs="+", default=["numpy", "xla"])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    found = {be: measure(be, args.rounds) for be in args.backend}
    if args.json:
        print(json.dumps(found))
        return 0
    for be, weights in found.items():
        print(f"{be}: " + ", ".join(f"{k}={v:.3g}" for k, v in weights.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
