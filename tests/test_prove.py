"""Proofs of equivalence: TASO's rewrite rules proven by saturation, explanations whose rules are each
needed, honest "not proven", the CLI, and the axioms off by default in optimize."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest

import eqsat
from eqsat.cli import main
from eqsat.rules import RULESETS, select
from eqsat.rules.base import rule
from eqsat.saturate import NODE_SLACK

TASO = Path(__file__).parent / "data" / "taso_rules"


def _taso(file: str, conv: bool = False) -> list[dict[str, Any]]:
    """TASO's rules that use no conv (or, with ``conv``, those that do), each as {vars, lhs: [exprs],
    rhs: [exprs]} (two-output rules are stored as consecutive entries, one per output)."""
    entries = json.loads((TASO / file).read_text())
    groups = (
        [entries[i : i + 2] for i in range(0, len(entries), 2)] if "multi" in file else [[e] for e in entries]
    )
    rules = []
    for group in groups:
        if any("conv" in e["rule"] for e in group) != conv:
            continue
        variables = {k: v for e in group for k, v in e["vars"].items()}
        rules.append(
            {"vars": variables, "lhs": [e["lhs_jax"] for e in group], "rhs": [e["rhs_jax"] for e in group]}
        )
    return rules


def _function(names: list[str], exprs: list[str]):
    return eval(f"lambda {', '.join(names)}: ({', '.join(exprs)},)", {"jnp": jnp, "jax": jax, "lax": jax.lax})


def _proved(rules: list[dict[str, Any]]) -> list[bool]:
    out = []
    for r in rules:
        names = list(r["vars"])
        args = [jnp.zeros(r["vars"][n], jnp.float32) for n in names]
        out.append(bool(eqsat.equivalent(_function(names, r["lhs"]), _function(names, r["rhs"]), *args)))
    return out


@pytest.mark.parametrize(
    ("file", "count"), [("converted_as_programs.json", 86), ("converted_multi_as_programs.json", 7)]
)
def test_taso_rules_are_proven_by_saturation(file, count):
    rules = _taso(file)
    assert len(rules) == count
    proved = _proved(rules)
    print(f"{file}: {sum(proved)}/{len(proved)} TASO rules without conv proven")
    assert sum(proved) >= 0.95 * len(proved)


@pytest.mark.parametrize(
    ("file", "count"), [("converted_as_programs.json", 34), ("converted_multi_as_programs.json", 6)]
)
def test_taso_conv_rules_are_proven_by_saturation(file, count):
    rules = _taso(file, conv=True)
    assert len(rules) == count
    proved = _proved(rules)
    print(f"{file}: {sum(proved)}/{len(proved)} TASO rules with conv proven")
    assert sum(proved) >= 0.9 * len(proved)


def _args(*shapes):
    return [jnp.zeros(s, jnp.float32) for s in shapes]


def test_the_explanation_lists_rules_each_of_which_is_needed():
    def f(x, y, z):
        return jnp.concatenate([x + y, z * y], axis=1)

    def g(x, y, z):
        return jnp.concatenate([y + x, y * z], axis=1)

    args = _args((2, 3), (2, 3), (2, 3))
    proof = eqsat.equivalent(f, g, *args)
    assert proof and set(proof.rules) == {"add-commute", "mul-commute"}
    assert "add-commute" in str(proof) and "iteration 1" in str(proof)
    for name in proof.rules:
        fewer = [r for r in select(["all"]) if r.name != name]
        assert not eqsat.equivalent(f, g, *args, rules=fewer)


def test_not_proven_is_never_not_equal():
    args = _args((3,), (3,))
    result = eqsat.equivalent(lambda x, y: x + y, lambda x, y: x * y, *args)
    assert not result
    assert str(result).startswith("not proven: saturation stopped (saturated)")
    different = eqsat.equivalent(lambda x, y: x + y, lambda x, y: (x + y)[:2], *args)
    assert not different and "output 0 is" in different.reason


def test_the_same_program_needs_no_rule_and_different_inputs_are_an_error():
    args = _args((3,), (3,))
    same = eqsat.equivalent(lambda x, y: x + y, lambda x, y: x + y, *args)
    assert same and same.rules == ()
    a = eqsat.from_jax(lambda x: x, *_args((3,)))
    b = eqsat.from_jax(lambda x: x, *_args((4,)))
    with pytest.raises(eqsat.ShapeError, match="different inputs"):
        eqsat.equivalent(a, b)


def test_cli_prove(tmp_path, capsys):
    first, second, third = (tmp_path / f"{n}.txt" for n in "abc")
    args = _args((2, 2), (2, 2))
    first.write_text(str(eqsat.from_jax(lambda x, y: jax.nn.relu(x) * y, *args)))
    second.write_text(str(eqsat.from_jax(lambda x, y: y * jax.nn.relu(x), *args)))
    third.write_text(str(eqsat.from_jax(lambda x, y: y + jax.nn.relu(x), *args)))
    assert main(["prove", str(first), str(second)]) == 0
    assert "proven equal" in capsys.readouterr().out
    assert main(["prove", str(first), str(third)]) == 1
    assert "not proven" in capsys.readouterr().out


def test_axioms_are_off_by_default_and_on_with_all():
    axioms = {r.name for r in RULESETS["axioms"]}
    assert axioms.isdisjoint(r.name for r in select())
    assert axioms <= {r.name for r in select(["all"])}


def test_a_program_optimizes_within_the_limits_with_every_rule_on():
    def attention(q, k, v):
        return jax.nn.softmax(q @ k.T / 8.0, axis=-1) @ v

    program = eqsat.from_jax(attention, *_args((64, 32), (64, 32), (64, 32)))
    limits = eqsat.Limits(max_nodes=3000, timeout_s=120.0)  # the node limit bounds it, not the load
    default = eqsat.optimize(program, limits=limits)
    every = eqsat.optimize(program, rules=["all"], limits=limits, verify=True)
    assert every.report.saturation.iterations[-1].nodes <= NODE_SLACK * limits.max_nodes
    assert every.report.cost_after <= default.report.cost_after * 1.001


def test_a_rule_that_breaks_saturation_gives_not_proven_not_an_exception():
    def example(rng):
        return {"x": eqsat.TensorType((3, 4), "float32")}

    wrong = rule(
        "relu-is-a-sum", "deliberately wrong: two shapes", "(Relu x)", "(ReduceSum x 0 0)", example=example
    )
    result = eqsat.equivalent(jax.nn.relu, lambda x: x * 2.0, *_args((3, 4)), rules=[wrong])
    assert not result and result.reason.startswith("saturation failed")


def test_attention_written_two_ways_with_a_batch_of_one_is_proven():
    """Unit dims are canonicalized as optimize does, so the layouts libraries pick do not hide it."""
    scale = 8**-0.5

    def einsum_form(q, k, v):
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k) * scale
        return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, axis=-1), v)

    def matmul_form(q, k, v):
        qt, kt, vt = (x.transpose(0, 2, 1, 3) for x in (q, k, v))
        return (jax.nn.softmax((qt * scale) @ kt.swapaxes(-1, -2), -1) @ vt).transpose(0, 2, 1, 3)

    x = jnp.ones((1, 16, 2, 8))
    proof = eqsat.equivalent(einsum_form, matmul_form, x, x, x, rules=["default"])
    assert proof.proven, proof
    assert "scale-through-matmul" in proof.rules
