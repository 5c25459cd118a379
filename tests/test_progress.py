"""Progress of an optimization: a bar on a terminal, nothing where stderr is not one or when asked, or
a function called with each saturation iteration."""

from __future__ import annotations

import io
import sys

import pytest

import eqsat
from eqsat.progress import ProgressBar
from eqsat.saturate import Iteration


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _program() -> eqsat.Program:
    b = eqsat.Builder()
    x = b.input("x", (4, 8))
    return b.build(b.transpose(b.transpose(b.relu(x), perm=(1, 0)), perm=(1, 0)))


def test_a_bar_is_drawn_on_a_terminal_with_each_iterations_size(monkeypatch):
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    bar = ProgressBar(delay=0.0, verbose=True)
    bar(Iteration(0, 12, 7, {"fold": 3}, 0.01))
    bar.close()
    text = terminal.getvalue()
    assert "eqsat: saturating" in text and "nodes=12" in text
    assert "1it" in text and "1/" not in text  # iterations counted, not out of a limit rarely reached
    assert "iteration 0: 12 e-nodes, 7 e-classes, 3 matches" in text


def test_nothing_is_printed_where_stderr_is_not_a_terminal(capsys):
    bar = ProgressBar(delay=0.0)
    bar(Iteration(0, 12, 7, {}, 0.01))
    bar.close()
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("progress", [None, False])
def test_optimize_is_silent_off_a_terminal_and_when_asked(progress, capsys):
    eqsat.optimize(_program(), progress=progress)
    assert capsys.readouterr().err == ""


def test_a_function_gets_every_iteration():
    seen: list[Iteration] = []
    result = eqsat.optimize(_program(), progress=seen.append)
    assert [it.index for it in seen] == [it.index for it in result.report.saturation.iterations]
    assert seen
