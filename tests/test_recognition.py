"""Recognition composes: attention and softmax are found through the intermediate forms (the scaled
product, the masked softmax) however a library spells them — probabilities zeroed after the softmax
by the same mask, a softmax without the max subtracted, a softmax whose max and sum are taken in
different layouts (penzai's named axes) — in float32 and bfloat16, batch 1 and more, gradients too;
a batch norm after a conv, however it is written, folds into the conv; layer norm and RMS norm as
flax, equinox, Keras and a reference implementation write them are one op each."""

from __future__ import annotations

import ast
import functools
import inspect
import os
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqsat
from eqsat.cost.models import FunctionCost
from eqsat.frontend import jax as jax_frontend
from eqsat.ops import OPS

ATTENTION_OPS = ("attention", "flash_attention")
TOLERANCE = {"float32": 2e-5, "bfloat16": 5e-2}


def _qkv_mask(batch: int, dtype: str, seq: int = 12, heads: int = 2, dim: int = 8) -> tuple[jax.Array, ...]:
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.normal(size=(batch, heads, seq, dim)), dtype) for _ in range(3))
    keep = rng.random((batch, 1, seq, seq)) < 0.7
    keep[0, :, 5] = False  # a fully masked row
    return q, k, v, jnp.asarray(keep)


def zeroed_after_softmax(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
    """The masked softmax that never gives NaN: the same mask zeroes the probabilities after it."""
    scores = jnp.where(mask, q @ jnp.swapaxes(k, -1, -2) / jnp.sqrt(q.shape[-1]).astype(q.dtype), -jnp.inf)
    return jnp.where(mask, jax.nn.softmax(scores), 0) @ v


def unshifted_softmax(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
    """Softmax as some kernels' reference programs write it: exp(s) / sum(exp(s)), no max."""
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) * 0.125
    e = jnp.exp(scores)
    return (e / jnp.sum(e, axis=-1, keepdims=True)) @ v


def normalized_after_product(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
    """MaxText's order: the shifted exponentials' product with v, divided by their sum after it; the
    mask filled with its DEFAULT_MASK_VALUE."""
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / jnp.sqrt(q.shape[-1]).astype(q.dtype)
    scores = jnp.where(mask, scores, -0.7 * float(jnp.finfo(jnp.float32).max))
    e = jnp.exp(scores - jnp.max(scores, axis=-1, keepdims=True))
    return jnp.einsum("bhqk,bhkd->bhqd", e, v) / jnp.sum(e, axis=-1, keepdims=True)


def hf_llama_attention(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
    """HF Flax Llama in bfloat16: flax's ``dot_product_attention_weights(dtype=float32)`` promotes q and
    k to float32, scores and softmax in float32, probabilities cast back for the product with v."""
    qf, kf = q.astype(jnp.float32), k.astype(jnp.float32)
    bias = jnp.where(mask, 0.0, jnp.finfo(jnp.float32).min)
    weights = jnp.einsum("...hqd,...hkd->...hqk", qf / jnp.sqrt(q.shape[-1]).astype(jnp.float32), kf) + bias
    return jnp.einsum("...hqk,...hkd->...hqd", jax.nn.softmax(weights).astype(v.dtype), v)


def product_widened(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
    """q kᵀ in bfloat16 cast to float32 before the scale and the softmax (Mistral-style code)."""
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k).astype(jnp.float32) / np.sqrt(q.shape[-1])
    scores = jnp.where(mask, scores, -1e9)
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(scores, axis=-1).astype(v.dtype), v)


def hf_bert_head_mask(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
    """HF Flax BERT: flax's attention weights over (B, S, H, D), a per-head mask (not all ones) multiplied
    in by ``einsum("...hqk,h->...hqk")``, then the product with v."""
    import flax.linen as nn

    q, k, v = (jnp.swapaxes(t, 1, 2) for t in (q, k, v))
    bias = jnp.where(mask, 0.0, jnp.finfo(q.dtype).min).astype(q.dtype)
    weights = nn.dot_product_attention_weights(q, k, bias=bias, dtype=q.dtype)
    weights = jnp.einsum("...hqk,h->...hqk", weights, jnp.asarray([1.0, 0.5], q.dtype))
    return jnp.einsum("...hqk,...khd->...qhd", weights, v)


def integer_head_mask(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
    """The same with the head mask an int32 array of 0s and 1s (einsum promotes it)."""
    scores = jnp.where(mask, jnp.einsum("bhqd,bhkd->bhqk", q, k) * 0.125, -1e9)
    weights = jnp.einsum("...hqk,h->...hqk", jax.nn.softmax(scores), jnp.asarray([1, 0], jnp.int32))
    return weights @ v


def max_where_the_keys_stand(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
    """Named-axis code that reduces before it transposes: the scores laid out (B, H, keys, queries), the
    max taken over the keys where they stand, the exponentials and their sum after the keys move last."""
    scores = jnp.einsum("bhqd,bhkd->bhkq", q, k) * 0.125
    top = jnp.max(scores, axis=2)
    e = jnp.exp(jnp.swapaxes(scores, 2, 3) - top[..., None])
    return (e / jnp.sum(e, axis=-1, keepdims=True)) @ v


def subtracted_bias(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
    """HF Flax DistilBERT: the mask subtracted as a large bias, ``s - 1e30 * (1 - mask)``."""
    scores = jnp.einsum("bhqd,bhkd->bhqk", q / jnp.sqrt(q.shape[-1]).astype(q.dtype), k)
    scores = scores - 1e30 * (1.0 - mask.astype(q.dtype))
    return jax.nn.softmax(scores, axis=-1) @ v


def alibi_before_the_scale(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
    """keras-hub Falcon: ALiBi's per-head linear bias added to q kᵀ before the 1/sqrt(d) factor, then
    a masked softmax."""
    heads, seq = q.shape[1], k.shape[2]
    slopes = 2.0 ** (-8.0 * jnp.arange(1, heads + 1) / heads)
    alibi = (slopes[:, None] * jnp.arange(seq)[None, :])[None, :, None, :].astype(q.dtype)
    scores = (jnp.einsum("bhqd,bhkd->bhqk", q, k) + alibi) * (1.0 / np.sqrt(q.shape[-1])).astype(q.dtype)
    scores = jnp.where(mask, scores, jnp.finfo(scores.dtype).min)
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(scores, axis=-1), v)


IDIOMS = [
    zeroed_after_softmax,
    alibi_before_the_scale,
    unshifted_softmax,
    normalized_after_product,
    hf_bert_head_mask,
    integer_head_mask,
    max_where_the_keys_stand,
    subtracted_bias,
]


def _matches_jax(fn: Any, args: tuple[Any, ...], dtype: str) -> eqsat.Program:
    """eqsat.jit(fn)(*args) against jax.jit's within the dtype's tolerance; the optimized program."""
    optimized = eqsat.jit(fn)
    got, want = optimized(*args), jax.jit(fn)(*args)
    tol = TOLERANCE[dtype]
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32), rtol=tol, atol=tol)
    (result,) = optimized.results.values()
    return result.program


def _attention(program: eqsat.Program) -> list:
    return [op for op in program.live_ops() if op.name in ATTENTION_OPS]


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("fn", IDIOMS)
def test_attention_idiom_is_one_op_and_matches_jax(fn, batch, dtype):
    (op,) = _attention(_matches_jax(fn, _qkv_mask(batch, dtype), dtype))
    assert op.attrs["zero_masked"] == (fn is zeroed_after_softmax), op.attrs


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("fn", [hf_llama_attention, product_widened])
def test_half_precision_q_k_with_float32_scores_is_one_op(fn, batch):
    """bfloat16 q, k, v; scores and softmax in float32 (q and k promoted, or their product cast);
    probabilities cast back: one attention op, its product rounded where the program rounds it."""
    args = _qkv_mask(batch, "bfloat16")
    (op,) = _attention(_matches_jax(fn, args, "bfloat16"))
    assert (op.attrs["scores_dtype"], op.attrs["softmax_dtype"]) == ("float32", "float32")
    assert op.attrs["product_dtype"] == ("bfloat16" if fn is product_widened else "float32")
    q, k, v, mask = args

    def loss(q, k, v):
        return jnp.mean(jnp.square(fn(q, k, v, mask).astype(jnp.float32)))

    got = jax.jit(jax.grad(eqsat.jit(loss), argnums=(0, 1, 2)))(q, k, v)
    want = jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(q, k, v)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g, np.float32), np.asarray(w, np.float32), rtol=5e-2, atol=5e-3)


@pytest.mark.parametrize("fn", IDIOMS)
def test_attention_idiom_gradients_match_jax(fn):
    q, k, v, mask = _qkv_mask(2, "float32")
    _gradients_match(fn, q, k, v, mask | jnp.eye(mask.shape[-1], dtype=bool))  # an empty row's is NaN


def _gradients_match(fn: Any, q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> None:
    """The loss and its gradients through eqsat.jit(fn) are jax.jit's."""

    def loss(q, k, v):
        return jnp.mean(jnp.square(fn(q, k, v, mask)))

    got = jax.jit(jax.value_and_grad(eqsat.jit(loss), argnums=(0, 1, 2)))(q, k, v)
    want = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))(q, k, v)
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-6)


