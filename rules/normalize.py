"""Normalizations in any spelling.

Layer norm and RMS norm over the last axis become the ops ``layer_norm`` and ``rms_norm`` (exact: each
computes as its expansion), through ``reduce_mean`` (a sum times 1/n, exactly, or divided by n): the
core ``x * rsqrt(mean(x²) + eps)`` or ``(x - mean) * rsqrt(var + eps)`` in either order, then a vector
along the last axis multiplied (the scale) or added (the bias). An RMS norm's scale then moves into the
constant weights of the matmul after it.

A batch norm's affine part after a conv folds into it in any spelling. Precomputed, ``y * s + t`` (s
and t computed from parameters): its weights scaled per output channel (``per-channel-scale-into-conv``),
t its bias (``conv-bias-epilogue``). ``(y - mean) / sqrt(var + eps) * gamma + beta`` or with ``rsqrt``:
a division by a square root is a product by its reciprocal root, constant factors gather, and
``batch-norm-written-out`` reads a batch norm, which ``batch-norm-into-conv`` folds. A constant factor
distributes over a constant offset, and constant offsets gather, only where that cannot cancel
(``rules/ranges.py``: never over run-time data near the offset).

The regrouping steps are guarded by the analysis's ``parameter-value`` (computed from leaves only, at
least one a parameter: its arithmetic is done once, where XLA folds constants; products of literals
alone are the ``algebra`` rules', which bound their magnitude) and by float32/float64 (regrouping
rounds differently); none of them is exact in IEEE arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from eqsat.egglog_text import PARAMETER_VALUE
from eqsat.ir import TensorType
from eqsat.ops.conv import CONV_AXES, LAYOUTS

from .algebra import PRODUCTS_IN_RANGE
from .base import MODERATE, Rule, Variant, rand_shape, rand_unit_axes
from .ranges import RANGES, Magnitude, cancels_little, exact_fold, in_range
from .terms import (
    SCALAR,
    Add,
    Conv2d,
    Div,
    Fact,
    Full,
    LayerNorm,
    Linear,
    Matmul,
    Maximum,
    Mul,
    Neg,
    ReduceMean,
    ReduceSum,
    Reshape,
    RmsNorm,
    Rsqrt,
    Scale,
    Sqrt,
    Sub,
    as_f64,
    dim,
    dtype_of,
    equal,
    float_dtype,
    get,
    last_axis,
    length,
    parameter_value,
    rank,
    set_item,
    shape_of,
    var,
    vec,
    wide_float,
)

F32 = "float32"


def _kept(*terms: str) -> tuple[Fact, ...]:
    """Guards: y's dtype is float32/float64, c1 and c2 are computed from leaves, and the terms (the
    left side and its inner op) have y's shape: the constants do not broadcast y to a larger one."""
    return (
        wide_float(dtype_of("y")),
        parameter_value("c1"),
        parameter_value("c2"),
        *(equal(shape_of(t), shape_of("y")) for t in terms),
    )


def _regroup(outer: Any, inner: Any, rhs: str, ranges: tuple[Fact, ...]) -> Variant:
    """``outer(inner(y, c1), c2)`` -> ``rhs``, guarded by ``_kept`` and the ``ranges`` of what it folds."""
    lhs = outer(inner("y", "c1"), "c2")
    return Variant(lhs, rhs, (*_kept(inner("y", "c1"), lhs), *ranges))


C1, C2 = Magnitude.of("c1"), Magnitude.of("c2")
# (y ± c1) * c2 = y * c2 ± c1 * c2: the factor and the folded offset in range
_OVER_OFFSET = (*in_range(C2), *in_range(C1 * C2))
# An offset fold's example draws these nonnegative: y + c1 (+ c2) is then away from 0 and its range
# says so, as a weight's would (y - c1 is not, nor anything over normal data: the guard refuses those)
_APART = ("y", "c1", "c2")
_FOLDED = (*PARAMETER_VALUE, *RANGES)


