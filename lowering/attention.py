"""Attention lowerings: naive (scores materialized) and flash (blocked, stats form).

``flash_attention`` loops over query blocks (``lax.fori_loop``). When one block's scores over all keys
fit ``FLASH_SCORES_BUDGET``, each block takes an exact one-pass softmax (XLA:CPU fuses it into one
kernel, and the scores stay in cache); otherwise each block streams over key blocks (sliced in place,
never copied), carrying the softmax stats (running max ``m``, running sum ``l``) and an accumulator
rescaled by ``exp(m_old - m_new)`` whenever the max grows — the online softmax. Either way it never
materializes the S×S scores, accumulates in float32 for float16/bfloat16 inputs, and is exact for
``-inf`` masks: a fully masked row gives ``0/0`` (NaN), as naive softmax does. On a GPU backend,
float16/bfloat16 inputs of rank 4 go to cuDNN's fused attention
(``jax.nn.dot_product_attention(implementation="cudnn")``) when it accepts them."""

from __future__ import annotations

from math import prod

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from eqsat.ops import flash_blocks

from . import register

Array = jax.Array


def _no_mask(mask: Array) -> bool:
    """A mask known (at trace time) to be all zeros: nothing to add."""
    return isinstance(mask, np.ndarray) and not mask.any()


def _softmax_attention(q: Array, k: Array, v: Array, mask: Array | None) -> Array:
    """softmax(q kᵀ + mask) v in one pass over materialized scores (in flash: one query block's, which
    fit in cache and which XLA:CPU fuses into a single kernel)."""
    scores = jnp.einsum("...qd,...kd->...qk", q, k)
    if mask is not None:
        scores = scores + mask
    return jnp.matmul(jax.nn.softmax(scores, axis=-1), v)


@register("attention")
def naive_attention(q: Array, k: Array, v: Array, mask: Array, *, scale: float) -> Array:
    return _softmax_attention(q * jnp.asarray(scale, q.dtype), k, v, None if _no_mask(mask) else mask)


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


def _pad(x: Array, axis: int, length: int, fill: float = 0.0) -> Array:
    """Pad ``axis`` with ``fill`` up to ``length`` (no copy when it already has it)."""
    pad = length - x.shape[axis]
    if not pad:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, pad)
    return jnp.pad(x, widths, constant_values=fill)


def _online_softmax(q: Array, k: Array, v: Array, mask: Array | None, bk: int, nk: int) -> Array:
    """softmax(q kᵀ + mask) v for one query block, streaming over key blocks with the stats form.

    Blocks are sliced in place (``dynamic_slice``), so keys, values and mask are never copied.
    """

    def step(j: Array, carry: tuple[Array, Array, Array]) -> tuple[Array, Array, Array]:
        m, total, acc = carry
        k_blk = lax.dynamic_slice_in_dim(k, j * bk, bk, axis=k.ndim - 2)
        v_blk = lax.dynamic_slice_in_dim(v, j * bk, bk, axis=v.ndim - 2)
        s = jnp.einsum("...qd,...kd->...qk", q, k_blk)
        if mask is not None:
            s = s + lax.dynamic_slice_in_dim(mask, j * bk, bk, axis=mask.ndim - 1)
        m_new = jnp.maximum(m, jnp.max(s, axis=-1, keepdims=True))
        if mask is None:  # every score finite: no row is fully masked
            p, rescale = jnp.exp(s - m_new), jnp.exp(m - m_new)
        else:
            safe = jnp.where(jnp.isneginf(m_new), 0.0, m_new)  # rows masked so far: exp(-inf - 0) = 0
            p = jnp.exp(s - safe)
            rescale = jnp.exp(jnp.where(jnp.isneginf(m), -jnp.inf, m - safe))
        total = total * rescale + jnp.sum(p, axis=-1, keepdims=True)
        acc = acc * rescale + jnp.matmul(p, v_blk)
        return m_new, total, acc

    rows = (*q.shape[:-1], 1)
    init = (
        jnp.full(rows, -jnp.inf, q.dtype),
        jnp.zeros(rows, q.dtype),
        jnp.zeros((*q.shape[:-1], v.shape[-1]), q.dtype),
    )
    _, total, acc = lax.fori_loop(0, nk, step, init)
    return acc / total  # a fully masked row: 0 / 0 = NaN, as in naive softmax


@register("flash_attention")
def flash_attention(q: Array, k: Array, v: Array, mask: Array, *, scale: float) -> Array:
    fused = _cudnn(q, k, v, mask, scale)
    if fused is not None:
        return fused
    out_dtype, sq, sk = q.dtype, q.shape[-2], k.shape[-2]
    acc_dtype = jnp.promote_types(q.dtype, jnp.float32)
    bq, bk, nq, nk = flash_blocks(prod(q.shape[:-2]), sq, sk)
    q = _pad(q.astype(acc_dtype) * jnp.asarray(scale, acc_dtype), -2, nq * bq)
    k, v = (_pad(t.astype(acc_dtype), -2, nk * bk) for t in (k, v))
    if _no_mask(mask) and nk * bk == sk:
        mask = None
    else:
        mask = mask.reshape((1,) * (q.ndim - mask.ndim) + mask.shape).astype(acc_dtype)  # rank of the scores
        mask = _pad(jnp.broadcast_to(mask, (*mask.shape[:-1], sk)), -1, nk * bk, fill=-jnp.inf)  # padded keys
        if mask.shape[-2] != 1:
            mask = _pad(mask, -2, nq * bq)

    def query_block(i: Array, out: Array) -> Array:
        qt = lax.dynamic_slice_in_dim(q, i * bq, bq, axis=q.ndim - 2)
        mt = mask
        if mask is not None and mask.shape[-2] != 1:
            mt = lax.dynamic_slice_in_dim(mask, i * bq, bq, axis=mask.ndim - 2)
        block = _softmax_attention(qt, k, v, mt) if nk == 1 else _online_softmax(qt, k, v, mt, bk, nk)
        return lax.dynamic_update_slice_in_dim(out, block, i * bq, axis=out.ndim - 2)

    out = lax.fori_loop(0, nq, query_block, jnp.zeros((*q.shape[:-1], v.shape[-1]), acc_dtype))
    return out[..., :sq, :].astype(out_dtype)
