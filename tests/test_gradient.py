"""A differentiated ``eqsat.jit`` function: what is differentiated (``eqsat.gradient``), and that its
derivatives are jax's."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqsat
from eqsat import speed
from eqsat.cost import CostModel


class PrefersBigProducts(CostModel):
    """Wrong on purpose: the larger a product's result, the cheaper it looks."""

    name = "prefers-big-products"

    def op_cost(self, op, attrs, inputs, output):
        return 1.0 / (1 + output.size)


def chain(a, m, v):
    """Two products by a thin matrix as written; the model above prefers (a m) v, a 512³ product. (v
    has two columns: with one, the sum over it is a reshape plus 0, whose scalar the model prices
    above every product.)"""
    return jnp.sum(a @ (m @ v))


def _args():
    rng = np.random.default_rng(0)
    return tuple(jnp.asarray(rng.normal(size=s), jnp.float32) for s in ((512, 512), (512, 512), (512, 2)))


def _gradients_match_jax(fn, args):
    got = jax.grad(fn, argnums=(0, 1, 2))(*args)
    want = jax.grad(chain, argnums=(0, 1, 2))(*args)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-3)


def test_a_program_that_trains_slower_is_not_the_one_differentiated():
    args = _args()
    fn = eqsat.jit(chain, cost=PrefersBigProducts())
    np.testing.assert_allclose(fn(*args), chain(*args), rtol=1e-4)
    (result,) = fn.results.values()
    assert result.program is not result.original  # the model's slow choice runs forward
    assert "training step" not in result.report.note  # nothing is timed until it is differentiated
    _gradients_match_jax(fn, args)
    jax.jit(jax.grad(fn))(*args)  # a second differentiation of the signature is not timed again
    assert result.report.note.count("training step timed") == 1
    assert "the function as written is differentiated" in result.report.note
    assert result.report.timings["measure_gradient"] > 0


@pytest.mark.parametrize("mode", ["optimized", "input"])
def test_the_named_program_is_differentiated_untimed(mode):
    args = _args()
    fn = eqsat.jit(chain, cost=PrefersBigProducts(), gradient=mode)
    _gradients_match_jax(fn, args)
    (result,) = fn.results.values()
    assert "training step" not in result.report.note


def test_a_faster_optimized_program_is_differentiated():
    """Written as (a m) v, optimized to a (m v): the optimized program trains faster and is kept."""
    args = _args()
    fn = eqsat.jit(lambda a, m, v: jnp.sum((a @ m) @ v))
    jax.grad(fn)(*args)
    (result,) = fn.results.values()
    assert result.program is not result.original
    assert "the optimized program is differentiated" in result.report.note


def test_values_of_an_enclosing_trace_are_differentiated_through():
    args = _args()

    def loss(a):
        return eqsat.jit(lambda m, v: chain(a, m, v), cost=PrefersBigProducts())(*args[1:])

    np.testing.assert_allclose(jax.grad(loss)(args[0]), jax.grad(chain)(*args), rtol=1e-4, atol=1e-3)


def test_higher_derivatives_and_integer_arguments():
    def f(x, n):
        return jnp.sum(jnp.exp(x) * jnp.exp(x) * n)

    fn = eqsat.jit(f)
    x, n = jnp.linspace(-1, 1, 8), jnp.arange(8)
    np.testing.assert_allclose(jax.hessian(fn)(x, n), jax.hessian(f)(x, n), rtol=1e-5)
    (result,) = fn.results.values()
    assert result.program is not result.original  # the rule was in the way
    assert "training step timed" in result.report.note


def test_an_unknown_mode_fails_at_decoration():
    with pytest.raises(ValueError, match="unknown gradient mode 'fastest'"):
        eqsat.jit(chain, gradient="fastest")


def test_a_training_step_as_written_that_needs_too_much_memory_is_not_run(monkeypatch):
    """Here "too much" is any amount more than the optimized step needs: (a m) v keeps a 512² product
    for its backward pass, a (m v) keeps vectors."""
    monkeypatch.setattr(speed, "LARGE_BYTES", 0)
    monkeypatch.setattr(speed, "FAR", 1)
    args = _args()
    fn = eqsat.jit(lambda a, m, v: jnp.sum((a @ m) @ v))
    jax.grad(fn)(*args)
    (result,) = fn.results.values()
    assert "MiB a measurement may take: the optimized program is differentiated untimed" in result.report.note


@jax.custom_vjp
def straight_through_round(x):
    return jnp.round(x)


straight_through_round.defvjp(lambda x: (jnp.round(x), None), lambda _, g: (g,))


