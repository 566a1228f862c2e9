"""The examples run and say what they promise."""

import re
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run(name: str) -> str:
    return subprocess.run([sys.executable, str(EXAMPLES / name)], capture_output=True, text=True, check=True).stdout


def test_checkpoint_closures_example():
    out = run("checkpoint_closures.py")
    diff = float(re.search(r"largest gradient difference: (\S+)", out).group(1))
    ratio = float(re.search(r"\((\d\.\d\d)x\)", out).group(1))
    assert diff < 1e-5 and ratio < 0.65


def test_per_example_gradients_example():
    out = run("per_example_gradients.py")
    assert "(('example', 8),)" in out and "equal to vmap(grad): True" in out
