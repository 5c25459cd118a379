"""How eqsat writes egglog text, below the e-graph that runs it: the rulesets' names, attribute values as
literals, operand lists, which ops are encoded opaque, and the analysis relations rules guard on
(``constant-weight``, ``constant-value``, ``parameter-value``). Rules and the e-graph both read it;
it reads only the ops and the IR."""

from __future__ import annotations

import json
import math
from typing import Any

from eqsat.ir import Op
from eqsat.ops import OPAQUE, OPS
from eqsat.shapes import MAX_RANK

ANALYSIS = "analysis"
REWRITES = "rewrites"


# Helper relations some rules need (installed with them, as their prelude), filled by the analysis.
# ``(constant-weight w)``: w is a leaf (a parameter, an input) or a constant fill, not a computed value.
CONSTANT_WEIGHT = (
    "(relation constant-weight (Tensor))",
    f"(rule ((= w (Input n))) ((constant-weight w)) :ruleset {ANALYSIS})",
    f"(rule ((= w (Full s v d))) ((constant-weight w)) :ruleset {ANALYSIS})",
)


def _closure(relation: str, leaves: tuple[str, ...], other: str) -> tuple[str, ...]:
    """``(relation t)`` for the leaf patterns, and through reshapes, casts, roots and arithmetic: a
    unary op of a term in the relation, a binary op of one (either side) and a term in ``other``."""
    facts = [f"(rule ((= t {leaf})) (({relation} t)) :ruleset {ANALYSIS})" for leaf in leaves]
    facts += [
        f"(rule ((= t {term}) ({relation} a)) (({relation} t)) :ruleset {ANALYSIS})"
        for term in ("(Reshape a s)", "(Cast a s)", "(Sqrt a)", "(Rsqrt a)")
    ]
    facts += [
        f"(rule ((= t ({op} {x} {y})) ({relation} a) ({other} b)) (({relation} t)) :ruleset {ANALYSIS})"
        for op in ("Add", "Sub", "Mul", "Div")
        for x, y in (("a", "b"), ("b", "a"))
    ]
    return (f"(relation {relation} (Tensor))", *facts)


# ``(constant-value t)``: t is computed from leaves (parameters, constants) only: folding it into a
# weight costs nothing at run time.
CONSTANT_VALUE = _closure("constant-value", ("(Input n)", "(Full s v d)"), "constant-value")
# ``(parameter-value t)``: t is computed from leaves only, at least one of them a parameter or input
# (not from constant fills alone: a product of two literals such as 1e-30 * 1e-30 can underflow, which
# the rules on literals guard by their magnitude).
PARAMETER_VALUE = (*CONSTANT_VALUE, *_closure("parameter-value", ("(Input n)",), "constant-value"))


def literal(value: Any) -> str:
    """An attribute value as an egglog literal."""
    if isinstance(value, tuple):
        return f"(vec-of {' '.join(map(str, value))})" if value else "(vec-empty)"
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        return repr(value).replace("e+", "e")
    if isinstance(value, str):
        return json.dumps(value)
    return str(int(value))


def negative_zero(value: Any) -> bool:
    """``value`` is -0.0 (which egglog's f64 equates with 0.0)."""
    return isinstance(value, float) and value == 0.0 and math.copysign(1.0, value) < 0


def needs_opaque(op: Op) -> bool:
    """Encoded as opaque: canonical ops whose rank-dependent rules were not generated, and ops with a
    -0.0 attribute (egglog's f64 equates -0.0 with 0.0, so the sign of zero would be lost)."""
    if op.name == OPAQUE:
        return True
    spec = OPS[op.name]
    ranks = [v.type.rank for v in (*op.inputs, *op.outputs)]
    if spec.shape.rank_bounded and max(ranks, default=0) > MAX_RANK:
        return True
    return op.name != "full" and any(negative_zero(v) for v in op.attrs.values())


def tlist(names: list[str]) -> str:
    """A TList of tensor terms."""
    out = "(TNil)"
    for n in reversed(names):
        out = f"(TCons {n} {out})"
    return out
