"""The notebooks run top to bottom (a failing cell fails the build), and they are stored with their
outputs, pictures included (``make notebooks``), as a fresh run in the tests' environment
(``scripts/execute_notebooks.environment``) produces them: every cell's stored outputs are of the
kinds a fresh run produces, and every cell not tagged ``machine-dependent`` prints the same text
(its printed text and its results' text, less the report's times); pictures are compared by kind.
A notebook edited, or a result of eqsat changed, without re-running ``make notebooks`` fails here.
A cell tagged ``machine-dependent`` (a cost model timing this machine's kernels) says so in the
notebook's text."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from scripts.execute_notebooks import MACHINE_DEPENDENT, execute, shown

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))

# What a deterministic cell's text may differ in from run to run: the report's wall times, and an
# object's address in its default repr.
_VARYING = [(re.compile(r"^time: .*$", re.M), "time: ..."), (re.compile(r"\b0x[0-9a-f]+\b"), "0x...")]


def _kinds(cell: nbformat.NotebookNode) -> set[tuple[str, ...]]:
    """What a cell shows: printed text, results and pictures by type (``shown`` leaves out what varies
    by machine: warnings, and the progress bar of an optimization that took over a second here)."""
    return {(out["output_type"], *sorted(out.get("data", {}))) for out in shown(cell.get("outputs", []))}


def _normalized(text: str) -> str:
    for pattern, replacement in _VARYING:
        text = pattern.sub(replacement, text)
    return text


def _text(cell: nbformat.NotebookNode) -> list[tuple[str, str]]:
    """What a cell prints and its results' text, in order. A stream's consecutive writes are joined:
    where the kernel splits them into outputs depends on timing."""
    out: list[tuple[str, str]] = []
    for output in shown(cell.get("outputs", [])):
        kind = str(output["output_type"])
        if kind == "stream":
            key, text = f"stream:{output['name']}", output["text"]
            if out and out[-1][0] == key:
                out[-1] = (key, out[-1][1] + text)
                continue
        elif "text/plain" in output.get("data", {}):
            key, text = kind, output["data"]["text/plain"]
        else:
            continue
        out.append((key, text))
    return [(key, _normalized(text)) for key, text in out]


def _machine_dependent(cell: nbformat.NotebookNode) -> bool:
    return MACHINE_DEPENDENT in cell.get("metadata", {}).get("tags", [])


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_and_is_stored_with_its_outputs(path):
    stored = nbformat.read(path, as_version=4)
    notebook = execute(path)
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
        if not _machine_dependent(old):
            assert _text(old) == _text(new), (
                f"code cell {i} is stored with other outputs than it prints now: make notebooks "
                f"(or, where its output depends on the machine, say so and tag it {MACHINE_DEPENDENT!r})"
            )


def test_the_comparison_ignores_only_what_varies_by_run():
    """Times and addresses are left out, stream writes joined; a count that changed is not."""

    def cell(*outputs: dict) -> nbformat.NotebookNode:
        return nbformat.from_dict({"cell_type": "code", "metadata": {}, "outputs": list(outputs)})

    def stream(text: str) -> dict:
        return {"output_type": "stream", "name": "stdout", "text": text}

    def result(text: str) -> dict:
        return {"output_type": "execute_result", "data": {"text/plain": text, "image/svg+xml": "<svg/>"}}

    report = "saturation: 7 iterations, 103 e-nodes\ntime: encode {} ms, saturate {} ms\ncache: off\n"
    old = cell(stream(report.format(41.5, 76.5)), result("<eqsat.show.Picture at 0x7f1135f1d760>"))
    new = cell(
        stream(report.format(114.2, 149.9)[:20]),
        stream(report.format(114.2, 149.9)[20:]),
        {"output_type": "stream", "name": "stderr", "text": "a warning\n"},
        result("<eqsat.show.Picture at 0x7f60364e80b0>"),
    )
    assert _text(old) == _text(new)
    assert _text(old) != _text(cell(stream(report.format(41.5, 76.5).replace("103", "121")), result("")))
