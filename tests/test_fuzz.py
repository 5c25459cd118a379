"""Random programs through the whole optimizer: every result must compute what the input computes.

``make fuzz`` runs thousands (EQSAT_FUZZ_EXAMPLES); CI runs 200 per run.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings

import eqsat
from eqsat import Limits
from eqsat.verify import validate
from tests.strategies import programs

EXAMPLES = int(os.environ.get("EQSAT_FUZZ_EXAMPLES", "200"))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_random_programs_optimize_to_equivalent_programs(program):
    result = eqsat.optimize(program, limits=Limits(max_iterations=8, timeout_s=2.0))
    validate(program, result.program, trials=2, compile=False, rules_fired=sorted(result.report.rules_fired))