@pytest.mark.parametrize("mode", ["measure", "optimized"])
def test_a_derivative_the_function_defines_is_kept(mode):
    """A straight-through estimator: the programs inline its rounding, whose derivative is zero."""

    def f(x):
        return jnp.sum(straight_through_round(x) * x)

    fn = eqsat.jit(f, gradient=mode)
    x = jnp.linspace(-2.0, 2.0, 9)
    np.testing.assert_allclose(jax.grad(fn)(x), jax.grad(f)(x))
    np.testing.assert_allclose(jax.grad(fn)(x), x + jnp.round(x))
    (result,) = fn.results.values()
    assert "derivatives of its own (custom_vjp_call)" in result.report.note


def test_a_checkpointed_region_is_optimized_and_its_gradient_recomputes():
    """A block under ``jax.checkpoint`` (flax's ``remat``: memory-saving training code wraps every
    residual block) is seen: its attention is fused. Its gradient is the function's as written, so
    the backward pass still recomputes the region (the checkpoint is kept) rather than store it."""

    @jax.checkpoint
    def block(q, k, v):
        s = jnp.einsum("bqd,bkd->bqk", q, k) / 8.0
        return jnp.einsum("bqk,bkd->bqd", jax.nn.softmax(s, axis=-1), v)

    def f(q, k, v):
        return jnp.tanh(block(q, k, v))

    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.normal(size=(2, 64, 16)), jnp.float32) for _ in range(3))
    fn = eqsat.jit(f)
    np.testing.assert_allclose(fn(q, k, v), f(q, k, v), rtol=1e-5, atol=1e-6)
    (result,) = fn.results.values()
    assert {"attention", "flash_attention"} & set(result.program.op_counts()), result.program.op_counts()
    loss = lambda *a: jnp.sum(fn(*a) ** 2)  # noqa: E731
    grads = jax.grad(loss, (0, 1, 2))(q, k, v)
    want = jax.grad(lambda *a: jnp.sum(f(*a) ** 2), (0, 1, 2))(q, k, v)
    for g, w in zip(grads, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    assert "(jax.checkpoint)" in result.report.note
    assert "remat" in str(jax.make_jaxpr(jax.grad(loss))(q, k, v))


@pytest.mark.parametrize("mode", ["optimized", "measure", "input"])
def test_a_frozen_value_has_no_gradient(mode):
    """``stop_gradient`` is an op of its own, not the identity: the optimized program (its attention
    fused) freezes what the function froze, and the gradient through it is exactly 0 (r24)."""

    def f(pos, x):
        h = x + jax.lax.stop_gradient(pos)
        return jax.nn.softmax(h @ h.T / 8.0) @ h

    rng = np.random.default_rng(0)
    pos, x, ct = (jnp.asarray(rng.normal(size=(64, 32)), jnp.float32) for _ in range(3))
    fn = eqsat.jit(f, gradient=mode)
    loss = lambda p, x: jnp.sum(fn(p, x) * ct)  # noqa: E731
    g_pos, g_x = jax.jit(jax.grad(loss, argnums=(0, 1)))(pos, x)
    assert float(jnp.max(jnp.abs(g_pos))) == 0.0
    want = jax.grad(lambda p, x: jnp.sum(f(p, x) * ct), argnums=1)(pos, x)
    np.testing.assert_allclose(g_x, want, rtol=1e-3, atol=1e-3)
    (result,) = fn.results.values()
    names = {op.name for op in result.program.ops}
    assert "stop_gradient" in names and "attention" in names


def test_a_max_from_minus_infinity_differentiates_as_jax_at_finite_inputs():
    """``jnp.max(x, initial=-inf)`` and ``jax.nn.softmax(where=)`` (which takes it): ``max-with-neg-inf``
    drops the -inf, which no finite input ties, so the derivative is JAX's, ties among the inputs and a
    row that keeps no key included. (At an input of -inf no derivative exists; JAX gives -inf's tie
    half the cotangent, the rule all of it.)"""

    def f(x, mask):
        top = jnp.max(jnp.where(mask, x, -jnp.inf), axis=-1, keepdims=True, initial=-jnp.inf)
        return jax.nn.softmax(x, where=mask) * 2.0 + jnp.where(mask, top, 0.0)

    x = jnp.asarray([[1.0, 1.0, 0.5, -2.0], [3.0, 0.0, 3.0, 1.0], [0.0, 1.0, 2.0, 3.0]], jnp.float32)
    mask = jnp.asarray([[True, True, True, False], [True, False, True, True], [False] * 4])
    ct = jnp.asarray(np.random.default_rng(1).normal(size=x.shape), jnp.float32)
    fn = eqsat.jit(f, gradient="optimized")
    got = jax.grad(lambda x: jnp.sum(fn(x, mask) * ct))(x)
    want = jax.grad(lambda x: jnp.sum(f(x, mask) * ct))(x)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    (result,) = fn.results.values()
    assert "max-with-neg-inf" in result.report.rules_fired
