"""How remat's modules depend on each other (issue 27): `import remat` loads none of the heavy
libraries (each is loaded where it is first used), and imports written inside functions — the
way around an import cycle — do not grow back: each one left is a cycle not yet broken."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
# Function-level imports of remat modules allowed: what is left of the import circle (147 before
# the imports that stood in no cycle and pointed down the layers moved to the tops of their files,
# and the protocols moved to the modules that own them). Lower it as cycles break.
MOST_INNER_IMPORTS = 65


def inner_imports() -> list[str]:
    """`file:line` of each import of a remat module written inside a function, in `src/`."""
    return [f"{path.relative_to(SRC)}:{line}" for path in sorted(SRC.rglob("*.py"))
            for line in inner_import_lines(path.read_text())]


def inner_import_lines(text: str) -> list[int]:
    """The lines of `text` that import a remat module (absolutely or relatively) inside a function."""
    lines = set()
    for fn in ast.walk(ast.parse(text)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.ImportFrom):
                names = ["remat"] if node.level else [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            if any(n == "remat" or n.startswith("remat.") for n in names):
                lines.add(node.lineno)
    return sorted(lines)


def test_the_scan_finds_imports_of_remat_inside_functions_only():
    text = ("import numpy\nfrom remat import trace\n\ndef f():\n    import jax\n    from remat.ops import add\n"
            "    def g():\n        from . import tree\n        import remat.vectorize as v\n    return add\n")
    assert inner_import_lines(text) == [6, 8, 9]


def test_import_remat_loads_no_heavy_library():
    code = ("import sys, remat; print(sorted(m for m in ('jax', 'scipy', 'matplotlib', 'torch', 'rich', 'tqdm') "
            "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout == "[]\n"


def test_imports_inside_functions_do_not_grow():
    found = inner_imports()
    assert len(found) <= MOST_INNER_IMPORTS, (
        f"{len(found)} imports of remat modules inside functions (at most {MOST_INNER_IMPORTS}): move a new one to "
        "the top of its file, or break the cycle that needs it\n" + "\n".join(found))
