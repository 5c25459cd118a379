"""Attention lowerings: naive (scores materialized) and flash (blocked online softmax).

``flash_attention`` streams over key blocks with ``lax.scan``, carrying the softmax stats (running
max ``m``, running sum ``l``) and an accumulator rescaled by ``exp(m_old - m_new)`` whenever the max
grows — the stats form of softmax. It never materializes the S×S scores, accumulates in float32
for float16/bfloat16 inputs, and is exact for ``-inf`` masks: a fully masked row gives ``0/0``
(NaN), as naive softmax does. On a GPU backend, float16/bfloat16 inputs of rank 4 go to cuDNN's fused
attention (``jax.nn.dot_product_attention(implementation="cudnn")``) when it accepts them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from eqsat.ops import FLASH_BLOCK

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


@register("flash_attention")
def flash_attention(q: Array, k: Array, v: Array, mask: Array, *, scale: float) -> Array:
    fused = _cudnn(q, k, v, mask, scale)
    if fused is not None:
        return fused
    out_dtype = q.dtype
    acc_dtype = jnp.promote_types(q.dtype, jnp.float32)
    q, k, v = (t.astype(acc_dtype) for t in (q, k, v))
    sk = k.shape[-2]
    block = min(FLASH_BLOCK, sk)
    n = -(-sk // block)
    pad = n * block - sk
    mask = mask.reshape((1,) * (q.ndim - mask.ndim) + mask.shape)  # same rank as the scores
    mask = jnp.broadcast_to(mask, (*mask.shape[:-1], sk)).astype(acc_dtype)
    if pad:
        widths = [(0, 0)] * (k.ndim - 2) + [(0, pad), (0, 0)]
        k, v = jnp.pad(k, widths), jnp.pad(v, widths)
        mask = jnp.pad(mask, [(0, 0)] * (mask.ndim - 1) + [(0, pad)], constant_values=-jnp.inf)
    kb = jnp.moveaxis(k.reshape(*k.shape[:-2], n, block, k.shape[-1]), -3, 0)
    vb = jnp.moveaxis(v.reshape(*v.shape[:-2], n, block, v.shape[-1]), -3, 0)
    mb = jnp.moveaxis(mask.reshape(*mask.shape[:-1], n, block), -2, 0)
    q = q * jnp.asarray(scale, acc_dtype)

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
        jnp.full(rows, -jnp.inf, acc_dtype),
        jnp.zeros(rows, acc_dtype),
        jnp.zeros((*q.shape[:-1], v.shape[-1]), acc_dtype),
    )
    (_, total, acc), _ = lax.scan(step, init, (kb, vb, mb))
    return (acc / total).astype(out_dtype)
