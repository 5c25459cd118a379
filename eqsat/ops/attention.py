"""Attention: ``attention`` (scores materialized) and ``flash_attention`` (streamed over key blocks
with the stats-form softmax; the kernel is ``eqsat.ops.flash``), their shape rule, costs and
lowerings.

Each lowering reads the op's attributes once, as an ``AttentionCall`` (``eqsat.ops.attention_call``),
and passes that record whole to ``eqsat.ops.flash`` and to the backends' kernels.

Both lowerings round where the program they were recognized from rounds (the scores' and the softmax's
dtypes are attributes). ``flash_attention`` scales and pads its inputs to whole blocks —
``flash.flash_blocks`` picks them, as the cost model does — and runs ``flash.blocked_attention``, which
never materializes the S×S scores, skips causal blocks, and has its own blocked backward pass. Both
keep the meaning of masks: with a ``-inf`` fill a fully masked row gives ``0/0`` (NaN), as naive softmax
does; with a finite fill it is the uniform average; with ``zero_masked`` the probabilities of masked keys
are 0 after the softmax (as Keras's masked softmax writes it), so a fully masked row gives 0. On a GPU
or TPU, ``flash_attention`` runs on the backend's own kernel (cuDNN, Pallas) where that kernel computes
the call exactly as written (``eqsat.ops.attention_kernels``).

Recognition goes through two intermediate ops defined here too: ``scores`` (``q kᵀ·scale + bias``, the
scaled product) and ``masked_softmax`` (in ``eqsat.ops.reduce``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from math import prod

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import DTypeLike

from eqsat.egglog_text import app, equal
from eqsat.errors import ShapeError
from eqsat.shapes import (
    Broadcast,
    EggRule,
    Shape,
    ShapeRule,
    broadcast,
    broadcasts_to,
    egg_batch,
    egg_dim_from_end,
)
from eqsat.text import AttrValue
from eqsat.types import FLOAT_DTYPES, TensorType

from . import attention_kernels as kernels
from .attention_call import ATTRS, AttentionCall
from .base import (
    RESULT_DTYPE,
    Attr,
    DeviceKernelFn,
    Kernel,
    Lowering,
    OpDef,
    PhasesFn,
    Spelling,
    contraction_kind,
    like,
    product_kind,
    spelled,
)
from .flash import Blocks, Masking, blocked_attention, flash_blocks, flash_key_blocks, soft_cap
from .linear import matmul
from .reduce import softmax


@dataclass(frozen=True)
class Attention(ShapeRule):
    """``softmax(where(mask, q kᵀ·scale + bias, fill)) v``, the scores soft-capped or not: q (..., Sq, D),
    k (..., Sk, D), v (..., Sk, Dv) -> (..., Sq, Dv); k's and v's batch dims broadcast to q's
    (grouped-query attention: one kv head for a group of query heads), bias and mask broadcast to the
    scores (..., Sq, Sk)."""

    def infer(self, shapes: Sequence[Shape], attrs: dict) -> Shape:
        q, k, v, bias, mask = shapes
        fits = len(q) == len(k) == len(v) >= 2 and all(broadcasts_to(t[:-2], q[:-2]) for t in (k, v))
        if not fits:
            raise ShapeError(
                f"attention needs q, k, v of one rank, k's and v's batch dims broadcasting to q's, "
                f"got {q}, {k}, {v}"
            )
        if q[-1] != k[-1] or k[-2] != v[-2]:
            raise ShapeError(f"attention of q {q}, k {k}, v {v}: head dims or key lengths differ")
        scores = (*q[:-1], k[-2])
        for name, shape in (("bias", bias), ("mask", mask)):
            if not broadcasts_to(shape, scores):
                raise ShapeError(f"attention {name} {shape} does not broadcast to the scores {scores}")
        return (*q[:-1], v[-1])

    def egglog(self, pattern: dict[str, str]) -> list[EggRule]:
        q, v = pattern["s0"], pattern["s2"]
        last = app("-", app("vec-length", q), 1)
        return [("", app("vec-set", q, last, egg_dim_from_end(v, 1)))]


@dataclass(frozen=True)
class Scores(ShapeRule):
    """``q kᵀ·scale / divisor + bias``: q (..., Sq, D), k (..., Sk, D) -> (..., Sq, Sk), batch dims
    broadcasting; the bias broadcasts to the result."""

    rank_bounded = True

    def infer(self, shapes: Sequence[Shape], attrs: dict) -> Shape:
        q, k, bias = shapes
        if len(q) < 2 or len(k) < 2 or q[-1] != k[-1]:
            raise ShapeError(f"scores of q {q} and k {k}: need rank >= 2 and one head dim")
        out = (*broadcast(q[:-2], k[:-2]), q[-2], k[-2])
        if not broadcasts_to(bias, out):
            raise ShapeError(f"scores bias {bias} does not broadcast to {out}")
        return out

    def egglog(self, pattern: dict[str, str]) -> list[EggRule]:
        q, k = pattern["s0"], pattern["s1"]
        rows, keys = (egg_dim_from_end(s, 2) for s in (q, k))
        batch = equal("b", app("broadcast-shape", egg_batch(q), egg_batch(k)))
        return [(batch, app("vec-push", app("vec-push", "b", rows), keys))]

    def demand(self, pattern: dict[str, str]) -> str:
        return app("wants-broadcast-shape", egg_batch(pattern["s0"]), egg_batch(pattern["s1"]))

    def prelude(self, ruleset: str) -> list[str]:
        return Broadcast().prelude(ruleset)


SOFTCAP = Attr("softcap", "float", 0.0)
PRODUCT_DTYPE = Attr("product_dtype", "str", like("dtype"))


def _scores_operands(types: Sequence[TensorType], attrs: dict) -> str | None:
    if types[0].dtype not in FLOAT_DTYPES:
        return f"needs floating-point q and k, got {types[0].dtype}"
    if types[2].dtype != attrs["dtype"]:
        return f"bias of dtype {types[2].dtype}, scores of dtype {attrs['dtype']}"
    return None


def _scores(
    q: Array,
    k: Array,
    bias: Array,
    *,
    scale: float,
    divisor: float,
    dtype: str,
    softcap: float = 0.0,
    product_dtype: str | None = None,
) -> Array:
    """As written: q kᵀ rounded to ``product_dtype`` (default ``dtype``) and cast to ``dtype``, times the
    scale, divided by the divisor, soft-capped (all in ``dtype``), plus the bias."""
    s = matmul(q, k, transpose_x=0, transpose_y=1, dtype=product_dtype or dtype).astype(dtype)
    if scale != 1:
        s = s * jnp.asarray(scale, s.dtype)
    if divisor != 1:
        s = s / jnp.asarray(divisor, s.dtype)
    if softcap:
        s = soft_cap(s, softcap)[0]
    return s if _known(bias, 0) else s + bias


def _scores_phases(ins: Sequence[TensorType], out: TensorType, attrs: dict) -> list[Kernel]:
    """As written: the product, then a pass scaling it (unless the scale is 1), then one adding the
    bias (unless it is a scalar, which XLA folds into the product's output)."""
    q, k, bias = ins
    product = Kernel(
        2.0 * out.size * q.shape[-1],
        q.nbytes + k.nbytes + out.nbytes,
        kind=product_kind(q.dtype, out.dtype),
        written=out.nbytes,
    )
    kernels = [product]
    for factor in ("scale", "divisor"):
        if attrs[factor] != 1:
            kernels.append(Kernel(float(out.size), 2.0 * out.nbytes))
    if attrs.get("softcap"):
        kernels.append(Kernel(3.0 * out.size, 2.0 * out.nbytes))
    if bias.size > 1:
        kernels.append(Kernel(float(out.size), 2.0 * out.nbytes + bias.nbytes))
    return kernels


_HEADS = ((2, 4, 16, 8), "float32")  # (batch, heads, length, head dim)
_TOKENS = ((2, 16, 4, 8), "float32")  # (batch, length, heads, head dim): jax.nn.dot_product_attention's


@spelled("q kᵀ / √d (flax's dot_product_attention_weights, HF Flax)", _HEADS, _HEADS)
def _scaled_product(q: jax.Array, k: jax.Array) -> jax.Array:
    return jnp.einsum("...hqd,...hkd->...hqk", q / jnp.sqrt(q.shape[-1]).astype(q.dtype), k)


@spelled("jax.nn.dot_product_attention", _TOKENS, _TOKENS, _TOKENS)
def _dot_product_attention(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    return jax.nn.dot_product_attention(q, k, v)


@spelled("jax.nn.dot_product_attention(is_causal=True)", _TOKENS, _TOKENS, _TOKENS)
def _causal_attention(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    return jax.nn.dot_product_attention(q, k, v, is_causal=True)


SCORES = OpDef(
    "scores",
    3,
    "q kᵀ·scale / divisor, soft-capped, + bias (q, k, bias), the scaled product attention's softmax "
    "takes: q kᵀ accumulated in product_dtype (default dtype; HF Llama rounds it to bfloat16 and "
    "casts it to float32) and returned as dtype, scaled, divided, capped (softcap · tanh(s / "
    "softcap) unless softcap is 0) and biased in dtype (as matmul, scale, div, tanh and add compute "
    "it: a division by a constant rounds unlike the product by its inverse)",
    (Attr("scale", "float", 1.0), Attr("divisor", "float", 1.0), RESULT_DTYPE, SOFTCAP, PRODUCT_DTYPE),
    Scores(),
    "dtype",
    lambda ins, out, attrs: 2.0 * out.size * ins[0].shape[-1] + 2.0 * out.size,
    phases=_scores_phases,
    same_dtype=(0, 1),
    check=_scores_operands,
    lower=_scores,
    spellings=(_scaled_product,),
)


def _attention_flops(ins: Sequence[TensorType], out: TensorType, attrs: dict) -> float:
    q, k, v = ins[0].shape, ins[1].shape, ins[2].shape
    scores = prod(q[:-1]) * k[-2]
    capped = 3.0 * scores if attrs.get("softcap") else 0.0
    return 2.0 * scores * q[-1] + 2.0 * scores * v[-1] + 5.0 * scores + capped


def _attention_phases(ins: Sequence[TensorType], out: TensorType, attrs: dict) -> list[Kernel]:
    """Naive attention is three kernels: q kᵀ writes the f32 scores, softmax reads and writes them,
    the product with v reads them back. Its products are of kind ``dot:attention:<dtype>``: a
    backend may run them apart from other products (XLA:CPU fuses the block and computes it in
    float32), and a calibrated profile prices them as measured (else as ``dot:<dtype>``)."""
    q, k, v = (t.shape for t in ins[:3])
    scores = prod(q[:-1]) * k[-2]
    s_bytes = 4.0 * scores
    kind = contraction_kind("dot", ins[0].dtype, "attention")
    return [
        Kernel(2.0 * scores * q[-1], ins[0].nbytes + ins[1].nbytes + s_bytes, kind=kind, written=s_bytes),
        Kernel(5.0 * scores, 2 * s_bytes + sum(t.nbytes for t in ins[3:] if t.size > 1)),  # scalars fold
        Kernel(2.0 * scores * v[-1], s_bytes + ins[2].nbytes + out.nbytes, kind=kind),
    ]


def _flash_phases(ins: Sequence[TensorType], out: TensorType, attrs: dict) -> list[Kernel]:
    """One fused step per (query block, key block) it visits — under a causal mask, only the key
    blocks at or before the query block's last row: its share of the work, the key/value block it
    reads, and the f32 accumulator and (max, sum) stats it reads and writes. Its products accumulate
    in float32 (``dot:widened:<dtype>`` for half-precision operands)."""
    q, k, v = ins[0].shape, ins[1].shape, ins[2].shape
    rows = prod(q[:-2])
    bq, bk, nq, nk = flash_blocks(rows, q[-2], k[-2])
    steps = sum(flash_key_blocks(i, bq, bk, nk, bool(attrs.get("causal"))) for i in range(nq))
    state = 4.0 * rows * bq * (v[-1] + 2)
    io = sum(t.nbytes for t in ins) + out.nbytes
    flops = _attention_flops(ins, out, attrs) / max(nq * nk, 1)
    return [Kernel(flops, io / nk + 2 * state, True, product_kind(ins[0].dtype, "float32"))] * steps


def _attention_operands(types: Sequence[TensorType], attrs: dict) -> str | None:
    if types[0].dtype not in FLOAT_DTYPES:
        return f"needs floating-point q, k, v, got {types[0].dtype}"
    narrow = [a for a in ("scores_dtype", "softmax_dtype") if attrs[a] not in FLOAT_DTYPES]
    if narrow:
        return f"{narrow[0]} must be a floating-point dtype, got {attrs[narrow[0]]}"
    if types[3].dtype not in (types[0].dtype, "float32", attrs["scores_dtype"]):
        return f"bias must be of q's dtype, float32 or the scores' dtype, got {types[3].dtype}"
    return None if types[4].dtype == "bool" else f"mask must be bool, got {types[4].dtype}"


Array = jax.Array


def _known(x: Array, value: float | bool) -> bool:
    """``x`` is known at trace time to hold only ``value`` (a zero bias, an all-true mask)."""
    return isinstance(x, np.ndarray) and bool((x == value).all())


def _optional(bias: Array, mask: Array) -> tuple[Array | None, Array | None]:
    return (None if _known(bias, 0) else bias), (None if _known(mask, True) else mask)


def _naive(call: AttentionCall, q: Array, k: Array, v: Array, bias: Array, mask: Array) -> Array:
    """The program as written: scores, softmax (shifted or not) and probabilities rounded where it
    rounds them."""
    b, m = _optional(bias, mask)
    scores, keep = Masking(call, b is not None, m is not None, k.shape[-2]).scores(q, k, 0, 0, b, m)
    probabilities = softmax(scores, axis=-1, shifted=call.shifted)
    if call.zero_masked and keep is not None:
        probabilities = jnp.where(keep, probabilities, 0)
    return jnp.matmul(probabilities.astype(q.dtype), v, preferred_element_type=q.dtype)


def naive_attention(q: Array, k: Array, v: Array, bias: Array, mask: Array, **attrs: AttrValue) -> Array:
    """The ``attention`` op's lowering: the program as written (``attrs``: ``AttentionCall.of``'s)."""
    return _naive(AttentionCall.of(attrs), q, k, v, bias, mask)


def _pad(x: Array, axis: int, length: int, value: float | bool = 0) -> Array:
    """Pad ``axis`` with ``value`` up to ``length`` (no copy when it has it, or broadcasts there)."""
    pad = length - x.shape[axis]
    if not pad or x.shape[axis] == 1:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, pad)
    return jnp.pad(x, widths, constant_values=value)


def _scores_rank(x: Array, rank: int, dtype: DTypeLike) -> Array:
    return x.reshape((1,) * (rank - x.ndim) + x.shape).astype(dtype)


def _device_kernel(ins: Sequence[TensorType], out: TensorType, attrs: dict, platform: str) -> str | None:
    """The kernel ``platform`` runs a ``flash_attention`` of these operands on (``kernels.route``), or
    None; a rank-0 bias or mask is taken for no bias or mask (a scalar shifts no softmax)."""
    q, k, v, bias, mask = ins
    optional = (t if t.shape else None for t in (bias, mask))
    call = kernels.Call.of(AttentionCall.of(attrs), q, k, v, *optional)
    taken = kernels.route(call, on=platform).kernel
    return None if taken == "xla" else taken


def _flash(call: AttentionCall, q: Array, k: Array, v: Array, bias: Array, mask: Array) -> Array:
    # nothing to stream, or an unshifted softmax (streaming needs the running max): as written
    if not (q.size and k.size and v.size and call.shifted):
        return _naive(call, q, k, v, bias, mask)
    b, m = _optional(bias, mask)
    out_dtype, sq, sk = q.dtype, q.shape[-2], k.shape[-2]
    acc_dtype = jnp.promote_types(q.dtype, jnp.float32)
    fused = kernels.run(kernels.Call.of(call, q, k, v, b, m), q, k, v, b)
    if fused is not None:  # the backend's own kernel takes it
        return fused
    bq, bk, nq, nk = flash_blocks(prod(q.shape[:-2]), sq, sk)
    if (
        q.dtype == acc_dtype == call.scores_dtype == call.product_dtype
    ):  # scaling q costs less than the scores
        q, call = q * jnp.asarray(call.scale, acc_dtype), replace(call, scale=1.0)
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
    masking = Masking(call, b is not None, m is not None, sk, ragged)
    out = blocked_attention(Blocks(masking, bq, bk, nq, nk), q, k, v, b, m)
    return out[..., :sq, :].astype(out_dtype)


def flash_attention(q: Array, k: Array, v: Array, bias: Array, mask: Array, **attrs: AttrValue) -> Array:
    """The ``flash_attention`` op's lowering: the backend's own kernel where one takes the call, else
    ``blocked_attention`` over inputs padded to whole blocks (``attrs``: ``AttentionCall.of``'s)."""
    return _flash(AttentionCall.of(attrs), q, k, v, bias, mask)


def _attention(
    name: str,
    doc: str,
    phases: PhasesFn,
    lower: Lowering,
    spellings: tuple[Spelling, ...],
    device_kernel: DeviceKernelFn | None = None,
) -> OpDef:
    """The attention ops differ only in how they run (their kernels), not in what they compute."""
    return OpDef(
        name,
        5,
        doc,
        ATTRS,
        Attention(),
        flops=_attention_flops,
        phases=phases,
        same_dtype=(0, 1, 2),
        check=_attention_operands,
        lower=lower,
        spellings=spellings,
        device_kernel=device_kernel,
    )


ATTENTION = [
    _attention(
        "attention",
        "softmax(where(mask, cap(q kᵀ·scale / divisor) + bias, fill)) v (q, k, v, bias, mask), cap(s) = "
        "softcap · tanh(s / softcap) where softcap is not 0 (Gemma 2's logit soft-capping); causal: the "
        "mask also keeps only keys j <= query i; zero_masked: the probabilities of masked keys are 0 "
        "(where(mask, softmax(...), 0): a fully masked row gives 0). Rounded where the program rounds: "
        "q kᵀ (rounded to product_dtype first, default scores_dtype), its scaling, the cap, the bias and "
        "the fill in scores_dtype; the softmax in softmax_dtype; "
        "the probabilities in q's dtype, their product with v accumulated in float32 or wider and "
        "returned in q's dtype (both dtypes default to q's, at least float32); scores materialized",
        _attention_phases,
        naive_attention,
        (_dot_product_attention,),
    ),
    _attention(
        "flash_attention",
        "attention streamed over key blocks with the online (stats-form) softmax: no S×S scores",
        _flash_phases,
        flash_attention,
        (_causal_attention,),
        _device_kernel,
    ),
]
