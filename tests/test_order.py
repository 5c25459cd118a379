"""The ops that pick by order (``eqsat/ops/order.py``): their lowerings against JAX's own on special
values, and their shape errors."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from eqsat.errors import ShapeError
from eqsat.ir import Program, TensorType
from eqsat.ops import OPS

_SPECIALS = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0], np.float32)


def _data(rng: np.random.Generator, shape: tuple[int, ...], dtype: str, special: bool) -> jnp.ndarray:
    """Small integers (many ties), or for floats special values (NaNs of both signs, ±inf, ±0)."""
    if dtype == "bool":
        return jnp.asarray(rng.integers(0, 2, shape).astype(bool))
    if dtype.startswith(("int", "uint")):
        return jnp.asarray(rng.integers(0 if dtype.startswith("u") else -3, 3, shape).astype(dtype))
    data = rng.choice(_SPECIALS, shape) if special else rng.integers(-2, 2, shape).astype(np.float32)
    return jnp.asarray(data, dtype)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int32", "int8", "uint8", "bool"])
@pytest.mark.parametrize(("name", "reference"), [("argmax", jnp.argmax), ("argmin", jnp.argmin)])
def test_first_position_is_jax_argmax_on_ties_nans_and_signed_zeros(dtype, name, reference):
    """argmax/argmin lower as two reductions; the position is jnp.argmax's wherever it is defined. Among
    several NaNs jnp.argmax's is its reduction order's (on an H100 it picked a row's second NaN where
    XLA:CPU picks the first): eqsat's is the first, and both hold a NaN."""
    rng = np.random.default_rng(0)
    for trial in range(60):
        shape = tuple(int(d) for d in rng.integers(1, 5, rng.integers(1, 4)))
        x = _data(rng, shape, dtype, special=bool(trial % 2))
        for axis in range(len(shape)):
            for keep in (0, 1):
                got = np.asarray(OPS[name].lower(x, axis=axis, keepdim=keep, dtype="int32"))
                want = np.asarray(reference(x, axis=axis, keepdims=bool(keep)))
                if not keep:
                    got, want = np.expand_dims(got, axis), np.expand_dims(want, axis)
                np.testing.assert_array_equal(np.where(_among_nans(x, axis, got, want), want, got), want)


def _among_nans(x: jnp.ndarray, axis: int, got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Where x's row has several NaNs and both positions hold one."""
    nans = np.isnan(np.asarray(x, np.float32))
    several = np.sum(nans, axis=axis, keepdims=True) > 1
    return several & np.take_along_axis(nans, got, axis) & np.take_along_axis(nans, want, axis)


@pytest.mark.parametrize("axis", [0, 1, 2])
def test_top_k_and_take_along_are_lax_top_k(axis):
    x = _data(np.random.default_rng(1), (3, 5, 4), "float32", special=True)
    positions = OPS["top_k"].lower(x, axis=axis, k=2)
    values, want = lax.top_k(jnp.moveaxis(x, axis, -1), 2)
    np.testing.assert_array_equal(positions, jnp.moveaxis(want, -1, axis))
    got = OPS["take_along"].lower(x, positions, axis=axis)
    np.testing.assert_array_equal(got, jnp.moveaxis(values, -1, axis))


@pytest.mark.parametrize(
    ("op", "operands", "attrs", "error"),
    [
        ("top_k", [(3, 4)], {"axis": 1, "k": 5}, "k = 5 outside 0..4"),
        ("argmax", [(3, 0)], {"axis": 1}, "no position to pick along axis 1 of size 0"),
        ("take_along", [(3, 4), (2, 1)], {"axis": 1}, "do not fit an operand"),
        ("argmin", [(3, 4)], {"axis": 0, "dtype": "float32"}, "an integer dtype is needed"),
    ],
)
def test_a_pick_that_does_not_fit_is_a_shape_error(op, operands, attrs, error):
    program = Program()
    dtypes = ["float32", "int32"]
    values = [program.add_input(f"x{i}", TensorType(s, dtypes[i])) for i, s in enumerate(operands)]
    with pytest.raises(ShapeError, match=error):
        program.add_op(op, values, **attrs)
