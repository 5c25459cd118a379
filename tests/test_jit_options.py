"""``eqsat.jit`` takes what ``jax.jit`` takes: static and donated arguments, shardings, keep_unused; and
offers ``.lower()``, ``.trace()``, ``.eval_shape()``. Sharded programs run over 8 (host) devices."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqsat
from eqsat import saturate


def _mlp(w, b, x):
    return jax.nn.relu(x @ w + b)


def _args():
    rng = np.random.default_rng(0)
    return (
        jnp.asarray(rng.normal(size=(32, 16)), jnp.float32),
        jnp.asarray(rng.normal(size=(16,)), jnp.float32),
        jnp.asarray(rng.normal(size=(8, 32)), jnp.float32),
    )


def test_lower_trace_and_eval_shape_see_the_optimized_program():
    fn = eqsat.jit(_mlp)
    args = _args()
    shape = fn.eval_shape(*args)
    assert (shape.shape, shape.dtype) == ((8, 16), jnp.float32)
    assert fn.optimizations == 1
    (result,) = fn.results.values()
    assert result.program.op_counts().get("linear") == 1
    jaxpr = str(fn.trace(*args).jaxpr)
    assert "dot_general" in jaxpr and "max" in jaxpr
    compiled = fn.lower(*args).compile()
    np.testing.assert_allclose(compiled(*args), jax.jit(_mlp)(*args), rtol=1e-6)
    assert fn.optimizations == 1  # one signature, optimized once


def test_donated_and_keyword_static_arguments():
    def scaled(x, factor, *, mode):
        return x * factor if mode == "mul" else x + factor

    fn = eqsat.jit(scaled, donate_argnums=0, static_argnames="mode")
    x = jnp.ones((4, 4))
    out = fn(x, 3.0, mode="mul")
    np.testing.assert_array_equal(out, np.full((4, 4), 3.0))
    donated = eqsat.jit(scaled, donate_argnames="x", static_argnames="mode")
    np.testing.assert_array_equal(donated(jnp.ones((4, 4)), 2.0, mode="add"), np.full((4, 4), 3.0))
    # the donation reaches XLA on every backend: the donated input aliases the output buffer
    for f in (fn, donated):
        assert "tf.aliasing_output" in f.lower(x, 3.0, mode="mul").as_text()
    kept = eqsat.jit(scaled, static_argnames="mode")
    assert "tf.aliasing_output" not in kept.lower(x, 3.0, mode="mul").as_text()


def test_keep_unused_keeps_an_unused_argument():
    def first(x, unused):
        return x * 2

    args = (jnp.ones(3), jnp.ones(5))
    kept = eqsat.jit(first, keep_unused=True).lower(*args).compile()
    pruned = eqsat.jit(first).lower(*args).compile()
    assert kept.input_shardings[0][1] is not None
    assert pruned.input_shardings[0][1] is None  # jax.jit's default: an unused argument is pruned


SHARDED = textwrap.dedent(
    """
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P
    import eqsat

    assert len(jax.devices()) == 8, jax.devices()
    mesh = jax.make_mesh((8,), ("x",))
    rng = np.random.default_rng(0)

    def mlp(w, b, x):
        return jax.nn.relu(x @ w + b)

    rows = NamedSharding(mesh, P("x"))
    w, b = jnp.asarray(rng.normal(size=(64, 32)), jnp.float32), jnp.zeros(32)
    x = jax.device_put(jnp.asarray(rng.normal(size=(64, 64)), jnp.float32), rows)
    fn = eqsat.jit(mlp, in_shardings=(None, None, rows), out_shardings=rows)
    out = fn(w, b, x)
    assert out.sharding.is_equivalent_to(rows, 2), out.sharding
    np.testing.assert_allclose(out, jax.jit(mlp)(w, b, x), rtol=1e-5, atol=1e-5)

    def attention(q, k, v):
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / 8.0
        return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v)

    heads = NamedSharding(mesh, P(None, "x"))
    qkv = (jnp.asarray(rng.normal(size=(1, 8, 2048, 64)), jnp.float32) for _ in "qkv")
    q, k, v = (jax.device_put(t, heads) for t in qkv)
    fn = eqsat.jit(attention, in_shardings=heads, out_shardings=heads, cost="roofline:cpu")
    out = fn(q, k, v)
    (result,) = fn.results.values()
    assert "flash_attention" in result.program.op_counts(), result.program.op_counts()
    assert out.sharding.is_equivalent_to(heads, 4)
    np.testing.assert_allclose(out, jax.jit(attention)(q, k, v), rtol=1e-4, atol=1e-4)
    print("sharded ok")
    """
)


def test_sharded_programs_run_over_eight_devices_and_match_jax():
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=8", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run(
        [sys.executable, "-c", SHARDED], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "sharded ok" in done.stdout


def test_decorating_starts_installing_the_rules_and_rejects_unknown_rule_names():
    relu_twice = eqsat.rules.base.rule(  # a rule set no other test uses: its e-graph is made anew
        "relu-twice-decorated", "relu is idempotent", "(Relu (Relu x))", "(Relu x)", example=lambda rng: {}
    )
    rules = [*eqsat.rules.select(["transpose", "reshape", "fusion"]), relu_twice]
    fn = eqsat.jit(_mlp, rules=rules)
    assert tuple(rules) in saturate._INCOMING  # on its way before the first call
    args = _args()
    np.testing.assert_allclose(fn(*args), jax.jit(_mlp)(*args), rtol=1e-5, atol=1e-5)
    assert tuple(rules) not in saturate._INCOMING  # the first call took it
    with pytest.raises(KeyError, match="no-such-rule"):
        eqsat.jit(_mlp, rules=["no-such-rule"])


def test_bad_options_fail_where_they_are_given():
    """An unknown cost model fails at decoration, an unknown extractor before any saturation."""
    with pytest.raises(KeyError, match="unknown cost model 'bogus'"):
        eqsat.jit(lambda x: x * 2, cost="bogus")
    iterations = []
    program = eqsat.from_jax(lambda x: jnp.tanh(x) * 2, jnp.ones(3))
    with pytest.raises(ValueError, match="unknown extractor 'bogus'"):
        eqsat.optimize(program, extractor="bogus", progress=iterations.append)
    assert iterations == []
