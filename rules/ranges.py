"""The range analysis that guards constant folding, and the guards themselves.

Parameters with values start with their ranges (``eqsat.ranges``); ``RANGES`` carries them through
the arithmetic constants are computed by (interval arithmetic on the bounds, a product's and a
quotient's smallest nonzero magnitude from its operands'). A rule that folds constants together or
into weights states, with ``Magnitude``, what it creates, and ``in_range`` keeps it to
``2**-64 .. 2**64`` in magnitude: far inside the normal range of float32 and float64, so a folded
constant never overflows to inf nor underflows to 0 or a subnormal where the program as written did
not. A constant whose range is not known (a function argument, a NaN in it) is never folded. A fold
that moves an offset next to other data (``cancels_little``) bounds it relative to the result, which
only that data's range does: over run-time data it is taken only where exact (``exact_fold``).

egglog orders NaN above every float; a bound that is NaN (``inf * 0``) fails every guard.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from eqsat.egglog_text import ANALYSIS

from .terms import (
    Add,
    Cast,
    Div,
    Expand,
    Fact,
    Full,
    Mul,
    Neg,
    Operand,
    Reshape,
    Rsqrt,
    Sqrt,
    Sub,
    Tensor,
    Term,
    Transpose,
    at_least,
    at_most,
    call,
    differ,
    equal,
    greater,
    largest,
    less,
    magnitude,
    not_nan,
    range_hi,
    range_lo,
    range_tiny,
    root,
    rule_command,
    set_to,
    smallest,
    var,
    wide_float,
)

LIMIT = 2.0**64
# Folding an offset into a constant, a factor distributed over it ((y - c1) * c2 = y * c2 - c1 * c2) or
# two offsets gathered ((y - c1) + c2 = y + (c2 - c1)), rounds at the offset's magnitude where the
# program's y - c1 may be exact (Sterbenz): bits lost are about log2(|offset| / |result|), relative to
# the result; ``cancels_little`` allows 10. Only y's range (a weight's) bounds the result away from 0:
# over run-time data of unknown range the result can be arbitrarily small (r36: x - 1000 ~ 1e-3).
CANCELLATION = 2.0**10


def _rule(term: Term, facts: tuple[Fact, ...], actions: tuple[Fact, ...]) -> str:
    """Where ``t`` is ``term`` and the facts hold, set its bounds."""
    return rule_command((equal("t", term), *facts), actions, ANALYSIS)


def _set(t: Tensor, lo: Operand, hi: Operand, tiny: Operand | None = None) -> tuple[Fact, ...]:
    sets = (set_to(range_lo(t), lo), set_to(range_hi(t), hi))
    return sets if tiny is None else (*sets, set_to(range_tiny(t), tiny))


def _bounds(x: str) -> tuple[Fact, ...]:
    """Facts binding ``l<x>``, ``h<x>`` and ``t<x>`` to the bounds of the operand ``x``."""
    return tuple(equal(f"{b}{x}", f(x)) for b, f in (("l", range_lo), ("h", range_hi), ("t", range_tiny)))


_A, _B = _bounds("a"), _bounds("b")
LA, HA, TA, LB = var("la"), var("ha"), var("ta"), var("lb")
_PRODUCTS = (LA * "lb", LA * "hb", HA * "lb", HA * "hb")
_QUOTIENTS = (LA / "lb", LA / "hb", HA / "lb", HA / "hb")

RANGES: tuple[str, ...] = (
    _rule(Full(shape="s", value="v", dtype="d"), (differ("v", 0.0),), _set("t", "v", "v", magnitude("v"))),
    _rule(Full(shape="s", value="v", dtype="d"), (equal("v", 0.0),), _set("t", "v", "v", math.inf)),
    *(
        _rule(term, _A, _set("t", "la", "ha", "ta"))
        for term in (Reshape("a", shape="s"), Expand("a", shape="s"), Transpose("a", perm="s"))
    ),
    _rule(Cast("a", dtype="d"), (wide_float("d"), *_A), _set("t", "la", "ha", "ta")),
    _rule(Neg("a"), _A, _set("t", 0.0 - HA, 0.0 - LA, "ta")),
    _rule(Add("a", "b"), (*_A, *_B), _set("t", LA + "lb", HA + "hb")),
    _rule(Sub("a", "b"), (*_A, *_B), _set("t", LA - "hb", HA - "lb")),
    _rule(Mul("a", "b"), (*_A, *_B), _set("t", smallest(*_PRODUCTS), largest(*_PRODUCTS), TA * "tb")),
    _rule(
        Div("a", "b"),
        (*_A, *_B, greater(LB * "hb", 0.0)),  # b's range excludes 0
        _set(
            "t", smallest(*_QUOTIENTS), largest(*_QUOTIENTS), TA / largest(magnitude("lb"), magnitude("hb"))
        ),
    ),
    _rule(Sqrt("a"), (*_A, at_least("la", 0.0)), _set("t", root("la"), root("ha"), root("ta"))),
    _rule(
        Rsqrt("a"),
        (*_A, greater("la", 0.0)),
        _set("t", 1.0 / root("ha"), 1.0 / root("la"), 1.0 / root("ha")),
    ),
    # a range that excludes 0 bounds the nonzero magnitudes (a sum's, say)
    rule_command(
        (equal("l", range_lo("t")), equal("h", range_hi("t")), greater(var("l") * "h", 0.0)),
        (set_to(range_tiny("t"), smallest(magnitude("l"), magnitude("h"))),),
        ANALYSIS,
    ),
)


@dataclass(frozen=True)
class Magnitude:
    """f64 expressions bounding a constant's magnitudes: ``|x| <= most`` and, where ``x != 0``,
    ``|x| >= least``; ``facts`` are what the bounds need to hold."""

    most: Operand
    least: Operand
    facts: tuple[Fact, ...] = ()

    @classmethod
    def of(cls, c: Tensor) -> Magnitude:
        """The magnitudes of the constant term ``c``, as the range analysis bounds them."""
        return cls(largest(magnitude(range_lo(c)), magnitude(range_hi(c))), range_tiny(c))

    @classmethod
    def rsqrt_of_sum(cls, v: Tensor, eps: Tensor) -> Magnitude:
        """The magnitudes of ``rsqrt(v + eps)`` (a batch norm's variance and epsilon), v's range known."""
        low, high = range_lo(v) + eps, range_hi(v) + eps
        return cls(1.0 / root(low), 1.0 / root(high), (greater(low, 0.0),))

    def __mul__(self, other: Magnitude) -> Magnitude:
        return Magnitude(
            call("*", self.most, other.most), call("*", self.least, other.least), (*self.facts, *other.facts)
        )

    def __add__(self, other: Magnitude) -> Magnitude:
        """Of a sum: no bound on the smallest nonzero magnitude (the terms may cancel)."""
        return Magnitude(call("+", self.most, other.most), 0.0, (*self.facts, *other.facts))


def in_range(m: Magnitude, *, nonzero: bool = True, limit: float = LIMIT) -> tuple[Fact, ...]:
    """Guards: the constant of magnitudes ``m`` is at most ``limit`` and (``nonzero``) its nonzero
    elements at least ``1 / limit`` (a NaN bound fails both: egglog orders NaN above every float)."""
    guards = (*m.facts, less(m.most, limit))
    if nonzero:
        guards += (at_most(1 / limit, m.least), not_nan(m.least))
    return guards


def cancels_little(offset: Magnitude, result: Tensor) -> tuple[Fact, ...]:
    """Guard: the offset a rule folds is at most ``CANCELLATION`` times the smallest nonzero magnitude of
    ``result``, the value the program computes with it (``y - c1`` for ``(y - c1) * c2``, the sum for
    ``(y - c1) + c2``). The range analysis bounds that magnitude only where ``result``'s range excludes
    0, so never over run-time data (a function argument, a conv's output): the guard fails there."""
    return (*offset.facts, at_most(offset.most, call("*", CANCELLATION, range_tiny(result))))


def exact_fold(c1: Magnitude, c2: Magnitude) -> tuple[Fact, ...]:
    """Guard: one of the two constants a rule folds is all zeros, so the fold rounds nothing the program
    does not: ``(y - 0) * c2 = y * c2 - 0``, ``(y - c1) * 0 = y * 0 - c1 * 0``, ``(y - c1) + 0 = y - c1``."""
    return (*c1.facts, *c2.facts, at_most(call("*", c1.most, c2.most), 0.0))


def shift_moderate(offset: Magnitude, factor: Magnitude) -> tuple[Fact, ...]:
    """Guard: ``offset * factor`` is at most ``CANCELLATION`` in magnitude, an absolute bound (results of
    order one), for ``batch-norm-into-conv``: where the conv's output y is near the mean, the program
    rounds y at about ``|offset|`` already unless the conv is exact (a 1x1 identity kernel), so the
    folded shift's rounding is of that order. It bounds nothing relative to the result."""
    return (*offset.facts, *factor.facts, at_most(call("*", offset.most, factor.most), CANCELLATION))
