"""Attention lowerings: naive (scores materialized) and flash (blocked, stats form).

``flash_attention`` loops over query blocks (``lax.fori_loop``). When one block's scores over all keys
fit ``FLASH_SCORES_BUDGET``, each block takes an exact one-pass softmax (XLA:CPU fuses it into one
kernel, and the scores stay in cache); otherwise each block streams over key blocks (sliced in place,
never copied), carrying the softmax stats (running max ``m``, running sum ``l``) and an accumulator
rescaled by ``exp(m_old - m_new)`` whenever the max grows — the online softmax. Either way it never
materializes the S×S scores, accumulates in float32 for float16/bfloat16 inputs, and keeps the
meaning of masks: with a ``-inf`` fill a fully masked row gives ``0/0`` (NaN), as naive softmax does;
with a finite fill it is the uniform average. Under a causal mask, key blocks after a query block's
last row are skipped (when no other mask could empty a row with a finite fill). On a GPU backend,
float16/bfloat16 inputs of rank 4 go to cuDNN's fused attention
(``jax.nn.dot_product_attention(implementation="cudnn")``) when it accepts them."""

from __future__ import annotations

import math
from math import prod

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from eqsat.ops import flash_blocks

from . import register

Array = jax.Array


def _known(x: Array, value: float | bool) -> bool:
    """``x`` is known at trace time to hold only ``value`` (a zero bias, an all-true mask)."""
    return isinstance(x, np.ndarray) and bool((x == value).all())


class _Masking:
    """How one attention call turns q kᵀ into the scores its softmax takes: the bias added, then
    ``where(mask and causal, scores, fill)``, and keys from ``valid`` on (padding) at -inf."""

    def __init__(
        self, has_bias: bool, has_mask: bool, fill: float, causal: bool, valid: int, padded: bool
    ) -> None:
        self.has_bias, self.has_mask, self.fill, self.causal = has_bias, has_mask, fill, causal
        self.valid, self.padded = valid, padded

    def scores(
        self, q: Array, k: Array, row0: Array | int, col0: Array | int, bias: Array | None, mask: Array | None
    ) -> Array:
        s = jnp.einsum("...qd,...kd->...qk", q, k)
        if bias is not None:
            s = s + bias
        rows = row0 + lax.broadcasted_iota(jnp.int32, s.shape[-2:], 0)
        cols = col0 + lax.broadcasted_iota(jnp.int32, s.shape[-2:], 1)
        keep = mask
        if self.causal:
            keep = rows >= cols if keep is None else keep & (rows >= cols)
        if keep is not None:
            s = jnp.where(keep, s, jnp.asarray(self.fill, s.dtype))
        if self.padded:
            s = jnp.where(cols < self.valid, s, -jnp.inf)
        return s

    @property
    def all_finite(self) -> bool:
        """Every score finite (for finite inputs): the online softmax needs no -inf guards."""
        masked = self.has_mask or self.causal
        return not self.has_bias and (not masked or math.isfinite(self.fill))

    @property
    def skips_blocks(self) -> bool:
        """Causal key blocks after the diagonal may be skipped: they are masked out and (with a -inf
        fill, or no other mask) no row is masked out entirely."""
        return self.causal and (not self.has_mask or self.fill == -math.inf)


def _softmax_attention(
    q: Array, k: Array, v: Array, masking: _Masking, row0: Array | int, bias: Array | None, mask: Array | None
) -> Array:
    """softmax(scores) v in one pass over materialized scores (in flash: one query block's, which
    fit in cache and which XLA:CPU fuses into a single kernel)."""
    scores = masking.scores(q, k, row0, 0, bias, mask)
    return jnp.matmul(jax.nn.softmax(scores, axis=-1), v)


def _optional(bias: Array, mask: Array) -> tuple[Array | None, Array | None]:
    return (None if _known(bias, 0) else bias), (None if _known(mask, True) else mask)


@register("attention")
def naive_attention(
    q: Array, k: Array, v: Array, bias: Array, mask: Array, *, scale: float, fill: float, causal: int
) -> Array:
    b, m = _optional(bias, mask)
    masking = _Masking(b is not None, m is not None, fill, bool(causal), k.shape[-2], padded=False)
    acc = jnp.promote_types(q.dtype, jnp.float32)  # scores and softmax of half precision in float32
    scaled = q.astype(acc) * jnp.asarray(scale, acc)
    return _softmax_attention(scaled, k.astype(acc), v.astype(acc), masking, 0, b, m).astype(q.dtype)


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


def _pad(x: Array, axis: int, length: int) -> Array:
    """Pad ``axis`` with zeros (False) up to ``length`` (no copy when it already has it)."""
    pad = length - x.shape[axis]
    if not pad:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, pad)
    return jnp.pad(x, widths)


