"""The notebooks run top to bottom (a failing cell fails the build), and they are stored with their
outputs, pictures included (``make notebooks``): every cell's stored outputs are of the kinds a fresh
run produces, so a notebook edited without re-running it fails here."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from scripts.execute_notebooks import shown

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))


def _kinds(cell: nbformat.NotebookNode) -> set[tuple[str, ...]]:
    """What a cell shows: printed text, results and pictures by type (``shown`` leaves out what varies
    by machine: warnings, and the progress bar of an optimization that took over a second here)."""
    return {(out["output_type"], *sorted(out.get("data", {}))) for out in shown(cell.get("outputs", []))}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_and_is_stored_with_its_outputs(path):
    stored = nbformat.read(path, as_version=4)
    notebook = nbformat.read(path, as_version=4)
    NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    ).execute()
    errors = [
        out for cell in notebook.cells for out in cell.get("outputs", []) if out.get("output_type") == "error"
    ]
    assert not errors
    code = [
        (old, new) for old, new in zip(stored.cells, notebook.cells, strict=True) if new.cell_type == "code"
    ]
    for i, (old, new) in enumerate(code):
        assert _kinds(old) == _kinds(new), (
            f"code cell {i} is stored without its current outputs: make notebooks"
        )
