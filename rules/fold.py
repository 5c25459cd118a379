"""Folding of ``full``: a constant of one value stays a constant under expand, reshape, transpose, and
its square root is a constant (``scores / jnp.sqrt(d)`` then becomes a scale); the identities of
masks built from constants (``jnp.tril``'s ``where(c, True, False)``, ``True & m``, ``i + 0``,
``cast(c) != 0``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from eqsat.ir import TensorType

from .base import Rule, Variant, rand_perm, rand_shape, rand_unit_axes, rule
from .terms import (
    SCALAR,
    Add,
    Cast,
    Expand,
    Fact,
    Full,
    Ge,
    Gt,
    Le,
    LogicalAnd,
    Lt,
    Ne,
    Reshape,
    Select,
    Sqrt,
    Sub,
    Transpose,
    at_least,
    at_most,
    differ,
    dtype_of,
    equal,
    float_dtype,
    greater,
    int_dtype,
    less,
    not_nan,
    root,
    shape_of,
)

_FULL = Full(shape="s", value="v", dtype="d")


def _full(rng: Any, rank: int) -> dict[str, Any]:
    return {"s": rand_shape(rng, rank), "v": float(rng.normal()), "d": "float32"}


def _expand_example(rng: Any) -> dict[str, Any]:
    ex = _full(rng, 2)
    return {**ex, "s2": (int(rng.integers(1, 4)), *ex["s"])}


def _reshape_example(rng: Any) -> dict[str, Any]:
    ex = _full(rng, 2)
    return {**ex, "s2": (ex["s"][0] * ex["s"][1],)}


def _transpose_example(rng: Any) -> dict[str, Any]:
    return {**_full(rng, 3), "p": rand_perm(rng, 3)}


RULES = [
    rule(
        "expand-full",
        "expanding a constant-valued tensor is a bigger constant-valued tensor",
        Expand(_FULL, shape="s2"),
        Full(shape="s2", value="v", dtype="d"),
        example=_expand_example,
    ),
    rule(
        "reshape-full",
        "reshaping a constant-valued tensor is a constant of the new shape",
        Reshape(_FULL, shape="s2"),
        Full(shape="s2", value="v", dtype="d"),
        example=_reshape_example,
    ),
    rule(
        "transpose-full",
        "transposing a constant-valued tensor is a constant of the permuted shape",
        Transpose(_FULL, perm="p"),
        Full(shape="s2", value="v", dtype="d"),
        equal("s2", shape_of(Transpose(_FULL, perm="p"))),
        example=_transpose_example,
    ),
]

RULES.append(
    rule(
        "sqrt-full",
        "the square root of a constant is a constant: rounded once from float64, which is exact for "
        "every float dtype (float64 holds more than twice their precision)",
        Sqrt(_FULL),
        Full(shape="s", value=root("v"), dtype="d"),
        float_dtype("d"),
        at_least("v", 0.0),
        example=lambda rng: {"s": rand_shape(rng, 2), "v": float(rng.uniform(0.0, 100.0)), "d": "float32"},
    )
)


TRUE, FALSE = (Full(shape="s", value=v, dtype="bool") for v in (1.0, 0.0))


def _mask_example(rng: Any) -> dict[str, Any]:
    shape = rand_shape(rng, 2)
    return {"c": TensorType(shape, "bool"), "s": shape, "x": TensorType(shape, "int32"), "d": "int32"}


_ZERO = Full(shape=SCALAR, value=0.0, dtype="d")


def _compared(compare: Callable[..., str], relation: Callable[..., Fact], holds: bool) -> Variant:
    """compare(a, b) of two constants is ``holds`` where ``relation(a, b)`` and neither is NaN."""
    lhs = compare(Full(shape="sa", value="a", dtype="d"), Full(shape="sb", value="b", dtype="d"))
    guards = (not_nan("a"), not_nan("b"), relation("a", "b"), equal("s", shape_of(lhs)))
    return Variant(lhs, Full(shape="s", value=float(holds), dtype="bool"), guards)


_CONST_A, _CONST_B = (Full(shape="s", value=v, dtype="d") for v in "ab")
_CONST_V = Full(shape="sv", value="v", dtype="d")


def _into_select(compare: Callable[..., str]) -> Variant:
    """compare(where(c, a, b), v) is where(c, compare(a, v), compare(b, v)) where v broadcasts into
    the select's shape."""
    lhs = compare(Select("c", _CONST_A, _CONST_B), _CONST_V)
    rhs = Select("c", compare(_CONST_A, _CONST_V), compare(_CONST_B, _CONST_V))
    return Variant(lhs, rhs, (equal(shape_of(lhs), "s"),))


