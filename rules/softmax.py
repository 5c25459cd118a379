"""Softmax and its stats form (ByteIR's ``linalg_ext.softmax``): ``softmax(x) = exp(x - m) / l`` with
``m = max(x)``, ``l = sum(exp(x - m))``; over blocks the stats compose: ``m = max(m1, m2)`` and
``l = l1·exp(m1 - m) + l2·exp(m2 - m)`` — the identities flash attention streams with.

The same rules recognize softmax written out by hand or by ``jax.nn.softmax`` (whose max is taken
against ``-inf`` and whose reductions drop the axis and reshape it back), or without the max
(``exp(x) / sum(exp(x))``). Every softmax is also a ``masked_softmax``: of ``where(mask, x, fill)``, in x's
dtype or cast, with the masked probabilities zeroed after it (``where(mask, p, 0)``, Keras's masked
softmax) or not — the one form attention is recognized from, whatever the spelling.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from eqsat.ir import TensorType

from .base import Rule, Variant, rand_perm, rand_shape, rule
from .terms import (
    SCALAR,
    Add,
    Cast,
    Concat,
    Div,
    Exp,
    Full,
    IsFinite,
    MaskedSoftmax,
    Matmul,
    Maximum,
    Mul,
    Operand,
    ReduceMax,
    ReduceSum,
    Reshape,
    Select,
    Softmax,
    StopGradient,
    Sub,
    TList,
    Transpose,
    Var,
    dim,
    dtype_of,
    equal,
    float_dtype,
    get,
    last_axis,
    length,
    rank,
    remove,
    set_item,
    shape_of,
    var,
)

F32 = "float32"
# The softmax ops' attributes as pattern variables (their examples bind them by the same objects)
AXIS, FILL, ZERO_MASKED, SHIFTED = var("a"), var("f"), var("zm"), var("sh")


def _stats(x: str, a: Operand) -> tuple[str, str]:
    e = Exp(Sub(x, ReduceMax(x, axis=a, keepdim=1)))
    return e, ReduceSum(e, axis=a, keepdim=1)


def _x_axis(rng: Any) -> dict[str | Var, Any]:
    shape = rand_shape(rng, int(rng.integers(1, 4)))
    return {"x": TensorType(shape, F32), AXIS: int(rng.integers(len(shape)))}


def _masked_example(rng: Any) -> dict[str | Var, Any]:
    """x, a mask of its shape, a fill, an axis, x's dtype (d) and another (dc) for casts."""
    ex = _x_axis(rng)
    shape = ex["x"].shape
    return {
        **ex,
        "m": TensorType(shape, "bool"),
        FILL: float(rng.choice([-1e9, -np.inf, -30.0])),
        "sf": shape,
        "sz": shape,
        "d": F32,
        "df": F32,
        "dc": str(rng.choice(["float64", "float16", F32])),
        ZERO_MASKED: int(rng.integers(0, 2)),
        SHIFTED: int(rng.integers(0, 2)),
    }


def _shift_example(rng: Any) -> dict[str | Var, Any]:
    """x, an axis, a shift m of x's shape with that axis 1, and x's dtype."""
    ex = _blocks(rng)
    return {"x": ex["x"], AXIS: ex[AXIS], "m": ex["m"], "d": F32}


def _blocks(rng: Any) -> dict[str | Var, Any]:
    ex = _x_axis(rng)
    other = list(ex["x"].shape)
    other[ex[AXIS]] = int(rng.integers(1, 5))
    stats_shape = list(ex["x"].shape)
    stats_shape[ex[AXIS]] = 1
    return {**ex, "x2": TensorType(tuple(other), F32), "m": TensorType(tuple(stats_shape), F32)}


_E, _L = _stats("x", AXIS)
_ROW = set_item(shape_of("x"), AXIS, 1)  # the shape of x's statistics along a
_NEG_INF = Full(shape=SCALAR, value=float("-inf"), dtype="d")
# The row max where it is finite, else 0 (FlashAttention's guard): exp(x - max) is then never inf - inf.
_MAX = ReduceMax("x", axis=AXIS, keepdim=1)
_SAFE_MAX = Select(IsFinite(_MAX), _MAX, Full(shape="sm", value=0.0, dtype="d"))


