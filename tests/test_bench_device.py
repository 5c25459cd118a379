"""The device check (``bench/device.py``, ``scripts/device_check.sh``) runs end to end here in its
smoke mode, so it has not rotted when a device is lent."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import device

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_device_check_runs_and_writes_its_rows(tmp_path):
    device.main(["--smoke", "--out", str(tmp_path / "device")])
    results = json.loads((tmp_path / "device.json").read_text())
    assert results["backend"] == "cpu" and "environment" in results
    names = [row["case"] for row in results["rows"]]
    assert len(names) == len(set(names)) == 7
    for row in results["rows"][4:]:  # Pallas' norms, interpreted
        assert row["pallas_s"] > 0 and row["max_abs_error"] < 0.1, row
    for row in results["rows"][:4]:
        assert row["kernel"] == "xla"  # no GPU kernel on this CPU
        assert row["eqsat_s"] > 0 and row["jax_s"] > 0 and row["library_s"] > 0
        assert row["max_abs_error"] < 0.1, row  # bfloat16 attention, outputs and gradients of about 1


def test_the_script_says_how_it_is_used():
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "device_check.sh"), "--help"],
        capture_output=True,
        text=True,
        check=False,
        env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    assert "devices:" in done.stdout and "--smoke" in done.stdout
