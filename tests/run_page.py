"""Run the code of a Markdown page as a reader would, and check that it prints what the page shows.

    python tests/run_page.py README.md
    python tests/run_page.py --write docs/loops.md   # put what each block printed in its ```text block

A page's ```python blocks run in order in one namespace, as if typed into one session. A block
whose first line starts with `>>>` is a doctest (its expected output is inline). Any other block
that prints must be followed at once by a ```text block showing what it prints; `...` in that
block stands for any text (doctest's ELLIPSIS) and runs of whitespace compare equal. Each block
is compiled as a file named `model.py` whose first line is the block's first line, so a source
line remat prints (`output of add at model.py:6`) is the line a reader counts in the block.

The page runs in this process with 8 simulated CPU devices (set before JAX starts), so a page may
show a sharded step. Exit status 0 when every block ran and printed what the page shows; 1 with a
message naming the page, the block's line and the difference otherwise. `--write` is for writing
a page: each ```text block that differs from what its code printed is replaced by it (review the
diff), and a block that prints with no ```text block after it gets one.
"""

from __future__ import annotations

import contextlib
import doctest
import io
import os
import re
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

DEVICES = 8
FENCE = re.compile(r"^```(\S*)\s*$")
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


@dataclass(frozen=True)
class Block:
    lang: str
    line: int  # 1-based line of the block's first line of code
    text: str


def blocks(markdown: str) -> list[Block]:
    """The fenced blocks of `markdown`, in order."""
    out, lang, start, lines = [], None, 0, []
    for number, line in enumerate(markdown.splitlines(), 1):
        fence = FENCE.match(line)
        if lang is None and fence:
            lang, start, lines = fence.group(1), number + 1, []
        elif lang is not None and line.startswith("```"):
            out.append(Block(lang, start, "\n".join(lines) + "\n"))
            lang = None
        elif lang is not None:
            lines.append(line)
    if lang is not None:
        raise ValueError(f"the block at line {start} is never closed")
    return out


def runnable(page: list[Block]) -> list[tuple[Block, Block | None]]:
    """Each Python block with the ```text block right after it (its output), if any."""
    pairs = []
    for i, b in enumerate(page):
        if b.lang == "python":
            after = page[i + 1] if i + 1 < len(page) and page[i + 1].lang == "text" else None
            pairs.append((b, after))
    return pairs


def _doctest(block: Block, namespace: dict, name: str) -> str | None:
    test = doctest.DocTestParser().get_doctest(block.text, namespace, name, "model.py", 0)
    out = io.StringIO()
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    runner.run(test, out=out.write, clear_globs=False)
    return out.getvalue() if runner.failures else None


def _run(block: Block, shown: Block | None, namespace: dict) -> tuple[str | None, str]:
    """(None when `block` runs and prints what `shown` shows, otherwise what went wrong; what it printed)."""
    code = compile(block.text, "model.py", "exec")
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            exec(code, namespace)
    except Exception:
        return "it raised:\n" + traceback.format_exc(limit=-4), printed.getvalue()
    got = printed.getvalue()
    if shown is None:
        return (f"it printed, and the page shows no ```text block after it:\n{got}" if got.strip() else None), got
    checker = doctest.OutputChecker()
    if checker.check_output(shown.text, got, FLAGS):
        return None, got
    return checker.output_difference(doctest.Example("", shown.text), got, FLAGS), got


def run_page(path: Path, write: bool = False) -> list[str]:
    """What went wrong in each block of the page at `path` (an empty list: nothing)."""
    lines = path.read_text().splitlines(keepends=True)
    edits = []  # (first line, last line, new lines), 0-based, for --write
    namespace: dict = {"__name__": "__main__"}
    for block, shown in runnable(blocks(path.read_text())):
        if block.text.lstrip().startswith(">>>"):
            problem, got = _doctest(block, namespace, f"{path.name}:{block.line}"), None
        else:
            problem, got = _run(block, shown, namespace)
        if problem and write and got is not None and not problem.startswith("it raised"):
            if shown is not None:
                edits.append((shown.line - 1, shown.line - 1 + len(shown.text.splitlines()), got))
            else:
                end = block.line - 1 + len(block.text.splitlines()) + 1  # the line after the closing fence
                edits.append((end, end, "\n```text\n" + got + "```\n"))
            continue
        if problem:
            if edits:
                _apply(path, lines, edits)
            return [f"{path}, the block at line {block.line}: {problem}"]  # later blocks build on this one
    if edits:
        _apply(path, lines, edits)
    return []


def _apply(path: Path, lines: list[str], edits: list) -> None:
    for first, last, text in reversed(edits):
        lines[first:last] = [text]
    path.write_text("".join(lines))


def main(argv: list[str]) -> int:
    write = "--write" in argv
    problems = [p for page in argv if page != "--write" for p in run_page(Path(page), write)]
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    flags = [f for f in os.environ.get("XLA_FLAGS", "").split() if "device_count" not in f]
    os.environ["XLA_FLAGS"] = " ".join([*flags, f"--xla_force_host_platform_device_count={DEVICES}"])
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    sys.exit(main(sys.argv[1:]))
