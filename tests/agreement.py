"""eqsat.jit against jax.jit on the same function and arguments: the comparisons the regression tests
of every subject share (each found by an independent fuzzer)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import eqsat


def same_as_jax_jit(fn: Callable[..., Any], *args: Any, **jit_kwargs: Any) -> None:
    """eqsat.jit(fn) gives exactly jax.jit(fn)'s results: values, dtypes, signs of zero, infs."""
    want = jax.tree_util.tree_leaves(jax.jit(fn)(*args))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = jax.tree_util.tree_leaves(eqsat.jit(fn, **jit_kwargs)(*args))
    for a, b in zip(want, got, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(b, a)
        if jnp.issubdtype(a.dtype, jnp.floating):
            assert (np.signbit(a) == np.signbit(b)).all()


def close_to_jax_jit(fn: Callable[..., Any], *args: Any) -> None:
    """eqsat.jit(fn) has jax.jit(fn)'s infs and NaNs where they are, and is close elsewhere (relative
    to each output's largest finite magnitude)."""
    for want, got in zip(jax.jit(fn)(*args), eqsat.jit(fn)(*args), strict=True):
        want, got = np.asarray(want, np.float64), np.asarray(got, np.float64)
        assert np.array_equal(np.isnan(want), np.isnan(got)) and np.array_equal(np.isinf(want), np.isinf(got))
        finite = np.isfinite(want)
        scale = np.abs(want[finite]).max(initial=1.0)
        np.testing.assert_allclose(got[finite], want[finite], rtol=1e-4, atol=1e-5 * scale)
