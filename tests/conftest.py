"""Shared fixtures: paths of the bundled PIR programs. The cache of optimized programs is off in the
tests (and in the notebooks they run), but for the tests of the cache itself: a test optimizes afresh;
the cache directory is a fresh one, so nothing measured on this machine before changes a result, and
no kernel is timed but where a test asks."""

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
# no kernel is timed unless a test asks: a choice made by timings would depend on the machine's load
os.environ["EQSAT_KERNEL_SECONDS"] = "0"
config.update("kernel_seconds", 0)

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "pir"


@pytest.fixture
def pir_path():
    return lambda name: EXAMPLES / f"{name}.pir"


# The suite's slow tier, which ``make test-fast`` leaves out: the fuzzers, the proofs, every rule's
# numeric check, the attention kernels' numeric checks, whole networks run against Paddle, library
# models, notebooks, the docs site (and tests marked slow one by one).
SLOW_MODULES = {
    "test_fuzz",
    "test_fusion_attention",
    "test_prove",
    "test_paddle_networks",
    "test_paddle_conformance",
    "test_real_models",
    "test_notebooks",
    "test_docs",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.stem in SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
