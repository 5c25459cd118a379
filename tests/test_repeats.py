"""Repeated layers are optimized once and every copy alike (eqsat/repeats.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqsat
from bench import models
from bench.library_models import linen_transformer
from eqsat.repeats import find_repeats


def _bert(layers: int) -> tuple[eqsat.Program, tuple]:
    fn, args = models.make_bert(layers, 32, d=64, heads=2)
    return eqsat.from_jax(fn, *args), (fn, args)


@pytest.mark.slow
@pytest.mark.parametrize("layers", [2, 4])
def test_bert_layers_are_optimized_exactly_as_one_layer_alone(layers):
    """The issue's symptom: a deep BERT kept divisions that one layer turns into scales, because the
    back-off scheduler banned rules as the e-graph grew. Now each layer is the one-layer program."""
    one = eqsat.optimize(_bert(1)[0]).program.op_counts()
    program, (fn, args) = _bert(layers)
    repeats = find_repeats(program)
    assert repeats is not None and repeats.count == layers and len(repeats.segments) == layers
    result = eqsat.optimize(program, verify=True)
    assert result.program.op_counts() == {op: n * layers for op, n in one.items()}
    assert "div" not in one
    assert f"repeats {layers} times" in result.report.note
    got = result.fn(*jax.tree_util.tree_leaves(args))
    np.testing.assert_allclose(np.asarray(got[0]), np.asarray(jax.jit(fn)(*args)), rtol=2e-5, atol=2e-5)


def test_prefix_copies_and_suffix_are_stitched_back_in_order():
    """An embedding-like prefix, three identical residual MLP blocks (each reading its own weights
    and a shared bias), and a suffix: the copies are found, and the stitched program computes what
    the original does."""
    rng = np.random.default_rng(0)
    ws = [jnp.asarray(rng.normal(size=(3, 32, 32)) / 6, jnp.float32) for _ in range(3)]
    shared = jnp.asarray(rng.normal(size=32), jnp.float32)

    def block(x, w):
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
        h = (x - mean) * jax.lax.rsqrt(var + 1e-5) * w[2, 0] + shared
        return x + jnp.tanh(h @ w[0]) @ w[1] * 0.5 + jnp.exp(-jnp.square(h))

    def f(x, ws):
        x = jnp.sin(x) * 2.0 + 1.0
        for w in ws:
            x = block(x, w)
        return jnp.sum(jnp.abs(x), axis=-1), jnp.max(x)

    x = jnp.asarray(rng.normal(size=(8, 32)), jnp.float32)
    program = eqsat.from_jax(f, x, ws)
    repeats = find_repeats(program)
    assert repeats is not None and repeats.count == 3
    assert repeats.first == 1 and len(repeats.segments) == 5  # prefix, three copies, suffix
    jitted = eqsat.jit(f)
    for got, want in zip(jitted(x, ws), jax.jit(f)(x, ws), strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
    (result,) = jitted.results.values()
    assert "repeats 3 times" in result.report.note


def test_the_first_layer_reading_the_input_is_a_copy_too():
    """flax linen's first block reads the program input several times (cut finer than the blocks
    after it, whose input is computed); it still counts as a copy."""
    model = linen_transformer(2, 32, 2, causal=False)
    x = jnp.asarray(np.random.default_rng(0).normal(size=(1, 16, 32)), jnp.float32)
    params = model.init(jax.random.key(0), x)
    repeats = find_repeats(eqsat.from_jax(model.apply, params, x))
    assert repeats is not None and repeats.count == 2 and repeats.first == 0


def test_small_repeats_are_left_to_whole_program_optimization():
    """A chain of products repeats one matmul: it must be reassociated across the repeats, so blocks
    under MIN_BLOCK_OPS ops are never split off."""
    fn, args = models.make_chain(64)
    program = eqsat.from_jax(fn, *args)
    assert find_repeats(program) is None
    assert "repeats" not in eqsat.optimize(program).report.note
