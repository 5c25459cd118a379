"""The documentation's code runs: every ```python block of docs/*.md and README.md, in order, one
namespace per page, from the repository root (```py blocks are fragments shown, not run)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from scripts import update_listings
from scripts.check_docs_site import check as check_site

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
    assert check_site(tmp_path / "site") == []  # as a reader sees it: no raw markup, no broken link


def test_the_site_check_finds_raw_markup_and_broken_links(tmp_path):
    page = tmp_path / "site" / "a" / "index.html"
    page.parent.mkdir(parents=True)
    page.write_text(
        '<p>See :class:`Program` and <a href="../missing/">this</a>, <a href="#nowhere">here</a>.</p>'
        "<pre><code>:class:`fine in code`</code></pre>"
    )
    problems = check_site(tmp_path / "site")
    assert len(problems) == 3 and "raw markup" in problems[0]


def test_every_exported_name_is_in_the_api_reference():
    import importlib

    import eqsat

    documented = set()
    for path in re.findall(r"^::: (\S+)$", (ROOT / "docs" / "reference.md").read_text(), re.M):
        module, _, name = path.rpartition(".")
        module = module if module.startswith("eqsat") else f"eqsat.{module}"  # rules/ is eqsat.rules
        documented.add(id(getattr(importlib.import_module(module), name)))
    missing = [name for name in eqsat.__all__ if id(getattr(eqsat, name)) not in documented]
    assert not missing


@pytest.mark.parametrize(("page", "heading", "command"), update_listings.LISTINGS)
def test_a_listing_in_the_docs_is_what_the_cli_prints(page, heading, command):
    """docs/rules.md lists every rule as ``eqsat rules`` prints it, docs/ops.md every op as ``eqsat ops``
    does: a rule or an op added, renamed or reworded without regenerating the listing fails here."""
    listing = update_listings.listing((ROOT / "docs" / page).read_text(), heading)
    assert listing == update_listings.printed(command), "run: python scripts/update_listings.py"
