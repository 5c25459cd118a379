"""Random programs through the whole optimizer: every result must compute what the input computes.
Results are judged against the program as it reads (each op in float64, rounded to its dtype:
``eqsat.lowering.reference``), so that XLA's own liberties are not blamed on eqsat (``numerics.judge``).

Two generators: Programs built op by op (``programs``, per dtype family), and JAX functions as users
write them, run through ``eqsat.jit`` and ``jax.jit`` side by side (``jax_functions``). Each family
runs ``EQSAT_FUZZ_EXAMPLES`` examples (CI: 30; ``make fuzz``: 5,000 in all); float64 and 64-bit
integers run under ``jax.enable_x64``. A deep program (2,000 ops) must optimize too.
"""

from __future__ import annotations

import os
import warnings

import jax
import pytest
from hypothesis import HealthCheck, given, settings

import eqsat
from eqsat import Limits
from eqsat.lowering import reference
from eqsat.numerics import judge, loosest, path_dtypes
from eqsat.rules import select
from eqsat.verify import validate
from tests.strategies import FAMILIES, X64_FAMILIES, deep_program, jax_functions, programs

EXAMPLES = int(os.environ.get("EQSAT_FUZZ_EXAMPLES", "30"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
LIMITS = Limits(max_iterations=8, timeout_s=2.0)


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


def test_a_deep_program_optimizes():
    program = deep_program(2000)
    result = eqsat.optimize(program)
    validate(program, result.program, rules_fired=sorted(result.report.rules_fired))
    assert len(result.program.live_ops()) <= len(program.live_ops())
