"""Attention and MLP blocks written with real model libraries (flax nnx and linen, equinox, Keras 3,
haiku, ``jax.nn.dot_product_attention``), as users write them. Each ``make_*`` returns (function, example
arguments) with the parameters closed over; ``CASES`` names them. Used by tests/test_real_models.py
(small shapes) and bench/real_models.py (long sequences)."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

Case = tuple[Callable[..., Any], tuple[Any, ...]]


def _x(batch: int, seq: int, dim: int, dtype: Any, seed: int = 0) -> jax.Array:
    return jnp.asarray(np.random.default_rng(seed).normal(size=(batch, seq, dim)), dtype)


def _causal(seq: int) -> jax.Array:
    return jnp.tril(jnp.ones((seq, seq), bool))


def nnx_attention(batch: int, seq: int, dim: int = 64, heads: int = 4, dtype: Any = jnp.float32) -> Case:
    """flax nnx.MultiHeadAttention, self-attention, no mask."""
    from flax import nnx

    mha = nnx.MultiHeadAttention(
        num_heads=heads, in_features=dim, decode=False, dtype=dtype, rngs=nnx.Rngs(0)
    )

    def f(x: jax.Array) -> jax.Array:
        return mha(x)

    return f, (_x(batch, seq, dim, dtype),)


def nnx_causal_attention(
    batch: int, seq: int, dim: int = 64, heads: int = 4, dtype: Any = jnp.float32
) -> Case:
    """flax nnx.MultiHeadAttention with a causal mask (nnx.make_causal_mask)."""
    from flax import nnx

    mha = nnx.MultiHeadAttention(
        num_heads=heads, in_features=dim, decode=False, dtype=dtype, rngs=nnx.Rngs(0)
    )

    def f(x: jax.Array) -> jax.Array:
        return mha(x, mask=nnx.make_causal_mask(jnp.ones(x.shape[:2])))

    return f, (_x(batch, seq, dim, dtype),)


def linen_encoder(batch: int, seq: int, dim: int = 64, heads: int = 4, dtype: Any = jnp.float32) -> Case:
    """A post-LN encoder block with flax linen: MultiHeadDotProductAttention, LayerNorm, Dense MLP."""
    import flax.linen as nn

    class Encoder(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array, mask: jax.Array) -> jax.Array:
            y = nn.MultiHeadDotProductAttention(num_heads=heads, dtype=dtype)(x, x, mask=mask)
            x = nn.LayerNorm(dtype=dtype)(x + y)
            h = nn.Dense(4 * dim, dtype=dtype)(x)
            return nn.LayerNorm(dtype=dtype)(x + nn.Dense(dim, dtype=dtype)(nn.gelu(h)))

    x = _x(batch, seq, dim, dtype)
    mask = jnp.asarray(np.random.default_rng(1).random((batch, 1, 1, seq)) < 0.8)
    mask = mask.at[..., 0].set(True)
    model = Encoder()
    params = model.init(jax.random.key(0), x, mask)

    def f(x: jax.Array, mask: jax.Array) -> jax.Array:
        return model.apply(params, x, mask)

    return f, (x, mask)


def linen_transformer(
    layers: int, width: int, heads: int, dtype: Any = jnp.float32, causal: bool = True
) -> Any:
    """A pre-LN transformer with flax linen (MultiHeadDotProductAttention, LayerNorm, a GELU MLP),
    ``layers`` blocks deep: a decoder (``nn.make_causal_mask``) or an encoder (no mask)."""
    import flax.linen as nn

    class Block(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            mask = nn.make_causal_mask(jnp.ones(x.shape[:2])) if causal else None
            attention = nn.MultiHeadDotProductAttention(num_heads=heads, dtype=dtype)
            x = x + attention(nn.LayerNorm(dtype=dtype)(x), mask=mask)
            h = nn.Dense(4 * width, dtype=dtype)(nn.LayerNorm(dtype=dtype)(x))
            return x + nn.Dense(width, dtype=dtype)(nn.gelu(h))

    class Decoder(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            for _ in range(layers):
                x = Block()(x)
            return nn.LayerNorm(dtype=dtype)(x)

    return Decoder()


def linen_decoder(batch: int, seq: int, dim: int = 64, heads: int = 4, dtype: Any = jnp.float32) -> Case:
    """One block of the linen causal decoder (its mask a float 0/1 tensor compared back to bool)."""
    model = linen_transformer(1, dim, heads, dtype)
    x = _x(batch, seq, dim, dtype)
    params = model.init(jax.random.key(0), x)

    def f(x: jax.Array) -> jax.Array:
        return model.apply(params, x)

    return f, (x,)


def equinox_attention(batch: int, seq: int, dim: int = 64, heads: int = 4, dtype: Any = jnp.float32) -> Case:
    """equinox.nn.MultiheadAttention (per example, vmapped over the batch) with a causal mask."""
    import equinox as eqx

    mha = eqx.nn.MultiheadAttention(
        heads, dim, use_query_bias=True, use_output_bias=True, key=jax.random.key(0)
    )
    mha = jax.tree_util.tree_map(lambda a: a.astype(dtype) if eqx.is_inexact_array(a) else a, mha)

    def f(x: jax.Array) -> jax.Array:
        mask = _causal(x.shape[1])
        return jax.vmap(lambda xi: mha(xi, xi, xi, mask=mask))(x)

    return f, (_x(batch, seq, dim, dtype),)


def equinox_mlp(batch: int, seq: int, dim: int = 64, heads: int = 4, dtype: Any = jnp.float32) -> Case:
    """Two equinox.nn.Linear layers with a gelu, vmapped over batch and sequence."""
    import equinox as eqx

    k1, k2 = jax.random.split(jax.random.key(0))
    up, down = eqx.nn.Linear(dim, 4 * dim, key=k1), eqx.nn.Linear(4 * dim, dim, key=k2)
    up, down = (jax.tree_util.tree_map(lambda a: a.astype(dtype), m) for m in (up, down))

    def f(x: jax.Array) -> jax.Array:
        return jax.vmap(jax.vmap(lambda t: down(jax.nn.gelu(up(t)))))(x)

    return f, (_x(batch, seq, dim, dtype),)


def keras_attention(batch: int, seq: int, dim: int = 64, heads: int = 4, dtype: Any = jnp.float32) -> Case:
    """Keras 3 (JAX backend) MultiHeadAttention with dropout and an attention mask, at inference: its
    masked softmax zeroes the masked probabilities after the softmax (a fully masked row gives 0); the
    mask empties one row."""
    os.environ.setdefault("KERAS_BACKEND", "jax")
    import keras

    name = jnp.dtype(dtype).name
    mha = keras.layers.MultiHeadAttention(num_heads=heads, key_dim=dim // heads, dropout=0.1, dtype=name)
    x = _x(batch, seq, dim, dtype)
    keep = np.random.default_rng(1).random((batch, seq, seq)) < 0.7
    keep[0, seq // 2] = False
    mask = jnp.asarray(keep)
    mha(x, x, attention_mask=mask)  # builds the weights

    def f(x: jax.Array, mask: jax.Array) -> jax.Array:
        return mha(x, x, attention_mask=mask, training=False)

    return f, (x, mask)


def haiku_attention(batch: int, seq: int, dim: int = 64, heads: int = 4, dtype: Any = jnp.float32) -> Case:
    """haiku.MultiHeadAttention with a padding mask: its logits are divided by sqrt(key size) in the
    model's dtype (a division, not a product, in bfloat16)."""
    import haiku as hk

    def forward(x: jax.Array, mask: jax.Array) -> jax.Array:
        return hk.MultiHeadAttention(heads, dim // heads, w_init=hk.initializers.VarianceScaling(1.0))(
            x, x, x, mask=mask
        )

    model = hk.without_apply_rng(hk.transform(forward))
    x = _x(batch, seq, dim, dtype)
    mask = jnp.asarray(np.random.default_rng(1).random((batch, 1, 1, seq)) < 0.8).at[..., 0].set(True)
    params = jax.tree_util.tree_map(lambda a: a.astype(dtype), model.init(jax.random.key(0), x, mask))

    def f(x: jax.Array, mask: jax.Array) -> jax.Array:
        return model.apply(params, x, mask)

    return f, (x, mask)


