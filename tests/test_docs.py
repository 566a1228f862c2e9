"""The README and every page of docs/ are true: each Python block runs and prints what the page
shows (tests/run_page.py, one process per page), the README stays a short tour, and every page
is linked from it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import run_page

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_block_of_the_page_runs_and_prints_what_it_shows(page):
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "run_page.py"), str(page)], capture_output=True,
                          text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-6000:]


def test_the_pages_have_code_to_run():
    pages = {p.name: run_page.runnable(run_page.blocks(p.read_text())) for p in PAGES}
    assert len(pages["README.md"]) >= 8
    assert all(pages[p.name] for p in PAGES if p.name != "benchmarks.md"), [n for n, b in pages.items() if not b]


def test_the_readme_is_a_short_tour_linking_every_page():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    linked = set(re.findall(r"\]\(docs/([\w-]+\.md)\)", readme))
    assert linked == {p.name for p in PAGES[1:]}
    assert "make demo" in readme and "make test" in readme


def _problems(tmp_path, text: str) -> list[str]:
    page = tmp_path / "page.md"
    page.write_text(text)
    return run_page.run_page(page)


def test_a_page_passes_when_its_blocks_print_what_it_shows(tmp_path):
    assert _problems(tmp_path, "```python\nx = 6 * 7\nprint(x, 'a  b')\n```\n\n```text\n42 a b\n```\n"
                               "then\n```python\n>>> x + 1\n43\n```\n```python\nprint(list(range(30)))\n```\n"
                               "```text\n[0, 1, ..., 29]\n```\n") == []


@pytest.mark.parametrize("text, says", [
    ("```python\nprint(1)\n```\n```text\n2\n```\n", "Expected:\n    2\nGot:\n    1"),
    ("```python\nprint(1)\n```\n", "the page shows no ```text block"),
    ("```python\n1 / 0\n```\n", "ZeroDivisionError"),
    ("```python\n>>> 1 + 1\n3\n```\n", "Expected:\n    3\nGot:\n    2"),
    ("x\n```python\ny = 1\n```\n```python\nprint(z)\n```\n```text\n1\n```\n", "NameError: name 'z'"),
])
def test_a_page_fails_where_a_block_breaks_or_prints_something_else(tmp_path, text, says):
    (problem,) = _problems(tmp_path, text)
    assert "page.md, the block at line" in problem and says in problem


def test_a_source_line_is_counted_in_its_block(tmp_path):
    here = "inspect.stack()[0]"
    text = f"```python\nimport inspect\n\ndef f():\n    return {here}.filename, {here}.lineno\n```\n" \
           "```python\nprint(*f())\n```\n```text\nmodel.py 4\n```\n"
    assert _problems(tmp_path, text) == []


def test_write_puts_what_each_block_printed_in_its_text_block(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("Intro.\n\n```python\nprint('new')\n```\n\n```text\nold\n```\n\n```python\nprint(2)\n```\nEnd.\n")
    assert run_page.run_page(page, write=True) == []
    assert page.read_text() == ("Intro.\n\n```python\nprint('new')\n```\n\n```text\nnew\n```\n\n"
                                "```python\nprint(2)\n```\n\n```text\n2\n```\nEnd.\n")
    assert run_page.run_page(page) == []


def test_the_version_is_pyprojects_and_the_changelog_opens_with_it(capsys):
    import tomllib

    import remat as rm
    from remat.cli import main

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert rm.__version__ == version
    first = re.search(r"^## (\S+) — \d{4}-\d\d-\d\d$", (ROOT / "CHANGELOG.md").read_text(), re.MULTILINE)
    assert first and first.group(1) == version
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out == f"remat {version}\n"
