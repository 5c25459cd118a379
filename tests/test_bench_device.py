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
    rows = results["rows"]
    names = [row["case"] for row in rows]
    assert len(names) == len(set(names)) == len(device.cases(smoke=True))
    attention = [row for row in rows if row["case"].startswith("attention")]
    norms = [row for row in rows if "pallas_s" in row]
    models = [row for row in rows if row not in attention and row not in norms]
    assert (len(attention), len(norms), len(models)) == (6, 3, 2)
    for row in norms:  # Pallas' norms, interpreted
        assert row["pallas_s"] > 0 and row["max_abs_error"] < 0.1, row
    for row in attention:
        assert row["kernel"] == row["widened_kernel"] == "xla"  # no GPU kernel on this CPU
        assert row["eqsat_s"] > 0 and row["jax_s"] > 0 and row["library_s"] > 0 and row["widened_s"] > 0
        assert not row["out_of_memory"]
        # bfloat16 attention, outputs and gradients of about 1
        assert max(row["max_abs_error"], row["widened_max_abs_error"]) < 0.1, row
    for row in models:
        assert row["eqsat_s"] > 0 and row["max_abs_error"] < 0.1 and not row["cut_short"], row


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
