"""How eqsat writes egglog text, the one layer that does (with ``eqsat.rules.terms``, its typed
constructors): literals, vectors, s-expressions, commands, the rulesets' names and the analysis
relations rules guard on (``constant-weight``, ``constant-value``, ``parameter-value``). It imports
nothing of eqsat's, so every layer above may write through it (a test holds the others to it)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import Any

ANALYSIS = "analysis"
REWRITES = "rewrites"


class Term(str):
    """egglog text of a tensor (or a list of them): a pattern variable or a constructor's application."""

    __slots__ = ()


class Fact(str):
    """egglog text of a guard or an action: a fact a rule's left side checks, or what it does."""

    __slots__ = ()


def literal(value: Any) -> str:
    """An attribute value as an egglog literal: a tuple a vector, NaN and inf spelled as egglog does,
    a string quoted, an int or a bool a number."""
    if isinstance(value, tuple):
        return vec(value)
    if isinstance(value, float):
        return "NaN" if math.isnan(value) else repr(value).replace("e+", "e")
    if isinstance(value, str):
        return json.dumps(value)
    return str(int(value))


def render(x: object) -> str:
    """``x`` as egglog text: a string (a variable, a term) or an expression as it is, a number or a
    tuple a literal."""
    return literal(x) if isinstance(x, int | float | tuple) else str(x)


def negative_zero(value: object) -> bool:
    """``value`` is -0.0 (which egglog's f64 equates with 0.0)."""
    return isinstance(value, float) and value == 0.0 and math.copysign(1.0, value) < 0


def app(head: str, *args: object) -> str:
    """The s-expression ``(head args...)``."""
    return f"({' '.join([head, *map(render, args)])})"


def vec(items: Iterable[object]) -> str:
    """An egglog vector of ints (``IVec``)."""
    texts = [render(i) for i in items]
    return app("vec-of", *texts) if texts else app("vec-empty")


def tlist(items: Iterable[str]) -> Term:
    """A TList of tensor terms."""
    out = app("TNil")
    for item in reversed(list(items)):
        out = app("TCons", item, out)
    return Term(out)


# Commands.
def let(name: str, value: str) -> str:
    """Bind the global ``name`` to the term ``value``."""
    return app("let", name, value)


def set_to(function: object, value: object) -> Fact:
    """Action: the function application ``function`` (``(shape t)``) takes ``value``."""
    return Fact(app("set", function, value))


def union(a: str, b: str) -> Fact:
    """Action: ``a`` and ``b`` are the same value."""
    return Fact(app("union", a, b))


def equal(a: object, b: object) -> Fact:
    """Fact: ``a`` and ``b`` are equal."""
    return Fact(app("=", a, b))


def rule_command(facts: Iterable[str], actions: Iterable[str], ruleset: str, name: str | None = None) -> str:
    """A rule: where every fact holds, do the actions."""
    named = f' :name "{name}"' if name is not None else ""
    return f"(rule ({' '.join(facts)}) ({' '.join(actions)}) :ruleset {ruleset}{named})"


def rewrite_command(lhs: str, rhs: str, when: Iterable[str], ruleset: str, name: str) -> str:
    """``lhs -> rhs`` if every fact in ``when`` holds."""
    facts = " ".join(when)
    guard = f" :when ({facts})" if facts else ""
    return f'(rewrite {lhs} {rhs}{guard} :ruleset {ruleset} :name "{name}")'


# Schedules.
def saturated(*rulesets: str) -> str:
    """Command: run each of ``rulesets`` in turn to saturation."""
    return app("run-schedule", *(app("saturate", r) for r in rulesets))


ANALYSE = saturated(ANALYSIS)  # the analysis to saturation


def back_off(name: str, match_limit: int, ban_length: int) -> str:
    """Command: ``name`` is a back-off scheduler with these limits."""
    return app("let-scheduler", name, app("back-off", ":match-limit", match_limit, ":ban-length", ban_length))


def iteration(scheduler: str) -> str:
    """Command: one iteration of the rewrites under ``scheduler``, then the analysis to saturation."""
    return app("run-schedule", app("run-with", scheduler, REWRITES), app("saturate", ANALYSIS))


def _analysis_rule(facts: Iterable[str], action: str) -> str:
    return rule_command(facts, (action,), ANALYSIS)


_INPUT, _FULL = app("Input", "n"), app("Full", "s", "v", "d")  # a leaf: an input, a constant fill
# Helper relations some rules need (installed with them, as their prelude), filled by the analysis.
# ``(constant-weight w)``: w is a leaf (a parameter, an input) or a constant fill, not a computed value.
CONSTANT_WEIGHT = (
    app("relation", "constant-weight", "(Tensor)"),
    *(_analysis_rule([equal("w", leaf)], app("constant-weight", "w")) for leaf in (_INPUT, _FULL)),
)


def _closure(relation: str, leaves: tuple[str, ...], other: str) -> tuple[str, ...]:
    """``(relation t)`` for the leaf patterns, and through reshapes, casts, roots and arithmetic: a
    unary op of a term in the relation, a binary op of one (either side) and a term in ``other``."""
    holds = app(relation, "t")
    facts = [_analysis_rule([equal("t", leaf)], holds) for leaf in leaves]
    facts += [
        _analysis_rule([equal("t", term), app(relation, "a")], holds)
        for term in (app("Reshape", "a", "s"), app("Cast", "a", "s"), app("Sqrt", "a"), app("Rsqrt", "a"))
    ]
    facts += [
        _analysis_rule([equal("t", app(op, x, y)), app(relation, "a"), app(other, "b")], holds)
        for op in ("Add", "Sub", "Mul", "Div")
        for x, y in (("a", "b"), ("b", "a"))
    ]
    return (app("relation", relation, "(Tensor)"), *facts)


# ``(constant-value t)``: t is computed from leaves (parameters, constants) only: folding it into a
# weight costs nothing at run time.
CONSTANT_VALUE = _closure("constant-value", (_INPUT, _FULL), "constant-value")
# ``(parameter-value t)``: t is computed from leaves only, at least one of them a parameter or input
# (not from constant fills alone: a product of two literals such as 1e-30 * 1e-30 can underflow, which
# the rules on literals guard by their magnitude).
PARAMETER_VALUE = (*CONSTANT_VALUE, *_closure("parameter-value", (_INPUT,), "constant-value"))
