"""Value ranges of a program's parameters, as the e-graph's range analysis starts from them.

A parameter with a value has a range: the least and greatest element and the smallest nonzero
magnitude, each rounded outward to a power of two, the smallest magnitude to at most ``TINY_CAP`` (so
that weights of the same scale give the same facts, and an optimization cached for one set of weights
holds for the next: the cache key holds the ranges). The rules that fold constants together or into
weights are guarded by the ranges of what they create (``rules/ranges.py``); a wider range only makes
them fold less.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from eqsat.egglog_text import app, set_to
from eqsat.ir import Program
from eqsat.types import FLOAT_DTYPES

# egglog functions of a Tensor: bounds of its elements (merged to the tightest) and of their nonzero
# magnitudes (inf where every element is 0)
LO, HI, TINY = "range-lo", "range-hi", "range-tiny"
# Smallest nonzero magnitudes only matter near underflow (the guards allow 2**-64): any above this is
# stated as this, so that retrained weights, whose smallest element is anyone's guess, keep their key
TINY_CAP = 2.0**-16
DECLARATIONS = tuple(
    app("function", name, "(Tensor)", "f64", ":merge", app(merge, "old", "new"))
    for name, merge in ((LO, "max"), (HI, "min"), (TINY, "max"))
)


def _power_of_two(magnitude: float, up: bool) -> float:
    """The power of two at or above (``up``) or at or below ``magnitude`` (0 and inf stay)."""
    if magnitude == 0.0 or math.isinf(magnitude):
        return magnitude
    mantissa, exponent = math.frexp(magnitude)  # magnitude = mantissa * 2**exponent, 0.5 <= mantissa < 1
    if mantissa == 0.5:
        return magnitude
    return math.ldexp(1.0, exponent if up else exponent - 1)


def _outward(value: float, up: bool) -> float:
    """``value`` rounded away from the range's inside: up for an upper bound, down for a lower one."""
    if value < 0:
        return -_power_of_two(-value, not up)
    return _power_of_two(value, up)


@dataclass(frozen=True)
class Range:
    """Bounds of a tensor's elements: ``lo <= x <= hi``, and ``|x| >= tiny`` wherever ``x != 0``."""

    lo: float
    hi: float
    tiny: float

    @classmethod
    def of(cls, value: np.ndarray) -> Range | None:
        """The range of a float array, rounded outward; None if it holds a NaN or nothing."""
        x = np.asarray(value)
        if x.dtype.kind != "f":  # bfloat16 (ml_dtypes): numpy's reductions want a native float
            x = x.astype(np.float32)
        if x.size == 0:
            return None
        least, most = float(x.min()), float(x.max())  # no copy of the weights; a NaN propagates
        if math.isnan(least) or math.isnan(most):
            return None
        tiny = float(np.min(np.abs(x), where=x != 0, initial=np.inf))
        low, high = _outward(least, up=False), _outward(most, up=True)
        return cls(low, high, min(_power_of_two(tiny, False), TINY_CAP))

    def facts(self, term: str) -> list[str]:
        """egglog commands stating this range of ``term``."""
        return [set_to(app(name, term), v) for name, v in ((LO, self.lo), (HI, self.hi), (TINY, self.tiny))]


def parameter_ranges(program: Program) -> dict[str, Range]:
    """The range of each float parameter with a value, by name."""
    out = {}
    for p in program.params:
        value = program.param_values.get(p.name) if p.name else None
        if p.name is None or value is None or p.type.dtype not in FLOAT_DTYPES:
            continue
        r = Range.of(value)
        if r is not None:
            out[p.name] = r
    return out