def _offset_folded(
    outer: Any, inner: Any, rhs: str, ranges: tuple[Fact, ...], offset: Magnitude
) -> tuple[Variant, ...]:
    """``_regroup`` where the ``offset`` it folds cancels little relative to the value the program
    computes first (``inner(y, c1)`` for a factor, the whole sum for offsets; known only where y's range
    is), and where c1 or c2 is all zeros (exact): never over run-time data that could cancel."""
    first = inner("y", "c1")
    result = first if outer is Mul else outer(first, "c2")
    return tuple(
        _regroup(outer, inner, rhs, (*ranges, *when))
        for when in (cancels_little(offset, result), exact_fold(C1, C2))
    )


def _example(rng: Any) -> dict[str, Any]:
    """y of rank 1-4 and constants of shapes broadcasting to it (some axes 1)."""
    shape = rand_shape(rng, int(rng.integers(1, 5)))
    small = {c: TensorType(rand_unit_axes(rng, shape, 0.5), F32) for c in ("c1", "c2")}
    return {"y": TensorType(shape, F32), "u": TensorType(shape, F32), **small}


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
        equal("o", get("sy", axes.channel)),
        equal(shape_of("f"), vec(ones)),
        parameter_value("f"),
        wide_float(dtype_of("x")),
        *in_range(Magnitude.of("w") * Magnitude.of("f")),
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


ONE = Full(shape=SCALAR, value=1.0, dtype="d")
ZERO = Full(shape=SCALAR, value=0.0, dtype="d")
_N = dim("x", "a")  # the length of the reduced axis
_MEAN_GUARD = (float_dtype(dtype_of("x")),)
# c is 1/n exactly: n a power of two (else a product by the rounded inverse is not the division, even
# where c * n rounds to 1)
_INVERSE = (equal("n", _N), equal(var("n") & (var("n") - 1), 0), equal(var("c") * as_f64("n"), 1.0))


def _last_axis(reshaped: bool) -> tuple[Fact, ...]:
    """Guards: a is x's last axis, d its dtype, and (``reshaped``) s its shape with that axis 1."""
    guards = (equal("a", last_axis("x")), equal("d", dtype_of("x")))
    return (*guards, equal("s", set_item(shape_of("x"), "a", 1))) if reshaped else guards


def _rms_core(keep: bool) -> tuple[Variant, ...]:
    """x * rsqrt(mean(x², last axis) + eps), either order: the mean reduced without the axis and the
    root reshaped back (as the layout pass leaves it), or keeping the axis."""
    mean = ReduceMean(Mul("x", "x"), axis="a", keepdim=int(keep))
    root = Rsqrt(Add(mean, Full(shape=SCALAR, value="eps", dtype="d")))
    root = root if keep else Reshape(root, shape="s")
    guards = _last_axis(reshaped=not keep)
    return tuple(
        Variant(lhs, RmsNorm("x", ONE, epsilon="eps"), guards) for lhs in (Mul("x", root), Mul(root, "x"))
    )


def _vectors(name: str) -> tuple[str, str]:
    """A vector of x's last axis as written: plain, or reshaped to broadcast (its shape ``s<name>``)."""
    return name, Reshape(name, shape=f"s{name}")


def _along_last(op: Any, norm: str, normalized: Callable[[str], str]) -> tuple[Variant, ...]:
    """``op(norm, g)``, either order, g a vector of x's last axis (plain, or reshaped to broadcast),
    is ``normalized(g)``."""
    n = dim("x", last_axis("x"))
    out = []
    for g in _vectors("g"):
        for lhs in (op(norm, g), op(g, norm)):
            guards = (equal(shape_of("g"), vec([n])), equal(shape_of(lhs), shape_of("x")))
            out.append(Variant(lhs, normalized("g"), guards))
    return tuple(out)


def _layer(scale: str, bias: str) -> str:
    """layer_norm(x, scale, bias) with its epsilon and variance kind as variables (ONE, ZERO: 1, 0)."""
    named = {"ONE": ONE, "ZERO": ZERO}
    return LayerNorm("x", named.get(scale, scale), named.get(bias, bias), epsilon="eps", fast_variance="fv")


def _statistics(fast: bool) -> tuple[str, str, str]:
    """The mean, x - mean and rsqrt(var + eps) of a layer norm, the statistics reduced without the last
    axis and reshaped back: var = mean((x - mean)²), or max(0, mean(x²) - mean²) (flax's fast variance)."""
    mean = ReduceMean("x", axis="a")
    centered = Sub("x", Reshape(mean, shape="s"))
    if fast:
        var = Maximum(ZERO, Sub(ReduceMean(Mul("x", "x"), axis="a"), Mul(mean, mean)))
    else:
        var = ReduceMean(Mul(centered, centered), axis="a")
    root = Reshape(Rsqrt(Add(var, Full(shape=SCALAR, value="eps", dtype="d"))), shape="s")
    return mean, centered, root


