"""Run every notebook in notebooks/ top to bottom and store it with its outputs (pictures included), so
the repository's web page shows them. ``make notebooks``; tests/test_notebooks.py checks they are
stored this way and still run, in the same environment (``environment``), and that every cell not
tagged ``machine-dependent`` prints what it is stored with."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"

# A cell whose output depends on this machine (timings): its text says so, and its stored output is
# one run's; tests/test_notebooks.py compares only the kinds of its outputs.
MACHINE_DEPENDENT = "machine-dependent"


def shown(outputs: list[Any]) -> list[Any]:
    """A cell's outputs less what varies by machine: warnings (stderr) and progress widgets."""
    return [
        out
        for out in outputs
        if out.get("name") != "stderr"
        and "application/vnd.jupyter.widget-view+json" not in out.get("data", {})
    ]


def environment(cache_dir: str) -> dict[str, str]:
    """The kernel's environment: the tests' (tests/conftest.py), so a notebook prints what its test
    expects. No cache of optimized programs; ``cache_dir`` a fresh directory, so no calibration or
    timing recorded on this machine before changes a result; no kernel timed but where a notebook
    asks (``Measured``); ``eqsat.jit`` waits for its optimization; JAX's CPU backend, so the default
    cost model (this backend's) is the same everywhere. Other ``EQSAT_*`` settings are dropped."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("EQSAT_")}
    env.update(
        EQSAT_ENABLE_CACHE="0",
        EQSAT_CACHE_DIR=cache_dir,
        EQSAT_KERNEL_SECONDS="0",
        EQSAT_BACKGROUND="0",
        JAX_PLATFORMS="cpu",
    )
    return env


def execute(path: Path) -> nbformat.NotebookNode:
    """``path`` run top to bottom in ``environment``, with its outputs."""
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    with tempfile.TemporaryDirectory(prefix="eqsat-notebook-") as cache_dir:
        client.execute(env=environment(cache_dir))
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
