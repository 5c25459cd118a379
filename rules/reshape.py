"""Reshape and expand composition and identity removal."""

from __future__ import annotations

from typing import Any

from eqsat.ir import TensorType
from eqsat.shapes import MAX_RANK

from .base import Rule, Variant, rand_shape, rule


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
        "(Reshape (Reshape x s1) s2)",
        "(Reshape x s2)",
        example=_two_shapes,
    ),
    rule(
        "reshape-identity",
        "a reshape to the shape a tensor already has does nothing",
        "(Reshape x s)",
        "x",
        "(= (shape x) s)",
        example=_same_shape,
    ),
    rule(
        "expand-compose",
        "broadcasting is transitive: an expand of an expand is one expand to the final shape",
        "(Expand (Expand x s1) s2)",
        "(Expand x s2)",
        example=_two_expands,
    ),
    rule(
        "expand-identity",
        "an expand to the shape a tensor already has does nothing",
        "(Expand x s)",
        "x",
        "(= (shape x) s)",
        example=_same_shape,
    ),
]


_BINARY = ("Add", "Sub", "Mul", "Div", "Maximum", "Minimum")


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
                Variant(f"({op} x (Expand y s))", f"({op} x y)", ("(= (shape x) s)",)),
                Variant(f"({op} (Expand y s) x)", f"({op} y x)", ("(= (shape x) s)",)),
                Variant(
                    f"({op} x (Reshape y s1))",
                    f"({op} x y)",
                    (
                        "(= s1 (vec-append (vec-of 1) (shape y)))",
                        "(= (shape (" + op + " x (Reshape y s1))) (shape x))",
                    ),
                ),
                Variant(
                    f"({op} x (Reshape y s2))",
                    f"({op} x y)",
                    (
                        "(= s2 (vec-append (vec-of 1 1) (shape y)))",
                        "(= (shape (" + op + " x (Reshape y s2))) (shape x))",
                    ),
                ),
            )
        ),
        _implicit_broadcast_example,
    ),
]


def _bias_through_reshape(rs: int, rb: int, flipped: bool) -> Variant:
    """(y reshaped to s) + b, b broadcast over the trailing dims y's last dim was split into."""
    trailing = [f"(vec-get s {i})" for i in range(rs - rb, rs)]
    product = trailing[-1]
    for term in reversed(trailing[:-1]):
        product = f"(* {term} {product})"
    lhs = "(Add b (Reshape y s))" if flipped else "(Add (Reshape y s) b)"
    inner = "(Add (Reshape b (vec-of n)) y)" if flipped else "(Add y (Reshape b (vec-of n)))"
    return Variant(
        lhs,
        f"(Reshape {inner} s)",
        (
            "(= (vec-length (shape y)) 2)",
            "(= n (vec-get (shape y) 1))",
            f"(= (vec-length s) {rs})",
            f"(= (shape b) (vec-of {' '.join(trailing)}))",
            f"(= n {product})",
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
        "reshape-into-cast",
        "a cast is elementwise, so a reshape of a cast is the cast of the reshape",
        "(Reshape (Cast x d) s)",
        "(Cast (Reshape x s) d)",
        example=lambda rng: (lambda ex: {"x": ex["x"], "s": ex["s2"], "d": "float16"})(_two_shapes(rng)),
    )
)