def _layer_core(fast: bool) -> tuple[Variant, ...]:
    """(x - mean) * rsqrt(var + eps), either order."""
    _, centered, root = _statistics(fast)
    guards = _last_axis(reshaped=True)
    norm = LayerNorm("x", ONE, ZERO, epsilon="eps", fast_variance=int(fast))
    return tuple(Variant(lhs, norm, guards) for lhs in (Mul(centered, root), Mul(root, centered)))


def _distributed() -> tuple[Variant, ...]:
    """Keras's order: inv = rsqrt(var + eps) [* g], then x * inv + ((-mean) * inv [+ h]); the scale g
    and the bias h each present or not, plain or reshaped."""
    mean, _, root = _statistics(fast=False)
    n = _N
    out = []
    for g in (None, *_vectors("g")):
        inv = root if g is None else Mul(root, g)
        for h in (None, *_vectors("h")):
            spread = Mul(Reshape(Neg(mean), shape="s"), inv)
            lhs = Add(Mul("x", inv), spread if h is None else Add(spread, h))
            present = [v for v, term in (("g", g), ("h", h)) if term is not None]
            guards = (
                *_last_axis(reshaped=True),
                equal(shape_of(lhs), shape_of("x")),
                *(equal(shape_of(v), vec([n])) for v in present),
            )
            scale, bias = ("g" if g else ONE), ("h" if h else ZERO)
            norm = LayerNorm("x", scale, bias, epsilon="eps", distributed=1)
            out.append(Variant(lhs, norm, guards))
    return tuple(out)


def _vector_outermost() -> tuple[Variant, ...]:
    """(g * r) * z, in either order of each product, r a root ``rsqrt(u)`` (reshaped to broadcast or
    not), g a vector along the last axis (plain or reshaped) and z of the result's shape (so r * z is
    too): (r * z) * g."""
    n = dim("z", last_axis("z"))
    out = []
    for root in (Rsqrt("u"), Reshape(Rsqrt("u"), shape="sr")):
        for g in _vectors("g"):
            for inner in (Mul(g, root), Mul(root, g)):
                for lhs in (Mul(inner, "z"), Mul("z", inner)):
                    guards = (
                        equal(shape_of("g"), vec([n])),
                        equal(shape_of(lhs), shape_of("z")),  # then r * z has lhs's shape too
                        wide_float(dtype_of("z")),
                    )
                    out.append(Variant(lhs, Mul(Mul(root, "z"), "g"), guards))
    return tuple(out)


def _outermost_example(rng: Any) -> dict[str, Any]:
    """z of rank 2-4, u a positive per-row statistic (with the last axis, or without it and ``sr``
    its shape with the axis 1), g along the last axis."""
    ex = _norm_example(rng)
    shape = ex["x"].shape
    rows = (*shape[:-1], 1)
    u = TensorType(rows if rng.integers(2) else shape[:-1], F32)
    return {**ex, "z": ex["x"], "u": u, "sr": rows}


def _scaled_weights(ty: int) -> str:
    """w with its rows (its columns when transposed: ``transpose_y``) scaled by the vector g."""
    if ty == 0:
        return Mul(Reshape("g", shape=vec(["n", 1])), "w")
    return Mul("w", Reshape("g", shape=vec([1, "n"])))


def _weights_guards() -> tuple[Fact, ...]:
    """g a vector of n, w a matrix, both computed from parameters."""
    return (
        equal("sv", shape_of("g")),
        equal(length("sv"), 1),
        equal("n", get("sv", 0)),
        equal(rank("w"), 2),
        wide_float(dtype_of("x")),
        parameter_value("g"),
        parameter_value("w"),
        *in_range(Magnitude.of("g") * Magnitude.of("w")),
    )


