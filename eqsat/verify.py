"""Correctness checks: every rule numerically (``check_rule``), every optimization end to end
(``validate``: original vs optimized on random inputs).

``check_rule`` instantiates a rule's left-hand side from its example bindings, lets egglog apply the
rule (so guards, computed attributes and the shape analysis are exercised exactly as in optimization),
then evaluates every term now in the root e-class with JAX and compares it with the left-hand side.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from eqsat.cost import NodeCount
from eqsat.egraph import Encoding, Serialized, decode, literal, new_egraph
from eqsat.errors import EqsatError, MiscompileError
from eqsat.extract import greedy_dag
from eqsat.ir import Program, TensorType, Value
from eqsat.rules import Rule
from eqsat.saturate import install

_TOKEN = re.compile(r"[()\s]+|[^()\s]+")
_TOLERANCE = {"float16": 2e-2, "bfloat16": 5e-2, "float32": 1e-5, "float64": 1e-9}


def tolerance(dtype: str) -> float:
    """Relative and absolute tolerance used when comparing results of ``dtype``."""
    return _TOLERANCE.get(dtype, 0.0)


def random_array(t: TensorType, rng: np.random.Generator, scale: float = 1.0) -> np.ndarray:
    """Random data of type ``t``: normal floats times ``scale``, small ints, random bools."""
    if t.dtype == "bool":
        return rng.random(t.shape) < 0.5
    if t.dtype.startswith(("int", "uint")):
        return rng.integers(0, 100, t.shape).astype(t.dtype)
    data = rng.normal(size=t.shape) * scale
    return jax.numpy.asarray(data, dtype=t.dtype)


def _substitute(pattern: str, binding: dict[str, str]) -> str:
    return "".join(binding.get(tok, tok) for tok in _TOKEN.findall(pattern))


@dataclass
class RuleCheck:
    """The outcome of checking one rule: how many rewritten terms were compared, on which LHS."""

    rule: str
    compared: int
    lhs: list[str]


def _compare(a: Any, b: Any, dtype: str) -> float | None:
    """Max abs difference if ``a`` and ``b`` disagree beyond tolerance, else None.

    The tolerance is relative to the largest finite magnitude of the expected result: rewrites such as
    reassociation legitimately change rounding, and an element that cancels to near zero carries the
    absolute error of the whole sum.
    """
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.shape != y.shape:
        return float("inf")
    finite = np.isfinite(x)
    scale = 1.0 + (float(np.max(np.abs(x[finite]))) if finite.any() else 0.0)
    bound = tolerance(dtype) * scale
    same = (np.abs(x - y) <= bound) | (x == y) | (np.isnan(x) & np.isnan(y))
    return None if same.all() else float(np.nanmax(np.abs(x - y)))


def _evaluate(program: Program, args: Sequence[Any]) -> tuple[Any, ...]:
    from eqsat.lowering import lower

    return lower(program)(*args)


def check_rule(rule: Rule, seed: int = 0) -> RuleCheck:
    """Apply ``rule`` to its example and check every resulting term agrees with the LHS numerically.

    Raises :class:`MiscompileError` on disagreement and :class:`EqsatError` if the rule does not fire.
    """
    rng = np.random.default_rng(seed)
    bindings = rule.example(rng)
    program = Program()
    egg: dict[str, str] = {}
    cmds = []
    for name, value in bindings.items():
        if isinstance(value, TensorType):
            program.add_input(name, value)
            egg[name] = f"$in_{name}"
            cmds += [
                f'(let $in_{name} (Input "{name}"))',
                f"(set (shape $in_{name}) {literal(value.shape)})",
                f"(set (dtype $in_{name}) {literal(value.dtype)})",
            ]
        else:
            egg[name] = literal(value)
    leaves = {v.name: v for v in program.inputs if v.name}
    args = [random_array(v.type, rng) for v in program.inputs]
    instances = list(dict.fromkeys(v.roots for v in rule.variants))
    compared, fired = 0, False
    for roots in instances:
        n, grew = _check_instance(rule, roots, cmds, egg, leaves, program, args, bindings)
        compared, fired = compared + n, fired or grew
    if not fired:
        raise EqsatError(f"rule {rule.name} did not fire on its example {bindings}")
    return RuleCheck(rule.name, compared, [r for roots in instances for r in roots])


def _check_instance(
    rule: Rule,
    roots: tuple[str, ...],
    cmds: list[str],
    egg: dict[str, str],
    leaves: dict[str, Value],
    program: Program,
    args: list[Any],
    bindings: dict[str, Any],
) -> tuple[int, bool]:
    """Instantiate ``roots`` in one e-graph, apply the rule once, compare every term of each root class.

    Returns (terms compared, whether some root class gained a term).
    """
    names = [f"$root{k}" for k in range(len(roots))]
    egraph = new_egraph()
    lets = [f"(let {n} {_substitute(r, egg)})" for n, r in zip(names, roots, strict=True)]
    egraph.parse_and_run_program("\n".join([*cmds, *lets]))
    egraph.parse_and_run_program("(run-schedule (saturate analysis))")
    before = Serialized(egraph.serialize([]).to_json())
    if any(before.roots[n] not in before.types for n in names):
        return 0, False  # ill-typed for this example (another variant's rank or dtype): nothing to check
    choose = greedy_dag(before, NodeCount())
    expected = {
        n: _evaluate(decode(before, Encoding("", [n], leaves), choose, _shell(program)), args)[0]
        for n in names
    }
    install(egraph, [rule])
    egraph.parse_and_run_program("(run-schedule (saturate analysis) (run rewrites) (saturate analysis))")
    after = Serialized(egraph.serialize([]).to_json())
    best = greedy_dag(after, NodeCount())
    compared, grew = 0, False
    for n, pattern in zip(names, roots, strict=True):
        rc = after.roots[n]
        grew |= len(after.classes[rc]) > 1
        for node in after.classes[rc]:
            if any(rc in best.uses(c) for c in node.children if c in after.classes):
                continue  # a cycle through the root itself (x = f(x)): not a term
            rewritten = decode(
                after,
                Encoding("", [n], leaves),
                lambda c, node=node, rc=rc: node if c == rc else best(c),
                _shell(program),
            )
            got = _evaluate(rewritten, args)[0]
            diff = _compare(expected[n], got, rewritten.outputs[0].type.dtype)
            if diff is not None:
                raise MiscompileError(
                    f"rule {rule.name}: {pattern} rewrote to\n{rewritten}\nwhich differs by {diff:g} "
                    f"(example {bindings})"
                )
            compared += 1
    return compared, grew


def _shell(program: Program) -> Program:
    shell = Program(list(program.inputs), list(program.params))
    shell.output_names = ["out"]
    return shell


def validate(
    original: Program,
    optimized: Program,
    *,
    trials: int = 3,
    seed: int = 0,
    rules_fired: Sequence[str] = (),
    compile: bool = True,
) -> None:
    """Run both programs on random inputs (unit scale, then large magnitude) and compare every output.

    ``compile=False`` runs them op by op (faster for many small programs). Raises
    :class:`MiscompileError` naming the first differing output and the rules that fired.
    """
    from eqsat.lowering import lower

    rng = np.random.default_rng(seed)
    f, g = lower(original), lower(optimized)
    if compile:
        f, g = jax.jit(f), jax.jit(g)
    free = [p for p in original.params if p.name not in original.param_values]
    for trial in range(trials):
        scale = 1.0 if trial == 0 else 10.0 ** (trial + 1)
        args = [random_array(v.type, rng, scale) for v in [*original.inputs, *free]]
        want, got = f(*args), g(*args)
        for i, (a, b) in enumerate(zip(want, got, strict=True)):
            a_np = np.asarray(a, dtype=np.float64)
            b_np = np.asarray(b, dtype=np.float64)
            finite = np.isfinite(a_np) & np.isfinite(b_np)
            diff = _compare(
                np.where(finite, a_np, 0), np.where(finite, b_np, 0), original.outputs[i].type.dtype
            )
            mismatch_nonfinite = not np.array_equal(np.isfinite(a_np), np.isfinite(b_np))
            if diff is not None or (trial == 0 and mismatch_nonfinite):
                name = original.output_names[i]
                raise MiscompileError(
                    f"output {i} ({name}) differs (max abs diff {diff}, input scale {scale:g}); "
                    f"rules fired: {', '.join(rules_fired) or 'none'}"
                )
