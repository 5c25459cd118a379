"""Normalizations in any spelling, by small steps to a per-channel affine ``y * s + t`` (s and t
computed from parameters only), which folds into the conv before it: its weights scaled per output
channel (``per-channel-scale-into-conv``), t its bias (``conv-bias-epilogue``). A batch norm written
``(y - mean) / sqrt(var + eps) * gamma + beta``, with ``rsqrt``, or precomputed as ``y * s + t`` all
reach it: a division by a square root is a product by its reciprocal root, constant factors gather,
a constant factor distributes over a constant offset, constant offsets gather.

Every step is guarded by the analysis's ``parameter-value`` (computed from leaves only, at least one a
parameter: its arithmetic is done once, where XLA folds constants; products of literals alone are the
``algebra`` rules', which bound their magnitude) and by float32/float64 (regrouping rounds
differently); none is exact in IEEE arithmetic.
"""

from __future__ import annotations

from typing import Any

from eqsat.egraph import PARAMETER_VALUE
from eqsat.ir import TensorType
from eqsat.ops.conv import CONV_AXES, LAYOUTS

from .base import Rule, Variant, rand_shape
from .terms import (
    Add,
    Conv2d,
    Div,
    Mul,
    Reshape,
    Rsqrt,
    Sqrt,
    Sub,
    dtype_of,
    equal,
    parameter_value,
    shape_of,
    vec,
    wide_float,
)

F32 = "float32"


def _kept(*terms: str) -> tuple[str, ...]:
    """Guards: y's dtype is float32/float64, c1 and c2 are computed from leaves, and the terms (the
    left side and its inner op) have y's shape: the constants do not broadcast y to a larger one."""
    return (
        wide_float(dtype_of("y")),
        parameter_value("c1"),
        parameter_value("c2"),
        *(equal(shape_of(t), shape_of("y")) for t in terms),
    )


def _regroup(outer: Any, inner: Any, rhs: str) -> Variant:
    """``outer(inner(y, c1), c2)`` -> ``rhs``, guarded by ``_kept``."""
    lhs = outer(inner("y", "c1"), "c2")
    return Variant(lhs, rhs, _kept(inner("y", "c1"), lhs))


def _example(rng: Any) -> dict[str, Any]:
    """y of rank 1-4 and constants of shapes broadcasting to it (some axes 1)."""
    shape = rand_shape(rng, int(rng.integers(1, 5)))
    small = {c: TensorType(tuple(d if rng.random() < 0.5 else 1 for d in shape), F32) for c in ("c1", "c2")}
    return {"y": TensorType(shape, F32), "u": TensorType(shape, F32), **small}


def _positive_example(rng: Any) -> dict[str, Any]:
    return {**_example(rng), "u": TensorType(rand_shape(rng, 2), F32)}


def _conv(layout: str, w: str = "w") -> str:
    return Conv2d("x", w, strides="st", padding="p", dilations="dl", groups="g", layout=layout)


def _into_conv(layout: str) -> tuple[Variant, ...]:
    """conv(x, w) * f, f constant of the per-channel broadcast shape (1, o, 1, 1) or (1, 1, 1, o), is
    conv(x, w * f laid out along the kernel's output channels), either order."""
    axes = CONV_AXES[layout]
    ones: list[str | int] = [1, 1, 1, 1]
    ones[axes.channel] = "o"
    kernel: list[str | int] = [1, 1, 1, 1]
    kernel[axes.kernel_out] = "o"
    conv = _conv(layout)
    guards = (
        equal("sy", shape_of(conv)),
        equal("o", f"(vec-get sy {axes.channel})"),
        equal(shape_of("f"), vec(ones)),
        parameter_value("f"),
        wide_float(dtype_of("x")),
    )
    folded = _conv(layout, Mul("w", Reshape("f", shape=vec(kernel))))
    return tuple(Variant(product, folded, guards) for product in (Mul(conv, "f"), Mul("f", conv)))


def _conv_example(rng: Any) -> dict[str, Any]:
    c, o, h, w = (int(d) for d in rng.integers(1, 5, 4))
    nchw = bool(rng.integers(2))
    return {
        "x": TensorType((2, c, h + 2, w + 2) if nchw else (2, h + 2, w + 2, c), F32),
        "w": TensorType((o, c, 3, 3) if nchw else (3, 3, c, o), F32),
        "f": TensorType((1, o, 1, 1) if nchw else (1, 1, 1, o), F32),
        "st": (1, 1),
        "p": (0, 0, 0, 0),
        "dl": (1, 1),
        "g": 1,
    }


RULES = [
    Rule(
        "div-by-sqrt-is-rsqrt",
        "y / sqrt(u) is y * rsqrt(u) (rsqrt is finite for every positive u, so no new overflow)",
        (
            Variant(Div("y", Sqrt("u")), Mul("y", Rsqrt("u")), (wide_float(dtype_of("y")),)),
            Variant(  # the root reshaped to broadcast (as the layout pass leaves a per-channel vector)
                Div("y", Reshape(Sqrt("u"), shape="s")),
                Mul("y", Reshape(Rsqrt("u"), shape="s")),
                (wide_float(dtype_of("y")),),
            ),
        ),
        lambda rng: (lambda ex: {**ex, "s": ex["u"].shape})(_example(rng)),
        exact=False,
    ),
    Rule(
        "constant-factors-together",
        "(y * c1) * c2 is y * (c1 * c2) where c1 and c2 are constants: their product is computed once",
        (_regroup(Mul, Mul, Mul("y", Mul("c1", "c2"))),),
        _example,
        prelude=PARAMETER_VALUE,
        exact=False,
    ),
    Rule(
        "constant-factor-over-offset",
        "(y - c1) * c2 is y * c2 - c1 * c2, and (y + c1) * c2 is y * c2 + c1 * c2, for constants c1, c2",
        (
            _regroup(Mul, Sub, Sub(Mul("y", "c2"), Mul("c1", "c2"))),
            _regroup(Mul, Add, Add(Mul("y", "c2"), Mul("c1", "c2"))),
        ),
        _example,
        prelude=PARAMETER_VALUE,
        exact=False,
    ),
    Rule(
        "constant-offsets-together",
        "(y - c1) + c2 is y + (c2 - c1), and (y + c1) + c2 is y + (c1 + c2), for constants c1, c2",
        (
            _regroup(Add, Sub, Add("y", Sub("c2", "c1"))),
            _regroup(Add, Add, Add("y", Add("c1", "c2"))),
        ),
        _example,
        prelude=PARAMETER_VALUE,
        exact=False,
    ),
    Rule(
        "per-channel-scale-into-conv",
        "a conv times a per-channel constant is the conv by weights scaled per output channel",
        tuple(v for layout in LAYOUTS for v in _into_conv(layout)),
        _conv_example,
        prelude=PARAMETER_VALUE,
        exact=False,
    ),
]
