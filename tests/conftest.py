"""Shared fixtures: paths of the bundled PIR programs. The cache of optimized programs is off in the
tests (and in the notebooks they run), but for the tests of the cache itself: a test optimizes afresh."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from eqsat import config

os.environ["EQSAT_ENABLE_CACHE"] = "0"
config.update("enable_cache", False)  # were eqsat imported before this file

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "pir"


@pytest.fixture
def pir_path():
    return lambda name: EXAMPLES / f"{name}.pir"
