"""Real model code (flax nnx and linen, equinox, Keras 3, haiku, jax.nn.dot_product_attention) through
eqsat.jit: the outputs match jax.jit, each attention block becomes one attention op, each biased
projection a ``linear``, and no primitive stays opaque — in float32 and bfloat16, batch 1 and more."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqsat
from bench.library_models import CASES

ATTENTION_OPS = ("attention", "flash_attention")
# (attention blocks, projections with a bias) each model holds
EXPECTED = {
    "flax-nnx-mha": (1, 4),
    "flax-nnx-causal": (1, 4),
    "flax-linen-encoder": (1, 6),
    "flax-linen-decoder": (1, 6),
    "equinox-mha": (1, 2),
    "equinox-mlp": (0, 2),
    "keras-mha-masked": (1, 4),
    "haiku-mha": (1, 2),
    "jax-dpa-plain": (1, 0),
    "jax-dpa-bias": (1, 0),
    "jax-dpa-mask": (1, 0),
    "jax-dpa-causal": (1, 0),
    "jax-dpa-gqa": (1, 0),
    "jax-dpa-gqa-causal": (1, 0),
    "jax-dpa-gqa-bias": (1, 0),
}
CAUSAL = {"flax-nnx-causal", "flax-linen-decoder", "equinox-mha", "jax-dpa-causal", "jax-dpa-gqa-causal"}
ZEROED = {"keras-mha-masked"}  # masked probabilities zeroed after the softmax
TOLERANCE = {"float32": 2e-5, "bfloat16": 5e-2}


def test_every_library_case_has_expectations():
    assert set(EXPECTED) == set(CASES)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("name", sorted(CASES))
def test_library_model_is_recognized_and_matches_jax(name, batch, dtype):
    fn, args = CASES[name](batch, 16, dtype=jnp.dtype(dtype))
    optimized = eqsat.jit(fn)
    got, want = optimized(*args), jax.jit(fn)(*args)
    tol = TOLERANCE[dtype]
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32), rtol=tol, atol=tol)

    (result,) = optimized.results.values()
    counts = result.program.op_counts()
    blocks, biased = EXPECTED[name]
    attention = [op for op in result.program.live_ops() if op.name in ATTENTION_OPS]
    assert len(attention) == blocks, counts
    assert counts.get("linear", 0) == biased, counts
    assert "opaque" not in {op.name for op in result.program.live_ops()}, counts
    assert all(op.attrs["causal"] == (name in CAUSAL) for op in attention), attention
    assert all(op.attrs["zero_masked"] == (name in ZEROED) for op in attention), attention


@pytest.mark.parametrize(
    "name",
    [
        "flax-linen-decoder",
        "flax-nnx-causal",
        "jax-dpa-gqa",
        "jax-dpa-gqa-causal",
        "jax-dpa-gqa-bias",
        "keras-mha-masked",
    ],
)
def test_gradients_through_eqsat_jit_match_jax(name):
    """jax.value_and_grad through eqsat.jit (a training step's shape) matches jax.jit's."""
    fn, args = CASES[name](2, 16)

    def loss(*xs):
        return jnp.mean(jnp.square(fn(*xs)))

    argnums = tuple(i for i, a in enumerate(args) if jnp.issubdtype(a.dtype, jnp.inexact))  # not masks
    got = jax.jit(jax.value_and_grad(eqsat.jit(loss), argnums=argnums))(*args)
    want = jax.jit(jax.value_and_grad(loss, argnums=argnums))(*args)
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-4, atol=1e-6)
