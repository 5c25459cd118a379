"""Attention lowerings: naive (scores materialized) and flash (blocked, stats form).

Both round where the program they were recognized from rounds (``eqsat.ops``: the scores' and the softmax's
dtypes are attributes). ``flash_attention`` scales and pads its inputs to whole blocks —
``eqsat.ops.flash_blocks`` picks them, as the cost model does — and runs ``flash.blocked_attention``, which
never materializes the S×S scores, skips causal blocks, and has its own blocked backward pass. Both lowerings
keep the meaning of masks: with a ``-inf`` fill a fully masked row gives ``0/0`` (NaN), as naive softmax does;
with a finite fill it is the uniform average. On a GPU backend, float16/bfloat16 inputs of rank 4 go to
cuDNN's fused attention (``jax.nn.dot_product_attention(implementation="cudnn")``) when it accepts them."""

from __future__ import annotations

from math import prod

import jax
import jax.numpy as jnp
import numpy as np

from eqsat.ops import flash_blocks

from . import register
from .flash import Blocks, Masking, blocked_attention

Array = jax.Array


def _known(x: Array, value: float | bool) -> bool:
    """``x`` is known at trace time to hold only ``value`` (a zero bias, an all-true mask)."""
    return isinstance(x, np.ndarray) and bool((x == value).all())


def _optional(bias: Array, mask: Array) -> tuple[Array | None, Array | None]:
    return (None if _known(bias, 0) else bias), (None if _known(mask, True) else mask)


@register("attention")
def naive_attention(
    q: Array,
    k: Array,
    v: Array,
    bias: Array,
    mask: Array,
    *,
    scale: float,
    fill: float,
    causal: int,
    scores_dtype: str,
    softmax_dtype: str,
) -> Array:
    """The program as written: scores, softmax and probabilities rounded where it rounds them."""
    b, m = _optional(bias, mask)
    precision = (scores_dtype, softmax_dtype)
    masking = Masking(b is not None, m is not None, fill, bool(causal), k.shape[-2], False, scale, *precision)
    scores, _ = masking.scores(q, k, 0, 0, b, m)
    probabilities = jax.nn.softmax(scores, axis=-1).astype(q.dtype)
    return jnp.matmul(probabilities, v, preferred_element_type=q.dtype)


def _cudnn(
    q: Array, k: Array, v: Array, bias: Array | None, mask: Array | None, scale: float, causal: bool
) -> Array | None:
    """cuDNN fused attention for (B, H, S, D) half-precision inputs on GPU without a boolean mask,
    else None."""
    if jax.default_backend() != "gpu" or q.ndim != 4 or q.dtype not in (jnp.float16, jnp.bfloat16):
        return None
    if mask is not None:
        return None
    try:
        full = None if bias is None else jnp.broadcast_to(bias, (*q.shape[:-1], k.shape[-2])).astype(q.dtype)
        out = jax.nn.dot_product_attention(
            *(jnp.swapaxes(t, 1, 2) for t in (q, k, v)),
            bias=full,
            scale=scale,
            is_causal=causal,
            implementation="cudnn",
        )
    except Exception:  # cuDNN rejects this layout, size or version: use the portable path
        return None
    return jnp.swapaxes(out, 1, 2)


def _pad(x: Array, axis: int, length: int, value: float | bool = 0) -> Array:
    """Pad ``axis`` with ``value`` up to ``length`` (no copy when it has it, or broadcasts there)."""
    pad = length - x.shape[axis]
    if not pad or x.shape[axis] == 1:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, pad)
    return jnp.pad(x, widths, constant_values=value)


def _scores_rank(x: Array, rank: int, dtype: object) -> Array:
    return x.reshape((1,) * (rank - x.ndim) + x.shape).astype(dtype)


@register("flash_attention")
def flash_attention(
    q: Array,
    k: Array,
    v: Array,
    bias: Array,
    mask: Array,
    *,
    scale: float,
    fill: float,
    causal: int,
    scores_dtype: str,
    softmax_dtype: str,
) -> Array:
    if not (q.size and k.size and v.size):  # nothing to stream: the empty result the program gives
        precision = {"scores_dtype": scores_dtype, "softmax_dtype": softmax_dtype}
        return naive_attention(q, k, v, bias, mask, scale=scale, fill=fill, causal=causal, **precision)
    b, m = _optional(bias, mask)
    out_dtype, sq, sk = q.dtype, q.shape[-2], k.shape[-2]
    acc_dtype = jnp.promote_types(q.dtype, jnp.float32)
    if scores_dtype == softmax_dtype == "float32":  # cuDNN keeps float32 scores, as the program does
        fused = _cudnn(q, k, v, b, m, scale, bool(causal))
        if fused is not None:
            return fused
    bq, bk, nq, nk = flash_blocks(prod(q.shape[:-2]), sq, sk)
    if q.dtype == acc_dtype == scores_dtype:  # scaling q costs less than scaling the scores
        q, scale = q * jnp.asarray(scale, acc_dtype), 1.0
    q, k, v = _pad(q, -2, nq * bq), _pad(k, -2, nk * bk), _pad(v, -2, nk * bk)
    padded = []
    # padding keys are masked out by the padding itself; padding rows keep every key, so their
    # (discarded) softmax stays finite and adds nothing to the gradients
    for x, dtype, value in ((b, acc_dtype, 0.0), (m, jnp.bool_, True)):
        if x is not None:
            x = _pad(_pad(_scores_rank(x, q.ndim, dtype), -1, nk * bk, value), -2, nq * bq, value)
        padded.append(x)
    b, m = padded
    ragged = nk * bk != sk  # the keys do not fill whole blocks
    masking = Masking(
        b is not None, m is not None, fill, bool(causal), sk, ragged, scale, scores_dtype, softmax_dtype
    )
    out = blocked_attention(Blocks(masking, bq, bk, nq, nk), q, k, v, b, m)
    return out[..., :sq, :].astype(out_dtype)
