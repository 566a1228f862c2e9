"""Run Python code in a fresh process that sees several simulated CPU devices, and read its JSON.

The test process has already initialised JAX with one CPU device, and XLA reads
`--xla_force_host_platform_device_count` only once, at start-up: multi-device checks run in a
subprocess. The code prints one JSON document as its last line of output; `run` returns it
decoded, and fails with the subprocess's output when it exits with an error.

    from multidevice import run
    out = run("import jax, json; print(json.dumps(len(jax.devices())))")
    assert out == 8
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

DEVICES = 8
# Sized for a loaded machine: the slowest sweep took 85 s on 2 quiet cores, and a load of 8-12
# makes a run five to six times as long.


def run(code: str, devices: int = DEVICES, timeout: float = 1800, args: tuple[str, ...] = ()) -> Any:
    """Run `code` (dedented) with `devices` CPU devices; its last printed line, as JSON."""
    return _run(["-c", textwrap.dedent(code), *args], devices, timeout)


def run_file(path: str | Path, *args: str, devices: int = DEVICES, timeout: float = 1800) -> Any:
    """Run the Python file `path` with `args` likewise."""
    return _run([str(path), *args], devices, timeout)


def environment(devices: int = DEVICES) -> dict[str, str]:
    """The environment of such a process: this one's, on `devices` CPU devices."""
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if "device_count" not in f]
    flags.append(f"--xla_force_host_platform_device_count={devices}")
    return dict(os.environ, XLA_FLAGS=" ".join(flags), JAX_PLATFORMS="cpu")


def _run(argv: list[str], devices: int, timeout: float) -> Any:
    proc = subprocess.run([sys.executable, *argv], env=environment(devices), capture_output=True,
                          text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"the subprocess exited with {proc.returncode}:\n{proc.stdout[-3000:]}\n"
                             f"{proc.stderr[-6000:]}")
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if not lines:
        raise AssertionError(f"the subprocess printed nothing; its errors:\n{proc.stderr[-6000:]}")
    return json.loads(lines[-1])
