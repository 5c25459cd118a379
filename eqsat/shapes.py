"""Shape rules: each infers an op's output shape in Python and states the same rule as egglog rules.
This module holds the base and the rules many ops share; a rule of one op family lives beside its ops
(``eqsat.ops.layout.Permute``, ``eqsat.ops.conv.Conv2d``).

The Python side checks programs as they are built; the egglog side is the e-graph's shape analysis
(``(shape t)``), which guards rewrites and which makes a rule that equates tensors of different shapes
fail loudly ("Illegal merge"). Rank-dependent rules are generated for ranks up to ``MAX_RANK``; an op of
higher rank is encoded as opaque.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import product
from typing import ClassVar

from eqsat.egglog_text import app, equal, rule_command, set_to, vec
from eqsat.errors import ShapeError

MAX_RANK = 6
Shape = tuple[int, ...]
# An egglog shape rule: extra facts over the pattern's variables, and the shape expression.
EggRule = tuple[str, str]


def broadcast(a: Shape, b: Shape) -> Shape:
    """Numpy broadcasting of two shapes."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        da = a[-i] if i <= len(a) else 1
        db = b[-i] if i <= len(b) else 1
        if da != db and 1 not in (da, db):
            raise ShapeError(f"shapes {a} and {b} do not broadcast")
        out.append(db if da == 1 else da)
    return tuple(reversed(out))


def broadcasts_to(shape: Shape, target: Shape) -> bool:
    """``shape`` broadcasts to ``target`` itself (no dim of target grows, no rank is added to it)."""
    pairs = zip(reversed(shape), reversed(target), strict=False)
    return len(shape) <= len(target) and all(a in (1, b) for a, b in pairs)


def egg_batch(shape: str) -> str:
    """An egglog shape (a vector) without its last two dims: a product's batch dims."""
    return app("vec-pop", app("vec-pop", shape))


def egg_dim_from_end(shape: str, k: int) -> str:
    """Dim ``k`` from the end (1 the last) of an egglog shape."""
    return app("vec-get", shape, app("-", app("vec-length", shape), k))


def _egg_broadcast(a: str, ra: int, b: str, rb: int) -> list[str]:
    """egglog expressions of the broadcast dims of vectors ``a`` (rank ra) and ``b`` (rank rb)."""
    r = max(ra, rb)
    dims = []
    for i in range(r):
        ia, ib = i - (r - ra), i - (r - rb)
        ea = app("vec-get", a, ia) if ia >= 0 else None
        eb = app("vec-get", b, ib) if ib >= 0 else None
        # max(a, b), or 0 where one is 0 (a size-0 dim broadcast against 1)
        both = app("*", app("max", ea, eb), app("min", app("min", ea, eb), 1))
        dims.append(both if ea and eb else ea or eb or "1")
    return dims


class ShapeRule:
    """Base: ``infer`` in Python, ``egglog`` as (facts, shape expression) pairs.

    A rule may need a helper table shared by several ops: ``prelude`` declares and fills it (once),
    ``demand`` is the action that asks for the entries an op needs. ``rank_bounded``: its egglog rules
    exist for ranks up to ``MAX_RANK`` only (an op of higher rank is encoded as opaque).
    """

    rank_bounded: ClassVar[bool] = False

    def infer(self, shapes: Sequence[Shape], attrs: dict) -> Shape:
        raise NotImplementedError

    def egglog(self, pattern: dict[str, str]) -> list[EggRule]:
        """``pattern`` maps names to egglog variables: ``s0``.. (input shapes), attribute names."""
        raise NotImplementedError

    def demand(self, pattern: dict[str, str]) -> str:
        return ""

    def prelude(self, ruleset: str) -> list[str]:
        return []


@dataclass(frozen=True)
class SameAs(ShapeRule):
    index: int = 0

    def infer(self, shapes: Sequence[Shape], attrs: dict) -> Shape:
        return shapes[self.index]

    def egglog(self, pattern: dict[str, str]) -> list[EggRule]:
        return [("", pattern[f"s{self.index}"])]


@dataclass(frozen=True)
class FromAttr(ShapeRule):
    attr: str = "shape"

    def infer(self, shapes: Sequence[Shape], attrs: dict) -> Shape:
        return tuple(attrs[self.attr])

    def egglog(self, pattern: dict[str, str]) -> list[EggRule]:
        return [("", pattern[self.attr])]


@dataclass(frozen=True)
class Broadcast(ShapeRule):
    rank_bounded = True

    def infer(self, shapes: Sequence[Shape], attrs: dict) -> Shape:
        return broadcast(shapes[0], shapes[1])

    def egglog(self, pattern: dict[str, str]) -> list[EggRule]:
        return [(equal("b", app("broadcast-shape", pattern["s0"], pattern["s1"])), "b")]

    def demand(self, pattern: dict[str, str]) -> str:
        return app("wants-broadcast-shape", pattern["s0"], pattern["s1"])

    def prelude(self, ruleset: str) -> list[str]:
        rules = [
            app("function", "broadcast-shape", "(IVec IVec)", "IVec", ":no-merge"),
            app("relation", "wants-broadcast-shape", "(IVec IVec)"),
        ]
        for ra, rb in product(range(MAX_RANK + 1), repeat=2):
            wants = app("wants-broadcast-shape", "a", "b")
            ranks = (equal(app("vec-length", "a"), ra), equal(app("vec-length", "b"), rb))
            shape = set_to(app("broadcast-shape", "a", "b"), vec(_egg_broadcast("a", ra, "b", rb)))
            rules.append(rule_command((wants, *ranks), (shape,), ruleset))
        return rules
