"""Attention lowerings: naive (scores materialized) and flash (blocked online softmax).

``flash_attention`` maps over query blocks and, within each, streams over key blocks with
``lax.scan``, carrying the softmax stats (running max ``m``, running sum ``l``) and an accumulator
rescaled by ``exp(m_old - m_new)`` whenever the max grows — the stats form of softmax. It never
materializes the S×S scores (one block of them at a time), accumulates in float32
for float16/bfloat16 inputs, and is exact for ``-inf`` masks: a fully masked row gives ``0/0``
(NaN), as naive softmax does. On a GPU backend, float16/bfloat16 inputs of rank 4 go to cuDNN's fused
attention (``jax.nn.dot_product_attention(implementation="cudnn")``) when it accepts them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from eqsat.ops import flash_blocks

from . import register

Array = jax.Array


@register("attention")
def naive_attention(q: Array, k: Array, v: Array, mask: Array, *, scale: float) -> Array:
    scores = jnp.matmul(q, jnp.swapaxes(k, -1, -2)) * jnp.asarray(scale, q.dtype) + mask
    return jnp.matmul(jax.nn.softmax(scores, axis=-1), v)


def _cudnn(q: Array, k: Array, v: Array, mask: Array, scale: float) -> Array | None:
    """cuDNN fused attention for (B, H, S, D) half-precision inputs on GPU, else None."""
    if jax.default_backend() != "gpu" or q.ndim != 4 or q.dtype not in (jnp.float16, jnp.bfloat16):
        return None
    try:
        bias = jnp.broadcast_to(mask, (*q.shape[:-1], k.shape[-2])).astype(q.dtype)
        out = jax.nn.dot_product_attention(
            *(jnp.swapaxes(t, 1, 2) for t in (q, k, v)), bias=bias, scale=scale, implementation="cudnn"
        )
    except Exception:  # cuDNN rejects this layout, size or version: use the portable path
        return None
    return jnp.swapaxes(out, 1, 2)


def _blocks(x: Array, axis: int, size: int, count: int, fill: float = 0.0) -> Array:
    """Pad ``axis`` to ``count * size`` and move the block index to the front."""
    pad = count * size - x.shape[axis]
    if pad:
        widths = [(0, 0)] * x.ndim
        widths[axis] = (0, pad)
        x = jnp.pad(x, widths, constant_values=fill)
    axis %= x.ndim
    x = x.reshape(*x.shape[:axis], count, size, *x.shape[axis + 1 :])
    return jnp.moveaxis(x, axis, 0)


def _online_softmax(q: Array, kb: Array, vb: Array, mb: Array) -> Array:
    """softmax(q kᵀ + mask) v for one query block, streaming over key blocks with the stats form."""

    def step(carry: tuple[Array, Array, Array], xs: tuple[Array, Array, Array]) -> tuple[tuple, None]:
        m, total, acc = carry
        k_blk, v_blk, mask_blk = xs
        s = jnp.matmul(q, jnp.swapaxes(k_blk, -1, -2)) + mask_blk
        m_new = jnp.maximum(m, jnp.max(s, axis=-1, keepdims=True))
        safe = jnp.where(jnp.isneginf(m_new), 0.0, m_new)  # rows masked so far: exp(-inf - 0) = 0
        p = jnp.exp(s - safe)
        rescale = jnp.exp(jnp.where(jnp.isneginf(m), -jnp.inf, m - safe))
        total = total * rescale + jnp.sum(p, axis=-1, keepdims=True)
        acc = acc * rescale + jnp.matmul(p, v_blk)
        return (m_new, total, acc), None

    rows = (*q.shape[:-1], 1)
    init = (
        jnp.full(rows, -jnp.inf, q.dtype),
        jnp.zeros(rows, q.dtype),
        jnp.zeros((*q.shape[:-1], vb.shape[-1]), q.dtype),
    )
    (_, total, acc), _ = lax.scan(step, init, (kb, vb, mb))
    return acc / total  # a fully masked row: 0 / 0 = NaN, as in naive softmax


@register("flash_attention")
def flash_attention(q: Array, k: Array, v: Array, mask: Array, *, scale: float) -> Array:
    fused = _cudnn(q, k, v, mask, scale)
    if fused is not None:
        return fused
    out_dtype, sq = q.dtype, q.shape[-2]
    acc_dtype = jnp.promote_types(q.dtype, jnp.float32)
    q, k, v = (t.astype(acc_dtype) for t in (q, k, v))
    bq, bk, nq, nk = flash_blocks(sq, k.shape[-2])
    mask = mask.reshape((1,) * (q.ndim - mask.ndim) + mask.shape).astype(acc_dtype)  # rank of the scores
    mask = jnp.broadcast_to(mask, (*mask.shape[:-1], k.shape[-2]))
    kb, vb = _blocks(k, -2, bk, nk), _blocks(v, -2, bk, nk)
    mask = _blocks(mask, -1, bk, nk, fill=-jnp.inf)  # (nk, ..., Sq or 1, bk); padded keys masked
    qb = _blocks(q * jnp.asarray(scale, acc_dtype), -2, bq, nq)
    if mask.shape[-2] == 1:
        out = lax.map(lambda qt: _online_softmax(qt, kb, vb, mask), qb)
    else:
        mq = _blocks(jnp.moveaxis(mask, 0, -1), -3, bq, nq)  # (nq, ..., bq, bk, nk)
        out = lax.map(lambda xs: _online_softmax(xs[0], kb, vb, jnp.moveaxis(xs[1], -1, 0)), (qb, mq))
    out = jnp.moveaxis(out, 0, -3).reshape(*q.shape[:-2], nq * bq, v.shape[-1])
    return out[..., :sq, :].astype(out_dtype)