def _shifted(m: str) -> tuple[str, str]:
    """exp(x - m) and its sum along a, for a shift m of x's shape with a's length 1."""
    e = Exp(Sub("x", m))
    return e, ReduceSum(e, axis=AXIS, keepdim=1)


def _float32_sum(e: str) -> str:
    """The sum of ``e`` along ``a`` accumulated in float32 and cast back to ``d`` (jnp.sum of half
    precision)."""
    return Cast(ReduceSum(Cast(e, dtype="float32"), axis=AXIS, keepdim=1), dtype="d")


_TRUE = Full(shape=SCALAR, value=1.0, dtype="bool")
_SG_E, _SG_L = _shifted(StopGradient("m"))
_M_E, _M_L = _shifted("m")
_SHIFT = (equal(shape_of("m"), _ROW),)
_FILL = Full(shape="sf", value=FILL, dtype="df")
_IN_X = (equal("d", dtype_of("x")),)


def _masked(x: str, dtype: str, mask: str = "m", fill: Operand = FILL, zero: Operand = 0) -> str:
    return MaskedSoftmax(x, mask, fill=fill, zero_masked=zero, axis=AXIS, dtype=dtype, shifted=SHIFTED)


_SOFTMAX = Softmax("x", axis=AXIS, shifted=SHIFTED)


def _rows_example(rng: Any) -> dict[str | Var, Any]:
    """p (..., q, k) and v (..., k, d) or its transpose, l (..., q, 1): a per-row divisor."""
    batch = rand_shape(rng, int(rng.integers(0, 3)))
    q, k, d = (int(n) for n in rng.integers(1, 6, 3))
    ty = int(rng.integers(2))
    v = (*batch, d, k) if ty else (*batch, k, d)
    return {
        "p": TensorType((*batch, q, k), F32),
        "v": TensorType(v, F32),
        "l": TensorType((*batch, q, 1), F32),
        "ty": ty,
        "d": F32,
    }


_ROWS = Matmul("p", "v", transpose_y="ty", dtype="d")


# the softmax is over the last axis of s, which is x's last dim
_KEEPS_ROWS = (
    equal(AXIS, length("s") - 1),
    equal("ax", last_axis("x")),
    equal(get("s", AXIS), dim("x", "ax")),
)


def _regrouped_example(rng: Any) -> dict[str | Var, Any]:
    """x (..., g * h, n) and s: its leading dims regrouped (g, h split out), the last kept; a mask of
    s and the masked softmax's attributes."""
    g, h, n = (int(v) for v in rng.integers(1, 4, 3))
    lead = rand_shape(rng, int(rng.integers(0, 2)))
    split = int(rng.integers(2))
    x, shape = ((*lead, g * h, n), (*lead, g, h, n)) if split else ((*lead, g, h, n), (*lead, g * h, n))
    ex = _masked_example(rng)
    return {**ex, "x": TensorType(x, F32), "s": shape, "m": TensorType(shape, "bool"), AXIS: len(shape) - 1}


