"""Rules written in Python (``eqsat.rule``): traced into patterns, checked before use, run beside the
built-in rules; unsound ones refused with a counterexample."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import eqsat
from eqsat import TensorType as T

F32 = "float32"


def _exp_product() -> eqsat.rules.Rule:
    return eqsat.rule(
        "exp-product",
        "exp(x) * exp(y) = exp(x + y): one exp instead of two",
        lhs=lambda x, y: jnp.exp(x) * jnp.exp(y),
        rhs=lambda x, y: jnp.exp(x + y),
        example=[T((2, 3), F32)] * 2,
    )


def _ops(program: eqsat.Program) -> list[str]:
    return [op.name for op in program.live_ops()]


def test_a_python_rule_runs_beside_the_built_in_rules():
    rule = _exp_product()
    program = eqsat.from_jax(
        lambda a, b: jnp.tanh(jnp.exp(a) * jnp.exp(b)), jnp.ones((4, 5, 6)), jnp.ones((4, 5, 6))
    )
    plain = eqsat.optimize(program)
    assert _ops(plain.program).count("exp") == 2
    result = eqsat.optimize(program, rules=["default", rule], verify=True)
    assert "exp-product" in result.report.rules_fired
    assert (
        _ops(result.program).count("exp") == 1
    )  # other sizes and rank than the example: the rule is elementwise


def test_an_unsound_rule_is_refused_with_a_counterexample_that_shows_it():
    with pytest.raises(eqsat.UnsoundRuleError) as caught:
        eqsat.rule(
            "sub-commute",
            "wrong on purpose",
            lhs=lambda x, y: x - y,
            rhs=lambda x, y: y - x,
            example=[T((3,), F32)] * 2,
        )
    err = caught.value
    assert "sub-commute is refused" in str(err) and "x = " in str(err)
    x, y = err.inputs["x"], err.inputs["y"]
    np.testing.assert_allclose(err.lhs, x - y)
    np.testing.assert_allclose(err.rhs, y - x)
    assert not np.allclose(x - y, y - x)


def test_an_exact_rule_is_also_checked_on_inf_and_nan():
    # max(x, x) = x holds on NaN too; x * 0 = 0 does not (inf * 0 is NaN): refused only when exact.
    eqsat.rule(
        "max-self",
        "idempotent",
        lhs=lambda x: jnp.maximum(x, x),
        rhs=lambda x: x,
        example=[T((4, 3), F32)],
        exact=True,
    )
    zero = {"lhs": lambda x: x * 0.0, "rhs": lambda x: jnp.zeros_like(x), "example": [T((4, 3), F32)]}
    eqsat.rule("times-zero", "fast-math", **zero)
    with pytest.raises(eqsat.UnsoundRuleError, match="special inputs"):
        eqsat.rule("times-zero", "claimed exact", exact=True, **zero)


def test_sizes_become_shape_expressions_and_the_rule_applies_at_other_sizes():
    linear = eqsat.rule(
        "my-linear",
        "x @ w + b is one linear",
        lhs=lambda x, w, b: x @ w + b,
        rhs=eqsat.Built(lambda bld, x, w, b: bld.linear(x, w, b)),
        example=[T((2, 3), F32), T((3, 5), F32), T((5,), F32)],
    )
    (variant,) = linear.variants
    assert "(vec-get w_shape 1)" in variant.egglog("r", "my-linear")  # the bias reshape's target
    program = eqsat.from_jax(lambda x, w, b: x @ w + b, jnp.ones((7, 4)), jnp.ones((4, 9)), jnp.ones(9))
    result = eqsat.optimize(program, rules=[linear], verify=True)
    assert "my-linear" in result.report.rules_fired
    assert _ops(result.program) == ["linear"]


def test_a_size_that_is_a_product_keeps_the_example_shapes():
    total = eqsat.rule(
        "sum-of-flat",
        "summing the flattened tensor is summing over every axis",
        lhs=lambda x: jnp.sum(x.reshape(-1)),
        rhs=lambda x: jnp.sum(x),
        example=[T((2, 3), F32)],
    )
    assert "(= x_shape (vec-of 2 3))" in total.variants[0].egglog("r", "sum-of-flat")
    for shape, fires in (((2, 3), True), ((4, 5), False)):
        program = eqsat.from_jax(lambda x: jnp.sum(x.reshape(-1)), jnp.ones(shape))
        result = eqsat.optimize(program, rules=[total])
        assert ("sum-of-flat" in result.report.rules_fired) is fires


@pytest.mark.slow
def test_several_spellings_and_examples_make_variants_and_dtypes_carry_over():
    fma = eqsat.rule(
        "my-fma",
        "x*y + z and z + x*y are one fma",
        lhs=[lambda x, y, z: x * y + z, lambda x, y, z: z + x * y],
        rhs=eqsat.Built(lambda bld, x, y, z: bld.fma(x, y, z)),
        examples=[[T((3, 4), F32)] * 3, [T((3, 4), "bfloat16")] * 3],
    )
    assert len(fma.variants) == 4
    program = eqsat.from_jax(lambda x, y, z: z + x * y, *(jnp.ones((2, 2, 2), jnp.bfloat16),) * 3)
    assert "my-fma" in eqsat.optimize(program, rules=[fma]).report.rules_fired


def test_sides_that_cannot_be_patterns_are_clear_errors():
    table = jnp.arange(6.0)
    with pytest.raises(eqsat.UnsupportedError, match="constant array"):
        eqsat.rule("c", "r", lhs=lambda x: x + table, rhs=lambda x: table + x, example=[T((6,), F32)])
    with pytest.raises(eqsat.UnsupportedError, match="the rhs reads y, which the lhs does not"):
        eqsat.rule("u", "r", lhs=lambda x, y: x, rhs=lambda x, y: x + y - y, example=[T((6,), F32)] * 2)
    with pytest.raises(eqsat.EqsatError, match="taken by a built-in rule"):
        eqsat.rule(
            "add-commute", "r", lhs=lambda x, y: x + y, rhs=lambda x, y: y + x, example=[T((6,), F32)] * 2
        )
    with pytest.raises(eqsat.EqsatError, match="example"):
        eqsat.rule("e", "r", lhs=lambda x: x, rhs=lambda x: x)


def test_a_python_rule_proves_what_the_built_in_rules_cannot():
    f = lambda a, b: jnp.exp(a) * jnp.exp(b)  # noqa: E731
    g = lambda a, b: jnp.exp(a + b)  # noqa: E731
    args = (jnp.ones((3, 3)), jnp.ones((3, 3)))
    assert not eqsat.equivalent(f, g, *args)
    proof = eqsat.equivalent(f, g, *args, rules=["default", _exp_product()])
    assert proof.proven and proof.rules == ("exp-product",)


def test_the_built_in_axioms_written_as_functions_keep_their_guards():
    rules = {r.name: r for r in eqsat.rules.RULESETS["axioms"]}
    commute = rules["add-commute"].variants[0].egglog("r", "add-commute")
    assert "(= y_shape x_shape)" in commute and "vec-length" not in commute  # one shape, any rank
    assoc = rules["add-assoc"].variants[0].egglog("r", "add-assoc")
    assert "(reassociable (dtype x))" in assoc and len(rules["add-assoc"].variants) == 2


def test_sides_of_different_shapes_are_refused_before_egglog_sees_them():
    with pytest.raises(eqsat.UnsoundRuleError, match="shape"):
        eqsat.rule(
            "wrong-axis", "r", lhs=lambda x: x.sum(0), rhs=lambda x: x.sum(1), example=[T((3, 5), F32)]
        )


def test_parameters_named_like_the_analyses_still_make_patterns():
    made = eqsat.rule(
        "renamed", "r", lhs=lambda shape: shape * 2.0, rhs=lambda shape: shape + shape, example=[T((4,), F32)]
    )
    assert "(shape arg0)" in made.variants[0].egglog("r", "renamed")
