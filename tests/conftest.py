"""Shared fixtures: paths of the bundled PIR programs. The cache of optimized programs is off in the
tests (and in the notebooks they run), but for the tests of the cache itself: a test optimizes afresh;
the cache directory is a fresh one, so nothing measured on this machine before changes a result."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from eqsat import config

os.environ["EQSAT_ENABLE_CACHE"] = "0"
config.update("enable_cache", False)  # were eqsat imported before this file
# a calibrated device profile or timings of this machine (eqsat calibrate) must not change the tests
os.environ["EQSAT_CACHE_DIR"] = tempfile.mkdtemp(prefix="eqsat-tests-")
config.update("cache_dir", os.environ["EQSAT_CACHE_DIR"])

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "pir"


@pytest.fixture
def pir_path():
    return lambda name: EXAMPLES / f"{name}.pir"
