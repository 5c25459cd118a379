"""Every rule is instantiated on random shapes and data; both sides must agree (and the rule must fire)."""

from __future__ import annotations

import pytest

from eqsat import EqsatError, MiscompileError
from eqsat.ir import TensorType
from eqsat.rules import ALL_RULES, RULESETS, select
from eqsat.rules.base import rule
from eqsat.verify import check_rule


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.name)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rule_is_numerically_sound(rule, seed):
    result = check_rule(rule, seed)
    assert result.compared >= 1


@pytest.mark.parametrize("rule", ALL_RULES, ids=lambda r: r.name)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int8"])
def test_rule_is_sound_in_half_precision_and_integers(rule, dtype):
    """Where a rule's guard admits the dtype it must hold there too (check_rule raises otherwise).
    Every exact rule applies in half precision (its meaning does not depend on the dtype); the
    inexact rules that reassociate or move scales do not (their guards ask for float32/float64, or
    for integers, where sums are a ring); no scale is ever made for integers."""
    result = check_rule(rule, seed=3, dtype=dtype)
    if dtype in ("float16", "bfloat16") and (rule.exact or rule.name in _WIDE_ONLY):
        assert result.fired == rule.exact
    if dtype == "int8" and rule.name.startswith("scalar-"):
        assert not result.fired


_WIDE_ONLY = ("matmul-assoc", "scale-compose", "scale-through-matmul", "matmul-distribute", "add-assoc")


def test_every_rule_has_a_name_reason_and_theme():
    names = [r.name for r in ALL_RULES]
    assert len(names) == len(set(names))
    assert all(r.reason and r.theme in RULESETS for r in ALL_RULES)


def _example(rng):
    return {"x": TensorType((3, 4), "float32")}


def test_a_wrong_rule_is_caught():
    wrong = rule("exp-is-relu", "deliberately wrong", "(Exp x)", "(Relu x)", example=_example)
    with pytest.raises(MiscompileError, match="exp-is-relu"):
        check_rule(wrong)


def test_a_rule_that_never_fires_is_caught():
    idle = rule("never", "guard never holds", "(Exp x)", "(Relu x)", '(= (dtype x) "int8")', example=_example)
    with pytest.raises(EqsatError, match="did not fire"):
        check_rule(idle)


def test_select_by_theme_and_name():
    assert select(["cast"]) == RULESETS["cast"]
    assert [r.name for r in select(["reshape-compose"])] == ["reshape-compose"]
    with pytest.raises(KeyError, match="unknown rule"):
        select(["nope"])


CASES = [(r, i) for r in ALL_RULES for i in range(len(r.cases))]


@pytest.mark.parametrize(("rule", "case"), CASES, ids=[f"{r.name}-{i}" for r, i in CASES])
def test_rule_is_sound_in_every_case_it_lists(rule, case):
    """Rules that keep intermediate dtypes apart (attention's scores and softmax) are checked in each
    combination, half precision and float64 included."""
    assert check_rule(rule, seed=4, case=rule.cases[case]).compared >= 1
