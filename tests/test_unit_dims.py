"""The unit-dim pass (eqsat/unit_dims.py): a sum or max over an axis of one element is that element,
bit for bit, and the e-graph shares it with the element's other uses."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import eqsat
from eqsat.frontend.builder import Builder
from eqsat.lowering import lower
from eqsat.unit_dims import drop_unit_dims

SPECIAL = [0.0, -0.0, 1.5, -2.25, np.inf, -np.inf, np.nan, 1e-40]


@pytest.mark.parametrize("op", ["reduce_sum", "reduce_max"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
@pytest.mark.parametrize("keepdim", [0, 1])
def test_a_reduction_over_one_element_is_that_element_bit_for_bit(op, dtype, keepdim):
    b = Builder()
    x = b.input("x", (2, 1, 4), dtype)
    program = b.build(b.op(op, x, axis=1, keepdim=keepdim))
    squeezed = drop_unit_dims(program)
    assert op not in squeezed.op_counts()
    values = np.resize(np.array(SPECIAL if "float" in dtype else [0, -7, 2**30, -(2**31)]), (2, 1, 4))
    data = jnp.asarray(values.astype(dtype))
    want, got = (np.asarray(jax.jit(lower(p))(data)[0]) for p in (program, squeezed))
    assert want.shape == got.shape and want.dtype == got.dtype
    assert want.tobytes() == got.tobytes()


def test_a_reduction_of_bools_is_kept():
    b = Builder()
    flags = b.input("m", (3, 1), "bool")
    program = drop_unit_dims(b.build(b.reduce_max(flags, axis=1, keepdim=0)))
    assert "reduce_max" in program.op_counts()


def test_a_gradient_through_a_mean_over_one_feature_stays_finite():
    """Found by tests/test_fuzz.py: a layer norm over one feature, its scale 1e300, after a cast
    round trip through float32. The mean over one element was a second copy of the element, so the
    optimized program's gradient sent 3e302 and -3e302 through the cast to float32 separately (inf
    and -inf, then NaN) where the function as written sums them, to 0, first."""
    gamma = np.array([1e300])

    def fn(x):
        e = x.astype(jnp.float32).astype(jnp.float64)
        centered = e - jnp.mean(e, axis=-1, keepdims=True)
        e = centered * lax.rsqrt(jnp.mean(centered * centered, axis=-1, keepdims=True) + 1e-5) * gamma + 2.0
        scores = (e @ jnp.swapaxes(e, -1, -2)) * 2.0
        return jax.nn.softmax(scores.astype(jnp.float32), axis=-1).astype(e.dtype) @ e

    with jax.enable_x64(True):
        x = jnp.asarray([[-0.13210486]])
        loss = lambda f: lambda x: jnp.sum(f(x).astype(jnp.float32) * 0.7)  # noqa: E731
        want = jax.grad(loss(fn))(x)
        jitted = eqsat.jit(fn, gradient="optimized", limits=eqsat.Limits(max_iterations=8, max_nodes=5_000))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = jax.jit(jax.grad(loss(jitted)))(x)
    assert np.isfinite(np.asarray(want)).all()
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
