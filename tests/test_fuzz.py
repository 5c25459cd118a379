"""Random programs through the whole optimizer: every result must compute what the input computes.
Results are judged against the program as it reads (each op in float64, rounded to its dtype:
``eqsat.lowering.reference``), so that XLA's own liberties are not blamed on eqsat (``numerics.judge``).

Two generators: Programs built op by op (``programs``, per dtype family), and JAX functions as users
write them, run through ``eqsat.jit`` and ``jax.jit`` side by side (``jax_functions``). Each family
runs ``EQSAT_FUZZ_EXAMPLES`` examples (CI: 30; ``make fuzz``: 5,000 in all); float64 and 64-bit
integers run under ``jax.enable_x64``. The JAX functions are differentiated too (a third as many
examples). A deep program (2,000 ops) must optimize too.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import eqsat
from eqsat import Limits
from eqsat.lowering import reference
from eqsat.numerics import judge, loosest, path_dtypes, tolerance
from eqsat.rules import select
from eqsat.verify import validate
from tests.strategies import FAMILIES, X64_FAMILIES, deep_program, jax_functions, programs

EXAMPLES = int(os.environ.get("EQSAT_FUZZ_EXAMPLES", "30"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
LIMITS = Limits(max_iterations=8, max_nodes=5_000)  # work: the same search at any load


def _x64(family: str) -> bool:
    return family in X64_FAMILIES


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_random_programs_optimize_to_equivalent_programs(family):
    @FUZZ
    @given(programs(family))
    def check(program):
        result = eqsat.optimize(program, limits=LIMITS)
        validate(program, result.program, compile=False, rules_fired=sorted(result.report.rules_fired))

    with jax.enable_x64(_x64(family)):
        check()


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_random_jax_functions_match_jax_jit(family):
    @FUZZ
    @given(jax_functions(family))
    def check(case):
        fn, args = case
        want = jax.jit(fn)(*args)
        jitted = eqsat.jit(fn, limits=LIMITS)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. "extraction found nothing cheaper"
            got = jitted(*args)
        (result,) = jitted.results.values()
        fired = result.report.rules_fired
        exact = all(r.exact for r in select(list(fired)))
        program = eqsat.from_jax(fn, *args)
        dtype = loosest(*path_dtypes(program))
        for i, (r, a, b) in enumerate(zip(reference(program)(*args), want, got, strict=True)):
            problem = judge(r, a, b, dtype, strict=exact)
            assert problem is None, f"output {i}: {problem}; rules fired: {sorted(fired)}"

    with jax.enable_x64(_x64(family)):
        check()


GRADIENT_EXAMPLES = settings(FUZZ, max_examples=max(1, EXAMPLES // 3))


@pytest.mark.parametrize("family", ["float32", "half", "float64"])
def test_random_jax_functions_differentiate_as_jax_jit(family):
    """The gradient of the optimized program (``gradient="optimized"``) against jax.jit's, both judged
    against the gradient of the function evaluated in float64 (its casts kept): eqsat's may not be
    further from it than jax.jit's beyond the dtype's tolerance and, where jax.jit's is beyond it
    too, the gradient's sensitivity at this input (``_sensitivity``). Entries at an infinite or NaN
    input are left out: no derivative exists there, and what JAX returns is its tie convention
    (max(-inf, -inf) gives each side half), which a rule like ``max-with-neg-inf`` need not keep."""

    @GRADIENT_EXAMPLES
    @given(jax_functions(family), st.integers(0, 2**16))
    def check(case, seed):
        fn, (*arrays, s) = case
        rng = np.random.default_rng(seed)
        cotangents = [rng.normal(size=o.shape).astype(o.dtype) for o in fn(*arrays, s)]

        def loss(f, *xs):
            return sum(jnp.sum(o.astype(jnp.float32) * c) for o, c in zip(f(*xs, s), cotangents, strict=True))

        argnums = tuple(range(len(arrays)))
        want = jax.jit(jax.grad(lambda *xs: loss(fn, *xs), argnums))(*arrays)
        jitted = eqsat.jit(fn, limits=LIMITS, gradient="optimized")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = jax.jit(jax.grad(lambda *xs: loss(jitted, *xs), argnums))(*arrays)
        (result,) = jitted.results.values()
        dtype = loosest(*path_dtypes(result.original))
        with jax.enable_x64(True):
            wide = [jnp.asarray(a, jnp.float64) for a in arrays]
            reference = jax.grad(lambda *xs: loss(fn, *xs), argnums)(*wide)
            spreads = _sensitivity(lambda *xs: loss(fn, *xs), wide, reference, dtype, rng)
        for i, (x, r, a, b) in enumerate(zip(arrays, reference, want, got, strict=True)):
            r, a, b = (_at_finite(x, np.asarray(g)) for g in (r, a, b))
            problem = judge(r, a, b, dtype, strict=False, spread=spreads[i])
            assert problem is None, (
                f"gradient {i}: {problem}; rules fired: {sorted(result.report.rules_fired)}"
            )

    with jax.enable_x64(_x64(family)):
        check()


def _sensitivity(
    f: Callable[..., Any], wide: list[Any], reference: tuple[Any, ...], dtype: str, rng: np.random.Generator
) -> list[float]:
    """How far each float64 gradient of ``f`` moves when its arguments and the constants it closes over
    move by the tolerance of ``dtype`` (each element up or down at random; the larger of two draws):
    the gradient's sensitivity to roundings at this input. A softmax's gradient cancels its
    cotangents, so of cotangents of 1e4 two orders of float32 roundings keep different digits. Where
    a gradient moves to inf or NaN, it grants nothing."""
    converted, constants = jax.closure_convert(f, *wide)

    def nudged(a: Any) -> Any:
        if not jnp.issubdtype(a.dtype, jnp.floating):
            return a
        signs = rng.choice([-1.0, 1.0], size=a.shape)
        return jnp.asarray(np.asarray(a, np.float64) * (1.0 + tolerance(dtype) * signs), a.dtype)

    spreads = [0.0] * len(wide)
    argnums = tuple(range(len(wide)))
    for _ in range(2):
        gradients = jax.grad(converted, argnums)(*map(nudged, wide), *map(nudged, constants))
        for i, (x, r, g) in enumerate(zip(wide, reference, gradients, strict=True)):
            with np.errstate(invalid="ignore"):  # inf - inf
                moved = np.abs(_at_finite(x, np.asarray(r)) - _at_finite(x, np.asarray(g)))
            spreads[i] = max(spreads[i], float(np.max(np.where(np.isfinite(moved), moved, 0.0), initial=0.0)))
    return spreads


def _at_finite(x: jax.Array, gradient: np.ndarray) -> np.ndarray:
    """``gradient`` with 0 where ``x`` is not finite (where no derivative exists)."""
    return np.where(np.isfinite(np.asarray(x, np.float64)), gradient, np.zeros((), gradient.dtype))


def test_a_deep_program_optimizes():
    program = deep_program(2000)
    result = eqsat.optimize(program)
    validate(program, result.program, rules_fired=sorted(result.report.rules_fired))
    assert len(result.program.live_ops()) <= len(program.live_ops())
