"""The rule format. Each rule has a name, a one-line reason, egglog patterns
(over the constructors derived in ``eqsat.egraph``) and an example that ``eqsat.verify.check_rule``
instantiates on random data to check both sides agree.

Pattern variables: tensors are bare names (``x``), attributes too (``p``); guards are egglog facts over
them and the analyses ``(shape x)`` and ``(dtype x)``. A rule whose attribute arithmetic depends on a
rank (composing permutations) is generated once per rank: one ``Rule``, several ``variants``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from eqsat.shapes import MAX_RANK

Example = Callable[[Any], dict[str, Any]]


@dataclass(frozen=True)
class Variant:
    lhs: str
    rhs: str
    when: tuple[str, ...] = ()


@dataclass(frozen=True)
class Rule:
    """A named rewrite ``lhs -> rhs`` (if ``when``), with its reason and a random example.

    ``example(rng)`` returns bindings for the variables of the LHS: a ``TensorType`` for each tensor
    variable, a Python value for each attribute variable, satisfying the guard.
    """

    name: str
    reason: str
    variants: tuple[Variant, ...]
    example: Example = field(compare=False, repr=False)
    theme: str = ""

    def egglog(self, ruleset: str) -> list[str]:
        out = []
        for i, v in enumerate(self.variants):
            when = f" :when ({' '.join(v.when)})" if v.when else ""
            suffix = f"#{i}" if len(self.variants) > 1 else ""
            out.append(f'(rewrite {v.lhs} {v.rhs}{when} :ruleset {ruleset} :name "{self.name}{suffix}")')
        return out


def rule(name: str, reason: str, lhs: str, rhs: str, *when: str, example: Example) -> Rule:
    """A rule with a single variant."""
    return Rule(name, reason, (Variant(lhs, rhs, when),), example)


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


def vec(items: Iterable[str]) -> str:
    items = list(items)
    return f"(vec-of {' '.join(items)})" if items else "(vec-empty)"


def rand_shape(rng: Any, rank: int, low: int = 1, high: int = 5) -> tuple[int, ...]:
    """A random shape for examples."""
    return tuple(int(d) for d in rng.integers(low, high, rank))


def rand_perm(rng: Any, rank: int) -> tuple[int, ...]:
    return tuple(int(i) for i in rng.permutation(rank))
