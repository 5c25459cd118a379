"""Blocked attention: the flash forward pass and its own blocked backward pass (a ``jax.custom_vjp``).

Inputs arrive padded to whole blocks, in their own dtype: half-precision q, k, v stay half in every product,
which accumulates in float32 (as FlashAttention does on GPUs). The scores are rounded where the program rounds
them (q kᵀ, its scaling, the bias and the fill in the scores' dtype, then the softmax's dtype); the softmax
stats and accumulators are float32 or wider, and the probabilities are rounded to v's dtype for their product
with v. The forward pass maps over query blocks: when one block's scores over all keys fit the cache budget it
takes an exact one-pass softmax; otherwise it streams over key blocks (sliced in place, never copied) carrying
the softmax stats — running max ``m``, running sum ``l`` — and an accumulator rescaled by ``exp(m_old -
m_new)`` whenever the max grows (the online softmax). It saves only the output and the stats ``m``, ``l`` per
row (not ``m + log l``: with a fill like -1e9 a fully masked row's log-sum-exp rounds to the fill, and its
probabilities would come back as 1 instead of 1/S).

The backward pass (FlashAttention-2) has its own blocking (under a causal mask, square blocks that skip more
of the masked triangle). It maps over key blocks, and for each visits the query blocks that see it: it
recomputes the block's probabilities from the stats (``p = exp(s - m) / l``, held keys × queries so that no
product contracts its left operand's rows), accumulates the key block's
``dk``/``dv`` (carried through the loop over query blocks), and adds the block's share into ``dq`` (and into
the bias's gradient when there is a bias). Neither pass materializes the S×S scores, so memory stays O(S·D);
under a causal mask both skip the blocks after the diagonal."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import NamedTuple, overload

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from eqsat.devices import FUSED_CPU_ATTENTION

from .attention_call import AttentionCall

Array = jax.Array
Opt = Array | None
# dq (transposed) and dbias (running, full size), dk and dv (of one key block)
Grads = tuple[Array, Opt, Array, Array]
# rows and keys per block of the causal backward pass (on this CPU, 256 beat 128 and 512 at S = 1024-4096)
BACKWARD_BLOCK = 256
PV = "...qk,...kd->...qd"  # probabilities times values
# The backward pass holds its blocks keys × queries: each product then contracts its left operand's last
# axis, as XLA:CPU's dot runs natively (contracting the left operand's rows, it ran at half the float32
# rate and a quarter of bfloat16's, which it widens to float32 first; measured on 8 × 256 × 256 × 64).
SCORES_T = "...kd,...qd->...kq"  # scores (and the output's gradient times values), keys × queries
KV = "...kq,...qd->...kd"  # probabilities or score gradients (keys × queries) times query rows
DQ_T = "...dk,...kq->...dq"  # the queries' gradient, transposed: keys (transposed) times score gradients
FLASH_BLOCK_Q = 256  # queries per block of the online softmax
FLASH_BLOCK_K = 512  # keys per step of the online softmax
FLASH_EXACT_BLOCK_Q = 512  # queries per block when a block's scores fit FLASH_SCORES_BUDGET
# bytes of f32 scores one query block may hold and still take an exact one-pass softmax: this CPU's
# L3 where XLA fuses the block into one kernel, half of it where the block's scores make several passes
FLASH_SCORES_BUDGET = (32 if FUSED_CPU_ATTENTION else 16) * 2**20


def flash_blocks(rows: int, queries: int, keys: int) -> tuple[int, int, int, int]:
    """(query block, key block, query blocks, key blocks) for ``rows`` (batch × heads) of these
    lengths: all keys in one block when that block's scores fit the budget, else blocks streamed by
    the online softmax. The lowering and the cost model both ask here."""
    bq = max(1, min(FLASH_EXACT_BLOCK_Q, queries))
    if 4 * rows * bq * keys <= FLASH_SCORES_BUDGET:
        return bq, max(1, keys), -(-queries // bq), 1
    bq, bk = max(1, min(FLASH_BLOCK_Q, queries)), max(1, min(FLASH_BLOCK_K, keys))
    return bq, bk, -(-queries // bq), -(-keys // bk)


def flash_key_blocks(i: int, bq: int, bk: int, nk: int, causal: bool) -> int:
    """How many key blocks query block ``i`` visits: all, or under a causal mask those holding a key
    at or before its last query (the later ones are masked out entirely)."""
    return min(nk, -(-(i + 1) * bq // bk)) if causal and nk > 1 else nk


@dataclass(frozen=True)
class Masking:
    """How one attention call turns q kᵀ into the scores its softmax takes, as ``attention`` says (with
    ``zero_masked`` the probabilities of masked keys are 0): ``has_bias``, ``has_mask``, whether it has
    a bias and a mask; keys from ``valid`` on (``padded``: padding) at -inf."""

    attention: AttentionCall
    has_bias: bool
    has_mask: bool
    valid: int
    padded: bool = False

    def visible(self, p: Array, keep: Opt) -> Array:
        """The probabilities that multiply v: with ``zero_masked``, those of masked keys are 0."""
        return jnp.where(keep, p, 0.0) if self.attention.zero_masked and keep is not None else p

    def seen(self, keep: Opt, seen: Array) -> Array:
        """``seen``, or-ed with whether each row of this block keeps a key (with ``zero_masked``)."""
        if not self.attention.zero_masked or keep is None:
            return seen
        return seen | jnp.any(keep, axis=-1, keepdims=True)

    def scores(
        self, q: Array, k: Array, row0: Array | int, col0: Array | int, bias: Opt, mask: Opt
    ) -> tuple[Array, Opt]:
        """The block's scores in the softmax's dtype, and where they depend on q kᵀ (None: everywhere)."""
        s, keep, _ = self.scores_and_slope(q, k, row0, col0, bias, mask)
        return s, keep

    def scores_and_slope(
        self,
        q: Array,
        k: Array,
        row0: Array | int,
        col0: Array | int,
        bias: Opt,
        mask: Opt,
        transposed: bool = False,
    ) -> tuple[Array, Opt, Opt]:
        """``scores``, and the soft-cap's derivative ``1 - tanh²`` at each score (None without a cap):
        the backward pass's chain rule through the cap. ``transposed``: all three keys × queries (the
        bias and mask still arrive queries × keys)."""
        a = self.attention
        dtype = jnp.dtype(a.scores_dtype)
        spec, x, y = (SCORES_T, k, q) if transposed else ("...qd,...kd->...qk", q, k)
        s = product(spec, x, y, k.dtype, dtype).astype(a.product_dtype).astype(dtype)
        if transposed:
            bias, mask = (None if t is None else jnp.swapaxes(t, -1, -2) for t in (bias, mask))
        if a.scale != 1:
            s = s * jnp.asarray(a.scale, dtype)
        if a.divisor != 1:
            s = s / jnp.asarray(a.divisor, dtype)
        slope = None
        if a.softcap:
            s, t = soft_cap(s, a.softcap)
            slope = 1 - jnp.square(t.astype(self.stats_dtype))
        if bias is not None:
            s = s + bias.astype(dtype)
        rows = row0 + lax.broadcasted_iota(jnp.int32, s.shape[-2:], int(transposed))
        cols = col0 + lax.broadcasted_iota(jnp.int32, s.shape[-2:], int(not transposed))
        keep = mask
        if a.causal:
            keep = rows >= cols if keep is None else keep & (rows >= cols)
        if keep is not None:
            s = jnp.where(keep, s, jnp.asarray(a.fill, dtype))
        if self.padded:
            s = jnp.where(cols < self.valid, s, -jnp.inf)
            keep = None if keep is None else keep & (cols < self.valid)  # padding keys are never kept
        return s.astype(a.softmax_dtype), keep, slope

    @property
    def rounded_fill(self) -> float:
        """The fill as the scores hold it (``finfo(float32).min`` is -inf in bfloat16)."""
        return float(
            np.asarray(self.attention.fill, jnp.dtype(self.attention.scores_dtype)).astype(np.float64)
        )

    @property
    def stats_dtype(self) -> jnp.dtype:
        """The dtype of the online softmax's stats and accumulators: the softmax's, at least float32."""
        return jnp.promote_types(self.attention.softmax_dtype, jnp.float32)

    @property
    def finite(self) -> bool:
        """Every score finite (for finite inputs), padding included: no row's max is -inf, so the
        online softmax needs no -inf guards."""
        masked = self.has_mask or self.attention.causal
        return not self.has_bias and (not masked or math.isfinite(self.rounded_fill)) and not self.padded

    @property
    def skips_blocks(self) -> bool:
        """Causal key blocks after the diagonal may be skipped: they are masked out and (with a -inf
        fill, or no other mask) no row is masked out entirely."""
        return self.attention.causal and (not self.has_mask or self.rounded_fill == -math.inf)


@dataclass(frozen=True)
class Blocks:
    """The blocking of one flash call: query blocks of ``bq`` rows (``nq`` of them), key blocks of
    ``bk`` (``nk``)."""

    masking: Masking
    bq: int
    bk: int
    nq: int
    nk: int

    def key_blocks(self, i: Array) -> Array | int:
        """How many key blocks query block ``i`` sees (under a causal mask, those up to its last row)."""
        if not self.masking.skips_blocks:
            return self.nk
        return jnp.minimum(self.nk, ((i + 1) * self.bq + self.bk - 1) // self.bk)

    def first_query_block(self, j: Array) -> Array | int:
        """The first query block that sees key block ``j`` (under a causal mask, the one holding row
        ``j * bk``)."""
        return (j * self.bk) // self.bq if self.masking.skips_blocks else 0

    def backward(self) -> Blocks:
        """The backward pass's blocking: under a causal mask, square blocks of ``BACKWARD_BLOCK`` where
        they tile the padded lengths (they skip more of the masked triangle than the forward pass's
        blocks, which may hold all keys), else the forward pass's."""
        queries, keys = self.nq * self.bq, self.nk * self.bk
        size = BACKWARD_BLOCK
        if not self.masking.skips_blocks or queries % size or keys % size:
            return self
        return Blocks(self.masking, size, size, queries // size, keys // size)


def soft_cap(s: Array, cap: float) -> tuple[Array, Array]:
    """``cap · tanh(s / cap)`` in s's dtype (Gemma 2's logit soft-capping), and the ``tanh`` it took."""
    c = jnp.asarray(cap, s.dtype)
    t = jnp.tanh(s / c)
    return t * c, t


def product(spec: str, x: Array, y: Array, dtype: jnp.dtype, result: jnp.dtype | None = None) -> Array:
    """``einsum(spec, x, y)`` with both operands in ``dtype`` and a float32 (or wider: ``result``)
    result."""
    acc = jnp.promote_types(jnp.promote_types(dtype, jnp.float32), result or dtype)
    return jnp.einsum(spec, x.astype(dtype), y.astype(dtype), preferred_element_type=acc)


@overload
def block(x: Array, start: Array | int, size: int, axis: int) -> Array: ...
@overload
def block(x: None, start: Array | int, size: int, axis: int) -> None: ...
def block(x: Opt, start: Array | int, size: int, axis: int) -> Opt:
    """A block of ``x`` along ``axis`` (from the end), or ``x`` itself where it broadcasts there."""
    if x is None or x.shape[axis] == 1:
        return x
    return lax.dynamic_slice_in_dim(x, start, size, axis=x.ndim + axis)


def _add_block(x: Array, update: Array, starts: dict[int, Array | int]) -> Array:
    """``x`` with ``update`` added in place at ``starts`` (axis from the end -> start) along the axes
    where ``x`` is not broadcast."""
    index: list[Array | int] = [0] * x.ndim
    for axis, start in starts.items():
        if x.shape[axis] != 1:
            index[x.ndim + axis] = start
    return lax.dynamic_update_slice(x, lax.dynamic_slice(x, index, update.shape) + update, index)


def _unbroadcast(x: Array, shape: tuple[int, ...]) -> Array:
    """``x`` summed over the axes that ``shape`` broadcasts (size 1 there)."""
    axes = tuple(i for i, (a, b) in enumerate(zip(x.shape, shape, strict=True)) if b == 1 and a != 1)
    return jnp.sum(x, axis=axes, keepdims=True) if axes else x


def _key_block(
    b: Blocks,
    j: Array | int,
    q: Array,
    k: Array,
    v: Array,
    row0: Array | int,
    bias: Opt,
    mask: Opt,
    transposed: bool = False,
) -> tuple[Array, Array, Opt, Opt]:
    """(scores, values, where the scores depend on q kᵀ, the soft-cap's derivative) of key block ``j``
    for the query rows from ``row0`` (bias and mask already cut to those rows); ``transposed``: scores,
    where and derivative keys × queries."""
    k_blk, v_blk = (block(t, j * b.bk, b.bk, -2) for t in (k, v))
    cols = j * b.bk
    s, keep, slope = b.masking.scores_and_slope(
        q, k_blk, row0, cols, block(bias, cols, b.bk, -1), block(mask, cols, b.bk, -1), transposed
    )
    return s.astype(b.masking.stats_dtype), v_blk, keep, slope


def _exp(s: Array, m: Array, finite: bool) -> Array:
    """exp(s - m); where a row is masked so far (m = -inf), exp(-inf - 0) = 0."""
    return jnp.exp(s - (m if finite else jnp.where(jnp.isneginf(m), 0.0, m)))


def _query_block(
    b: Blocks, q: Array, k: Array, v: Array, row0: Array, bias: Opt, mask: Opt, steps: Array | int
) -> tuple[Array, Array, Array]:
    """(softmax(scores) v, the scores' max m, sum of exp(scores - m)) for one query block over
    ``steps`` key blocks: one pass when all keys form one block, else streamed with the stats form.
    With ``zero_masked``, masked keys add to the sum but not to the product with v, and rows that
    keep no key give 0."""
    s, v_blk, keep, _ = _key_block(b, 0, q, k, v, row0, bias, mask)
    none_seen = jnp.zeros((*s.shape[:-1], 1), bool)
    m = jnp.max(s, axis=-1, keepdims=True)
    if b.nk == 1:  # the block's scores fit in cache: an exact softmax, normalized after the product
        p = jnp.exp(s - m)
        total = jnp.sum(p, axis=-1, keepdims=True)
        out = product(PV, b.masking.visible(p, keep), v_blk, v.dtype) / total
        return _zeroed(b.masking, out, b.masking.seen(keep, none_seen)), m, total
    finite = b.masking.finite

    def step(j: Array, carry: tuple[Array, Array, Array, Array]) -> tuple[Array, Array, Array, Array]:
        m, total, acc, seen = carry
        s, v_blk, keep, _ = _key_block(b, j, q, k, v, row0, bias, mask)
        m_new = jnp.maximum(m, jnp.max(s, axis=-1, keepdims=True))
        p = _exp(s, m_new, finite)
        rescale = _exp(m, m_new, finite)
        total = total * rescale + jnp.sum(p, axis=-1, keepdims=True)
        acc = acc * rescale + product(PV, b.masking.visible(p, keep), v_blk, v.dtype)
        return m_new, total, acc, b.masking.seen(keep, seen)

    # the first key block starts the stats (no zero-filled carry: it would lose the rows' sharding)
    p = _exp(s, m, finite)
    pv = product(PV, b.masking.visible(p, keep), v_blk, v.dtype)
    first = (m, jnp.sum(p, axis=-1, keepdims=True), pv, b.masking.seen(keep, none_seen))
    m, total, acc, seen = lax.fori_loop(1, steps, step, first)
    # a fully masked row: 0 / 0 = NaN, as in naive softmax (0 with zero_masked)
    return _zeroed(b.masking, acc / total, seen), m, total


def _zeroed(masking: Masking, out: Array, seen: Array) -> Array:
    """With ``zero_masked``, 0 in rows that keep no key (their probabilities are all zeroed)."""
    zeroed = masking.attention.zero_masked and (masking.has_mask or masking.attention.causal)
    return jnp.where(seen, out, 0.0) if zeroed else out


def _unblock(blocks: Array) -> Array:
    """(n, ..., b, d) blocks back to (..., n * b, d)."""
    moved = jnp.moveaxis(blocks, 0, -3)
    return moved.reshape(*moved.shape[:-3], -1, moved.shape[-1])


def _forward(b: Blocks, q: Array, k: Array, v: Array, bias: Opt, mask: Opt) -> tuple[Array, Array, Array]:
    def query_block(i: Array) -> tuple[Array, Array, Array]:
        rows = i * b.bq
        qt = lax.dynamic_slice_in_dim(q, rows, b.bq, axis=q.ndim - 2)
        bt, mt = block(bias, rows, b.bq, -2), block(mask, rows, b.bq, -2)
        return _query_block(b, qt, k, v, rows, bt, mt, b.key_blocks(i))

    blocks = lax.map(query_block, jnp.arange(b.nq))  # (nq, ..., bq, d): no preallocated output
    return tuple(_unblock(x) for x in blocks)  # type: ignore[return-value]


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def blocked_attention(b: Blocks, q: Array, k: Array, v: Array, bias: Opt, mask: Opt) -> Array:
    """softmax(masked(q kᵀ + bias)) v over padded, scaled inputs, blocked as ``b`` says."""
    return _forward(b, q, k, v, bias, mask)[0]


class Residuals(NamedTuple):
    """What the forward pass saves for the backward pass: its inputs, its output and the softmax stats."""

    q: Array
    k: Array
    v: Array
    bias: Opt
    mask: Opt
    out: Array
    m: Array
    total: Array


def _fwd(b: Blocks, q: Array, k: Array, v: Array, bias: Opt, mask: Opt) -> tuple[Array, Residuals]:
    out, m, total = _forward(b, q, k, v, bias, mask)
    return out, Residuals(q, k, v, bias, mask, out, m, total)


def _backward_block(
    b: Blocks, i: Array, j: Array, res: Residuals, g: Array, delta: Array, k_t: Array, grads: Grads
) -> Grads:
    """Adds query block ``i`` × key block ``j``'s share to the gradients (``g`` the output's
    gradient, ``delta`` rowsum(dO ∘ O), ``k_t`` key block ``j`` transposed, ``dq`` transposed), keys ×
    queries: the probabilities are recomputed from the saved stats, ``ds = p (dO vᵀ - delta)``."""
    q, k, v, bias, mask, _, m, total = res
    dq_t, dbias, dk, dv = grads
    rows, cols = i * b.bq, j * b.bk
    qt, gt = (block(t, rows, b.bq, -2) for t in (q, g))
    m_row, total_row, delta_row = (jnp.swapaxes(block(t, rows, b.bq, -2), -1, -2) for t in (m, total, delta))
    bt, mt = block(bias, rows, b.bq, -2), block(mask, rows, b.bq, -2)
    s, v_blk, keep, slope = _key_block(b, j, qt, k, v, rows, bt, mt, transposed=True)
    p = _exp(s, m_row, b.masking.finite) / total_row
    ds = p * (product(SCORES_T, v_blk, gt, v.dtype) - delta_row)
    if keep is not None:  # a masked score is the fill, a constant (a fully masked row's NaN stays out)
        ds = jnp.where(keep, ds, 0.0)
    dv = dv + _unbroadcast(product(KV, b.masking.visible(p, keep), gt, v.dtype), dv.shape)
    ds_product = ds if slope is None else ds * slope  # the cap's chain rule: d(c·tanh(x / c)) = 1 - tanh²
    dk = dk + _unbroadcast(product(KV, ds_product, qt, q.dtype), dk.shape)
    dq_t = _add_block(dq_t, product(DQ_T, k_t, ds_product, k.dtype), {-1: rows})
    if dbias is not None:  # the bias's block: 1 along the axes it broadcasts
        target = (*dbias.shape[:-2], min(dbias.shape[-2], b.bq), min(dbias.shape[-1], b.bk))
        dbias = _add_block(dbias, _unbroadcast(jnp.swapaxes(ds, -1, -2), target), {-2: rows, -1: cols})
    return dq_t, dbias, dk, dv


def _bwd(b: Blocks, res: Residuals, g: Array) -> tuple[Array, Array, Array, Opt, None]:
    q, k, v, bias = res.q, res.k, res.v, res.bias
    b = b.backward()
    delta = jnp.sum(g * res.out, axis=-1, keepdims=True)
    g = g.astype(v.dtype)  # both its products take it in v's dtype: not held wider meanwhile
    acc = res.out.dtype
    scale = b.masking.attention.factor  # s = scale · q kᵀ / divisor

    def key_block(carry: tuple[Array, Opt], j: Array) -> tuple[tuple[Array, Opt], tuple[Array, Array]]:
        k_blk, v_blk = (block(t, j * b.bk, b.bk, -2) for t in (k, v))
        k_t = jnp.swapaxes(k_blk, -1, -2)
        dk, dv = jnp.zeros(k_blk.shape, acc), jnp.zeros(v_blk.shape, acc)
        dq_t, dbias, dk, dv = lax.fori_loop(
            b.first_query_block(j),
            b.nq,
            lambda i, grads: _backward_block(b, i, j, res, g, delta, k_t, grads),
            (*carry, dk, dv),
        )
        # each key block's gradients leave in their inputs' dtype (half the stacked bytes for half precision)
        return (dq_t, dbias), ((dk * scale).astype(k.dtype), dv.astype(v.dtype))

    start = (jnp.zeros(jnp.swapaxes(q, -1, -2).shape, acc), None if bias is None else jnp.zeros_like(bias))
    (dq_t, dbias), (dk, dv) = lax.scan(key_block, start, jnp.arange(b.nk))
    return (jnp.swapaxes(dq_t, -1, -2) * scale).astype(q.dtype), _unblock(dk), _unblock(dv), dbias, None


blocked_attention.defvjp(_fwd, _bwd)
