"""Attention: ``softmax(q kᵀ·scale + mask) v`` recognized as one ``attention`` op, which equals
``flash_attention`` — the same softmax computed blockwise in stats form (see ``rules/softmax.py``),
streaming over key blocks without materializing the S×S scores. The cost model picks one.

Recognition works with small rules over the canonical form: transposes of k fold into matmul flags,
scales on q or on the scores hoist (``rules/algebra.py``), ``jax.nn.softmax``'s expansion is folded back
into ``softmax`` (``rules/softmax.py``); these variants cover with/without mask and scale and casts
around the softmax.
"""

from __future__ import annotations

from typing import Any

from eqsat.ir import TensorType

from .base import Rule, Variant

F32 = "float32"


def _guards(scores: str) -> tuple[str, ...]:
    """q, k, v of one rank with equal batch dims; softmax over the last axis; mask fits the scores."""
    last = "(- (vec-length (shape q)) 1)"
    batch = "(vec-set (vec-set (shape {t}) {last} 0) (- {last} 1) 0)".replace("{last}", last)
    return (
        "(= (vec-length (shape q)) (vec-length (shape k)))",
        "(= (vec-length (shape q)) (vec-length (shape v)))",
        f"(= {batch.format(t='q')} {batch.format(t='k')})",
        f"(= {batch.format(t='q')} {batch.format(t='v')})",
        f"(= a {last})",
        f"(= (shape {scores}) (shape (Matmul q k 0 1 dq)))",
        "(= dq (dtype q))",
    )


def _fuse(scores: str, mask: str, scale: str, cast: str | None = None) -> Variant:
    probs = f"(Softmax {scores} a)"
    if cast:
        probs = f'(Cast (Softmax (Cast {scores} "float32") a) {cast})'
    when = _guards(scores) + ((f"(= {cast} (dtype q))",) if cast else ())
    return Variant(f"(Matmul {probs} v 0 0 dq)", f"(Attention q k v {mask} {scale})", when)


QK = "(Matmul q k 0 1 dq)"
ZERO_MASK = "(Full (vec-empty) 0.0 dq)"


def _example(rng: Any) -> dict[str, Any]:
    b, h, s, d = 1, int(rng.integers(1, 3)), int(rng.integers(2, 7)), int(rng.integers(1, 5))
    mask = rng.choice([(b, 1, 1, s), (b, h, s, s), (1, 1, s, s)])
    return {
        "q": TensorType((b, h, s, d), F32),
        "k": TensorType((b, h, s, d), F32),
        "v": TensorType((b, h, s, d), F32),
        "mask": TensorType(tuple(int(x) for x in mask), F32),
        "c": float(rng.uniform(0.1, 1.0)),
        "a": 3,
        "ct": "float16",
        "dq": F32,
        "q16": TensorType((b, h, s, d), "float16"),
    }


RULES = [
    Rule(
        "attention-fuse",
        "softmax(q kᵀ·c + mask) v is one attention op (with or without mask and scale, casts around softmax)",
        (
            _fuse(f"(Add (Scale {QK} c 0.0) mask)", "mask", "c"),
            _fuse(f"(Add {QK} mask)", "mask", "1.0"),
            _fuse(f"(Scale {QK} c 0.0)", ZERO_MASK, "c"),
            _fuse(QK, ZERO_MASK, "1.0"),
        ),
        _example,
        exact=False,
    ),
    Rule(
        "attention-is-flash",
        "attention = flash_attention: the same softmax in stats form, streamed over key blocks",
        (
            Variant("(Attention q k v mask c)", "(FlashAttention q k v mask c)"),
            Variant("(FlashAttention q k v mask c)", "(Attention q k v mask c)"),
        ),
        _example,
        exact=False,
    ),
]
