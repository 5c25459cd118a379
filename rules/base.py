"""The rule format. Each rule has a name, a one-line reason, egglog patterns (written with the typed
constructors of ``eqsat.rules.terms``) and an example that ``eqsat.verify.check_rule`` instantiates on
random data to check both sides agree.

Pattern variables: tensors are bare names (``x``), attributes too (``p``); guards are facts over them
and the analyses ``shape_of(x)`` and ``dtype_of(x)``, written with ``rules/terms.py``'s helpers. A
rule whose attribute arithmetic depends on a rank (composing permutations) is generated once per
rank: one ``Rule``, several ``variants``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from eqsat.ir import Program, TensorType
from eqsat.ops import OPS
from eqsat.shapes import MAX_RANK
from eqsat.stacking import Alternative

from .terms import (
    Fact,
    Operand,
    Tensor,
    at_least,
    at_most,
    constructor,
    magnitude,
    rewrite_command,
    rule_command,
)

_HEAD = re.compile(r"\((\w+)")  # the head of each application in a term
_CTORS = frozenset(op.ctor for op in OPS.values())
_ARITY = {op.ctor: op.arity for op in OPS.values()}  # VARIADIC (negative) for a list of operands

# ``example(rng, **case)``: bindings for a rule's variables, by name or by ``Var``; a case (one of
# ``Rule.cases``) picks what the random example may not reach, such as one combination of the dtypes a
# rule keeps apart.
Example = Callable[..., Mapping[Any, Any]]  # keys: str | Var


@dataclass(frozen=True)
class Variant:
    """``lhs -> rhs`` if every fact in ``when`` holds."""

    lhs: Tensor
    rhs: Tensor
    when: tuple[Fact, ...] = ()

    @property
    def roots(self) -> tuple[str, ...]:
        return (self.lhs,)

    @property
    def writes(self) -> tuple[str, ...]:
        """The terms a match adds."""
        return (self.rhs,)

    def egglog(self, ruleset: str, name: str) -> str:
        return rewrite_command(self.lhs, self.rhs, self.when, ruleset, name)


@dataclass(frozen=True)
class MultiVariant:
    """A rule over several matched terms (``facts`` -> ``actions``, e.g. unions), such as merging two
    matmuls that share an input; ``roots`` are the terms its check instantiates."""

    facts: tuple[Fact, ...]
    actions: tuple[Fact, ...]
    roots: tuple[str, ...]

    @property
    def writes(self) -> tuple[str, ...]:
        """The terms a match adds."""
        return self.actions

    def egglog(self, ruleset: str, name: str) -> str:
        return rule_command(self.facts, self.actions, ruleset, name)


@dataclass(frozen=True)
class Proposal:
    """A rule over the whole program, for a match of any number of terms that a pattern would write by
    enumerating their orderings: ``propose(program)`` gives the alternatives to add to its e-graph
    (``eqsat.stacking.Alternative``); ``subject(bindings)`` builds the program of the rule's example."""

    propose: Callable[[Program], Sequence[Alternative]]
    subject: Callable[[dict[str, Any]], Program]


