"""Axioms: commutativity, associativity and distributivity of elementwise add and mul, and the algebra
of two-part concatenations (elementwise ops, matmuls and splits through them, nested concats).

They complete the rule set for proofs (TASO's rewrite rules, the set TENSAT saturates with, are
proven from them and the other themes) and are off by default in ``optimize``: commutativity and
associativity make every sum and product of n terms appear in all its orders and groupings. Their
guards bound that: no rule matches across broadcasting, and associativity, distributivity and the
concat forms of matmuls only apply to dtypes that reassociate (float32, float64, integers).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from eqsat.ir import TensorType
from eqsat.ops import OPS

from .algebra import PRODUCTS_IN_RANGE
from .algebra import RULES as ALGEBRA
from .base import UNARY_ATTRS, Example, Rule, Variant, both_ways, example_dtype, rand_shape, unary_pattern
from .terms import (
    Add,
    Fact,
    Matmul,
    Split,
    constructor,
    differ,
    dim,
    dtype_of,
    equal,
    get,
    length,
    pair,
    rank,
    reassociable,
    shape_of,
)
from .traced import Side, traced_rule

F32 = "float32"
REASSOCIABLE = (reassociable(dtype_of("x")),)


def _three(rng: Any) -> dict[str, Any]:
    t = TensorType(rand_shape(rng, int(rng.integers(1, 4))), F32)
    return {"x": t, "y": t, "z": t}


def _parts(rng: Any) -> dict[str, Any]:
    """a, b of one shape and c, d of another: a and c (b and d) concatenate along ``ax``."""
    rank = int(rng.integers(1, 4))
    shape, axis = rand_shape(rng, rank), int(rng.integers(rank))
    first, second = list(shape), list(shape)
    second[axis] = int(rng.integers(1, 5))
    a, c = TensorType(tuple(first), F32), TensorType(tuple(second), F32)
    return {"ax": axis, "a": a, "b": a, "c": c, "d": c}


def _concat_binary(op: str) -> tuple[Variant, Variant]:
    make = constructor(op)
    return both_ways(
        pair(make("a", "b"), make("c", "d"), "ax"),
        make(pair("a", "c", "ax"), pair("b", "d", "ax")),
        equal(shape_of("a"), shape_of("b")),
        equal(shape_of("c"), shape_of("d")),
    )


def _concat_unary(op: str) -> tuple[Variant, Variant]:
    return both_ways(
        pair(unary_pattern(op, "a"), unary_pattern(op, "c"), "ax"),
        unary_pattern(op, pair("a", "c", "ax")),
    )


def _unary_example(rng: Any) -> dict[str, Any]:
    return {**_parts(rng), **{f"c_{k}": v for attrs in UNARY_ATTRS.values() for k, v in attrs.items()}}


def _matrices(rng: Any) -> dict[str, Any]:
    m, m2, k, k2, n, n2 = (int(d) for d in rng.integers(1, 5, 6))
    return {
        "a": TensorType((m, k), F32),
        "b": TensorType((m2, k), F32),
        "w": TensorType((k, n), F32),
        "v": TensorType((k, n2), F32),
        "a2": TensorType((m, k2), F32),
        "w2": TensorType((k2, n), F32),
        "d": F32,
    }


def _matmul(x: str, y: str) -> str:
    return Matmul(x, y, dtype="d")


def _rank2(x: str) -> Fact:
    return equal(rank(x), 2)


_MATRICES = (_rank2("a"), _rank2("w"), equal("d", dtype_of("a")))


def _nested(rng: Any) -> dict[str, Any]:
    rank = int(rng.integers(2, 4))
    i, j = (int(x) for x in rng.permutation(rank)[:2])
    base = list(rand_shape(rng, rank))
    out: dict[str, Any] = {"i": i, "j": j}
    for name, (di, dj) in {"a": (1, 1), "b": (2, 1), "c": (1, 3), "d": (2, 3)}.items():
        shape = list(base)
        shape[i], shape[j] = di, dj
        out[name] = TensorType(tuple(shape), F32)
    return out


def _split_example(rng: Any) -> dict[str, Any]:
    ex = _parts(rng)
    a, c, axis = ex["a"], ex["c"], ex["ax"]
    return {**ex, "sizes": (a.shape[axis], c.shape[axis])}


DISTRIBUTE = next(r for r in ALGEBRA if r.name == "matmul-distribute")


def _axiom(
    name: str, reason: str, variants: tuple[Variant, ...], example: Example, exact: bool = True
) -> Rule:
    """A rule of this theme: off by default in ``optimize``."""
    return Rule(name, reason, variants, example, exact=exact, default=False)


def _split_at_seam(index: int, part: str) -> Variant:
    seam = (equal(length("sizes"), 2), equal(get("sizes", 0), dim("a", "ax")))
    return Variant(Split(pair("a", "c", "ax"), axis="ax", sizes="sizes", index=index), part, seam)


def _elementwise(
    name: str, reason: str, lhs: Side, rhs: Side, *when: Fact, exact: bool, assumes: str = ""
) -> Rule:
    """An axiom of elementwise ops over tensors of one shape, written as two functions."""
    same = [TensorType((2, 3), F32)] * 3
    made, _ = traced_rule(
        name,
        reason,
        lhs=lhs,
        rhs=rhs,
        examples=[same],
        when=when,
        exact=exact,
        default=False,
        both_ways=not exact,
    )
    return replace(made, example=_three, assumes=assumes)


RULES = [
    _elementwise(
        "add-commute",
        "x + y = y + x (exact in IEEE arithmetic)",
        lambda x, y, z: x + y,
        lambda x, y, z: y + x,
        exact=True,
    ),
    _elementwise(
        "mul-commute",
        "x * y = y * x (exact in IEEE arithmetic)",
        lambda x, y, z: x * y,
        lambda x, y, z: y * x,
        exact=True,
    ),
    _elementwise(
        "add-assoc",
        "(x + y) + z = x + (y + z): rounds differently, so only where sums reassociate",
        lambda x, y, z: (x + y) + z,
        lambda x, y, z: x + (y + z),
        *REASSOCIABLE,
        exact=False,
    ),
    _elementwise(
        "mul-assoc",
        "(x * y) * z = x * (y * z): rounds differently (and a product may overflow in one grouping)",
        lambda x, y, z: (x * y) * z,
        lambda x, y, z: x * (y * z),
        *REASSOCIABLE,
        exact=False,
        assumes=PRODUCTS_IN_RANGE,
    ),
    _elementwise(
        "mul-distribute",
        "x * (y + z) = x*y + x*z: rounds differently",
        lambda x, y, z: x * (y + z),
        lambda x, y, z: x * y + x * z,
        *REASSOCIABLE,
        exact=False,
    ),
    _axiom(
        "matmul-expand",
        "(x+y)@w = x@w + y@w and w@(x+y) = w@x + w@y: matmul-distribute read backwards",
        tuple(Variant(v.rhs, v.lhs, v.when) for v in DISTRIBUTE.variants if isinstance(v, Variant)),
        DISTRIBUTE.example,
        exact=False,
    ),
    _axiom(
        "concat-of-elementwise",
        "an elementwise op of two concatenations of equal-shape parts is the concatenation of the ops",
        tuple(
            v
            for op, spec in OPS.items()
            if spec.elementwise and spec.arity == 2 and example_dtype(op) == F32
            for v in _concat_binary(op)
        ),
        _parts,
    ),
    _axiom(
        "concat-of-unary",
        "a unary elementwise op of a concatenation is the concatenation of the op of each part",
        tuple(
            v
            for op, spec in OPS.items()
            if spec.elementwise and spec.arity == 1 and example_dtype(op) == F32
            for v in _concat_unary(op)
        ),
        _unary_example,
    ),
    _axiom(
        "concat-of-matmuls",
        "[a; b] @ w = [a @ w; b @ w], a @ [w, v] = [a @ w, a @ v], [a, a2] @ [w; w2] = a @ w + a2 @ w2",
        (
            *both_ways(
                pair(_matmul("a", "w"), _matmul("b", "w"), 0), _matmul(pair("a", "b", 0), "w"), *_MATRICES
            ),
            *both_ways(
                pair(_matmul("a", "w"), _matmul("a", "v"), 1), _matmul("a", pair("w", "v", 1)), *_MATRICES
            ),
            *both_ways(
                Add(_matmul("a", "w"), _matmul("a2", "w2")),
                _matmul(pair("a", "a2", 1), pair("w", "w2", 0)),
                *_MATRICES,
                _rank2("a2"),
                reassociable("d"),
            ),
        ),
        _matrices,
        exact=False,
    ),
    _axiom(
        "concat-nested-swap",
        "a 2x2 block tensor concatenated along i then j is the same concatenated along j then i",
        (
            Variant(
                pair(pair("a", "b", "i"), pair("c", "d", "i"), "j"),
                pair(pair("a", "c", "j"), pair("b", "d", "j"), "i"),
                (
                    differ("i", "j"),
                    equal(dim("a", "i"), dim("c", "i")),
                    equal(dim("b", "i"), dim("d", "i")),
                ),
            ),
        ),
        _nested,
    ),
    _axiom(
        "split-of-concat",
        "splitting a concatenation at its seam gives back its parts",
        (_split_at_seam(0, "a"), _split_at_seam(1, "c")),
        _split_example,
    ),
]
