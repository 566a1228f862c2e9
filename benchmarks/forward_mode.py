"""Cost of forward mode on XLA, as ratios measured side by side in one process, never absolute times:

  rm.jvp of the MLP loss (tangents of every weight) / jax.jvp of the same program
  rm Hessian-vector product, rm.jvp(rm.grad(loss)) / JAX's jax.jvp(jax.grad(loss))

Both sides are jitted whole (rm.jit(backend="xla"): one executable, as jax.jit);
the variants are interleaved and timed `--repeats` times; the best times are compared (other
load disturbs them least), medians shown beside them. The model is the residual MLP: L layers
of `h + tanh(h @ w + b)`, loss `mean(h * h)`.

    python benchmarks/forward_mode.py [--layers 16 --width 256 --batch 1024 --repeats 9]
"""

from __future__ import annotations

import argparse
import json
import sys

from remat.bench.timing import best_and_median, interleaved, ready

TARGETS = {"jvp rm / jax": 1.3, "hvp rm / jax": 1.3}


def _programs(depth: int, width: int, batch: int):
    import jax
    import numpy as np

    import remat as rm
    from remat.bench.config import MLP, inputs
    from remat.bench.impl_jax import mlp_loss
    from remat.models import residual_mlp_loss

    params, x = inputs(MLP(depth=depth, width=width, batch=batch))
    rng = np.random.default_rng(1)
    v = [(rng.normal(size=w.shape).astype(np.float32), rng.normal(size=b.shape).astype(np.float32))
         for w, b in params]
    params, x, v = jax.device_put((params, x, v))

    def rm_loss(p, x):
        return residual_mlp_loss(p, x, "none")

    def jax_loss(p, x):
        return mlp_loss(p, x, "none")

    rm_jvp = rm.jit(lambda p, x, v: rm.jvp(lambda q: rm_loss(q, x), (p,), (v,)), backend="xla")
    jax_jvp = jax.jit(lambda p, x, v: jax.jvp(lambda q: jax_loss(q, x), (p,), (v,)))
    rm_hvp = rm.jit(lambda p, x, v: rm.jvp(rm.grad(lambda q: rm_loss(q, x)), (p,), (v,))[1], backend="xla")
    jax_hvp = jax.jit(lambda p, x, v: jax.jvp(jax.grad(lambda q: jax_loss(q, x)), (p,), (v,))[1])
    programs = {"jvp rm": rm_jvp, "jvp jax": jax_jvp, "hvp rm": rm_hvp, "hvp jax": jax_hvp}
    return {name: (lambda f=f: f(params, x, v)) for name, f in programs.items()}


def _check(programs) -> None:
    """The two sides compute the same numbers (else the ratio would mean nothing)."""
    import numpy as np

    for kind in ("jvp", "hvp"):
        ours, theirs = programs[f"{kind} rm"](), programs[f"{kind} jax"]()
        import jax

        a = [np.asarray(t) for t in jax.tree_util.tree_leaves(_plain(ours))]
        b = [np.asarray(t) for t in jax.tree_util.tree_leaves(theirs)]
        for x, y in zip(a, b):
            np.testing.assert_allclose(x, y, rtol=2e-3, atol=2e-5 * float(np.abs(y).max() + 1))


def _plain(tree):
    import remat as rm

    return rm.tree.map(lambda t: t._value if isinstance(t, rm.Tensor) else t, tree)


def measure(depth: int, width: int, batch: int, repeats: int) -> dict[str, list[float]]:
    programs = _programs(depth, width, batch)
    _check(programs)
    for run in programs.values():
        ready(run())  # compile and warm up
    return interleaved(programs, repeats)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--layers", type=int, default=16)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    times = measure(a.layers, a.width, a.batch, a.repeats)
    pairs = {"jvp rm / jax": ("jvp rm", "jvp jax"), "hvp rm / jax": ("hvp rm", "hvp jax")}
    ratios = best_and_median({k: (times[x], times[y]) for k, (x, y) in pairs.items()})
    if a.json:
        print(json.dumps(ratios))
        return 0
    best, median = ratios["best"], ratios["median"]
    print(f"residual MLP: {a.layers} layers, width {a.width}, batch {a.batch}; XLA, best of {a.repeats}, interleaved")
    failures = [k for k, r in best.items() if r > TARGETS[k]]
    for name, ratio in best.items():
        verdict = f"<= {TARGETS[name]}  ok" if ratio <= TARGETS[name] else f"> {TARGETS[name]}  NOT MET"
        print(f"  {name:<16}{ratio:6.2f}x  (median {median[name]:.2f}x)  {verdict}")
    print("targets met" if not failures else "NOT MET: " + ", ".join(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
