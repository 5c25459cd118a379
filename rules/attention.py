"""Attention: ``softmax(where(mask, q kᵀ·scale + bias, fill)) v`` recognized as one ``attention`` op,
which equals ``flash_attention`` — the same softmax computed blockwise in stats form (see
``rules/softmax.py``), streaming over key blocks without materializing the S×S scores. The cost
model picks one.

Recognition is by saturation: layout rules move transposes into matmul flags and through
elementwise ops, scales hoist (``rules/algebra.py``), ``jax.nn.softmax``'s expansion folds back into
``softmax`` (``rules/softmax.py``), constants fold (``rules/fold.py``), and the layout pass
(``eqsat.layout``) drops unit dims; what is left is one canonical form per combination of bias
(additive), mask (boolean, with its fill: ``-inf``, ``-1e9``, ``finfo.min``) and scale, with casts
around the softmax. A mask built from iota comparisons (row >= column) becomes the ``causal`` flag.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from itertools import product
from typing import Any

import numpy as np

from eqsat.ir import TensorType
from eqsat.shapes import MAX_RANK

from .base import Rule, Variant
from .terms import (
    Add,
    Attention,
    Cast,
    Expand,
    FlashAttention,
    Full,
    Ge,
    Iota,
    Le,
    Matmul,
    Reshape,
    Scale,
    Select,
    Softmax,
    differ,
    dtype_of,
    equal,
    float_dtype,
    half_float,
    shape_of,
    vec,
)

F32 = "float32"
QK = Matmul("q", "k", transpose_y=1, dtype="ds")  # scores of dtype ds
ZERO = Full(shape="(vec-empty)", value=0.0, dtype="ds")
TRUE = Full(shape="(vec-empty)", value=1.0, dtype="bool")
_LAST = f"(- (vec-length {shape_of('q')}) 1)"
_ATTRS = {"scale": "c", "fill": "f", "causal": "z", "scores_dtype": "ds", "softmax_dtype": "dm"}


def _guards(scores: str, product: str) -> tuple[str, ...]:
    """q, k, v of one rank; the product with v has q's batch dims (k's and v's broadcast to them);
    softmax over the last axis; the scores are q kᵀ's."""
    out = f"(vec-set {shape_of('q')} {_LAST} (vec-get {shape_of('v')} {_LAST}))"
    rank = f"(vec-length {shape_of('q')})"
    return (
        equal(rank, f"(vec-length {shape_of('k')})"),
        equal(rank, f"(vec-length {shape_of('v')})"),
        equal(shape_of(product), out),
        equal("a", _LAST),
        equal(shape_of(scores), shape_of(QK)),
        equal("dq", dtype_of("q")),
        float_dtype("dq"),
        float_dtype("ds"),
    )


# (scores, bias, scale): q kᵀ with or without a scale and an additive bias
_SCORES: tuple[tuple[str, str, str | float], ...] = (
    (Add(Scale(QK, scale="c"), "b"), "b", "c"),
    (Add(QK, "b"), "b", 1.0),
    (Scale(QK, scale="c"), ZERO, "c"),
    (QK, ZERO, 1.0),
)


def _masked(scores: str) -> tuple[tuple[str, str, str | float], ...]:
    """(masked scores, mask, fill): unmasked, ``where(m, s, fill)``, ``where(broadcast m, s, fill)``."""
    fill = Full(shape="sf", value="f", dtype="ds")
    return (
        (scores, TRUE, float("-inf")),
        (Select("m", scores, fill), "m", "f"),
        (Select(Expand("m", shape="se"), scores, fill), "m", "f"),
    )


# The softmax's precision, which the attention op keeps (its scores_dtype and softmax_dtype): (the
# probabilities of the masked scores, the softmax's dtype, guard). In the scores' dtype, which is q's;
# in the scores' dtype, cast to q's (float32 scores of half-precision q, as jax.nn.dot_product_attention
# computes them); in a dtype dm the scores are cast to (jax.nn.softmax of half precision in float32),
# cast to q's.
_PRECISIONS: tuple[tuple[Callable[[str], str], str, tuple[str, ...]], ...] = (
    (lambda s: Softmax(s, axis="a"), "ds", (equal("ds", "dq"),)),
    (lambda s: Cast(Softmax(s, axis="a"), dtype="dq"), "ds", ()),
    (lambda s: Cast(Softmax(Cast(s, dtype="dm"), axis="a"), dtype="dq"), "dm", (float_dtype("dm"),)),
)


def _fuse(
    scores: str, bias: str, scale: str | float, masked: str, mask: str, fill: str | float, precision: int
) -> Variant:
    probs, softmax_dtype, when = _PRECISIONS[precision]
    product = Matmul(probs(masked), "v", dtype="dq")
    attention = Attention(
        "q",
        "k",
        "v",
        bias,
        mask,
        scale=scale,
        fill=fill,
        causal=0,
        scores_dtype="ds",
        softmax_dtype=softmax_dtype,
    )
    return Variant(product, attention, (*_guards(scores, product), *when))


def _causal(rank: int, compare: str, reshaped: bool) -> Variant:
    """A mask ``row >= column`` over the last two dims (Sq, Sk) of the scores is the causal flag; its
    leading dims (any, reshaped or not) do not change its values."""
    row, col = (Iota(shape="s", dimension=rank - i, dtype="d") for i in (2, 1))
    mask = Ge(row, col) if compare == "Ge" else Le(col, row)
    shapes = ("s", "s2") if reshaped else ("s",)
    if reshaped:
        mask = Reshape(mask, shape="s2")
    sq, sk = (f"(vec-get {shape_of(t)} (- (vec-length {shape_of(t)}) 2))" for t in "qk")
    fit = [equal(f"(vec-get {v} (- (vec-length {v}) 2))", sq) for v in shapes]
    fit += [equal(f"(vec-get {v} (- (vec-length {v}) 1))", sk) for v in shapes]
    return Variant(
        Attention("q", "k", "v", "b", mask, **{**_ATTRS, "causal": 0}),
        Attention("q", "k", "v", "b", TRUE, **{**_ATTRS, "causal": 1}),
        (equal("(vec-length s)", rank), *fit),
    )