def _rms_into_matmul() -> tuple[Variant, ...]:
    """rms_norm(x, g) @ w is rms_norm(x, 1) @ (g[:, None] * w) (or w * g[None, :] for a transposed
    w): the scale moves into constant weights; for matmul and linear."""
    norm, bare = RmsNorm("x", "g", epsilon="eps"), RmsNorm("x", ONE, epsilon="eps")
    out = []
    for ty in (0, 1):
        scaled = _scaled_weights(ty)
        out.append(
            Variant(
                Matmul(norm, "w", transpose_y=ty, dtype="d"),
                Matmul(bare, scaled, transpose_y=ty, dtype="d"),
                _weights_guards(),
            )
        )
        out.append(
            Variant(
                Linear(norm, "w", "b", transpose_y=ty, act="act", dtype="d"),
                Linear(bare, scaled, "b", transpose_y=ty, act="act", dtype="d"),
                _weights_guards(),
            )
        )
    return tuple(out)


def _norm_example(rng: Any) -> dict[str, Any]:
    """x of rank 2-4 and the vectors, shapes and constants the normalization rules bind."""
    shape = rand_shape(rng, int(rng.integers(2, 5)))
    n, m = shape[-1], int(rng.integers(1, 5))
    return {
        "x": TensorType(shape, F32),
        "a": len(shape) - 1,
        "s": (*shape[:-1], 1),
        "sg": (1,) * (len(shape) - 1) + (n,),
        "g": TensorType((n,), F32),
        "w": TensorType((n, m) if rng.integers(2) else (m, n), F32),  # for w or its transpose
        "b": TensorType((m,), F32),
        "eps": 1e-5,
        "d": F32,
        "c": 1.0 / shape[-1],
        "nf": float(shape[-1]),
        "act": "none",
    }


def _layer_example(rng: Any) -> dict[str, Any]:
    """The normalization example with a layer norm's bias h and variance kind."""
    ex = _norm_example(rng)
    return {**ex, "h": ex["g"], "sh": ex["sg"], "fv": int(rng.integers(0, 2))}


