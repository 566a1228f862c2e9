"""How remat's modules depend on each other (issue 27): each layer imports only from the layers
below it (the import-linter contract in pyproject.toml), an import written inside a function — the
way around a cycle — is only for loading a heavy library late or for the tools, and `import remat`
loads none of the heavy libraries."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = SRC.parent
# Where a function may import a remat module: the tools (CLI subcommands, and benchmark workers that
# load only the framework they measure), and the XLA backend, which loads JAX.
LATE_IMPORTERS = ("remat/bench/", "remat/cli.py", "remat/fit.py", "remat/parallel.py")
LATE_IMPORTED = ("remat.backends.xla",)


def inner_imports() -> list[str]:
    """`file:line module` of each import of a remat module written inside a function, in `src/`."""
    return [f"{path.relative_to(SRC)}:{line} {module}" for path in sorted(SRC.rglob("*.py"))
            for line, module in inner_import_lines(path.read_text())]


def inner_import_lines(text: str) -> list[tuple[int, str]]:
    """The lines of `text` that import a remat module (absolutely or relatively) inside a function,
    each with what it imports (`remat` for a relative import)."""
    lines = set()
    for fn in ast.walk(ast.parse(text)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.ImportFrom):
                names = ["remat"] if node.level else [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            lines.update((node.lineno, n) for n in names if n == "remat" or n.startswith("remat."))
    return sorted(lines)


def test_the_scan_finds_imports_of_remat_inside_functions_only():
    text = ("import numpy\nfrom remat import trace\n\ndef f():\n    import jax\n    from remat.ops import add\n"
            "    def g():\n        from . import tree\n        import remat.vectorize as v\n    return add\n")
    assert inner_import_lines(text) == [(6, "remat.ops.add"), (8, "remat"), (9, "remat.vectorize")]


def test_import_remat_loads_no_heavy_library():
    code = ("import sys, remat; print(sorted(m for m in ('jax', 'scipy', 'matplotlib', 'torch', 'rich', 'tqdm') "
            "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout == "[]\n"


def test_imports_inside_functions_load_a_heavy_library_or_serve_the_tools():
    found = [f for f in inner_imports() if not f.startswith(LATE_IMPORTERS) and not f.endswith(LATE_IMPORTED)]
    assert not found, ("imports of remat modules inside functions, outside the tools and not of the XLA backend: "
                       "move each to the top of its file (a cycle that needs one is a layer imported upwards)\n"
                       + "\n".join(found))


def test_each_layer_imports_only_the_layers_below_it():
    code = ("from importlinter.cli import lint_imports; "
            "raise SystemExit(lint_imports(config_filename='pyproject.toml', no_cache=True, no_logo=True))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
