"""The ``eqsat`` command line."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from eqsat import Builder, config
from eqsat.cli import main
from eqsat.examples import PIR
from eqsat.ops import OPS
from eqsat.rules import RULESETS


def test_help_lists_the_commands():
    out = subprocess.run(
        [sys.executable, "-m", "eqsat.cli", "--help"], capture_output=True, text=True, check=True
    )
    for command in ("optimize", "show", "rules", "ops", "demo"):
        assert command in out.stdout


def test_version_is_the_projects_installed_or_not(monkeypatch, capsys):
    import importlib.metadata
    import tomllib

    import eqsat.version

    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())["project"]
    assert eqsat.__version__ == project["version"]
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith(f"eqsat {project['version']} (egglog ")

    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    # a source checkout that is not installed reads its pyproject.toml
    monkeypatch.setattr(importlib.metadata, "version", not_installed)
    assert eqsat.version._version() == project["version"]


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
    for theme, rules in RULESETS.items():
        assert f"{theme}:" in out
        assert all(f"  {r.name} " in out for r in rules), theme


def test_ops_lists_every_op_with_what_reaches_it(capsys):
    assert main(["ops"]) == 0
    out = capsys.readouterr().out
    for name in OPS:
        assert f"\n{name}: " in f"\n{out}", name
    assert "spelled: flax.linen.RMSNorm" in out and "jax exp" in out


def test_bad_input_is_an_error_message_not_a_traceback(tmp_path, capsys):
    bad = tmp_path / "bad.pir"
    bad.write_text('{\n (%0) = "pd.relu" (%3) {} : (pd.tensor<2xf32>) -> pd.tensor<2xf32>\n}\n')
    assert main(["optimize", str(bad)]) == 2
    assert "eqsat: error: line 2: pd.relu: undefined value %3" in capsys.readouterr().err
    assert main(["show", str(tmp_path / "missing.pir")]) == 2
    script = tmp_path / "model.py"
    script.write_text("import jax\n")
    assert main(["optimize", str(script)]) == 2
    assert "model.py is Python source: trace a function with eqsat.from_jax" in capsys.readouterr().err
    assert main(["demo", "--dir", str(tmp_path / "nowhere")]) == 2
    assert "eqsat: error: --dir " in capsys.readouterr().err


def test_a_listing_whose_reader_went_away_ends_quietly():
    """``eqsat rules | head``: the reader closes the pipe (``true`` before a line is written); no
    error, the exit status of SIGPIPE, as cat's."""
    listing = subprocess.run(
        ["bash", "-c", f"set -o pipefail; {sys.executable} -m eqsat rules | true"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (listing.returncode, listing.stderr) == (141, "")


def test_unknown_command_exits_with_usage():
    with pytest.raises(SystemExit):
        main(["frobnicate"])


def test_show_draws_the_program_and_a_view_of_the_egraph(tmp_path, capsys):
    source = PIR / "drr_transpose_before.pir"
    program_svg, egraph_svg = tmp_path / "p.svg", tmp_path / "e.svg"
    args = ["show", str(source), "--svg", str(program_svg), "--egraph-svg", str(egraph_svg)]
    assert main([*args, "--depth", "1", "--max-classes", "3"]) == 0
    assert "wrote" in capsys.readouterr().out
    assert program_svg.read_text().count('class="node"') > 2
    assert egraph_svg.read_text().count('class="cluster"') <= 3


def test_show_draws_the_egraph_of_a_program_optimized_before(tmp_path, monkeypatch, capsys):
    """``eqsat optimize FILE`` stores its result in the cache, which keeps no e-graph; ``show`` after it
    saturates again rather than failing."""
    monkeypatch.setattr(config, "enable_cache", True)
    monkeypatch.setattr(config, "cache_dir", tmp_path / "cache")
    source = PIR / "drr_transpose_before.pir"
    assert main(["optimize", str(source)]) == 0
    assert "cache: stored" in capsys.readouterr().out
    assert main(["show", str(source), "--egraph-svg", str(tmp_path / "e.svg")]) == 0
    assert (tmp_path / "e.svg").read_text().count('class="cluster"') >= 1


NETS = Path(__file__).resolve().parent / "data" / "paddle_nets"


def test_optimize_binds_dynamic_dims_or_says_which_default_it_took(capsys):
    model = str(NETS / "mini_conv_squeeze_dyn.json")
    assert main(["optimize", model, "-q", "--check"]) == 0
    out = capsys.readouterr().out
    assert "note: input 'x' is declared [-1, 3, 8, 8]: optimized at [1, 3, 8, 8]" in out
    assert "verify: the optimized program runs" in out
    assert main(["optimize", model, "--shape", "x=4,3,8,8"]) == 0
    out = capsys.readouterr().out
    assert "note:" not in out and "tensor<4x3x8x8xf32>" in out
    with pytest.raises(SystemExit):
        main(["optimize", model, "--shape", "x=four"])
    assert "expected NAME=D0,D1,..." in capsys.readouterr().err


def test_optimize_fails_for_a_program_that_cannot_run(tmp_path, capsys):
    text = (
        (NETS.parent / "paddle" / "dumps" / "mlp.pir").read_text().replace('"pd_op.relu"', '"pd_op.mystery"')
    )
    path = tmp_path / "m.pir"
    path.write_text(text)
    assert main(["optimize", str(path), "-q"]) == 2
    assert "opaque op 'pd_op.mystery' has no JAX implementation" in capsys.readouterr().err


def test_optimize_measures_a_gain_within_the_models_error(tmp_path, capsys):
    """Two transposes that cancel after a large product: a gain of a few percent, within the
    roofline's error, so it is timed, and the report says how it went."""
    b = Builder()
    x = b.input("x", (512, 512))
    product = b.matmul(x, b.input("w", (512, 512)))
    path = tmp_path / "program.txt"
    path.write_text(str(b.build(b.transpose(b.transpose(product, perm=(1, 0)), perm=(1, 0)))))
    assert main(["optimize", str(path), "--measure", "--no-cache", "-q"]) == 0
    kept = "the (optimized program is kept|input is returned)"
    timed = r"timed: as written [\d.e-]+ ms, optimized [\d.e-]+ ms, \d+\.\d+x against a margin of \d+%"
    assert re.search(rf"predicted \d+\.\d+x, {timed}: {kept}", capsys.readouterr().out)


def test_the_kernel_timing_budget_is_an_option_of_optimize(monkeypatch):
    """``--kernel-seconds`` sets ``Limits.kernel_seconds``; without it the setting's default holds."""
    from eqsat.cli import _limits, build_parser

    monkeypatch.setattr(config, "kernel_seconds", 7.0)
    parse = build_parser().parse_args
    assert _limits(parse(["optimize", "x.pir"])).kernel_seconds == 7.0
    assert _limits(parse(["optimize", "x.pir", "--kernel-seconds", "60"])).kernel_seconds == 60.0


@pytest.mark.slow  # compiles and times real kernels
def test_calibrate_times_the_kernels_of_given_programs_once(tmp_path, monkeypatch, capsys):
    """``eqsat calibrate --kernels FILE``: the conv's formulations timed and kept; a second run times
    none (read from the table)."""
    monkeypatch.setattr(config, "cache_dir", tmp_path)
    conv = Path(__file__).parent / "data" / "paddle" / "dumps" / "conv_bn_relu.pir"
    assert main(["calibrate", "--kernels", str(conv), "--kernel-seconds", "120"]) == 0
    first = capsys.readouterr().out
    assert re.search(r": [1-9]\d* kernels timed", first), first
    assert list(tmp_path.glob("kernels-*.json"))
    assert main(["calibrate", "--kernels", str(conv)]) == 0
    assert ": 0 kernels timed" in capsys.readouterr().out


def test_a_failed_check_exits_1_as_its_help_says(monkeypatch, capsys):
    """``--check`` finding the programs apart is exit status 1 (a user error is 2)."""
    import eqsat.verify

    def differs(*args, **kwargs):
        raise eqsat.MiscompileError("output 0 (out) on normal inputs: max abs difference 1")

    monkeypatch.setattr(eqsat.verify, "validate", differs)
    assert main(["optimize", str(PIR / "drr_transpose_before.pir"), "-q", "--check", "--no-cache"]) == 1
    assert "verify failed: output 0 (out)" in capsys.readouterr().err


def test_the_extractor_option_is_the_apis():
    """The CLI spells the extractors and the ILP's threshold itself (its help imports nothing heavy):
    they must be the API's."""
    from eqsat.cli import build_parser
    from eqsat.options import EXTRACTORS
    from eqsat.pipeline import ILP_MAX_NODES

    optimize = next(a for a in build_parser()._actions if a.dest == "command").choices["optimize"]
    extractor = next(a for a in optimize._actions if a.dest == "extractor")
    assert tuple(extractor.choices) == EXTRACTORS and f"ILP up to {ILP_MAX_NODES} e-nodes" in extractor.help
