"""Attention: ``softmax(where(mask, q kᵀ·scale + bias, fill)) v``, its scores soft-capped or not,
recognized as one ``attention`` op, which equals ``flash_attention`` — the same softmax computed
blockwise in stats form (see ``rules/softmax.py``), streaming over key blocks without materializing
the S×S scores. The cost model picks one.

Recognition composes small steps through two intermediate forms instead of listing spellings: the
**scaled product** ``scores(q, k, bias, scale)`` (a ``q kᵀ`` matmul, then a scale, a divisor, a
soft-cap ``t · tanh(s / t)`` and an added bias, each step one rule here) and the **masked softmax**
``masked_softmax(x, mask, fill, zero_masked)`` (``rules/softmax.py``: a softmax, of a ``where(mask, x,
fill)``, in its own dtype or cast, its masked probabilities zeroed or not). Attention is their product
with v. Around them, layout rules move transposes into matmul flags and through elementwise ops,
scales hoist (``rules/algebra.py``), softmax's expansions fold back into ``softmax``, constants fold
(``rules/fold.py``), and the unit-dim pass (``eqsat.unit_dims``) drops unit dims. A mask built from iota
comparisons (row >= column) becomes the ``causal`` flag; an expanded or reshaped mask or bias is not
needed (attention broadcasts them).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from eqsat.ir import TensorType
from eqsat.shapes import MAX_RANK

from .base import Rule, Variant
from .softmax import AXIS, FILL, SHIFTED, ZERO_MASKED
from .terms import (
    SCALAR,
    Add,
    Attention,
    Cast,
    Div,
    Expand,
    Fact,
    FlashAttention,
    Full,
    Ge,
    Iota,
    Le,
    MaskedSoftmax,
    Matmul,
    Neg,
    Operand,
    Reshape,
    Scale,
    Scores,
    Sub,
    Tanh,
    Var,
    append,
    at_most,
    differ,
    dim,
    dtype_of,
    equal,
    float_dtype,
    get,
    half_float,
    last_axis,
    length,
    rank,
    set_item,
    shape_of,
    var,
    vec,
    wide_float,
)

F32 = "float32"
# The attention ops' attributes as pattern variables (their example binds them by the same objects)
# (and the softmax's, from its theme: AXIS, FILL, ZERO_MASKED, SHIFTED)
SCALE, DIVISOR, SOFTCAP, CAUSAL = var("c"), var("cd"), var("cap"), var("z")
DTYPE, SCORES_DTYPE, SOFTMAX_DTYPE, PRODUCT_DTYPE = var("dq"), var("ds"), var("dm"), var("dp")
NARROW_DTYPE = var("dn")  # a product rounded narrower than the scores
CAP, INVERSE_CAP = var("t"), var("r")  # a soft-cap as written: t · tanh(s / t), or s · r with r = 1 / t
ZERO = Full(shape=SCALAR, value=0.0, dtype=SCORES_DTYPE)
_ZERO_NARROW = Full(shape=SCALAR, value=0.0, dtype=NARROW_DTYPE)  # a no-bias of the narrower product
TRUE = Full(shape=SCALAR, value=1.0, dtype="bool")
_LAST = last_axis("q")
_ATTRS = {
    "scale": SCALE,
    "fill": FILL,
    "causal": CAUSAL,
    "zero_masked": ZERO_MASKED,
    "divisor": DIVISOR,
    "scores_dtype": SCORES_DTYPE,
    "softmax_dtype": SOFTMAX_DTYPE,
    "shifted": SHIFTED,
    "softcap": SOFTCAP,
    "product_dtype": PRODUCT_DTYPE,
}
_STREAMED = {**_ATTRS, "shifted": 1}  # streaming keeps a running max: flash attention's softmax is shifted


def _scores(
    bias: str = "b",
    scale: Operand = SCALE,
    divisor: Operand = DIVISOR,
    softcap: Operand = SOFTCAP,
    product: Operand = PRODUCT_DTYPE,
    dtype: Operand = SCORES_DTYPE,
) -> str:
    return Scores(
        "q", "k", bias, scale=scale, divisor=divisor, dtype=dtype, softcap=softcap, product_dtype=product
    )


_CAP = Full(shape=SCALAR, value=CAP, dtype=SCORES_DTYPE)
# the scaled product's attributes, its product rounded to the scores' dtype
_SCORES_ATTRS = {
    "scale": SCALE,
    "divisor": DIVISOR,
    "dtype": SCORES_DTYPE,
    "softcap": SOFTCAP,
    "product_dtype": SCORES_DTYPE,
}


def _fuse(cast: bool) -> Variant:
    """``masked_softmax(scores(q, k, b)) v``, the probabilities cast to q's dtype or already in it."""
    probs = MaskedSoftmax(
        _scores(), "m", fill=FILL, zero_masked=ZERO_MASKED, axis=AXIS, dtype=SOFTMAX_DTYPE, shifted=SHIFTED
    )
    product = Matmul(Cast(probs, dtype=DTYPE) if cast else probs, "v", dtype=DTYPE)
    out = set_item(shape_of("q"), _LAST, dim("v", _LAST))
    guards = (
        equal(rank("q"), rank("k")),
        equal(rank("q"), rank("v")),
        equal(shape_of(product), out),  # k's and v's batch dims broadcast to q's, not beyond
        equal(AXIS, _LAST),
        equal(DTYPE, dtype_of("q")),
        equal(DTYPE, dtype_of("v")),
        float_dtype(DTYPE),
    )
    return Variant(product, Attention("q", "k", "v", "b", "m", **{**_ATTRS, "causal": 0}), guards)


