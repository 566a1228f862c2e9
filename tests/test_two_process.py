"""Two processes joined by `jax.distributed` (Gloo CPU collectives) run the data-parallel GPT
step of `examples/two_process.py` and agree with one process."""

import importlib.util
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "two_process.py"


def run_example(*args: str) -> str:
    # The example kills its workers after --timeout; the outer timeout only guards the launcher.
    done = subprocess.run([sys.executable, str(EXAMPLE), "--timeout", "180", *args],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def figure(text: str, label: str) -> float:
    return float(re.search(rf"{label}: (\S+)", text).group(1))


@pytest.mark.claims
def test_two_processes_agree_with_one():
    out = run_example("--plan", "layer")
    assert "2 processes x 1 CPU device, data parallel, plan 'layer'\n" in out
    assert "devices seen by each process (local, global): (1, 2)\n" in out  # one mesh over both processes
    assert 3.0 < figure(out, r"loss \(one process\)") < 5.0  # ~log(64): an untrained model
    assert figure(out, "largest loss difference") < 1e-5
    assert figure(out, "largest gradient difference") < 1e-6


def load_example():
    spec = importlib.util.spec_from_file_location("two_process", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sleeper(seconds: int, code: int = 0) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds}); raise SystemExit({code})"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_a_failing_worker_ends_the_wait_at_once():
    # The peer of a failed worker would wait in a collective: wait_all must return on the failure.
    example = load_example()
    hung, failing = sleeper(60), sleeper(0, code=3)
    start = time.monotonic()
    try:
        example.wait_all([hung, failing], time.monotonic() + 60)
        assert failing.returncode == 3 and hung.poll() is None
        assert time.monotonic() - start < 20
    finally:
        hung.kill()
        hung.wait()


def test_a_hung_worker_times_out():
    example = load_example()
    hung = sleeper(60)
    try:
        with pytest.raises(TimeoutError, match=r"workers \[0\] still running"):
            example.wait_all([hung], time.monotonic() + 1)
    finally:
        hung.kill()
        hung.wait()
