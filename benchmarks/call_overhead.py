"""Per-call overhead of `rm.jit(..., backend="xla")` against `jax.jit`: a ratio, never a time alone.

Both take the same pytree, a dict of `--leaves` small NumPy arrays, and run a trivial function
(the sum of every array), so the call itself is what is measured: flattening the arguments,
checking their signature, handing them to XLA and wrapping the result. The two are called in
turn, `--calls` calls per batch, the order flipping every round; each round's ratio comes from
its own pair of batches and the median of the rounds is compared with the target.

    python benchmarks/call_overhead.py [--leaves 512 --calls 50 --rounds 15]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from functools import partial

from remat.bench.timing import ratios, round_robin, seconds

TARGET = 2.0  # remat / jax.jit


def callers(leaves: int):
    import jax
    import jax.numpy as jnp
    import numpy as np

    import remat as rm

    rng = np.random.default_rng(0)
    tree = {f"p{i}": rng.normal(size=(4,)).astype(np.float32) for i in range(leaves)}

    def total(xs, sum_):
        out = 0.0
        for v in xs.values():
            out = out + sum_(v)
        return out

    remat_fn = rm.jit(lambda xs: total(xs, rm.sum), backend="xla")
    jax_fn = jax.jit(lambda xs: total(xs, jnp.sum))
    expected = float(sum(v.sum() for v in tree.values()))
    for fn in (remat_fn, jax_fn):
        got = float(fn(tree))  # traces and compiles
        assert abs(got - expected) <= 1e-3 * max(1.0, abs(expected)), (got, expected)

    def per_call(fn, n: int) -> float:
        """Seconds a call, over `n` calls in a row (the last one's result waited for)."""

        def calls():
            for _ in range(n):
                out = fn(tree)
            return out

        return seconds(calls) / n

    return {"remat": partial(per_call, remat_fn), "jax": partial(per_call, jax_fn)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--leaves", type=int, default=512)
    p.add_argument("--calls", type=int, default=50)
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    run = callers(a.leaves)
    for fn in run.values():
        fn(3)  # warm up
    times = round_robin({name: partial(fn, a.calls) for name, fn in run.items()}, a.rounds)
    per_round = ratios(times["remat"], times["jax"])
    ratio = statistics.median(per_round)
    if a.json:
        print(json.dumps({"ratios": per_round, "median": ratio, "times": times}))
        return 0
    us = {k: statistics.median(v) * 1e6 for k, v in times.items()}
    print(f"{a.leaves} NumPy leaves, {a.calls} calls a batch, {a.rounds} rounds, interleaved")
    print(f"  per call: remat {us['remat']:.0f} us, jax.jit {us['jax']:.0f} us (medians)")
    print(f"  remat / jax.jit: {ratio:.2f}x median (range {min(per_round):.2f}-{max(per_round):.2f}), "
          f"target <= {TARGET}x  " + ("ok" if ratio <= TARGET else "NOT MET"))
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
