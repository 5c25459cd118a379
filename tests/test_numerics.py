"""``eqsat.numerics``: the oracle that judges a result against the op-by-op reference and jax.jit
blames eqsat only for roundings of its own."""

from __future__ import annotations

import warnings
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import eqsat
from eqsat import Builder
from eqsat.cli import main
from eqsat.lowering import reference
from eqsat.numerics import judge, random_array
from eqsat.types import TensorType
from eqsat.verify import validate

EQSAT = Path(eqsat.__file__).resolve().parent


def test_the_oracle_does_not_blame_eqsat_for_xla_bfloat16_roundings():
    """A false alarm of the fuzzer: exp(softmax(softmax(x)) * x + 2) in bfloat16 amplifies one rounding
    of the softmax by exp's argument (~24), so jax.jit and eqsat (bit-equal) are both 12% from the
    op-by-op reference. The judge's "no further from the program than jax.jit" clause skipped bfloat16
    (its numpy kind is "V"); a result further than jax.jit is still flagged."""

    def fn(x):
        p = jax.nn.softmax(jax.nn.softmax(x, axis=0), axis=0)
        return jnp.exp(p * x + 2.0)

    x = jnp.asarray([125.5, -132.0, 640.0, 105.0], jnp.bfloat16)
    want = jax.jit(fn)(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = eqsat.jit(fn)(x)
    (ref,) = reference(eqsat.from_jax(fn, x))(x)
    assert judge(ref, want, got, "bfloat16", strict=False) is None
    worse = np.asarray(got).astype(np.float32) * np.float32(1.5)
    assert judge(ref, want, worse.astype(jnp.bfloat16), "bfloat16", strict=False) is not None


def test_the_oracle_judges_no_rounding_where_jax_jit_keeps_no_digit():
    """A false alarm of the fuzzer (float32 gradients): attention then batch norm of 10000 ± 0.02, whose
    float32 gradient is 2.3e4 at most; jax.jit's is 1.2e6 off and eqsat's 1.4e6: no digit in either, so
    neither rounding is judged. Where jax.jit keeps digits, or eqsat turns a finite result into inf,
    eqsat is still flagged."""
    ref = np.asarray([2.25e4, -1.0e4, 0.0145])
    garbage = np.asarray([1.2e6, -1.0e6, 1.2e6])  # jax.jit's: further than 2.25e4 from ref
    assert judge(ref, garbage, garbage * 1.15, "float32", strict=False) is None
    assert judge(ref, garbage, np.asarray([np.inf, 0.0, 0.0]), "float32", strict=False) is not None
    close = ref * (1 + 1e-3)  # jax.jit keeps three digits: eqsat's garbage is flagged
    assert judge(ref, close, garbage, "float32", strict=False) is not None


def test_the_oracle_grants_a_sensitivity_only_where_jax_jit_is_beyond_the_tolerance():
    """``spread`` (how far the reference moves when its inputs move within the tolerance): a gradient
    that cancels large cotangents, where jax.jit's roundings are 1e-3 off, may be as far again as
    the spread; where jax.jit agrees with the reference, the spread excuses nothing."""
    ref = np.asarray([0.25, -0.125, 0.5])
    amplified, ours = ref + 1e-3, ref - 2e-3
    assert judge(ref, amplified, ours, "float32", strict=False) is not None
    assert judge(ref, amplified, ours, "float32", strict=False, spread=2.5e-3) is None
    assert judge(ref, ref, ours, "float32", strict=False, spread=1.0) is not None


def test_float64_programs_optimize_and_validate_without_warnings_from_eqsat(pir_path, tmp_path):
    """Without ``jax_enable_x64`` JAX computes float64 in float32, and warns where it is asked for
    float64 explicitly: eqsat asks for the dtype JAX computes in, so users (and ``eqsat optimize -q``)
    see no warning of eqsat's making. pyproject's filter ignores that warning elsewhere in the suite;
    here every warning is recorded. The shapes are this test's own, so nothing traced before hides a
    warning."""
    assert not jax.config.jax_enable_x64
    b = Builder()
    x = b.input("x", (3, 7), "float64")
    widened = b.cast(b.exp(b.cast(x, dtype="float32")), dtype="float64")
    float64 = b.build(b.add(widened, b.full(shape=(3, 7), value=1.0, dtype="float64")))
    pir = pir_path("drr_transpose_before")  # casts to float64 and back
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for program in (eqsat.load(pir), float64):
            result = eqsat.optimize(program, verify=True)
            validate(program, result.program)
        for kind in ("normal", "special", "wide"):
            random_array(TensorType((3, 7), "float64"), np.random.default_rng(0), kind)
        assert main(["optimize", "-q", "--verify", str(pir), "-o", str(tmp_path / "out.pir")]) == 0
    ours = [
        f"{w.filename}:{w.lineno}: {w.message}"
        for w in caught
        if "float64" in str(w.message) or Path(w.filename).resolve().is_relative_to(EQSAT)
    ]
    assert not ours