def _broadcasts() -> list[tuple[tuple[str, str], tuple[str, ...]]]:
    out: list[tuple[tuple[str, str], tuple[str, ...]]] = [
        ((Expand("b", shape="se"), "m"), ()),
        (("b", Expand("m", shape="se")), ()),
    ]
    for ones in range(1, MAX_RANK):
        lead = {t: equal("s2", f"(vec-append {vec([1] * ones)} {shape_of(t)})") for t in "bm"}
        out.append(((Reshape("b", shape="s2"), "m"), (lead["b"],)))
        out.append((("b", Reshape("m", shape="s2")), (lead["m"],)))
    return out


_BROADCASTS = _broadcasts()
_ATTENTION = Attention("q", "k", "v", "b", "m", **_ATTRS)
_FLOAT32_SOFTMAX = Attention("q", "k", "v", "b", "m", **{**_ATTRS, "scores_dtype": F32, "softmax_dtype": F32})


def _example(rng: Any, dq: str = F32, ds: str | None = None, dm: str | None = None) -> dict[str, Any]:
    """q, k, v of dtype ``dq``, scores of ``ds``, a softmax in ``dm`` (both default to ``dq``)."""
    ds = ds or dq
    b, h, s, d = 1, int(rng.integers(1, 3)), int(rng.integers(2, 7)), int(rng.integers(1, 5))
    mask = rng.choice([(b, 1, 1, s), (b, h, s, s), (1, 1, s, s)])
    scores = (b, h, s, s)
    return {
        "q": TensorType((b, h, s, d), dq),
        "k": TensorType((b, h, s, d), dq),
        "v": TensorType((b, h, s, d), dq),
        "b": TensorType(tuple(int(x) for x in mask), ds),
        "m": TensorType(scores, "bool"),
        "c": float(rng.uniform(0.1, 1.0)),
        "f": float(rng.choice([-1e9, float(np.finfo(np.float32).min), -np.inf])),
        "sf": scores,
        "se": scores,
        "s": (s, s),
        "s2": (1, s, s),
        "a": 3,
        "dq": dq,
        "ds": ds,
        "dm": dm or ds,
        "d": "int32",
        "z": int(rng.integers(0, 2)),
    }


# Every precision the attention ops keep apart, (q's, the scores', the softmax's dtype): as written
# in half precision, with float32 scores, a float32 softmax or both; float64 with a float32 softmax.
PRECISION_CASES = tuple(
    {"dq": q, "ds": s, "dm": m}
    for q, s, m in (
        *((half, half, half) for half in ("float16", "bfloat16")),
        *((half, half, F32) for half in ("float16", "bfloat16")),
        *((half, F32, F32) for half in ("float16", "bfloat16")),
        ("bfloat16", F32, "bfloat16"),
        ("float64", "float64", "float64"),
        ("float64", "float64", F32),
    )
)

HALF_CASES = tuple(case for case in PRECISION_CASES if {case["ds"], case["dm"]} & {"float16", "bfloat16"})

RULES = [
    Rule(
        "attention-fuse",
        "softmax(where(mask, q kᵀ·c + bias, fill)) v is one attention op (each of bias, mask and scale "
        "optional; the scores and the softmax in the dtypes the program rounds them to)",
        tuple(
            _fuse(s, bias, scale, masked, mask, fill, precision)
            for (s, bias, scale), precision in product(_SCORES, range(len(_PRECISIONS)))
            for masked, mask, fill in _masked(s)
        ),
        _example,
        exact=False,
        cases=PRECISION_CASES,
    ),
    Rule(
        "attention-causal",
        "an iota mask keeping keys j <= query i is the causal flag",
        tuple(
            _causal(rank, compare, reshaped)
            for rank in range(2, MAX_RANK + 1)
            for compare in ("Ge", "Le")
            for reshaped in (False, True)
        ),
        _example,
    ),
    Rule(
        "attention-broadcast",
        "attention broadcasts its bias and mask to the scores: an explicit expand, or a reshape adding "
        "leading 1s, of either is unneeded",
        tuple(
            Variant(op("q", "k", "v", *operands, **_ATTRS), op("q", "k", "v", "b", "m", **_ATTRS), when)
            for op in (Attention, FlashAttention)
            for operands, when in _BROADCASTS
        ),
        _example,
    ),
    Rule(
        "attention-is-flash",
        "attention = flash_attention: the same softmax in stats form, streamed over key blocks",
        (
            Variant(_ATTENTION, FlashAttention("q", "k", "v", "b", "m", **_ATTRS)),
            Variant(FlashAttention("q", "k", "v", "b", "m", **_ATTRS), _ATTENTION),
        ),
        _example,
        exact=False,
        cases=PRECISION_CASES,
    ),
    Rule(
        "attention-float32-softmax",
        "half-precision scores and softmax computed in float32 instead (more precise than the program: "
        "off by default; outputs move by up to a few half-precision ulps, by O(1) where scores are large)",
        (
            Variant(_ATTENTION, _FLOAT32_SOFTMAX, (half_float("ds"), differ("dm", "float64"))),
            Variant(_ATTENTION, _FLOAT32_SOFTMAX, (equal("ds", F32), half_float("dm"))),
        ),
        functools.partial(_example, dq="bfloat16"),
        exact=False,
        default=False,
        cases=HALF_CASES,
    ),
]
