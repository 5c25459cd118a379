"""``eqsat.lowering``: programs lowered to JAX compute what the ops mean, trace each fused op once
across layers, read transposed operands in place, and keep integer and empty-shape semantics."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import eqsat
from eqsat import lowering
from eqsat.lowering import LOWERINGS
from eqsat.numerics import random_array
from tests.agreement import same_as_jax_jit


def test_div_lowers_to_truncating_integer_division_without_rules():
    x, y = jnp.array([7, -7, 9], jnp.int32), jnp.array([2, 2, 4], jnp.int32)
    same_as_jax_jit(lax.div, x, y, rules=[])


def test_small_integer_sums_wrap_in_their_own_dtype():
    same_as_jax_jit(lambda x: x.sum(dtype=jnp.int8), jnp.ones((300,), jnp.int8))


def test_size_zero_dims_broadcast_and_reduce():
    same_as_jax_jit(lambda x, y, z: x * y + z, jnp.ones((1,)), jnp.ones((0,)), jnp.ones((1,)))
    x = jnp.zeros((0, 3))
    same_as_jax_jit(lambda x: (jax.nn.softmax(x, axis=0), jnp.max(x, axis=0, initial=-jnp.inf)), x)


def _stacked_norms(layers: int, bound_scale: bool) -> eqsat.Program:
    """``layers`` layer norms of one signature, one after the other."""
    b = eqsat.Builder()
    y = b.input("x", (4, 8))
    scale = b.param("scale", (8,), data=np.full(8, 2.0) if bound_scale else None)
    bias = b.param("bias", (8,))
    for _ in range(layers):
        y = b.layer_norm(y, scale, bias, epsilon=1e-5)
    return b.build(y)


@pytest.mark.parametrize("bound_scale", [False, True])
def test_a_repeated_fused_op_is_traced_once_unless_an_operand_is_known(monkeypatch, bound_scale):
    """A model's layers trace each fused op once (a nested jit, inlined in MLIR); an operand known at
    trace time leaves each op to its lowering, which may specialize on it. The results are the same."""
    program = _stacked_norms(3, bound_scale)
    norm, traced = LOWERINGS["layer_norm"], []
    monkeypatch.setitem(LOWERINGS, "layer_norm", lambda *a, **k: traced.append(1) or norm(*a, **k))
    monkeypatch.setattr(lowering, "_staged", functools.lru_cache(lowering._staged.__wrapped__))
    rng = np.random.default_rng(0)
    args = [rng.normal(size=(4, 8)).astype(np.float32)] + [rng.normal(size=8).astype(np.float32)] * (
        1 if bound_scale else 2
    )
    jaxpr = jax.make_jaxpr(lowering.lower(program))(*args)
    assert len(traced) == (3 if bound_scale else 1)
    assert sum(e.primitive.name in ("jit", "pjit") for e in jaxpr.eqns) == (0 if bound_scale else 3)
    (got,) = jax.jit(lowering.lower(program))(*args)
    (want,) = lowering.reference(program)(*args)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_repeated_fused_op_with_known_scalar_operands_is_traced_once(monkeypatch):
    """Attention layers whose mask is an all-true constant (BERT's): the constant is part of the
    signature, so the layers trace attention once, and its lowering still sees the mask known (and
    drops it). A layer with another constant is traced apart."""
    b = eqsat.Builder()
    x = b.input("x", (2, 4, 8))
    bias = b.input("bias", (1, 1, 4))
    for keep in (True, True, True, False):
        x = b.attention(x, x, x, bias, b.full(shape=(), value=keep, dtype="bool"), scale=0.5, fill=-1e4)
    program = b.build(x)
    attention, traced = LOWERINGS["attention"], []
    monkeypatch.setitem(LOWERINGS, "attention", lambda *a, **k: traced.append(a[4]) or attention(*a, **k))
    monkeypatch.setattr(lowering, "_staged", functools.lru_cache(lowering._staged.__wrapped__))
    rng = np.random.default_rng(0)
    args = [rng.normal(size=(2, 4, 8)).astype(np.float32), rng.normal(size=(1, 1, 4)).astype(np.float32)]
    jax.make_jaxpr(lowering.lower(program))(*args)
    assert [bool(mask) for mask in traced] == [True, False]
    assert all(isinstance(mask, np.ndarray) for mask in traced)
    (got,) = jax.jit(lowering.lower(program))(*args)
    (want,) = lowering.reference(program)(*args)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _product_of_transposes(dtype: str, batch_y: int, also_added: bool) -> eqsat.Program:
    """``transpose(q) @ transpose(k)``, as einsum-written attention scores become (q, k: B, S, H, D)."""
    b = eqsat.Builder()
    q = b.input("q", (2, 5, 3, 4), dtype)
    k = b.input("k", (batch_y, 6, 3, 4), dtype)
    qt = b.transpose(q, perm=(0, 2, 1, 3))
    kt = b.transpose(k, perm=(0, 2, 3, 1))
    scores = b.matmul(qt, kt, dtype=dtype)
    return b.build(scores, b.add(qt, qt)) if also_added else b.build(scores)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8"])
@pytest.mark.parametrize(("batch_y", "also_added", "made"), [(2, False, 0), (1, False, 2), (2, True, 1)])
def test_a_product_reads_its_transposed_operands_in_place(dtype, batch_y, also_added, made):
    """A transpose only products read is folded into their dimension numbers (none made); one whose
    batch dims broadcast, or that another op reads, is made. The results are the program's."""
    program = _product_of_transposes("int32" if dtype == "int8" else dtype, batch_y, also_added)
    rng = np.random.default_rng(0)
    args = [random_array(v.type, rng) for v in program.inputs]
    jaxpr = jax.make_jaxpr(lowering.lower(program))(*args)
    written = [e for e in jaxpr.eqns if e.primitive.name == "transpose" and e.invars[0] in jaxpr.jaxpr.invars]
    assert len(written) == made
    got = jax.jit(lowering.lower(program))(*args)
    for g, want in zip(got, lowering.reference(program)(*args), strict=True):
        np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(want, np.float64), rtol=1e-2)