def _slice(x: Array | None, start: Array, size: int, axis: int) -> Array | None:
    """A block of ``x`` along ``axis`` (from the end), or ``x`` itself where it broadcasts there."""
    if x is None or x.shape[axis] == 1:
        return x
    return lax.dynamic_slice_in_dim(x, start, size, axis=x.ndim + axis)


def _online_softmax(
    q: Array,
    k: Array,
    v: Array,
    masking: _Masking,
    row0: Array,
    bias: Array | None,
    mask: Array | None,
    bk: int,
    nk: Array | int,
) -> Array:
    """softmax(scores) v for one query block, streaming over ``nk`` key blocks with the stats form.

    Blocks are sliced in place (``dynamic_slice``), so keys, values, bias and mask are never copied.
    """
    finite = masking.all_finite and not masking.padded

    def block(j: Array) -> tuple[Array, Array]:
        k_blk, v_blk = (lax.dynamic_slice_in_dim(t, j * bk, bk, axis=t.ndim - 2) for t in (k, v))
        s = masking.scores(q, k_blk, row0, j * bk, _slice(bias, j * bk, bk, -1), _slice(mask, j * bk, bk, -1))
        return s, v_blk

    def stats(s: Array, m_new: Array) -> Array:
        """exp(s - m_new); where a row is masked so far (-inf), exp(-inf - 0) = 0."""
        return jnp.exp(s - (m_new if finite else jnp.where(jnp.isneginf(m_new), 0.0, m_new)))

    def step(j: Array, carry: tuple[Array, Array, Array]) -> tuple[Array, Array, Array]:
        m, total, acc = carry
        s, v_blk = block(j)
        m_new = jnp.maximum(m, jnp.max(s, axis=-1, keepdims=True))
        p = stats(s, m_new)
        rescale = stats(m, m_new)
        total = total * rescale + jnp.sum(p, axis=-1, keepdims=True)
        acc = acc * rescale + jnp.matmul(p, v_blk)
        return m_new, total, acc

    # the first key block starts the stats (no zero-filled carry: it would lose the rows' sharding)
    s, v_blk = block(jnp.int32(0))
    m = jnp.max(s, axis=-1, keepdims=True)
    p = stats(s, m)
    first = (m, jnp.sum(p, axis=-1, keepdims=True), jnp.matmul(p, v_blk))
    _, total, acc = lax.fori_loop(1, nk, step, first)
    return acc / total  # a fully masked row: 0 / 0 = NaN, as in naive softmax


def _scores_rank(x: Array, rank: int, dtype: object) -> Array:
    return x.reshape((1,) * (rank - x.ndim) + x.shape).astype(dtype)


@register("flash_attention")
def flash_attention(
    q: Array, k: Array, v: Array, bias: Array, mask: Array, *, scale: float, fill: float, causal: int
) -> Array:
    b, m = _optional(bias, mask)
    fused = _cudnn(q, k, v, b, m, scale, bool(causal))
    if fused is not None:
        return fused
    out_dtype, sq, sk = q.dtype, q.shape[-2], k.shape[-2]
    acc_dtype = jnp.promote_types(q.dtype, jnp.float32)
    bq, bk, nq, nk = flash_blocks(prod(q.shape[:-2]), sq, sk)
    q = _pad(q.astype(acc_dtype) * jnp.asarray(scale, acc_dtype), -2, nq * bq)
    k, v = (_pad(t.astype(acc_dtype), -2, nk * bk) for t in (k, v))
    padded = []
    for x, dtype in ((b, acc_dtype), (m, jnp.bool_)):
        if x is not None:
            x = _scores_rank(x, q.ndim, dtype)
            x = x if x.shape[-1] == 1 else _pad(x, -1, nk * bk)
            x = x if x.shape[-2] == 1 else _pad(x, -2, nq * bq)
        padded.append(x)
    b, m = padded
    masking = _Masking(b is not None, m is not None, fill, bool(causal), sk, padded=nk * bk != sk)

    def query_block(i: Array) -> Array:
        qt = lax.dynamic_slice_in_dim(q, i * bq, bq, axis=q.ndim - 2)
        bt, mt = _slice(b, i * bq, bq, -2), _slice(m, i * bq, bq, -2)
        if nk == 1:
            return _softmax_attention(qt, k, v, masking, i * bq, bt, mt)
        steps = jnp.minimum(nk, ((i + 1) * bq + bk - 1) // bk) if masking.skips_blocks else nk
        return _online_softmax(qt, k, v, masking, i * bq, bt, mt, bk, steps)

    blocks = lax.map(query_block, jnp.arange(nq))  # (nq, ..., bq, dv): no preallocated output
    out = jnp.moveaxis(blocks, 0, -3).reshape(*q.shape[:-1], v.shape[-1])
    return out[..., :sq, :].astype(out_dtype)
