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
(``rules/fold.py``), and the layout pass (``eqsat.layout``) drops unit dims. A mask built from iota
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
from .terms import (
    Add,
    Attention,
    Cast,
    Div,
    Expand,
    FlashAttention,
    Full,
    Ge,
    Iota,
    Le,
    MaskedSoftmax,
    Matmul,
    Reshape,
    Scale,
    Scores,
    Tanh,
    differ,
    dtype_of,
    equal,
    float_dtype,
    half_float,
    shape_of,
    vec,
    wide_float,
)

F32 = "float32"
ZERO = Full(shape="(vec-empty)", value=0.0, dtype="ds")
_ZERO_NARROW = Full(shape="(vec-empty)", value=0.0, dtype="dn")  # a no-bias of the narrower product
TRUE = Full(shape="(vec-empty)", value=1.0, dtype="bool")
_LAST = f"(- (vec-length {shape_of('q')}) 1)"
_ATTRS = {
    "scale": "c",
    "fill": "f",
    "causal": "z",
    "zero_masked": "zm",
    "divisor": "cd",
    "scores_dtype": "ds",
    "softmax_dtype": "dm",
    "shifted": "sh",
    "softcap": "cap",
    "product_dtype": "dp",
}
_SHIFTED = {**_ATTRS, "shifted": 1}  # streaming keeps a running max: flash attention's softmax is shifted


def _scores(
    bias: str = "b",
    scale: str | float = "c",
    divisor: str | float = "cd",
    softcap: str | float = "cap",
    product: str = "dp",
    dtype: str = "ds",
) -> str:
    return Scores(
        "q", "k", bias, scale=scale, divisor=divisor, dtype=dtype, softcap=softcap, product_dtype=product
    )


_CAP = Full(shape="(vec-empty)", value="t", dtype="ds")
# the scaled product's attributes, its product rounded to the scores' dtype
_SCORES_ATTRS = {"scale": "c", "divisor": "cd", "dtype": "ds", "softcap": "cap", "product_dtype": "ds"}


def _fuse(cast: bool) -> Variant:
    """``masked_softmax(scores(q, k, b)) v``, the probabilities cast to q's dtype or already in it."""
    probs = MaskedSoftmax(_scores(), "m", fill="f", zero_masked="zm", axis="a", dtype="dm", shifted="sh")
    product = Matmul(Cast(probs, dtype="dq") if cast else probs, "v", dtype="dq")
    out = f"(vec-set {shape_of('q')} {_LAST} (vec-get {shape_of('v')} {_LAST}))"
    rank = f"(vec-length {shape_of('q')})"
    guards = (
        equal(rank, f"(vec-length {shape_of('k')})"),
        equal(rank, f"(vec-length {shape_of('v')})"),
        equal(shape_of(product), out),  # k's and v's batch dims broadcast to q's, not beyond
        equal("a", _LAST),
        equal("dq", dtype_of("q")),
        equal("dq", dtype_of("v")),
        float_dtype("dq"),
    )
    return Variant(product, Attention("q", "k", "v", "b", "m", **{**_ATTRS, "causal": 0}), guards)


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
        "zm": int(rng.integers(0, 2)),
        "cd": float(rng.choice([1.0, float(np.sqrt(8)), 3.0])),
        "sh": int(rng.integers(0, 2)),
        "cap": float(rng.choice([0.0, 0.5, 50.0])),
        "dp": str(rng.choice([ds, "bfloat16"])),
        "t": float(rng.choice([0.5, 50.0])),
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
                Matmul("q", "k", transpose_y=1, dtype="ds"),
                _scores(ZERO, 1.0, 1.0, 0.0, product="ds"),
                (float_dtype("ds"),),
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
                Cast(_scores(_ZERO_NARROW, 1.0, 1.0, 0.0, product="dn", dtype="dn"), dtype="ds"),
                _scores(ZERO, 1.0, 1.0, 0.0, product="dn"),
                (float_dtype("ds"), float_dtype("dn")),
            ),
        ),
        lambda rng: {**_example(rng, dq="bfloat16", ds=F32), "dn": "bfloat16"},
    ),
    Rule(
        "scores-of-widened-operands",
        "the scaled product of q and k cast to a wider float dtype is the product of q and k accumulated "
        "in it (each product of narrower floats is exact in the wider one: flax's promote_dtype)",
        tuple(
            Variant(
                Scores(Cast("q", dtype="ds"), Cast("k", dtype="ds"), "b", **_SCORES_ATTRS),
                Scores("q", "k", "b", **_SCORES_ATTRS),
                (equal(dtype_of("q"), dtype_of("k")), *widening),
            )
            # the casts keep every product exact: half precision to float32 or float64, float32 to
            # float64, or no cast at all
            for widening in (
                (half_float(dtype_of("q")), wide_float("ds")),
                (equal(dtype_of("q"), F32), equal("ds", "float64")),
                (equal(dtype_of("q"), "ds"),),
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
        (Variant(Scale(_scores(ZERO, 1.0, 1.0, 0.0), scale="c"), _scores(ZERO, "c", 1.0, 0.0)),),
        _example,
    ),
    Rule(
        "scores-divide",
        "the scaled product without a divisor or bias, divided by a constant, has that divisor (in half "
        "precision a division rounds unlike the product by its inverse, so it stays a division)",
        (
            Variant(
                Div(_scores(ZERO, "c", 1.0, 0.0), Full(shape="(vec-empty)", value="cd", dtype="ds")),
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
                Scale(Tanh(Div(_scores(ZERO, softcap=0.0), _CAP)), scale="t"),
                _scores(ZERO, softcap="t"),
                (differ("t", 0.0),),
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
                Scale(Tanh(Scale(_scores(ZERO, softcap=0.0), scale="r")), scale="t"),
                _scores(ZERO, softcap="t"),
                (differ("t", 0.0), equal("r", "(/ 1.0 t)")),
            ),
        ),
        lambda rng: (lambda ex: {**ex, "r": 1.0 / ex["t"]})(_example(rng)),
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
        "attention = flash_attention: the same (shifted) softmax in stats form, streamed over key blocks",
        (
            Variant(
                Attention("q", "k", "v", "b", "m", **_SHIFTED),
                FlashAttention("q", "k", "v", "b", "m", **_SHIFTED),
            ),
            Variant(
                FlashAttention("q", "k", "v", "b", "m", **_SHIFTED),
                Attention("q", "k", "v", "b", "m", **_SHIFTED),
            ),
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