def _qkv(batch: int, seq: int, heads: int, kv_heads: int, dim: int, dtype: Any) -> tuple[jax.Array, ...]:
    rng = np.random.default_rng(2)
    return tuple(
        jnp.asarray(rng.normal(size=(batch, seq, h, dim)), dtype) for h in (heads, kv_heads, kv_heads)
    )


def dot_product_attention(
    batch: int,
    seq: int,
    dim: int = 16,
    heads: int = 4,
    dtype: Any = jnp.float32,
    *,
    option: str = "plain",
) -> Case:
    """``jax.nn.dot_product_attention`` (BSHD) with one of its options: ``plain``, ``bias``, ``mask``,
    ``causal``, ``gqa`` (2 kv heads for ``heads`` query heads), ``gqa-causal``, ``gqa-bias``."""
    kv_heads = 2 if option.startswith("gqa") else heads
    q, k, v = _qkv(batch, seq, heads, kv_heads, dim, dtype)
    rng = np.random.default_rng(3)
    if option in ("bias", "gqa-bias"):
        bias = jnp.asarray(rng.normal(size=(1, heads, seq, seq)), dtype)
        return (lambda q, k, v, bias: jax.nn.dot_product_attention(q, k, v, bias=bias)), (q, k, v, bias)
    if option == "mask":
        mask = jnp.asarray(rng.random((batch, 1, seq, seq)) < 0.7).at[..., 0].set(True)
        return (lambda q, k, v, mask: jax.nn.dot_product_attention(q, k, v, mask=mask)), (q, k, v, mask)
    causal = option in ("causal", "gqa-causal")
    return (lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=causal)), (q, k, v)


CASES: dict[str, Callable[..., Any]] = {
    "flax-nnx-mha": nnx_attention,
    "flax-nnx-causal": nnx_causal_attention,
    "flax-linen-encoder": linen_encoder,
    "flax-linen-decoder": linen_decoder,
    "equinox-mha": equinox_attention,
    "equinox-mlp": equinox_mlp,
    "keras-mha-masked": keras_attention,
    "haiku-mha": haiku_attention,
    **{
        f"jax-dpa-{o}": functools.partial(dot_product_attention, option=o)
        for o in ("plain", "bias", "mask", "causal", "gqa", "gqa-causal", "gqa-bias")
    },
}
