"""Shared fixtures: paths of the bundled PIR programs. The cache of optimized programs is off in the
tests (and in the notebooks they run), but for the tests of the cache itself: a test optimizes afresh;
the cache directory is a fresh one, so nothing measured on this machine before changes a result, and
no kernel is timed but where a test asks."""

from __future__ import annotations

import os
import tempfile

import jax
import pytest

from eqsat import config
from eqsat.examples import PIR

os.environ["EQSAT_ENABLE_CACHE"] = "0"
config.update("enable_cache", False)  # were eqsat imported before this file
# a calibrated device profile or timings of this machine (eqsat calibrate) must not change the tests
os.environ["EQSAT_CACHE_DIR"] = tempfile.mkdtemp(prefix="eqsat-tests-")
config.update("cache_dir", os.environ["EQSAT_CACHE_DIR"])
# no kernel is timed unless a test asks: a choice made by timings would depend on the machine's load
os.environ["EQSAT_KERNEL_SECONDS"] = "0"
config.update("kernel_seconds", 0)
# eqsat.jit's first call waits for the optimization: a test of its output tests the optimized program
os.environ["EQSAT_BACKGROUND"] = "0"
config.update("background", False)
# float32 products at float32 precision: on a GPU JAX's default rounds a float32 product's operands to
# TF32 (10 bits), so two formulations of one conv (Winograd's against cuDNN's) differ by 1e-3 there,
# which no float32 tolerance here allows (XLA:CPU computes float32 products in float32 either way)
if jax.default_backend() != "cpu":
    jax.config.update("jax_default_matmul_precision", "highest")


@pytest.fixture(autouse=True)
def _own_cache_dir(tmp_path_factory, monkeypatch):
    """Each test reads and records timings and verdicts in a folder of its own: nothing a test before
    it measured changes its result."""
    monkeypatch.setattr(config, "cache_dir", tmp_path_factory.mktemp("eqsat-cache"))


EXAMPLES = PIR  # the bundled programs (eqsat/examples/)


@pytest.fixture
def pir_path():
    return lambda name: EXAMPLES / f"{name}.pir"


# The suite's slow tier, which ``make test-fast`` leaves out: the fuzzers, the proofs, every rule's
# numeric check, the attention kernels' numeric checks, whole networks run against Paddle, library
# models, notebooks, the docs site, the wheel built and installed, a grid of dtypes and batch sizes
# past its first point (tests parametrized over ``dtype`` or ``batch`` run at the first value listed),
# and tests marked slow one by one.
SLOW_MODULES = {
    "test_fuzz",
    "test_fusion_attention",
    "test_prove",
    "test_paddle_networks",
    "test_paddle_conformance",
    "test_real_models",
    "test_notebooks",
    "test_docs",
    "test_packaging",
}


GRID = ("dtype", "batch")


def _past_the_grids_first_point(item: pytest.Item) -> bool:
    """Whether ``item`` runs a ``dtype`` or ``batch`` parametrization at a value other than its first."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    for mark in item.iter_markers("parametrize"):
        names = mark.args[0]
        names = [n.strip() for n in names.split(",")] if isinstance(names, str) else list(names)
        if len(names) == 1 and names[0] in GRID and mark.args[1]:
            first = mark.args[1][0]
            first = first.values[0] if hasattr(first, "values") else first  # a pytest.param
            if params.get(names[0], first) != first:
                return True
    return False


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.stem in SLOW_MODULES or _past_the_grids_first_point(item):
            item.add_marker(pytest.mark.slow)
