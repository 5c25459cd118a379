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
from itertools import product
from typing import Any

import numpy as np

from eqsat.ir import TensorType
from eqsat.shapes import MAX_RANK

from .base import Rule, Variant

F32 = "float32"
QK = "(Matmul q k 0 1 ds)"  # scores of dtype ds
ZERO = "(Full (vec-empty) 0.0 ds)"
TRUE = '(Full (vec-empty) 1.0 "bool")'
_LAST = "(- (vec-length (shape q)) 1)"


def _guards(scores: str, product: str) -> tuple[str, ...]:
    """q, k, v of one rank; the product with v has q's batch dims (k's and v's broadcast to them);
    softmax over the last axis; the scores are q kᵀ's."""
    out = f"(vec-set (shape q) {_LAST} (vec-get (shape v) {_LAST}))"
    return (
        "(= (vec-length (shape q)) (vec-length (shape k)))",
        "(= (vec-length (shape q)) (vec-length (shape v)))",
        f"(= (shape {product}) {out})",
        f"(= a {_LAST})",
        f"(= (shape {scores}) (shape {QK}))",
        "(= dq (dtype q))",
        "(float-dtype dq)",
        "(float-dtype ds)",
    )


# (scores, bias, scale): q kᵀ with or without a scale and an additive bias
_SCORES = (
    (f"(Add (Scale {QK} c 0.0) b)", "b", "c"),
    (f"(Add {QK} b)", "b", "1.0"),
    (f"(Scale {QK} c 0.0)", ZERO, "c"),
    (QK, ZERO, "1.0"),
)


def _masked(scores: str) -> tuple[tuple[str, str, str], ...]:
    """(masked scores, mask, fill): unmasked, ``where(m, s, fill)``, ``where(broadcast m, s, fill)``."""
    fill = "(Full sf f ds)"
    return (
        (scores, TRUE, "-inf"),
        (f"(Select m {scores} {fill})", "m", "f"),
        (f"(Select (Expand m se) {scores} {fill})", "m", "f"),
    )


# The softmax's precision, which the attention op keeps (its scores_dtype and softmax_dtype): (the
# probabilities of the masked scores, the softmax's dtype, guard). In the scores' dtype, which is q's;
# in the scores' dtype, cast to q's (float32 scores of half-precision q, as jax.nn.dot_product_attention
# computes them); in a dtype dm the scores are cast to (jax.nn.softmax of half precision in float32),
# cast to q's.
_PRECISIONS = (
    ("(Softmax {} a)", "ds", ("(= ds dq)",)),
    ("(Cast (Softmax {} a) dq)", "ds", ()),
    ("(Cast (Softmax (Cast {} dm) a) dq)", "dm", ("(float-dtype dm)",)),
)


def _fuse(scores: str, bias: str, scale: str, masked: str, mask: str, fill: str, precision: int) -> Variant:
    probs, softmax_dtype, when = _PRECISIONS[precision]
    product = f"(Matmul {probs.format(masked)} v 0 0 dq)"
    attention = f"(Attention q k v {bias} {mask} {scale} {fill} 0 ds {softmax_dtype})"
    return Variant(product, attention, (*_guards(scores, product), *when))


def _causal(rank: int, compare: str, reshaped: bool) -> Variant:
    """A mask ``row >= column`` over the last two dims (Sq, Sk) of the scores is the causal flag; its
    leading dims (any, reshaped or not) do not change its values."""
    row, col = f"(Iota s {rank - 2} d)", f"(Iota s {rank - 1} d)"
    mask = f"(Ge {row} {col})" if compare == "Ge" else f"(Le {col} {row})"
    shapes = ("s", "s2") if reshaped else ("s",)
    if reshaped:
        mask = f"(Reshape {mask} s2)"
    sq, sk = (f"(vec-get (shape {t}) (- (vec-length (shape {t})) 2))" for t in "qk")
    fit = [f"(= (vec-get {v} (- (vec-length {v}) 2)) {sq})" for v in shapes]
    fit += [f"(= (vec-get {v} (- (vec-length {v}) 1)) {sk})" for v in shapes]
    return Variant(
        f"(Attention q k v b {mask} c f 0 ds dm)",
        f"(Attention q k v b {TRUE} c f 1 ds dm)",
        (f"(= (vec-length s) {rank})", *fit),
    )


def _broadcasts() -> list[tuple[str, str, tuple[str, ...]]]:
    out: list[tuple[str, str, tuple[str, ...]]] = [
        ("(Expand b se) m", "b m", ()),
        ("b (Expand m se)", "b m", ()),
    ]
    for ones in range(1, MAX_RANK):
        lead = f"(= s2 (vec-append (vec-of {' '.join(['1'] * ones)}) (shape {{t}})))"
        out.append(("(Reshape b s2) m", "b m", (lead.format(t="b"),)))
        out.append(("b (Reshape m s2)", "b m", (lead.format(t="m"),)))
    return out


_BROADCASTS = _broadcasts()


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
            Variant(f"({op} q k v {lhs} c f z ds dm)", f"({op} q k v {rhs} c f z ds dm)", when)
            for op in ("Attention", "FlashAttention")
            for lhs, rhs, when in _BROADCASTS
        ),
        _example,
    ),
    Rule(
        "attention-is-flash",
        "attention = flash_attention: the same softmax in stats form, streamed over key blocks",
        (
            Variant("(Attention q k v b m c f z ds dm)", "(FlashAttention q k v b m c f z ds dm)"),
            Variant("(FlashAttention q k v b m c f z ds dm)", "(Attention q k v b m c f z ds dm)"),
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
            Variant(
                "(Attention q k v b m c f z ds dm)",
                f'(Attention q k v b m c f z "{F32}" "{F32}")',
                ("(half-float ds)", '(!= dm "float64")'),
            ),
            Variant(
                "(Attention q k v b m c f z ds dm)",
                f'(Attention q k v b m c f z "{F32}" "{F32}")',
                (f'(= ds "{F32}")', "(half-float dm)"),
            ),
        ),
        functools.partial(_example, dq="bfloat16"),
        exact=False,
        default=False,
        cases=HALF_CASES,
    ),
]
