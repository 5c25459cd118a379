"""The range analysis that guards constant folding, and the guards themselves.

Parameters with values start with their ranges (``eqsat.ranges``); ``RANGES`` carries them through
the arithmetic constants are computed by (interval arithmetic on the bounds, a product's and a
quotient's smallest nonzero magnitude from its operands'). A rule that folds constants together or
into weights states, with ``Magnitude``, what it creates, and ``in_range`` keeps it to
``2**-64 .. 2**64`` in magnitude: far inside the normal range of float32 and float64, so a folded
constant never overflows to inf nor underflows to 0 or a subnormal where the program as written did
not. A constant whose range is not known (a function argument, a NaN in it) is never folded.

egglog orders NaN above every float; a bound that is NaN (``inf * 0``) fails every guard.
"""

from __future__ import annotations

from dataclasses import dataclass

from eqsat.egglog_text import ANALYSIS, literal
from eqsat.ranges import HI, LO, TINY

from .terms import Add, Cast, Div, Expand, Full, Mul, Neg, Reshape, Rsqrt, Sqrt, Sub, Term, Transpose

LIMIT = 2.0**64
# Distributing a factor over an offset, (y - c1) * c2 = y * c2 - c1 * c2, cancels where y is near c1:
# bits lost are log2(|c1 * c2| / |result|); for results of order one (a normalization's) at most 10.
CANCELLATION = 2.0**10


def _min(*xs: str) -> str:
    out = xs[0]
    for x in xs[1:]:
        out = f"(min {out} {x})"
    return out


def _max(*xs: str) -> str:
    out = xs[0]
    for x in xs[1:]:
        out = f"(max {out} {x})"
    return out


def _set(t: str, lo: str, hi: str, tiny: str | None = None) -> str:
    sets = [f"(set ({LO} {t}) {lo})", f"(set ({HI} {t}) {hi})"]
    if tiny is not None:
        sets.append(f"(set ({TINY} {t}) {tiny})")
    return " ".join(sets)


def _rule(term: str, facts: str, actions: str) -> str:
    return f"(rule ((= t {term}) {facts}) ({actions}) :ruleset {ANALYSIS})"


_A = f"(= la ({LO} a)) (= ha ({HI} a)) (= ta ({TINY} a))"
_B = f"(= lb ({LO} b)) (= hb ({HI} b)) (= tb ({TINY} b))"
_PRODUCTS = ("(* la lb)", "(* la hb)", "(* ha lb)", "(* ha hb)")
_QUOTIENTS = ("(/ la lb)", "(/ la hb)", "(/ ha lb)", "(/ ha hb)")

RANGES: tuple[str, ...] = (
    _rule(Full(shape="s", value="v", dtype="d"), "(!= v 0.0)", _set("t", "v", "v", "(abs v)")),
    _rule(Full(shape="s", value="v", dtype="d"), "(= v 0.0)", _set("t", "v", "v", "inf")),
    *(
        _rule(term, _A, _set("t", "la", "ha", "ta"))
        for term in (Reshape("a", shape="s"), Expand("a", shape="s"), Transpose("a", perm="s"))
    ),
    _rule(Cast("a", dtype="d"), f"(wide-float d) {_A}", _set("t", "la", "ha", "ta")),
    _rule(Neg("a"), _A, _set("t", "(- 0.0 ha)", "(- 0.0 la)", "ta")),
    _rule(Add("a", "b"), f"{_A} {_B}", _set("t", "(+ la lb)", "(+ ha hb)")),
    _rule(Sub("a", "b"), f"{_A} {_B}", _set("t", "(- la hb)", "(- ha lb)")),
    _rule(Mul("a", "b"), f"{_A} {_B}", _set("t", _min(*_PRODUCTS), _max(*_PRODUCTS), "(* ta tb)")),
    _rule(
        Div("a", "b"),
        f"{_A} {_B} (> (* lb hb) 0.0)",  # b's range excludes 0
        _set("t", _min(*_QUOTIENTS), _max(*_QUOTIENTS), "(/ ta (max (abs lb) (abs hb)))"),
    ),
    _rule(Sqrt("a"), f"{_A} (>= la 0.0)", _set("t", "(sqrt la)", "(sqrt ha)", "(sqrt ta)")),
    _rule(
        Rsqrt("a"),
        f"{_A} (> la 0.0)",
        _set("t", "(/ 1.0 (sqrt ha))", "(/ 1.0 (sqrt la))", "(/ 1.0 (sqrt ha))"),
    ),
    # a range that excludes 0 bounds the nonzero magnitudes (a sum's, say)
    f"(rule ((= l ({LO} t)) (= h ({HI} t)) (> (* l h) 0.0)) ((set ({TINY} t) (min (abs l) (abs h)))) "
    f":ruleset {ANALYSIS})",
)


@dataclass(frozen=True)
class Magnitude:
    """egglog f64 expressions bounding a constant's magnitudes: ``|x| <= most`` and, where
    ``x != 0``, ``|x| >= least``; ``facts`` are what the bounds need to hold."""

    most: str
    least: str
    facts: tuple[str, ...] = ()

    @classmethod
    def of(cls, c: Term) -> Magnitude:
        """The magnitudes of the constant term ``c``, as the range analysis bounds them."""
        return cls(f"(max (abs ({LO} {c})) (abs ({HI} {c})))", f"({TINY} {c})")

    @classmethod
    def rsqrt_of_sum(cls, v: Term, eps: Term) -> Magnitude:
        """The magnitudes of ``rsqrt(v + eps)`` (a batch norm's variance and epsilon), v's range known."""
        low, high = f"(+ ({LO} {v}) {eps})", f"(+ ({HI} {v}) {eps})"
        return cls(f"(/ 1.0 (sqrt {low}))", f"(/ 1.0 (sqrt {high}))", (f"(> {low} 0.0)",))

    def __mul__(self, other: Magnitude) -> Magnitude:
        return Magnitude(
            f"(* {self.most} {other.most})", f"(* {self.least} {other.least})", (*self.facts, *other.facts)
        )

    def __add__(self, other: Magnitude) -> Magnitude:
        """Of a sum: no bound on the smallest nonzero magnitude (the terms may cancel)."""
        return Magnitude(f"(+ {self.most} {other.most})", "0.0", (*self.facts, *other.facts))


def in_range(m: Magnitude, *, nonzero: bool = True, limit: float = LIMIT) -> tuple[str, ...]:
    """Guards: the constant of magnitudes ``m`` is at most ``limit`` and (``nonzero``) its nonzero
    elements at least ``1 / limit`` (a NaN bound fails both: egglog orders NaN above every float)."""
    guards = (*m.facts, f"(< {m.most} {literal(limit)})")
    if nonzero:
        guards += (f"(<= {literal(1 / limit)} {m.least})", f"(< {m.least} NaN)")
    return guards


def cancels_little(offset: Magnitude, factor: Magnitude) -> tuple[str, ...]:
    """Guard: the offset a factor is distributed over, times the factor, is at most ``CANCELLATION``."""
    return (*offset.facts, *factor.facts, f"(<= (* {offset.most} {factor.most}) {literal(CANCELLATION)})")
