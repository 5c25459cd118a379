"""The documentation's code runs: every ```python block of docs/*.md and README.md runs alone, as
printed, in a namespace of its own, from the repository root (```py blocks are fragments shown, not
run), and prints what the page shows it printing; the command line's synopsis and the messages the
docs quote are the CLI's."""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

from eqsat.cli import build_parser, main
from scripts import update_listings
from scripts.check_docs_site import check as check_site

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)
BLOCKS = [
    pytest.param(page, code, id=f"{page.stem}-{i}")
    for page in PAGES
    for i, code in enumerate(_BLOCK.findall(page.read_text()))
]
SHOWN = "# -> "  # a comment that shows what the line (or the line above) prints


def shown_output(code: str) -> list[list[str]]:
    """What a block shows it prints: its ``# -> LINE`` comments, on a print's line or on lines of
    their own after it; comments on consecutive lines are consecutive lines of output."""
    runs: list[list[str]] = []
    last = -1
    for token in tokenize.generate_tokens(io.StringIO(code).readline):
        if token.type == tokenize.COMMENT and token.string.startswith(SHOWN.rstrip()):
            line = token.string[len(SHOWN) :].rstrip()
            if runs and token.start[0] == last + 1:
                runs[-1].append(line)
            else:
                runs.append([line])
            last = token.start[0]
    return runs


def test_the_pages_have_code_and_show_what_it_prints():
    blocks = [code for page in PAGES for code in _BLOCK.findall(page.read_text())]
    assert len(blocks) >= 10
    assert sum(len(shown_output(code)) for code in blocks) >= 5
    code = "print(1)  # -> 1\nprint(2)  # 2, a remark\nprint(3, '# -> 4')\n# -> 3 # -> 4\n# ->   5\n"
    assert shown_output(code) == [["1"], ["3 # -> 4", "  5"]]


@pytest.mark.parametrize(("page", "code"), BLOCKS)
def test_a_code_block_runs_alone_and_prints_what_it_shows(page, code, monkeypatch):
    monkeypatch.chdir(ROOT)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, str(page.relative_to(ROOT)), "exec"), {"__name__": f"docs_{page.stem}"})
    assert os.getcwd() == str(ROOT)
    lines = [line.rstrip() for line in printed.getvalue().splitlines()]
    at = 0
    for run in shown_output(code):  # in order, each run as consecutive lines
        found = [i for i in range(at, len(lines) - len(run) + 1) if lines[i : i + len(run)] == run]
        assert found, f"the page shows {run}; the block printed:\n{printed.getvalue()}"
        at = found[0] + len(run)


def _synopsis() -> dict[str, str]:
    """docs/cli.md's synopsis: each command's lines (``""``: ``eqsat``'s own options), comments out."""
    text = (ROOT / "docs" / "cli.md").read_text()
    block = re.search(r"^## CLI\n+```\n(.*?)^```$", text, re.S | re.M)
    assert block
    commands: dict[str, str] = {}
    command = None
    for line in block.group(1).splitlines():
        line = re.split(r"\s#\s", line)[0]
        if line.startswith("eqsat "):
            word = line.split()[1]
            command = "" if word.startswith("-") else word
            commands[command] = commands.get(command, "") + " " + line
        elif line.startswith(" ") and command is not None:
            commands[command] += " " + line
        else:
            command = None  # python -m eqsat ...
    return commands


def _parsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return {"": parser, **commands.choices}


def test_the_cli_synopsis_names_every_option_and_no_other():
    synopsis, parsers = _synopsis(), _parsers()
    assert set(synopsis) == set(parsers)
    for command, parser in parsers.items():
        named = set(re.findall(r"(?<![\w.-])(--?[a-z][a-z-]*)", synopsis[command]))
        ignored = (argparse._HelpAction, argparse._SubParsersAction)  # the commands: checked above
        actions = [a for a in parser._actions if not isinstance(a, ignored)]
        options = [a.option_strings for a in actions if a.option_strings]
        assert [o for o in options if not named & set(o)] == [], f"eqsat {command}: left out of docs/cli.md"
        assert named <= {s for o in options for s in o}, f"eqsat {command}: not an option"
        words = set(synopsis[command].split())
        choices = [c for a in actions if not a.option_strings and a.choices for c in a.choices]
        assert set(choices) <= words, f"eqsat {command}: a choice left out of docs/cli.md"


# what docs/cli.md runs as segmenter.pir: an input declared [-1, 3, -1, -1], which runs at any size
SEGMENTER = """{
 (%0) = "pd.data" () {name:"x",dtype:float32,shape:[-1,3,-1,-1]} : () -> pd.tensor<-1x3x-1x-1xf32>
 (%1) = "pd.relu" (%0) {} : (pd.tensor<-1x3x-1x-1xf32>) -> pd.tensor<-1x3x-1x-1xf32>
 (%2) = "pd.fetch" (%1) {col:0,name:out} : (pd.tensor<-1x3x-1x-1xf32>) -> pd.tensor<-1x3x-1x-1xf32>
}
"""


def test_the_cli_prints_what_the_docs_show(tmp_path, monkeypatch, capsys):
    """Each ``$ eqsat ...`` of docs/cli.md's ```text blocks runs, and prints the lines shown after it,
    in order (``...``: lines not shown)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tests").symlink_to(ROOT / "tests")
    (tmp_path / "segmenter.pir").write_text(SEGMENTER)
    sessions = re.findall(r"^```text\n(.*?)^```$", (ROOT / "docs" / "cli.md").read_text(), re.S | re.M)
    runs = [run for session in sessions for run in re.split(r"^(?=\$ )", session, flags=re.M) if run]
    assert len(runs) >= 3
    for run in runs:
        command, *shown = run.splitlines()
        argv = shlex.split(command[2:], comments=True)
        assert argv[0] == "eqsat"
        main(argv[1:])
        printed = capsys.readouterr()
        lines = [line.rstrip() for line in (printed.out + printed.err).splitlines()]
        at = 0
        for line in (line for line in shown if line != "..."):
            assert line in lines[at:], f"{command}: printed\n{printed.out}{printed.err}"
            at = lines.index(line, at) + 1


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


def test_the_architecture_page_names_every_module():
    """docs/architecture.md's layout names each source module (by its file's name), so a new module
    is placed in the layers there when it is added."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    modules = [
        p
        for folder in ("eqsat", "rules", "lowering")
        for p in (ROOT / folder).rglob("*.py")
        if p.name != "__init__.py" and "__pycache__" not in p.parts
    ]
    missing = [str(p.relative_to(ROOT)) for p in modules if p.stem not in text]
    assert not missing, f"docs/architecture.md does not name: {', '.join(sorted(missing))}"
