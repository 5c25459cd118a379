"""Cast removal: identity casts and lossless round trips (f32 -> f64 -> f32)."""

from __future__ import annotations

from typing import Any

from eqsat.ir import TensorType

from .base import Rule, Variant, rand_shape, rule
from .terms import Cast, dtype_of, equal

# (source, wider) pairs: every source value is exactly representable in the wider type.
LOSSLESS = (
    ("float16", "float32"),
    ("float16", "float64"),
    ("bfloat16", "float32"),
    ("bfloat16", "float64"),
    ("float32", "float64"),
    ("int8", "int16"),
    ("int8", "int32"),
    ("int8", "int64"),
    ("int16", "int32"),
    ("int16", "int64"),
    ("int32", "int64"),
    ("uint8", "int16"),
    ("uint8", "int32"),
    ("uint8", "int64"),
    ("bool", "int8"),
    ("bool", "int32"),
    ("bool", "float32"),
)


def _roundtrip_example(rng: Any) -> dict[str, Any]:
    src, wide = LOSSLESS[int(rng.integers(len(LOSSLESS)))]
    return {"x": TensorType(rand_shape(rng, 2), src), "d1": wide, "d2": src}


def _identity_example(rng: Any) -> dict[str, Any]:
    return {"x": TensorType(rand_shape(rng, 2), "float32"), "d": "float32"}


RULES = [
    rule(
        "cast-identity",
        "a cast to the dtype a tensor already has does nothing",
        Cast("x", dtype="d"),
        "x",
        equal(dtype_of("x"), "d"),
        example=_identity_example,
    ),
    Rule(
        "cast-roundtrip",
        "casting to a wider type and back is lossless, so it does nothing",
        tuple(
            Variant(
                Cast(Cast("x", dtype="d1"), dtype="d2"),
                "x",
                (equal("d2", src), equal("d1", wide), equal(dtype_of("x"), "d2")),
            )
            for src, wide in LOSSLESS
        ),
        _roundtrip_example,
    ),
]