@dataclass(frozen=True)
class Rule:
    """A named rewrite ``lhs -> rhs`` (if ``when``), with its reason and a random example.

    ``example(rng)`` returns bindings for the variables of the LHS: a ``TensorType`` for each tensor
    variable, a Python value for each attribute variable, satisfying the guard.

    ``exact``: both sides give the same result in IEEE arithmetic for every input (given the same
    summation order inside a kernel). Inexact rules (reassociation, distribution, scale motion, a
    softmax computed blockwise) round differently; their guards keep them from turning finite
    results into inf, NaN or 0 (no half precision where a sum can overflow, constants of moderate
    magnitude), and ``select(["exact"])`` leaves them out.

    ``default``: on in ``optimize`` unless rules are chosen. Axioms that only grow the e-graph for
    proofs (commutativity, associativity) are off; ``select(["all"])`` and ``equivalent`` use them.

    ``cases``: keyword arguments of ``example``, each checked too (``check_rule(rule, case=...)``):
    e.g. every combination of the intermediate dtypes a fused op keeps, in half precision and float64.

    ``assumes``: what an inexact rule that regroups run-time data (no guard can see its values)
    assumes of them, as fast-math does: its check leaves out inputs of magnitudes far apart. Every other
    inexact rule is checked on them too (``eqsat.verify.EXTREME_KINDS``): its guards must hold.
    ``positive``: the example's tensors that are drawn nonnegative, as a variance is.
    ``proposal``: a rule over the whole program (no variants), applied as the program is loaded.
    """

    name: str
    reason: str
    variants: tuple[Variant | MultiVariant, ...]
    example: Example = field(compare=False, repr=False)
    theme: str = ""
    prelude: tuple[str, ...] = ()
    exact: bool = True
    default: bool = True
    cases: tuple[dict[str, Any], ...] = field(default=(), compare=False)
    assumes: str = ""
    positive: tuple[str, ...] = ()
    proposal: Proposal | None = field(default=None, compare=False)

    def bindings(self, rng: Any, **case: Any) -> dict[str, Any]:
        """Its example's bindings, by variable name."""
        return {str(name): value for name, value in self.example(rng, **case).items()}

    def constructs(self) -> frozenset[str]:
        """The op constructors (``Matmul``) of the e-nodes its matches can add."""
        return frozenset(
            name for v in self.variants for term in v.writes for name in _HEAD.findall(term) if name in _CTORS
        )

    @property
    def formulation(self) -> bool:
        """Whether it only computes an op another way: each variant rewrites one op into that op with
        other attributes (a conv's ``algorithm``), the same operands, nothing around it."""

        def ops(term: str) -> list[str]:
            return [name for name in _HEAD.findall(term) if name in _CTORS]

        def operands(term: str) -> list[str]:  # of a term of one op: its head's first ``arity`` words
            head, *words = term.strip("()").split()
            return words[: _ARITY[head]]

        def one_op(v: Variant | MultiVariant) -> bool:
            if not isinstance(v, Variant) or len(ops(v.lhs)) != 1 or ops(v.lhs) != ops(v.rhs):
                return False
            return _ARITY[ops(v.lhs)[0]] > 0 and operands(v.lhs) == operands(v.rhs)

        return bool(self.variants) and all(one_op(v) for v in self.variants)

    def egglog(self, ruleset: str) -> list[str]:
        many = len(self.variants) > 1
        return [
            v.egglog(ruleset, f"{self.name}#{i}" if many else self.name) for i, v in enumerate(self.variants)
        ]


def both_ways(lhs: Tensor, rhs: Tensor, *when: Fact) -> tuple[Variant, Variant]:
    """``lhs -> rhs`` and ``rhs -> lhs``, under the same guard."""
    return Variant(lhs, rhs, when), Variant(rhs, lhs, when)


def rule(
    name: str, reason: str, lhs: Tensor, rhs: Tensor, *when: Fact, example: Example, exact: bool = True
) -> Rule:
    """A rule with a single variant."""
    return Rule(name, reason, (Variant(lhs, rhs, when),), example, exact=exact)


# Constants a rule may create or move stay within 2**-20 .. 2**20 in magnitude: far from overflow and
# underflow in float32 and float64 for any reasonably scaled tensor.
MODERATE = 2.0**20


def moderate(c: Operand) -> tuple[Fact, ...]:
    """Guard facts: the f64 constant ``c`` (a variable or expression) is of moderate magnitude."""
    return at_most(magnitude(c), MODERATE), at_least(magnitude(c), 1 / MODERATE)


def per_rank(
    name: str,
    reason: str,
    make: Callable[[int], Variant],
    *,
    example: Example,
    ranks: Iterable[int] = range(1, MAX_RANK + 1),
) -> Rule:
    """A rule whose right-hand side depends on the rank: one variant per rank."""
    return Rule(name, reason, tuple(make(r) for r in ranks), example)


def rand_shape(rng: Any, rank: int, low: int = 1, high: int = 5) -> tuple[int, ...]:
    """A random shape for examples."""
    return tuple(int(d) for d in rng.integers(low, high, rank))


def rand_unit_axes(rng: Any, shape: tuple[int, ...], keep: float) -> tuple[int, ...]:
    """``shape`` with each axis kept with probability ``keep``, else 1: a shape that broadcasts to it."""
    return tuple(d if rng.random() < keep else 1 for d in shape)


def rand_perm(rng: Any, rank: int) -> tuple[int, ...]:
    return tuple(int(i) for i in rng.permutation(rank))


UNARY_ATTRS: dict[str, Any] = {"scale": {"scale": 0.5, "bias": 0.25}, "cast": {"dtype": "float16"}}


def example_dtype(op: str) -> str:
    """float32 for the example of ``op``, or int32 where its own dtype check refuses floats (and, or)."""
    spec = OPS[op]
    floats = [TensorType((1,), "float32")] * spec.arity
    return "float32" if spec.check is None or spec.check(floats, {}) is None else "int32"


def unary_pattern(op: str, inner: str) -> str:
    """``op`` of ``inner`` with each attribute a variable ``c_<name>`` (matching any value)."""
    return constructor(op)(inner, **{a.name: f"c_{a.name}" for a in OPS[op].attrs})