def _broadcasting(rng: Any, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts into ``shape``: a scalar's, or ``shape`` with some axes 1."""
    return () if rng.random() < 0.3 else rand_unit_axes(rng, shape, 0.7)


def _select_of_fulls_example(rng: Any) -> dict[str, Any]:
    """A condition c, the constants a and b of its shape, v of a shape that broadcasts into it."""
    s = rand_shape(rng, 2)
    values = {v: float(rng.choice([0.0, -3.0, 16.0])) for v in "abv"}
    return {"c": TensorType(s, "bool"), "d": "float32", "s": s, "sv": _broadcasting(rng, s), **values}


RULES += [
    rule(
        "select-true-false",
        "where(c, True, False) is c",
        Select("c", TRUE, FALSE),
        "c",
        equal(shape_of("c"), "s"),
        example=_mask_example,
    ),
    Rule(
        "select-ne-zero",
        "where(c, a, 0) != 0 is c for a constant a != 0 (a 0/1 mask compared back to bool)",
        tuple(
            Variant(
                Ne(
                    Select("c", Full(shape="s", value="a", dtype="d"), Full(shape="s", value=0.0, dtype="d")),
                    Full(shape=z, value=0.0, dtype="d"),
                ),
                "c",
                (differ("a", 0.0), equal(shape_of("c"), "s")),
            )
            for z in (SCALAR, "s")
        ),
        lambda rng: {**_mask_example(rng), "a": float(rng.choice([1.0, -2.5])), "d": "float32"},
    ),
    Rule(
        "cast-bool-ne-zero",
        "cast(c) != 0 is c for a boolean c (flax linen's float causal mask compared back to bool)",
        tuple(
            Variant(
                Ne(Cast("c", dtype="d"), Full(shape=z, value=0.0, dtype="d")),
                "c",
                (equal(dtype_of("c"), "bool"), equal(shape_of("c"), "s")),
            )
            for z in (SCALAR, "s")
        ),
        lambda rng: {**_mask_example(rng), "d": str(rng.choice(["float32", "bfloat16", "int8"]))},
    ),
    Rule(
        "and-true",
        "True & m is m (broadcast to the result's shape)",
        tuple(
            Variant(lhs, Expand("c", shape="s"), (equal("s", shape_of(lhs)),))
            for lhs in (LogicalAnd(TRUE, "c"), LogicalAnd("c", TRUE))
        ),
        _mask_example,
    ),
    Rule(
        "compare-fulls",
        "a comparison of two constants, neither NaN, is the constant True or False (equinox checks "
        "n > 0) of their broadcast shape; a NaN compares false in IEEE, not as egglog orders it",
        tuple(
            _compared(compare, relation if holds else negated, holds)
            for compare, relation, negated in (
                (Gt, greater, at_most),
                (Lt, less, at_least),
                (Ge, at_least, less),
                (Le, at_most, greater),
            )
            for holds in (True, False)
        ),
        lambda rng: {
            "a": float(rng.choice([0.0, 16.0])),
            "b": float(rng.choice([0.0, 16.0])),
            "d": "float32",
            **{s: _broadcasting(rng, (2, 3)) for s in ("sa", "sb")},
        },
    ),
    Rule(
        "compare-into-select-of-fulls",
        "a comparison of where(c, a, b), a and b constants, with a constant v is where(c, a cmp v, "
        "b cmp v): MaxText's mask where(m, 0, fill) >= fill / 2, whose comparisons then fold",
        tuple(map(_into_select, (Gt, Lt, Ge, Le))),
        _select_of_fulls_example,
    ),
    Rule(
        "select-constant",
        "where(True, x, y) is x, where(False, x, y) is y (a scalar condition)",
        tuple(
            Variant(Select(Full(shape=SCALAR, value=float(v), dtype="bool"), "x", "y"), "x" if v else "y")
            for v in (True, False)
        ),
        lambda rng: (lambda shape: {"x": TensorType(shape, "float32"), "y": TensorType(shape, "float32")})(
            rand_shape(rng, 2)
        ),
    ),
    Rule(
        "sub-zero",
        "x - 0 is x (for floats too: -0.0 - 0.0 is -0.0), the zeros of any shape x broadcasts over",
        (
            Variant(
                Sub("x", Full(shape="s", value=0.0, dtype="d")),
                "x",
                (equal(shape_of("x"), shape_of(Sub("x", Full(shape="s", value=0.0, dtype="d")))),),
            ),
        ),
        lambda rng: {"x": TensorType(rand_shape(rng, 2), "float32"), "s": (1, 1), "d": "float32"},
    ),
    Rule(
        "add-int-zero",
        "i + 0 is i for integers (not for floats: -0.0 + 0 is +0.0)",
        tuple(Variant(lhs, "x", (int_dtype("d"),)) for lhs in (Add("x", _ZERO), Add(_ZERO, "x"))),
        _mask_example,
    ),
]