RULES = [
    Rule(
        "mean-of-sum",
        "a sum times 1/n (n a power of two: exactly) or divided by n, n the summed axis's length, is the "
        "mean",
        (
            Variant(
                Mul(ReduceSum("x", axis="a", keepdim="k"), Full(shape=SCALAR, value="c", dtype="d")),
                ReduceMean("x", axis="a", keepdim="k"),
                (*_MEAN_GUARD, *_INVERSE),
            ),
            Variant(
                Scale(ReduceSum("x", axis="a", keepdim="k"), scale="c"),
                ReduceMean("x", axis="a", keepdim="k"),
                (*_MEAN_GUARD, *_INVERSE),
            ),
            Variant(
                Div(ReduceSum("x", axis="a", keepdim="k"), Full(shape=SCALAR, value="nf", dtype="d")),
                ReduceMean("x", axis="a", keepdim="k"),
                (*_MEAN_GUARD, equal("nf", as_f64(_N))),
            ),
        ),
        lambda rng: {**_norm_example(rng), "k": int(rng.integers(0, 2))},
    ),
    Rule(
        "rms-norm",
        "x * rsqrt(mean(x², last axis) + eps), either order, is rms_norm(x) (its scale 1)",
        (*_rms_core(keep=False), *_rms_core(keep=True)),
        _norm_example,
    ),
    Rule(
        "rms-norm-scale",
        "rms_norm(x, 1) times a vector along x's last axis is rms_norm(x) with that scale",
        _along_last(Mul, RmsNorm("x", ONE, epsilon="eps"), lambda g: RmsNorm("x", g, epsilon="eps")),
        _norm_example,
    ),
    Rule(
        "max-zero-of-mean-square",
        "max(0, mean(y * y)) is mean(y * y): a mean of squares is not negative (NaN stays NaN)",
        (Variant(Maximum(ZERO, ReduceMean(Mul("y", "y"), axis="a")), ReduceMean(Mul("y", "y"), axis="a")),),
        lambda rng: (lambda ex: {**ex, "y": ex["x"]})(_norm_example(rng)),
    ),
    Rule(
        "layer-norm",
        "(x - mean) * rsqrt(variance + eps) over the last axis, either order, is layer_norm(x) (scale 1, "
        "bias 0), the variance two-pass or flax's fast max(0, E[x²] - E[x]²)",
        (*_layer_core(fast=False), *_layer_core(fast=True)),
        _norm_example,
    ),
    Rule(
        "layer-norm-affine",
        "layer_norm(x) times a vector along the last axis is its scale; plus one, its bias",
        (
            *_along_last(Mul, _layer("ONE", "ZERO"), lambda g: _layer(g, "ZERO")),
            *_along_last(Add, _layer("h", "ZERO"), lambda g: _layer("h", g)),
        ),
        _layer_example,
    ),
    Rule(
        "vector-factor-outermost",
        "(g * rsqrt(u)) * z, g a vector along the last axis, is (rsqrt(u) * z) * g: a norm's scale applied "
        "to its root first (haiku's scale * rsqrt(var + eps) * (x - mean)) moves after the core it scales "
        "(1 rounding; the core, a normalized value, stays in range)",
        _vector_outermost(),
        _outermost_example,
        exact=False,
        assumes=PRODUCTS_IN_RANGE,
    ),
    Rule(
        "layer-norm-distributed",
        "x * inv + (-mean * inv + bias), inv = rsqrt(variance + eps) * scale, is layer_norm in Keras's "
        "order (scale and bias each optional)",
        _distributed(),
        _layer_example,
    ),
    Rule(
        "rms-norm-scale-into-matmul",
        "rms_norm(x, g) @ w is rms_norm(x) @ (g[:, None] * w): the scale moves into the constant weights "
        "(as the superoptimizers' RMSNorm + matmul programs do)",
        _rms_into_matmul(),
        _norm_example,
        prelude=_FOLDED,
        exact=False,
    ),
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
        (_regroup(Mul, Mul, Mul("y", Mul("c1", "c2")), in_range(C1 * C2)),),
        _example,
        prelude=_FOLDED,
        exact=False,
    ),
    Rule(
        "constant-factor-outward",
        "y * (z * c) is (y * z) * c for a constant c (flax multiplies the scale into the root first)",
        (
            Variant(
                Mul("y", Mul("z", "c2")),
                Mul(Mul("y", "z"), "c2"),
                (
                    wide_float(dtype_of("y")),
                    parameter_value("c2"),
                    equal(shape_of(Mul("z", "c2")), shape_of("y")),
                    *in_range(C2, limit=MODERATE),  # y * z overflows only where y * z * c2 is huge
                ),
            ),
        ),
        lambda rng: (lambda ex: {**ex, "z": ex["y"]})(_example(rng)),
        prelude=_FOLDED,
        exact=False,
    ),
    Rule(
        "constant-factor-over-offset",
        "(y - c1) * c2 is y * c2 - c1 * c2, and (y + c1) * c2 is y * c2 + c1 * c2, for constants c1, c2, "
        "where |c1| is at most 2**10 times |y ∓ c1| (y's range known: a weight's) or c1 or c2 is 0: "
        "over run-time data near c1 the folded c1 * c2 would cancel",
        (
            *_offset_folded(Mul, Sub, Sub(Mul("y", "c2"), Mul("c1", "c2")), _OVER_OFFSET, C1),
            *_offset_folded(Mul, Add, Add(Mul("y", "c2"), Mul("c1", "c2")), _OVER_OFFSET, C1),
        ),
        _example,
        prelude=_FOLDED,
        exact=False,
        positive=_APART,
    ),
    Rule(
        "constant-offsets-together",
        "(y - c1) + c2 is y + (c2 - c1), and (y + c1) + c2 is y + (c1 + c2), for constants c1, c2, "
        "where |c1| + |c2| is at most 2**10 times the result (y's range known: a weight's) or c1 or c2 "
        "is 0: over run-time data the folded offset would cancel",
        (
            *_offset_folded(Add, Sub, Add("y", Sub("c2", "c1")), in_range(C1 + C2, nonzero=False), C1 + C2),
            *_offset_folded(Add, Add, Add("y", Add("c1", "c2")), in_range(C1 + C2, nonzero=False), C1 + C2),
        ),
        _example,
        prelude=_FOLDED,
        exact=False,
        positive=_APART,
    ),
    Rule(
        "per-channel-scale-into-conv",
        "a conv times a per-channel constant is the conv by weights scaled per output channel",
        tuple(v for layout in LAYOUTS for v in _into_conv(layout)),
        _conv_example,
        prelude=_FOLDED,
        exact=False,
    ),
]
