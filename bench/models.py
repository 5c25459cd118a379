"""Benchmark programs written in JAX: MLP, BERT-base encoder layers, a GPT-2 small block, attention,
matmul chains, Q/K/V projections. Each ``make_*`` returns (function, example arguments)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

Case = tuple[Callable[..., Any], tuple[Any, ...]]


def _normal(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> jax.Array:
    return jnp.asarray(rng.normal(size=shape) * scale, jnp.float32)


def layer_norm(x: jax.Array, g: jax.Array, b: jax.Array) -> jax.Array:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5) * g + b


def _layer_params(rng: np.random.Generator, d: int, ff: int) -> dict[str, jax.Array]:
    p = {k: _normal(rng, d, d, scale=d**-0.5) for k in ("wq", "wk", "wv", "wo")}
    p |= {k: _normal(rng, d, scale=0.02) for k in ("bq", "bk", "bv", "bo", "b2", "ln1_b", "ln2_b")}
    p |= {"w1": _normal(rng, d, ff, scale=d**-0.5), "b1": _normal(rng, ff, scale=0.02)}
    p |= {"w2": _normal(rng, ff, d, scale=ff**-0.5), "ln1_g": jnp.ones(d), "ln2_g": jnp.ones(d)}
    return p


def encoder_layer(
    p: dict[str, jax.Array], x: jax.Array, mask: jax.Array, heads: int, causal: bool = False
) -> jax.Array:
    """Post-LN BERT layer (pre-LN GPT-2 block when ``causal``)."""
    b, s, d = x.shape

    def split(t: jax.Array) -> jax.Array:
        return t.reshape(b, s, heads, d // heads).transpose(0, 2, 1, 3)

    h = layer_norm(x, p["ln1_g"], p["ln1_b"]) if causal else x
    q, k, v = (split(h @ p[f"w{n}"] + p[f"b{n}"]) for n in "qkv")
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / np.sqrt(d // heads) + mask
    ctx = jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(scores, axis=-1), v)
    attn = ctx.transpose(0, 2, 1, 3).reshape(b, s, d) @ p["wo"] + p["bo"]
    if causal:
        x = x + attn
        return x + jax.nn.gelu(layer_norm(x, p["ln2_g"], p["ln2_b"]) @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]
    x = layer_norm(x + attn, p["ln1_g"], p["ln1_b"])
    return layer_norm(x + jax.nn.gelu(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"], p["ln2_g"], p["ln2_b"])


def make_bert(layers: int, seq: int, d: int = 768, heads: int = 12, seed: int = 0) -> Case:
    rng = np.random.default_rng(seed)
    params = [_layer_params(rng, d, 4 * d) for _ in range(layers)]
    mask = jnp.zeros((1, 1, 1, seq))

    def bert(params: list[dict[str, jax.Array]], x: jax.Array, mask: jax.Array) -> jax.Array:
        for p in params:
            x = encoder_layer(p, x, mask, heads)
        return x

    return bert, (params, _normal(rng, 1, seq, d), mask)


def make_gpt2_block(seq: int = 512, d: int = 768, heads: int = 12, seed: int = 0) -> Case:
    rng = np.random.default_rng(seed)
    mask = jnp.where(jnp.tril(jnp.ones((seq, seq), bool)), 0.0, -jnp.inf)[None, None]
    return (
        lambda p, x, m: encoder_layer(p, x, m, heads, causal=True),
        (_layer_params(rng, d, 4 * d), _normal(rng, 1, seq, d), mask),
    )


def make_mlp(batch: int = 64, seed: int = 0) -> Case:
    rng = np.random.default_rng(seed)
    p = {
        "w1": _normal(rng, 784, 128, scale=0.05),
        "b1": _normal(rng, 128),
        "w2": _normal(rng, 128, 10, scale=0.1),
        "b2": _normal(rng, 10),
    }

    def mlp(p: dict[str, jax.Array], x: jax.Array) -> jax.Array:
        return jax.nn.log_softmax(jax.nn.relu(x @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"])

    return mlp, (p, _normal(rng, batch, 784))


def make_attention(seq: int, heads: int = 8, dim: int = 64, seed: int = 0) -> Case:
    rng = np.random.default_rng(seed)

    def attention(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
        scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / np.sqrt(dim)
        return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(scores, axis=-1), v)

    return attention, tuple(_normal(rng, 1, heads, seq, dim) for _ in range(3))


def make_chain(n: int = 2048, seed: int = 0) -> Case:
    rng = np.random.default_rng(seed)
    return (lambda a, b, c, x: ((a @ b) @ c) @ x), (
        *(_normal(rng, n, n, scale=n**-0.5) for _ in range(3)),
        _normal(rng, n),
    )


def make_qkv(d: int = 768, seq: int = 128, seed: int = 0) -> Case:
    rng = np.random.default_rng(seed)
    w = tuple(_normal(rng, d, d, scale=d**-0.5) for _ in range(3))
    b = tuple(_normal(rng, d) for _ in range(3))
    return (lambda x, w, b: tuple(x @ wi + bi for wi, bi in zip(w, b, strict=True))), (
        _normal(rng, 1, seq, d),
        w,
        b,
    )
