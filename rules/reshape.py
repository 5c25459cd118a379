"""Reshape and expand composition and identity removal."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from eqsat.ir import TensorType
from eqsat.ops import OPS
from eqsat.shapes import MAX_RANK

from .base import UNARY_ATTRS, Rule, Variant, example_dtype, rand_shape, rule, unary_pattern
from .terms import (
    Add,
    Cast,
    Expand,
    Reshape,
    StopGradient,
    append,
    constructor,
    dim,
    equal,
    get,
    last_axis,
    length,
    rank,
    set_item,
    shape_of,
    vec,
)


def _two_shapes(rng: Any) -> dict[str, Any]:
    a, b = (int(v) for v in rng.integers(1, 5, 2))
    return {"x": TensorType((a, b, 2), "float32"), "s1": (b, a * 2), "s2": (a * b * 2,)}


def _two_expands(rng: Any) -> dict[str, Any]:
    a, b = (int(v) for v in rng.integers(1, 5, 2))
    return {"x": TensorType((1, b), "float32"), "s1": (a, b), "s2": (2, a, b)}


def _same_shape(rng: Any) -> dict[str, Any]:
    shape = rand_shape(rng, int(rng.integers(1, 5)))
    return {"x": TensorType(shape, "float32"), "s": shape}


RULES = [
    rule(
        "reshape-compose",
        "a reshape of a reshape is one reshape to the final shape",
        Reshape(Reshape("x", shape="s1"), shape="s2"),
        Reshape("x", shape="s2"),
        example=_two_shapes,
    ),
    rule(
        "reshape-identity",
        "a reshape to the shape a tensor already has does nothing",
        Reshape("x", shape="s"),
        "x",
        equal(shape_of("x"), "s"),
        example=_same_shape,
    ),
    rule(
        "expand-compose",
        "broadcasting is transitive: an expand of an expand is one expand to the final shape",
        Expand(Expand("x", shape="s1"), shape="s2"),
        Expand("x", shape="s2"),
        example=_two_expands,
    ),
    rule(
        "expand-identity",
        "an expand to the shape a tensor already has does nothing",
        Expand("x", shape="s"),
        "x",
        equal(shape_of("x"), "s"),
        example=_same_shape,
    ),
]


_BINARY = [constructor(op) for op in ("add", "sub", "mul", "div", "maximum", "minimum")]


def _implicit_broadcast_example(rng: Any) -> dict[str, Any]:
    n = int(rng.integers(1, 5))
    return {
        "x": TensorType((2, 3, n), "float32"),
        "y": TensorType((n,), "float32"),
        "s": (2, 3, n),
        "s1": (1, n),
        "s2": (1, 1, n),
    }


RULES += [
    Rule(
        "implicit-broadcast",
        "elementwise ops broadcast by themselves: an explicit expand, or a reshape adding leading 1s, "
        "of an operand is unneeded",
        tuple(
            variant
            for op in _BINARY
            for variant in (
                Variant(op("x", Expand("y", shape="s")), op("x", "y"), (equal(shape_of("x"), "s"),)),
                Variant(op(Expand("y", shape="s"), "x"), op("y", "x"), (equal(shape_of("x"), "s"),)),
                *(
                    Variant(
                        op("x", Reshape("y", shape=s)),
                        op("x", "y"),
                        (
                            equal(s, append(vec([1] * ones), shape_of("y"))),
                            equal(shape_of(op("x", Reshape("y", shape=s))), shape_of("x")),
                        ),
                    )
                    for ones, s in ((1, "s1"), (2, "s2"))
                ),
            )
        ),
        _implicit_broadcast_example,
    ),
]


def _bias_through_reshape(rs: int, rb: int, flipped: bool) -> Variant:
    """(y reshaped to s) + b, b broadcast over the trailing dims y's last dim was split into."""
    trailing = [get("s", i) for i in range(rs - rb, rs)]
    product = trailing[-1]
    for term in reversed(trailing[:-1]):
        product = term * product
    y, b = Reshape("y", shape="s"), Reshape("b", shape=vec(["n"]))
    lhs, inner = (Add("b", y), Add(b, "y")) if flipped else (Add(y, "b"), Add("y", b))
    return Variant(
        lhs,
        Reshape(inner, shape="s"),
        (
            equal(rank("y"), 2),
            equal("n", dim("y", 1)),
            equal(length("s"), rs),
            equal(shape_of("b"), vec(trailing)),
            equal("n", product),
        ),
    )


