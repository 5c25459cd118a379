"""The ``eqsat`` command line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from eqsat.cli import main


def test_help_lists_the_commands():
    out = subprocess.run(
        [sys.executable, "-m", "eqsat.cli", "--help"], capture_output=True, text=True, check=True
    )
    for command in ("optimize", "show", "rules", "demo"):
        assert command in out.stdout


def test_optimize_prints_before_after_rules_and_costs(pir_path, capsys, tmp_path):
    target = tmp_path / "out.txt"
    assert (
        main(
            [
                "optimize",
                str(pir_path("drr_transpose_before")),
                "--rules",
                "transpose,reshape,cast",
                "-o",
                str(target),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "== before" in out and "== after" in out
    assert "rules fired: " in out and "transpose-compose" in out
    assert "cost (roofline:cpu, " in out
    assert '"transpose"' in target.read_text()


def test_rules_lists_every_theme(capsys):
    assert main(["rules"]) == 0
    out = capsys.readouterr().out
    for theme in ("transpose:", "reshape:", "cast:", "fold:"):
        assert theme in out


def test_bad_input_is_an_error_message_not_a_traceback(tmp_path, capsys):
    bad = tmp_path / "bad.pir"
    bad.write_text('{\n (%0) = "pd.relu" (%3) {} : (pd.tensor<2xf32>) -> pd.tensor<2xf32>\n}\n')
    assert main(["optimize", str(bad)]) == 2
    assert "eqsat: error: line 2: pd.relu: undefined value %3" in capsys.readouterr().err
    assert main(["show", str(tmp_path / "missing.pir")]) == 2


def test_unknown_command_exits_with_usage():
    with pytest.raises(SystemExit):
        main(["frobnicate"])
