"""Reshape and expand composition and identity removal."""

from __future__ import annotations

from typing import Any

from eqsat.ir import TensorType

from .base import rand_shape, rule


def _two_shapes(rng: Any) -> dict[str, Any]:
    a, b = (int(v) for v in rng.integers(1, 5, 2))
    return {"x": TensorType((a, b, 2), "float32"), "s1": (b, a * 2), "s2": (a * b * 2,)}


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
        "expand-identity",
        "an expand to the shape a tensor already has does nothing",
        "(Expand x s)",
        "x",
        "(= (shape x) s)",
        example=_same_shape,
    ),
]
