"""Backends run Graphs. Each is a module with `compile(graph) -> callable` and a table of ops."""

from __future__ import annotations

import importlib

KNOWN = ("numpy", "xla")


def get(name: str):
    """The backend module called `name`."""
    if name not in KNOWN:
        raise ValueError(f"unknown backend {name!r}; known backends: {', '.join(KNOWN)}")
    return importlib.import_module(f"remat.backends.{name}")