def gemma_attention(
    q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array, softcap: float | None = None
) -> jax.Array:
    """Gemma's attention as its flax code writes it: (B, T, N, H) in and out, the logits laid out
    (B, T, N, S), heads after the query axis, soft-capped (Gemma 2: ``tanh(logits / cap) * cap``),
    the mask (B, T, S) broadcast over the heads. With fewer key/value heads K than query heads
    (grouped-query attention), the queries are grouped (B, T, K, G, H) for both products and the
    logits merged back to (B, T, N, S) between them, where the mask and softmax apply."""
    b, t, n, h = q.shape
    kv_heads = k.shape[2]
    scaled = q * h**-0.5
    if kv_heads < n:
        grouped = scaled.reshape((b, t, kv_heads, n // kv_heads, h))
        logits = jnp.einsum("BTKGH,BSKH->BTKGS", grouped, k).reshape((b, t, n, -1))
    else:
        logits = jnp.einsum("BTNH,BSNH->BTNS", scaled, k)
    if softcap is not None:
        logits = jnp.tanh(logits / softcap) * softcap
    logits = jnp.where(jnp.expand_dims(mask, -2), logits, -2.3819763e38)
    probs = jax.nn.softmax(logits, axis=-1).astype(k.dtype)
    if kv_heads < n:
        grouped_probs = probs.reshape((b, t, kv_heads, n // kv_heads, -1))
        return jnp.einsum("BTKGS,BSKH->BTKGH", grouped_probs, v).reshape((b, t, n, h))
    return jnp.einsum("BTNS,BSNH->BTNH", probs, v)


def _heads_after_queries(batch: int, dtype: str, grouped: bool = False) -> tuple[jax.Array, ...]:
    """q, k, v as (B, T, N, H) and a mask (B, T, S); grouped: 4 query heads to k and v's 2."""
    q, k, v, mask = _qkv_mask(batch, dtype)
    if grouped:
        q = _qkv_mask(batch, dtype, heads=4)[0]
    return (*(jnp.swapaxes(t, 1, 2) for t in (q, k, v)), mask[:, 0] | jnp.eye(mask.shape[-1], dtype=bool))


@pytest.mark.parametrize("grouped", [False, True])
@pytest.mark.parametrize("softcap", [None, 0.5])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("batch", [1, 3])
def test_attention_with_heads_after_queries_is_one_op(batch, dtype, softcap, grouped):
    fn = functools.partial(gemma_attention, softcap=softcap)
    (op,) = _attention(_matches_jax(fn, _heads_after_queries(batch, dtype, grouped), dtype))
    assert op.attrs["fill"] < -1e38
    assert op.attrs["softcap"] == (softcap or 0.0)


@pytest.mark.parametrize("grouped", [False, True])
@pytest.mark.parametrize("softcap", [None, 0.5])
def test_attention_with_heads_after_queries_gradients_match_jax(softcap, grouped):
    fn = functools.partial(gemma_attention, softcap=softcap)
    _gradients_match(fn, *_heads_after_queries(2, "float32", grouped))


MAXTEXT_MASK_VALUE = -0.7 * float(jnp.finfo(jnp.float32).max)


def maxtext_gqa(q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array) -> jax.Array:
    """MaxText's attention_op order for grouped-query attention: q (B, T, N, D) grouped to k and v's
    (B, S, K, D) heads, the scores ``'btkgd,bskd->bkgts'``, masked with its DEFAULT_MASK_VALUE (the
    mask made a bias, compared back against half of it), exp(s - max) @ v, then divided by the sum
    after the product (the sum moved and merged to the output's (B, T, N, 1))."""
    b, t, n, d = q.shape
    n_kv = k.shape[-2]
    query = jnp.reshape(q, (b, t, n_kv, n // n_kv, d))
    attn_weights = jnp.einsum("btkgd,bskd->bkgts", query, k)
    attn_mask = jnp.where(mask, 0.0, MAXTEXT_MASK_VALUE)[:, None, None, :, :]
    attn_weights = jnp.where(attn_mask >= MAXTEXT_MASK_VALUE * 0.5, attn_weights, MAXTEXT_MASK_VALUE)
    local_max = jnp.max(attn_weights, axis=-1, keepdims=True)
    local_exps = jnp.exp(attn_weights - local_max)
    local_sum = jnp.moveaxis(jnp.sum(local_exps, axis=-1, keepdims=True), -2, 1)
    local_sum = jnp.reshape(local_sum, (*local_sum.shape[:2], local_sum.shape[2] * local_sum.shape[3], 1))
    out = jnp.einsum("bkgts,bskd->btkgd", local_exps, v)
    bb, tt, n_kv, g, dd = out.shape
    return jnp.reshape(out, (bb, tt, n_kv * g, dd)) / local_sum


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("batch", [1, 3])
def test_maxtext_grouped_query_attention_is_one_op(batch, dtype):
    args = _heads_after_queries(batch, dtype, grouped=True)
    (op,) = _attention(_matches_jax(maxtext_gqa, args, dtype))
    assert op.attrs["fill"] < -1e38


def test_maxtext_grouped_query_attention_gradients_match_jax():
    _gradients_match(maxtext_gqa, *_heads_after_queries(2, "float32", grouped=True))


def test_keras_masked_softmax_layer_is_one_zeroed_masked_softmax():
    os.environ.setdefault("KERAS_BACKEND", "jax")
    import keras

    layer = keras.layers.Softmax(axis=-1)
    x = jnp.asarray(np.random.default_rng(1).normal(size=(2, 5, 7)), jnp.float32)
    mask = jnp.asarray(np.random.default_rng(2).random((2, 5, 7)) < 0.6).at[0, 1].set(False)

    def f(x: jax.Array, mask: jax.Array) -> jax.Array:
        return layer(x, mask=mask)

    optimized = eqsat.jit(f)
    np.testing.assert_allclose(np.asarray(optimized(x, mask)), np.asarray(jax.jit(f)(x, mask)), atol=1e-7)
    (result,) = optimized.results.values()
    (op,) = [op for op in result.program.live_ops() if op.name == "masked_softmax"]
    assert op.attrs["zero_masked"] == 1 and op.attrs["fill"] == -1e9, op.attrs


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("batch", [1, 3])
def test_penzai_attention_over_named_axes_is_one_op(batch, dtype):
    """penzai's llama-like attention: named axes lay the scores out as (query, key, batch, heads), its
    Softmax("kv_seq") maps jax.nn.softmax over the other axes (the max taken over axis 1, the exp
    and the sum after a transpose puts it last), the mask and its fill (a scalar array) broadcast
    in that layout."""
    from penzai import pz
    from penzai.models.transformer.variants import llamalike_common as llama

    config = llama.LlamalikeTransformerConfig(
        num_kv_heads=2,
        query_head_multiplier=1,
        embedding_dim=32,
        projection_dim=8,
        mlp_hidden_dim=64,
        num_decoder_blocks=1,
        vocab_size=50,
        mlp_variant="swiglu",
        tie_embedder_and_logits=True,
        parameter_dtype=jnp.dtype(dtype),
        activation_dtype=jnp.dtype(dtype),
    )
    model = llama.build_llamalike_transformer(config, init_base_rng=jax.random.key(0))

    def logits(tokens: jax.Array) -> jax.Array:
        named = pz.nx.wrap(tokens).tag("batch", "seq")
        out = model(named, token_positions=pz.nx.arange("seq", tokens.shape[1]))
        return out.unwrap("batch", "seq", "vocabulary")

    tokens = jnp.asarray(np.random.default_rng(0).integers(0, 50, (batch, 12)), jnp.int32)
    program = _matches_jax(logits, (tokens,), dtype)
    counts = program.op_counts()
    assert len(_attention(program)) == 1, counts
    assert not {"softmax", "masked_softmax", "reduce_max", "exp"} & set(counts), counts


def _batch_norm_spellings(layout: str) -> dict[str, Any]:
    """A conv and a batch norm at inference written four ways, the statistics closed over as users
    hold them: divided by the root, times rsqrt, precomputed as y * s + t, and Keras's own function
    (x * inv + (-mean * inv + offset))."""
    os.environ.setdefault("KERAS_BACKEND", "jax")
    from keras.src.backend.jax.nn import batch_normalization

    rng = np.random.default_rng(3)
    nchw = layout == "NCHW"
    w = jnp.asarray(rng.normal(size=(4, 3, 3, 3) if nchw else (3, 3, 3, 4)), jnp.float32)
    mean, gamma, beta = (jnp.asarray(rng.normal(size=4), jnp.float32) for _ in range(3))
    var = jnp.asarray(rng.random(4) + 0.5, jnp.float32)
    dims = ("NCHW", "OIHW", "NCHW") if nchw else ("NHWC", "HWIO", "NHWC")

    def conv(x: jax.Array) -> jax.Array:
        return jax.lax.conv_general_dilated(x, w, (1, 1), "VALID", dimension_numbers=dims)

    def per_channel(t: jax.Array) -> jax.Array:
        return t[None, :, None, None] if nchw else t

    s = gamma / jnp.sqrt(var + 1e-5)
    return {
        "divided": lambda x: (
            (conv(x) - per_channel(mean)) / jnp.sqrt(per_channel(var) + 1e-5) * per_channel(gamma)
            + per_channel(beta)
        ),
        "rsqrt": lambda x: (
            (conv(x) - per_channel(mean)) * jax.lax.rsqrt(per_channel(var) + 1e-5) * per_channel(gamma)
            + per_channel(beta)
        ),
        "precomputed": lambda x: conv(x) * per_channel(s) + per_channel(beta - mean * s),
        "keras": lambda x: batch_normalization(
            conv(x), mean, var, axis=1 if nchw else 3, offset=beta, scale=gamma, epsilon=1e-5
        ),
    }


@pytest.mark.parametrize("spelling", ["divided", "rsqrt", "precomputed", "keras"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_batch_norm_in_any_spelling_folds_into_the_conv(layout, spelling):
    fn = _batch_norm_spellings(layout)[spelling]
    x = jnp.asarray(np.random.default_rng(4).normal(size=(2, 3, 9, 9) if layout == "NCHW" else (2, 9, 9, 3)))
    x = x.astype(jnp.float32)
    optimized = eqsat.jit(fn)
    np.testing.assert_allclose(np.asarray(optimized(x)), np.asarray(jax.jit(fn)(x)), rtol=1e-5, atol=1e-5)
    (result,) = optimized.results.values()
    convs = [op for op in result.program.live_ops() if op.name.startswith("conv2d")]
    assert [op.name for op in convs] == ["conv2d_bias_act"], result.program.op_counts()
    # what runs on the conv's output is the conv: the statistics went into its weights and bias
    (conv,) = convs
    assert not [op for op in result.program.live_ops() if conv.output in op.inputs], result.program


def _norms(dtype: str) -> dict[str, Any]:
    """Layer norm and RMS norm as libraries write them, in ``dtype``, over a last axis of 16."""
    import equinox as eqx
    import flax.linen as nn
    import haiku as hk

    os.environ.setdefault("KERAS_BACKEND", "jax")
    import keras

    dt = jnp.dtype(dtype)
    rng = np.random.default_rng(6)
    scale = jnp.asarray(rng.normal(size=16), dt)
    layers = {
        "flax-layer": nn.LayerNorm(dtype=dt, param_dtype=dt),
        "flax-rms": nn.RMSNorm(dtype=dt, param_dtype=dt),
    }
    x0 = jnp.zeros((2, 16), dt)
    params = {k: m.init(jax.random.key(0), x0) for k, m in layers.items()}
    eqx_layer = jax.tree_util.tree_map(lambda a: a.astype(dt), eqx.nn.LayerNorm(16))
    eqx_rms = jax.tree_util.tree_map(lambda a: a.astype(dt), eqx.nn.RMSNorm(16))
    keras_rms = keras.layers.RMSNormalization(dtype=dtype)
    keras_rms.build((2, 5, 16))
    keras_layer = keras.layers.LayerNormalization(dtype=dtype)
    keras_layer.build((2, 5, 16))
    keras_layer.gamma.assign(np.linspace(0.5, 1.5, 16))
    keras_layer.beta.assign(np.linspace(-1.0, 1.0, 16))

    haiku_layer = hk.without_apply_rng(hk.transform(lambda x: hk.LayerNorm(-1, True, True, param_axis=-1)(x)))
    haiku_params = haiku_layer.init(None, jnp.zeros((2, 16), dt))
    haiku_params = jax.tree_util.tree_map(lambda a: jnp.asarray(rng.normal(size=a.shape), dt), haiku_params)

    def gemma(x: jax.Array) -> jax.Array:  # keras_hub's Gemma RMSNormalization, in keras.ops
        xf = keras.ops.cast(x, "float32")
        var = keras.ops.mean(keras.ops.square(xf), axis=-1, keepdims=True)
        normed = xf * keras.ops.reciprocal(keras.ops.sqrt(var + 1e-6))
        return keras.ops.cast(normed * (1 + keras.ops.cast(scale, "float32")), x.dtype)

    def keras_llama(
        x: jax.Array,
    ) -> jax.Array:  # keras_hub's Llama RMS norm: ops.power(x, 2), an int exponent
        xf = keras.ops.cast(x, "float32")
        var = keras.ops.mean(keras.ops.power(xf, 2), axis=-1, keepdims=True)
        return keras.ops.cast(xf * keras.ops.rsqrt(var + 1e-6), x.dtype) * scale

    def llama(x: jax.Array) -> jax.Array:  # the reference RMSNorm: statistics in float32
        xf = x.astype(jnp.float32)
        return (xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + 1e-6)).astype(x.dtype) * scale

    return {
        "flax-layer": ("layer_norm", lambda x: layers["flax-layer"].apply(params["flax-layer"], x)),
        "flax-rms": ("rms_norm", lambda x: layers["flax-rms"].apply(params["flax-rms"], x)),
        "equinox-layer": ("layer_norm", lambda x: jax.vmap(jax.vmap(eqx_layer))(x)),
        "equinox-rms": ("rms_norm", lambda x: jax.vmap(jax.vmap(eqx_rms))(x)),
        "keras-rms": ("rms_norm", lambda x: keras_rms(x)),
        "keras-layer": ("layer_norm", lambda x: keras_layer(x)),
        "llama-rms": ("rms_norm", llama),
        "haiku-layer": ("layer_norm", lambda x: haiku_layer.apply(haiku_params, x)),
        "gemma-rms": ("rms_norm", gemma),
        "keras-llama-rms": ("rms_norm", keras_llama),
    }


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize(
    "name",
    [
        "flax-layer",
        "flax-rms",
        "equinox-layer",
        "equinox-rms",
        "keras-rms",
        "keras-layer",
        "llama-rms",
        "haiku-layer",
        "gemma-rms",
        "keras-llama-rms",
    ],
)
def test_normalization_is_one_canonical_op(name, dtype):
    op, fn = _norms(dtype)[name]
    x = jnp.asarray(np.random.default_rng(7).normal(size=(2, 5, 16)), dtype)
    counts = _matches_jax(fn, (x,), dtype).op_counts()
    if (name, dtype) == ("haiku-layer", "bfloat16"):
        # haiku's statistics are float32 and its centering bfloat16: no one-dtype layer norm is exactly it
        assert op not in counts, counts
        return
    assert counts.get(op) == 1, counts
    assert not {"rsqrt", "reduce_sum", "reduce_mean"} & set(counts), counts


@pytest.mark.parametrize("bias", [False, True])
def test_rms_norm_scale_moves_into_the_projection_after_it(bias):
    """RMSNorm then a projection: the norm's scale goes into the projection's constant weights (the
    superoptimizers' RMSNorm + matmul rewrite), leaving a norm with scale 1."""
    import flax.linen as nn

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            return nn.Dense(8, use_bias=bias)(nn.RMSNorm()(x))

    x = jnp.asarray(np.random.default_rng(8).normal(size=(4, 16)), jnp.float32)
    model = Block()
    params = jax.tree_util.tree_map(
        lambda a: a + jnp.linspace(0.5, 1.5, a.size).reshape(a.shape), model.init(jax.random.key(0), x)
    )
    fn = functools.partial(model.apply, params)
    optimized = eqsat.jit(fn)
    np.testing.assert_allclose(np.asarray(optimized(x)), np.asarray(jax.jit(fn)(x)), rtol=1e-5, atol=1e-5)
    (result,) = optimized.results.values()
    (op,) = [op for op in result.program.live_ops() if op.name == "rms_norm"]
    assert op.inputs[1].type.shape == (), result.program  # the scale is the constant 1


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda b: b.scores(b.input("q", (2, 4, 8)), b.input("k", (2, 5, 3)), b.input("b", ())), "head dim"),
        (lambda b: b.scores(b.input("q", (4, 8)), b.input("k", (5, 8)), b.input("b", (3, 5))), "broadcast"),
        (
            lambda b: b.scores(
                b.input("q", (4, 8), "int32"), b.input("k", (5, 8), "int32"), b.input("b", (), "int32")
            ),
            "floating",
        ),
        (
            lambda b: b.masked_softmax(b.input("x", (4, 8)), b.input("m", (4, 8), "float32"), axis=1),
            "mask must be bool",
        ),
        (
            lambda b: b.masked_softmax(b.input("x", (4, 8)), b.input("m", (3, 8), "bool"), axis=1),
            "does not broadcast",
        ),
        (lambda b: b.rms_norm(b.input("x", (4, 8)), b.input("g", (4,)), epsilon=1e-6), "must broadcast to"),
        (
            lambda b: b.layer_norm(
                b.input("x", (4, 8)), b.input("g", (8,), "float16"), b.input("h", (8,)), epsilon=1e-6
            ),
            "of x's dtype",
        ),
        (lambda b: b.reduce_mean(b.input("x", (4, 8), "int32"), axis=1), "floating-point"),
    ],
)
def test_intermediate_and_norm_ops_name_operands_that_do_not_fit(build, message):
    """The ops recognition introduces refuse operands they cannot hold, with the reason."""
    with pytest.raises(eqsat.ShapeError, match=message):
        build(eqsat.Builder())


def _named_by_the_jax_frontend() -> set[str]:
    """The ops the JAX frontend emits by name (its handlers' string literals that name an op)."""
    tree = ast.parse(Path(inspect.getfile(jax_frontend)).read_text())
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and n.value in OPS}


def test_every_op_no_primitive_spells_lists_its_spellings():
    """An op that neither a JAX primitive (``OpDef.jax``) nor the JAX frontend spells is reached only
    through rules: its definition lists the library code that means it (``OpDef.spellings``)."""
    unspelled = [
        name
        for name, op in OPS.items()
        if not op.jax and name not in _named_by_the_jax_frontend() and not op.spellings
    ]
    assert unspelled == [], f"list the code that means these ops beside them (OpDef.spellings): {unspelled}"


SPELLINGS = [(name, s) for name, op in OPS.items() for s in op.spellings]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "spelling"), SPELLINGS, ids=[f"{n}-{s.fn.__name__}" for n, s in SPELLINGS])
def test_each_spelling_reaches_its_op(name, spelling):
    """Traced and saturated with the default rules, the spelling reaches the op: extraction that prices
    the op at nothing and every other op at 1 takes it, and the program still computes the same."""
    program = eqsat.from_jax(spelling.fn, *(jax.ShapeDtypeStruct(t.shape, t.dtype) for t in spelling.args))
    prefer = FunctionCost(lambda op, attrs, ins, out: 0.0 if op == name else 1.0)
    result = eqsat.optimize(program, cost=prefer, verify=True)
    assert name in result.program.op_counts(), (spelling.source, result.program.op_counts())