def _causal(r: int, compare: str, reshaped: bool) -> Variant:
    """A mask ``row >= column`` over the last two dims (Sq, Sk) of the scores is the causal flag; its
    leading dims (any, reshaped or not) do not change its values."""
    row, col = (Iota(shape="s", dimension=r - i, dtype="d") for i in (2, 1))
    mask = Ge(row, col) if compare == "Ge" else Le(col, row)
    shapes = ("s", "s2") if reshaped else ("s",)
    if reshaped:
        mask = Reshape(mask, shape="s2")
    sq, sk = (dim(t, rank(t) - 2) for t in "qk")
    fit = [equal(get(v, length(v) - 2), sq) for v in shapes]
    fit += [equal(get(v, length(v) - 1), sk) for v in shapes]
    return Variant(
        Attention("q", "k", "v", "b", mask, **{**_ATTRS, "causal": 0}),
        Attention("q", "k", "v", "b", TRUE, **{**_ATTRS, "causal": 1}),
        (equal(length("s"), r), *fit),
    )


def _broadcasts() -> list[tuple[tuple[str, str], tuple[Fact, ...]]]:
    out: list[tuple[tuple[str, str], tuple[Fact, ...]]] = [
        ((Expand("b", shape="se"), "m"), ()),
        (("b", Expand("m", shape="se")), ()),
    ]
    for ones in range(1, MAX_RANK):
        lead = {t: equal("s2", append(vec([1] * ones), shape_of(t))) for t in "bm"}
        out.append(((Reshape("b", shape="s2"), "m"), (lead["b"],)))
        out.append((("b", Reshape("m", shape="s2")), (lead["m"],)))
    return out


_BROADCASTS = _broadcasts()
_ATTENTION = Attention("q", "k", "v", "b", "m", **_ATTRS)
_WIDENED = {"scores_dtype": F32, "softmax_dtype": F32, "product_dtype": F32}
_FLOAT32_SOFTMAX = Attention("q", "k", "v", "b", "m", **{**_ATTRS, **_WIDENED})


