"""Plans kept on disk: a process that plans a step planned before (by itself or by an earlier
process) reads the plan instead of solving again, so the wait for a `memory_budget` is paid once
per model, not once per run.

An entry is keyed by everything the plan depends on: the step's graph as printed, the budget,
the strategy, the differentiated inputs and seeded outputs, the backend it is counted for, and
the planner's own code (remat's version and a digest of its source, XLA's counting included)
and the installed JAX (XLA's buffer report changes with it), so a stale plan is never
read. Each entry is one file, written to a temporary name and renamed into place: processes
planning the same step at once each write a whole file, and a reader sees one whole file or
none. An entry that cannot be read (cut short, another format) is ignored and written again.

The folder is `$REMAT_PLAN_CACHE` when set (`off` turns the cache off), else `remat/plans` in
the user's cache folder (`$XDG_CACHE_HOME`, or `~/.cache`). A folder that cannot be written
leaves planning as it was, only slower.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import pickle
import tempfile
from importlib import metadata
from pathlib import Path

from remat.planner.report import PlanReport

OFF = ("off", "0", "false", "no")


def directory() -> Path | None:
    """Where plans are kept, or None when the cache is off."""
    setting = os.environ.get("REMAT_PLAN_CACHE", "")
    if setting.lower() in OFF:
        return None
    if setting:
        return Path(setting)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "remat" / "plans"


def entry_name(*parts) -> str:
    """The file name of the plan for `parts` (what the plan depends on), with the planner's code."""
    digest = hashlib.sha256(repr(parts).encode())
    digest.update(_code_digest().encode())
    return digest.hexdigest() + ".plan"


def load(name: str) -> PlanReport | None:
    """The plan stored under `name`, or None (no cache, no entry, or one that cannot be read)."""
    folder = directory()
    if folder is None:
        return None
    try:
        with open(folder / name, "rb") as f:
            report = pickle.load(f)
    except FileNotFoundError:
        return None
    except Exception:  # noqa: BLE001  (cut short, or of another format: planned and written again)
        return None
    return report if isinstance(report, PlanReport) else None


def store(name: str, report: PlanReport) -> None:
    """Keep `report` under `name`, atomically; a folder that cannot be written is skipped."""
    folder = directory()
    if folder is None:
        return
    temporary = None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=folder, prefix=".writing-")
        with os.fdopen(fd, "wb") as f:
            pickle.dump(report, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(temporary, folder / name)
    except OSError:
        if temporary is not None:
            with contextlib.suppress(OSError):
                os.unlink(temporary)


@functools.cache
def _code_digest() -> str:
    """The versions of remat and of JAX, and a digest of the source of the modules a plan comes
    from: a changed planner (or graph printer, or count of XLA's memory) plans anew even before
    the version changes."""
    h = hashlib.sha256()
    for package in ("remat", "jax", "jaxlib"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            h.update(f"{package} {metadata.version(package)};".encode())
    root = Path(__file__).parent.parent  # remat/
    for path in sorted([*root.glob("planner/*.py"), root / "graph.py", *root.glob("checkpoint/*.py"),
                        *root.glob("backends/xla*.py")]):
        h.update(path.read_bytes())
    return h.hexdigest()
