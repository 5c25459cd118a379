"""The runner (``eqsat.saturate``): every theme saturates on what its rules rewrite."""

from __future__ import annotations

import warnings

import pytest

import eqsat
from eqsat import Limits
from eqsat.rules import ALL_RULES, RULESETS
from eqsat.verify import example_programs

# themes of rules that only grow the e-graph for proofs: they are not meant to saturate
_GROWING = {"axioms"}


@pytest.mark.slow
@pytest.mark.parametrize("theme", sorted(set(RULESETS) - _GROWING))
def test_every_theme_saturates_on_its_own_examples(theme):
    """Each rule's example, optimized with its theme alone (off-by-default rules included), reaches a
    fixpoint well inside the iteration limit: no rule of a theme undoes another's work forever."""
    limits = Limits(max_iterations=30, max_nodes=20_000, timeout_s=60)
    for rule in (r for r in ALL_RULES if r.theme == theme):
        for program in example_programs(rule):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                result = eqsat.optimize(program, rules=[theme], limits=limits, cache=False, progress=False)
            assert result.report.saturated, f"{rule.name}'s example: {result.report.stop_reason}\n{program}"