def _example(rng: Any, dq: str = F32, ds: str | None = None, dm: str | None = None) -> dict[str | Var, Any]:
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
        SCALE: float(rng.uniform(0.1, 1.0)),
        FILL: float(rng.choice([-1e9, float(np.finfo(np.float32).min), -np.inf])),
        "sf": scores,
        "se": scores,
        "s": (s, s),
        "s2": (1, s, s),
        AXIS: 3,
        DTYPE: dq,
        SCORES_DTYPE: ds,
        SOFTMAX_DTYPE: dm or ds,
        "d": "int32",
        CAUSAL: int(rng.integers(0, 2)),
        ZERO_MASKED: int(rng.integers(0, 2)),
        DIVISOR: float(rng.choice([1.0, float(np.sqrt(8)), 3.0])),
        SHIFTED: int(rng.integers(0, 2)),
        SOFTCAP: float(rng.choice([0.0, 0.5, 50.0])),
        PRODUCT_DTYPE: str(rng.choice([ds, "bfloat16"])),
        CAP: float(rng.choice([0.5, 50.0])),
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
        "scores-of-product",
        "q kᵀ is the scaled product with scale 1 and no bias (the form attention is recognized from)",
        (
            Variant(
                Matmul("q", "k", transpose_y=1, dtype=SCORES_DTYPE),
                _scores(ZERO, 1.0, 1.0, 0.0, product=SCORES_DTYPE),
                (float_dtype(SCORES_DTYPE),),
            ),
        ),
        _example,
    ),
    Rule(
        "scores-widened",
        "the unscaled product rounded to one float dtype and cast to another is the product in the "
        "second, rounded to the first on the way (HF Llama's bfloat16 q kᵀ cast to float32)",
        (
            Variant(
                Cast(
                    _scores(_ZERO_NARROW, 1.0, 1.0, 0.0, product=NARROW_DTYPE, dtype=NARROW_DTYPE),
                    dtype=SCORES_DTYPE,
                ),
                _scores(ZERO, 1.0, 1.0, 0.0, product=NARROW_DTYPE),
                (float_dtype(SCORES_DTYPE), float_dtype(NARROW_DTYPE)),
            ),
        ),
        lambda rng: {**_example(rng, dq="bfloat16", ds=F32), NARROW_DTYPE: "bfloat16"},
    ),
    Rule(
        "scores-of-widened-operands",
        "the scaled product of q and k cast to a wider float dtype is the product of q and k accumulated "
        "in it (each product of narrower floats is exact in the wider one: flax's promote_dtype)",
        tuple(
            Variant(
                Scores(Cast("q", dtype=SCORES_DTYPE), Cast("k", dtype=SCORES_DTYPE), "b", **_SCORES_ATTRS),
                Scores("q", "k", "b", **_SCORES_ATTRS),
                (equal(dtype_of("q"), dtype_of("k")), *widening),
            )
            # the casts keep every product exact: half precision to float32 or float64, float32 to
            # float64, or no cast at all
            for widening in (
                (half_float(dtype_of("q")), wide_float(SCORES_DTYPE)),
                (equal(dtype_of("q"), F32), equal(SCORES_DTYPE, "float64")),
                (equal(dtype_of("q"), SCORES_DTYPE),),
            )
        ),
        _example,
        cases=(
            {"dq": "bfloat16", "ds": F32},
            {"dq": "float16", "ds": "float64"},
            {"dq": F32, "ds": "float64"},
        ),
    ),
    Rule(
        "scores-scale",
        "the scaled product with scale 1 and no bias, scaled by c, is the scaled product with scale c",
        (Variant(Scale(_scores(ZERO, 1.0, 1.0, 0.0), scale=SCALE), _scores(ZERO, SCALE, 1.0, 0.0)),),
        _example,
    ),
    Rule(
        "scores-divide",
        "the scaled product without a divisor or bias, divided by a constant, has that divisor (in half "
        "precision a division rounds unlike the product by its inverse, so it stays a division)",
        (
            Variant(
                Div(_scores(ZERO, SCALE, 1.0, 0.0), Full(shape=SCALAR, value=DIVISOR, dtype=SCORES_DTYPE)),
                _scores(ZERO, softcap=0.0),
            ),
        ),
        _example,
    ),
    Rule(
        "scores-softcap",
        "t · tanh(s / t) of the scaled product without a cap or bias is the product capped at t (Gemma 2's "
        "logit soft-capping), computed as written",
        (
            Variant(
                Scale(Tanh(Div(_scores(ZERO, softcap=0.0), _CAP)), scale=CAP),
                _scores(ZERO, softcap=CAP),
                (differ(CAP, 0.0),),
            ),
        ),
        _example,
    ),
    Rule(
        "scores-softcap-by-inverse",
        "t · tanh(s · r), r = 1 / t, of the scaled product without a cap or bias is the product capped at "
        "t (what a division by a power of two becomes; else r rounds, and so does the cap)",
        (
            Variant(
                Scale(Tanh(Scale(_scores(ZERO, softcap=0.0), scale=INVERSE_CAP)), scale=CAP),
                _scores(ZERO, softcap=CAP),
                (differ(CAP, 0.0), equal(INVERSE_CAP, 1.0 / CAP)),
            ),
        ),
        lambda rng: (lambda ex: {**ex, INVERSE_CAP: 1.0 / ex[CAP]})(_example(rng)),
        exact=False,
    ),
    Rule(
        "scores-bias",
        "a bias added to the scaled product without one (broadcasting to it, either order) is its bias",
        tuple(
            Variant(Add(*operands), _scores(), (equal(shape_of(_scores(ZERO)), shape_of(Add(*operands))),))
            for operands in ((_scores(ZERO), "b"), ("b", _scores(ZERO)))
        ),
        _example,
    ),
    Rule(
        "scores-bias-subtracted",
        "a bias subtracted from the scaled product without one (broadcasting to it) is its negated bias: "
        "s - b is s + (-b) exactly (DistilBERT's s - 1e30 · (1 - mask))",
        (
            Variant(
                Sub(_scores(ZERO), "b"),
                _scores(Neg("b")),
                (equal(shape_of(_scores(ZERO)), shape_of(Sub(_scores(ZERO), "b"))),),
            ),
        ),
        _example,
    ),
    Rule(
        "scores-bias-scaled",
        "(q kᵀ + b) · c, a scale of magnitude at most 1 applied after the bias (keras-hub Falcon's ALiBi "
        "added before the 1/sqrt(d) factor), is the product scaled by c plus the bias b · c (two roundings "
        "where there was one; neither product can overflow)",
        (
            Variant(
                Scale(_scores("b", 1.0, 1.0, 0.0), scale=SCALE),
                _scores(Scale("b", scale=SCALE), SCALE, 1.0, 0.0),
                (at_most(SCALE, 1.0), at_most(-1.0, SCALE)),
            ),
        ),
        _example,
        exact=False,
    ),
    Rule(
        "attention-fuse",
        "masked_softmax(scores(q, k, bias)) v is one attention op, the probabilities cast to q's dtype or "
        "in it (the scores and the softmax keep the dtypes the program rounds them to)",
        (_fuse(cast=False), _fuse(cast=True)),
        _example,
        exact=False,
        cases=PRECISION_CASES,
    ),
    Rule(
        "attention-causal",
        "an iota mask keeping keys j <= query i is the causal flag",
        tuple(
            _causal(r, compare, reshaped)
            for r in range(2, MAX_RANK + 1)
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
        "attention = flash_attention: the same (shifted) softmax in stats form, streamed over key blocks",
        (
            Variant(
                Attention("q", "k", "v", "b", "m", **_STREAMED),
                FlashAttention("q", "k", "v", "b", "m", **_STREAMED),
            ),
            Variant(
                FlashAttention("q", "k", "v", "b", "m", **_STREAMED),
                Attention("q", "k", "v", "b", "m", **_STREAMED),
            ),
        ),
        _example,
        exact=False,
        cases=PRECISION_CASES,
    ),
    Rule(
        "attention-float32-softmax",
        "half-precision q kᵀ, scores and softmax computed in float32 instead, as the GPU's and TPU's "
        "attention kernels compute them (more precise than the program: off by default; outputs move "
        "by up to a few half-precision ulps, by O(1) where scores are large)",
        (
            Variant(
                _ATTENTION, _FLOAT32_SOFTMAX, (half_float(SCORES_DTYPE), differ(SOFTMAX_DTYPE, "float64"))
            ),
            Variant(_ATTENTION, _FLOAT32_SOFTMAX, (equal(SCORES_DTYPE, F32), half_float(SOFTMAX_DTYPE))),
        ),
        functools.partial(_example, dq="bfloat16"),
        exact=False,
        default=False,
        cases=HALF_CASES,
    ),
]