RULES = [
    Rule(
        "normalize-before-product",
        "(p @ v) / l, l one divisor per row of p, is (p / l) @ v: a softmax normalized after its product "
        "with v (MaxText's exp(s - max) @ v / sum) is normalized before it (1 rounding per row moves)",
        (
            Variant(
                Div(_ROWS, "l"),
                Matmul(Div("p", "l"), "v", transpose_y="ty", dtype="d"),
                (
                    equal(shape_of("l"), set_item(shape_of("p"), last_axis("p"), 1)),
                    equal(rank("p"), rank(_ROWS)),
                    equal("d", dtype_of("p")),
                    float_dtype("d"),
                ),
            ),
        ),
        _rows_example,
        exact=False,
        assumes="p / l stays in range (a softmax's exponentials over their sum are in [0, 1])",
    ),
    Rule(
        "softmax-stats-form",
        "exp(x - m) / l with m = max(x), l = sum(exp(x - m)) is softmax(x) (l summed in float32 for half "
        "precision, as jax.nn.softmax does)",
        (
            Variant(Div(_E, _L), Softmax("x", axis=AXIS)),
            Variant(Div(_E, _float32_sum(_E)), Softmax("x", axis=AXIS), _IN_X),
        ),
        lambda rng: {**_x_axis(rng), "d": F32},
    ),
    Rule(
        "softmax-shift-stopped",
        "exp(x - m) / sum(exp(x - m)) has the same value and gradient for every shift m, so a shift whose "
        "gradient is stopped (jax.nn.softmax's max) is the shift itself",
        (
            Variant(Div(_SG_E, _SG_L), Div(_M_E, _M_L), _SHIFT),
            Variant(Div(_SG_E, _float32_sum(_SG_E)), Div(_M_E, _float32_sum(_M_E)), (*_SHIFT, *_IN_X)),
        ),
        _shift_example,
    ),
    Rule(
        "softmax-to-stats-form",
        "softmax(x) = exp(x - m) / l, m = max(x), l = sum(exp(x - m)): the stats form the block rules "
        "work on (off by default: it grows every softmax's class, in every layout, by its expansion)",
        (Variant(Softmax("x", axis=AXIS), Div(_E, _L)),),
        _x_axis,
        default=False,
    ),
    Rule(
        "block-stats-max",
        "the max over two blocks is the max of the blocks' maxes",
        (
            Variant(
                ReduceMax(Concat(TList("x", "x2"), axis=AXIS), axis=AXIS, keepdim=1),
                Maximum(ReduceMax("x", axis=AXIS, keepdim=1), ReduceMax("x2", axis=AXIS, keepdim=1)),
            ),
        ),
        _blocks,
    ),
    Rule(
        "block-stats-sum",
        "the sum over two blocks is the sum of the blocks' sums",
        (
            Variant(
                ReduceSum(Concat(TList("x", "x2"), axis=AXIS), axis=AXIS, keepdim=1),
                Add(ReduceSum("x", axis=AXIS, keepdim=1), ReduceSum("x2", axis=AXIS, keepdim=1)),
            ),
        ),
        _blocks,
        exact=False,
    ),
    rule(
        "stats-rescale",
        "sum(exp(x - m)) = sum(exp(x - mx)) * exp(mx - m), mx = max(x) where finite, else 0: a block's "
        "sum rescaled to a new max (a fully masked -inf row stays 0, a row with +inf stays inf)",
        ReduceSum(Exp(Sub("x", "m")), axis=AXIS, keepdim=1),
        Mul(ReduceSum(Exp(Sub("x", _SAFE_MAX)), axis=AXIS, keepdim=1), Exp(Sub(_SAFE_MAX, "m"))),
        equal("sm", shape_of("m")),
        equal("sm", _ROW),
        equal("d", dtype_of("x")),
        example=_blocks,
        exact=False,
    ),
    Rule(
        "max-with-neg-inf",
        "max(-inf, y) = y (a scalar -inf broadcast against y; at y = -inf, no derivative exists, and y "
        "takes the whole cotangent where JAX splits it)",
        (
            Variant(Maximum(_NEG_INF, "y"), "y"),
            Variant(Maximum("y", _NEG_INF), "y"),
        ),
        lambda rng: {"y": TensorType(rand_shape(rng, 2), F32), "d": F32},
    ),
    Rule(
        "reduce-keepdim",
        "a reduction that drops the axis, reshaped to put it back, is the reduction keeping it",
        (
            *(
                Variant(
                    Reshape(reduce("x", axis=AXIS), shape="s"),
                    reduce("x", axis=AXIS, keepdim=1),
                    (equal("s", _ROW),),
                )
                for reduce in (ReduceMax, ReduceSum)
            ),
        ),
        lambda rng: (
            lambda ex: {**ex, "s": tuple(1 if i == ex[AXIS] else d for i, d in enumerate(ex["x"].shape))}
        )(_x_axis(rng)),
    ),
    Rule(
        "reduce-drop-axis",
        "a reduction that keeps the axis, reshaped to drop it, is the reduction dropping it (as the "
        "unit-dims pass writes a keepdims mean before an elementwise op)",
        tuple(
            Variant(
                Reshape(reduce("x", axis=AXIS, keepdim=1), shape="s"),
                reduce("x", axis=AXIS),
                (equal("s", remove(shape_of("x"), AXIS)),),
            )
            for reduce in (ReduceMax, ReduceSum)
        ),
        lambda rng: (lambda ex: {**ex, "s": tuple(d for i, d in enumerate(ex["x"].shape) if i != ex[AXIS])})(
            _x_axis(rng)
        ),
    ),
    Rule(
        "softmax-of-transpose",
        "softmax over axis a of x transposed by p is the softmax over x's axis p[a], transposed by p",
        (
            Variant(
                Softmax(Transpose("x", perm="p"), axis=AXIS, shifted=SHIFTED),
                Transpose(Softmax("x", axis=get("p", AXIS), shifted=SHIFTED), perm="p"),
            ),
        ),
        lambda rng: (
            lambda ex: {**ex, "p": rand_perm(rng, len(ex["x"].shape)), SHIFTED: int(rng.integers(0, 2))}
        )(_x_axis(rng)),
    ),
    Rule(
        "softmax-of-reshape",
        "a softmax over the last axis of x reshaped, where the reshape keeps that axis (rows stay rows: "
        "heads split or merged before it, as grouped-query attention does), is x's softmax reshaped",
        (
            Variant(
                Softmax(Reshape("x", shape="s"), axis=AXIS, shifted=SHIFTED),
                Reshape(Softmax("x", axis="ax", shifted=SHIFTED), shape="s"),
                _KEEPS_ROWS,
            ),
            Variant(
                _masked(Reshape("x", shape="s"), "d", fill=FILL, zero=ZERO_MASKED),
                Reshape(
                    MaskedSoftmax(
                        "x",
                        Reshape("m", shape="sx"),
                        fill=FILL,
                        zero_masked=ZERO_MASKED,
                        axis="ax",
                        dtype="d",
                        shifted=SHIFTED,
                    ),
                    shape="s",
                ),
                (*_KEEPS_ROWS, equal(shape_of("m"), "s"), equal("sx", shape_of("x"))),
            ),
        ),
        _regrouped_example,
    ),
    Rule(
        "softmax-unshifted",
        "exp(x) / sum(exp(x)) is the unshifted softmax(x), which computes it as written (its overflow, "
        "inf / inf = NaN, included: no rule turns it into the shifted softmax's number)",
        (
            Variant(
                Div(Exp("x"), ReduceSum(Exp("x"), axis=AXIS, keepdim=1)), Softmax("x", axis=AXIS, shifted=0)
            ),
            Variant(Div(Exp("x"), _float32_sum(Exp("x"))), Softmax("x", axis=AXIS, shifted=0), _IN_X),
        ),
        lambda rng: {**_x_axis(rng), "d": F32},
        exact=False,
    ),
    Rule(
        "softmax-is-masked",
        "a softmax, in x's dtype or of x cast, is the masked softmax that masks nothing",
        (
            Variant(_SOFTMAX, _masked("x", "d", _TRUE, float("-inf")), _IN_X),
            Variant(
                Softmax(Cast("x", dtype="dc"), axis=AXIS, shifted=SHIFTED),
                _masked("x", "dc", _TRUE, float("-inf")),
                (float_dtype(dtype_of("x")),),
            ),
        ),
        _masked_example,
    ),
    Rule(
        "masked-softmax",
        "the softmax of where(mask, x, fill), in x's dtype or cast, is one masked softmax",
        (
            Variant(Softmax(Select("m", "x", _FILL), axis=AXIS, shifted=SHIFTED), _masked("x", "d"), _IN_X),
            Variant(
                Softmax(Cast(Select("m", "x", _FILL), dtype="dc"), axis=AXIS, shifted=SHIFTED),
                _masked("x", "dc"),
            ),
        ),
        _masked_example,
    ),
    Rule(
        "masked-softmax-zeroed",
        "where(mask, masked_softmax(x, mask), 0) zeroes its masked probabilities (as Keras's does: a "
        "fully masked row gives 0)",
        (
            Variant(
                Select("m", _masked("x", "d"), Full(shape="sz", value=0.0, dtype="d")),
                _masked("x", "d", zero=1),
            ),
        ),
        _masked_example,
    ),
]
