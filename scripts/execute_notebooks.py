"""Run every notebook in notebooks/ top to bottom and store it with its outputs (pictures included), so
the repository's web page shows them. ``make notebooks``; tests/test_notebooks.py checks they are
stored this way and still run."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def shown(outputs: list[Any]) -> list[Any]:
    """A cell's outputs less what varies by machine: warnings (stderr) and progress widgets."""
    return [
        out
        for out in outputs
        if out.get("name") != "stderr"
        and "application/vnd.jupyter.widget-view+json" not in out.get("data", {})
    ]


def execute(path: Path) -> nbformat.NotebookNode:
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    client.execute()
    return notebook


if __name__ == "__main__":
    for path in sorted(NOTEBOOKS.glob("*.ipynb")) if len(sys.argv) < 2 else map(Path, sys.argv[1:]):
        print(f"executing {path.name}", flush=True)
        notebook = execute(path)
        for cell in notebook.cells:  # run metadata changes every time: keep diffs to the outputs
            cell.get("metadata", {}).pop("execution", None)
            if "outputs" in cell:
                cell["outputs"] = shown(cell["outputs"])
        nbformat.write(notebook, path)
