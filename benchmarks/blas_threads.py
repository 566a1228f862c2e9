"""NumPy-backend steps with the XLA runtime loaded, per BLAS thread setting: the spread of step
times, where the CPU goes, and what NumPy steps do to the XLA steps timed among them.

    python benchmarks/blas_threads.py [--rounds 20 --settings none,default,xla-only]

Each setting runs in a fresh process that builds the `remat bench` residual MLP's training step
(32 layers, width 256, batch 1024) on remat-NumPy, remat-XLA and in JAX, then does `--rounds`
rounds of one step of each, every step timed until its outputs are ready. Settings: `none`
leaves BLAS alone (remat before the limit), `default` is remat's default limit, a number is that
limit (`remat.backends.blas.set_threads`), `xla-only` runs no NumPy steps (the XLA steps timed
apart). Shown: min / median / max of the NumPy step; remat-XLA ÷ JAX per round (median, min–max);
the CPU seconds per round of the main thread, of OpenBLAS's workers and of every other thread
(XLA's pool). Workers busy-waiting between matrix products show up as worker CPU time far beyond
the work, and as NumPy and XLA steps that wait for a core.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

import numpy as np

from remat.bench import timing


def _thread_cpu() -> dict[int, float]:
    """CPU seconds (user + system) of each thread of this process, by thread id."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended
            continue
        out[int(tid)] = (int(fields[11]) + int(fields[12])) / tick
    return out


def _groups(main: int, blas: set[int], cpu: dict[int, float]) -> dict[str, float]:
    groups = {"main": 0.0, "BLAS workers": 0.0, "XLA and other": 0.0}
    for tid, seconds in cpu.items():
        key = "main" if tid == main else "BLAS workers" if tid in blas else "XLA and other"
        groups[key] += seconds
    return groups


def _limit(setting: str) -> int | None:
    from remat.backends import blas

    if setting.isdigit():
        return int(setting)
    return blas.default_threads() if setting == "default" else None


def _steps(numpy_too: bool) -> dict:
    from remat.bench import impl_jax, impl_remat
    from remat.bench.config import MLP, inputs

    size = MLP(depth=32, width=256, batch=1024)
    params, x = inputs(size)
    steps = {"jax": impl_jax.build(size, "none", params, x), "xla": impl_remat.build(size, "none", params, x, "xla")}
    if numpy_too:
        steps["numpy"] = impl_remat.build(size, "none", params, x, "numpy")
    return steps


def measure(setting: str, rounds: int) -> dict:
    """In this process: step times and CPU seconds per round under `setting`."""
    from remat.backends import blas

    blas.set_threads(_limit(setting))
    np.ones((64, 64)) @ np.ones((64, 64))  # OpenBLAS has started its workers by now
    main = threading.get_native_id()
    workers = set(_thread_cpu()) - {main}  # before JAX starts any thread
    steps = _steps(numpy_too=setting != "xla-only")
    for step, finish in steps.values():
        finish(step())  # warm up
    start_cpu, start = _thread_cpu(), time.perf_counter()
    times = timing.interleaved_pairs(steps, rounds)
    wall = time.perf_counter() - start
    end_cpu = _thread_cpu()
    burnt = {t: end_cpu[t] - start_cpu.get(t, 0.0) for t in end_cpu}
    cpu = {k: v / rounds for k, v in _groups(main, workers, burnt).items()}
    return {"setting": setting, "limit": blas.threads(), "times": times, "cpu": cpu, "wall": wall / rounds}


def _in_subprocess(setting: str, rounds: int) -> dict:
    cmd = [sys.executable, __file__, "--child", setting, "--rounds", str(rounds)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def spread(seconds: list[float]) -> str:
    """`min / median / max` in milliseconds."""
    if not seconds:
        return "not run"
    ms = [s * 1e3 for s in seconds]
    return f"{min(ms):.0f} / {statistics.median(ms):.0f} / {max(ms):.0f}"


def ratio(a: list[float], b: list[float]) -> str:
    rs = timing.ratios(a, b)
    return f"{statistics.median(rs):.2f} ({min(rs):.2f}–{max(rs):.2f})"


def table(rows: list[dict]) -> str:
    lines = [
        "| setting | NumPy step ms: min / median / max | remat-XLA ÷ JAX step | CPU s per round: main / "
        "BLAS workers / XLA and other | wall s per round |",
        "|---|---|---|---|---|",
    ]
    names = {"none": "BLAS not limited (before)", "xla-only": "no NumPy steps (XLA timed apart)"}
    for r in rows:
        name = names.get(r["setting"], f"BLAS limited to {r['limit']}" + (" (default)" * (r["setting"] == "default")))
        cpu = " / ".join(f"{v:.2f}" for v in r["cpu"].values())
        lines.append(f"| {name} | {spread(r['times'].get('numpy', []))} | "
                     f"{ratio(r['times']['xla'], r['times']['jax'])} | {cpu} | {r['wall']:.2f} |")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--settings", default="none,default,xla-only",
                        help="comma-separated: none, default, a number, xla-only")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # one setting, measured in this process
    args = parser.parse_args(argv)
    settings = args.settings.split(",")
    for s in settings:
        if s not in ("none", "default", "xla-only") and not (s.isdigit() and int(s) > 0):
            parser.error(f"--settings: unknown setting {s!r}; use none, default, xla-only or a number of threads")
    if args.child:
        print(json.dumps(measure(args.child, args.rounds)))
        return
    from remat.backends import blas

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"{cores} cores (remat's default BLAS limit: {blas.default_threads()}); {args.rounds} rounds of one JAX, "
          "one remat-XLA and one remat-NumPy step (residual MLP: 32 layers, width 256, batch 1024)")
    print(table([_in_subprocess(s, args.rounds) for s in settings]))


if __name__ == "__main__":
    main()
