"""Doctest collection imports every module under src/remat; PyTorch is an optional benchmark
dependency, so its implementation is collected only where torch is installed."""

import importlib.util

collect_ignore = [] if importlib.util.find_spec("torch") else ["src/remat/bench/impl_torch.py"]
