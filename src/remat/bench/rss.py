"""Resident memory of this process (Linux `/proc/self`): the peak of one step above the level
before it. Run the step in a process of its own started with `MALLOC_MMAP_THRESHOLD_=65536`, so
that freed buffers go back to the OS and resident memory follows live memory."""

from __future__ import annotations

import os
import threading
import time


def rss() -> int:
    """Resident set size now, in bytes."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def high_water_mark() -> int | None:
    """The kernel's peak resident set size (VmHWM), in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return None


def reset_high_water_mark() -> bool:
    """Set VmHWM to the current RSS; False where the kernel does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class Sampler(threading.Thread):
    """Reads RSS every `interval` seconds until stopped; `stop()` gives the largest reading."""

    def __init__(self, interval: float = 0.0005):
        super().__init__(daemon=True)
        self.interval = interval
        self.peak = rss()
        self._done = threading.Event()

    def run(self) -> None:
        while not self._done.is_set():
            self.peak = max(self.peak, rss())
            time.sleep(self.interval)

    def stop(self) -> int:
        self._done.set()
        self.join()
        return max(self.peak, rss())


def peak_during(fn, interval: float = 0.0005, high_water: bool = False):
    """`(fn(), baseline, peak)`: RSS before the call and its largest reading during it, sampled
    every `interval` seconds and, with `high_water`, also the kernel's high-water mark (reset at
    the baseline) where it can be reset."""
    baseline = rss()
    exact = high_water and reset_high_water_mark()
    sampler = Sampler(interval)
    sampler.start()
    result = fn()
    peak = sampler.stop()
    if exact:
        peak = max(peak, high_water_mark() or 0)
    return result, baseline, peak
