"""The documentation's code runs: every ```python block of docs/*.md and README.md, in order, one
namespace per page, from the repository root (```py blocks are fragments shown, not run)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)


def test_the_pages_have_code():
    assert sum(len(_BLOCK.findall(p.read_text())) for p in PAGES) >= 10


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_a_pages_code_runs(page, monkeypatch):
    monkeypatch.chdir(ROOT)
    namespace: dict = {"__name__": f"docs_{page.stem}"}
    for i, block in enumerate(_BLOCK.findall(page.read_text())):
        exec(compile(block, f"{page.name}[block {i}]", "exec"), namespace)
    assert os.getcwd() == str(ROOT)


def test_the_site_builds_without_warnings(tmp_path):
    """``make docs``: mkdocs in strict mode (a warning, such as a broken link or a docstring
    mkdocstrings cannot read, fails the build; ``-q`` would hide warnings from the strict count)."""
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr
    assert "WARNING" not in built.stderr, built.stderr  # counted even where strict mode lets one pass
    assert (tmp_path / "site" / "reference" / "index.html").read_text().count("doc-object") >= 10