def _bias_example(rng: Any) -> dict[str, Any]:
    h, d, rows = (int(v) for v in rng.integers(1, 4, 3))
    return {
        "y": TensorType((rows * 2, h * d), "float32"),
        "s": (2, rows, h, d),
        "b": TensorType((h, d), "float32"),
    }


RULES.append(
    Rule(
        "bias-through-reshape",
        "a bias added after a reshape that split the last dim (into heads) is added before it, over "
        "that dim (then a linear's bias)",
        tuple(
            _bias_through_reshape(rs, rb, flipped)
            for rs in range(2, MAX_RANK + 1)
            for rb in range(1, min(rs, 3) + 1)
            for flipped in (False, True)
        ),
        _bias_example,
    )
)


RULES.append(
    rule(
        "reshape-into-stop-gradient",
        "a reshape of a value whose gradient is stopped is the stopped reshape (a reshape is linear)",
        Reshape(StopGradient("x"), shape="s"),
        StopGradient(Reshape("x", shape="s")),
        example=lambda rng: (lambda ex: {"x": ex["x"], "s": ex["s2"]})(_two_shapes(rng)),
    )
)
RULES.append(
    rule(
        "reshape-into-cast",
        "a cast is elementwise, so a reshape of a cast is the cast of the reshape",
        Reshape(Cast("x", dtype="d"), shape="s"),
        Cast(Reshape("x", shape="s"), dtype="d"),
        example=lambda rng: (lambda ex: {"x": ex["x"], "s": ex["s2"], "d": "float16"})(_two_shapes(rng)),
    )
)


# elementwise ops of one float operand: a reshape moves out of each (one direction: outward, where a
# softmax or a product finds it)
_FLOAT_UNARY = [
    op for op, spec in OPS.items() if spec.elementwise and spec.arity == 1 and example_dtype(op) == "float32"
]


def _unary_example(rng: Any) -> dict[str, Any]:
    attrs = {f"c_{k}": v for op in _FLOAT_UNARY for k, v in UNARY_ATTRS.get(op, {}).items()}
    return {**{k: v for k, v in _two_shapes(rng).items() if k != "s2"}, **attrs}


RULES.append(
    Rule(
        "reshape-out-of-elementwise",
        "an elementwise op of a reshaped tensor is the reshape of the op (a soft cap of merged heads' "
        "scores is taken before the merge, so the softmax sees the reshape)",
        tuple(
            Variant(unary_pattern(op, Reshape("x", shape="s1")), Reshape(unary_pattern(op, "x"), shape="s1"))
            for op in _FLOAT_UNARY
        ),
        _unary_example,
    )
)


def _rows_reshaped(make: Callable[..., str]) -> Variant:
    """op(x reshaped to s1, y reshaped to s2): both reshapes keep the last axis (regroup the leading
    ones alike), s2 is s1 with its last axis 1, so y holds one value per row of x in row order."""
    return Variant(
        make(Reshape("x", shape="s1"), Reshape("y", shape="s2")),
        Reshape(make("x", Reshape("y", shape="sy")), shape="s1"),
        (
            equal("sy", set_item(shape_of("x"), last_axis("x"), 1)),
            equal(get("s1", length("s1") - 1), dim("x", last_axis("x"))),
            equal("s2", set_item("s1", length("s1") - 1, 1)),
        ),
    )


def _rows_reshaped_example(rng: Any) -> dict[str, Any]:
    """x (..., a, b, n) with its leading axes merged or split in s1; y its rows, as (..., a, b, 1),
    (..., a, b) or s1's leading axes."""
    a, b, n = (int(v) for v in rng.integers(1, 5, 3))
    lead = rand_shape(rng, int(rng.integers(0, 2)))
    split = int(rng.integers(2))
    x, s1 = ((*lead, a * b, n), (*lead, a, b, n)) if split else ((*lead, a, b, n), (*lead, a * b, n))
    y = [(*x[:-1], 1), x[:-1], s1[:-1]][int(rng.integers(3))]
    return {
        "x": TensorType(x, "float32"),
        "y": TensorType(y, "float32"),
        "s1": s1,
        "s2": (*s1[:-1], 1),
    }


RULES.append(
    Rule(
        "reshape-out-of-binary-of-rows",
        "an elementwise op of a tensor and one value per row of it, both reshaped keeping the last axis "
        "(heads grouped or merged), is the reshape of the op of the tensor and its row values in its "
        "layout (MaxText's grouped output divided by its merged row sums)",
        tuple(map(_rows_reshaped, _BINARY)),
        _rows_reshaped_example,
    )
)
