"""``eqsat.jit`` takes what ``jax.jit`` takes: static and donated arguments (by index or name, nested),
shardings, keep_unused, PRNG keys; and offers ``.lower()``, ``.trace()``, ``.eval_shape()``. Sharded
programs run over 8 (host) devices."""

from __future__ import annotations

import os
import re
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


def _shape_bug(x, y):
    return x @ y


def _python_branch(x):
    if x.sum() > 0:
        return x
    return -x


@pytest.mark.parametrize("fn, args", [(_shape_bug, 2), (_python_branch, 1)], ids=["shape", "branch"])
def test_an_error_in_the_users_function_is_raised_as_jax_jit_raises_it(fn, args):
    """The same exception, message and innermost frame (the user's line) as under jax.jit, with a
    traceback as long (jax's filtering hides eqsat's frames as it hides its own)."""
    import traceback

    x = jnp.ones((3, 4))
    caught = []
    for wrap in (jax.jit, eqsat.jit):
        with pytest.raises(Exception) as info:
            wrap(fn)(*[x] * args)
        caught.append(info.value)
    want, got = caught
    assert type(got) is type(want) and str(got).splitlines()[0] == str(want).splitlines()[0]
    frames = [traceback.extract_tb(e.__traceback__) for e in caught]
    innermost = [[f.name for f in tb if f.filename == __file__][-1] for tb in frames]
    assert innermost == [fn.__name__, fn.__name__]
    assert len(frames[1]) == len(frames[0])  # no frame of eqsat's: the user's call, then their code


def test_the_function_is_traced_once_on_its_first_call():
    calls = []

    def f(x):
        calls.append(1)  # a Python side effect, run once per trace
        return jnp.tanh(x) @ x.T

    x = jnp.ones((8, 8))
    eqsat.jit(f)(x)
    assert len(calls) == 1
    jax.grad(lambda x: eqsat.jit(f, gradient="input")(x).sum())(x)
    assert len(calls) == 2  # a new trace (differentiated), once too


def test_what_eqsat_does_not_model_runs_as_written_with_one_warning():
    fn = eqsat.jit(lambda z: z * 2 + 1)
    z = jnp.asarray([1 + 2j, 3 - 1j], jnp.complex64)
    with pytest.warns(RuntimeWarning, match="runs as written: .*complex64") as caught:
        np.testing.assert_array_equal(fn(z), z * 2 + 1)
        np.testing.assert_array_equal(fn(jnp.ones(3, jnp.complex64)), jnp.full(3, 3, jnp.complex64))
    assert len([w for w in caught if "runs as written" in str(w.message)]) == 1


def test_the_jit_surface_has_result_clear_cache_backend_and_inline():
    fn = eqsat.jit(lambda x: jnp.tanh(x) @ x.T, backend="cpu", inline=False)
    x = jnp.ones((8, 8))
    result = fn.result(x)  # optimizes the signature if it is new
    assert result.program.ops and fn.optimizations == 1
    assert fn.result(x) is result
    np.testing.assert_allclose(fn(x), jnp.tanh(x) @ x.T, rtol=1e-6)
    fn.clear_cache()
    assert fn.optimizations == 0
    fn(x)
    assert fn.optimizations == 1


def test_the_command_line_says_its_version():
    out = subprocess.run([sys.executable, "-m", "eqsat.cli", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and re.match(r"eqsat \d+\.\d+\.\d+ \(egglog ", out.stdout)


def test_jax_random_runs_inside_eqsat_jit():
    f = lambda x: x + jax.random.normal(jax.random.key(0), x.shape)  # noqa: E731
    g = lambda x: x + jax.random.normal(jax.random.PRNGKey(0), x.shape)  # noqa: E731
    for fn in (f, g):
        np.testing.assert_array_equal(eqsat.jit(fn)(jnp.ones(3)), jax.jit(fn)(jnp.ones(3)))


def test_static_arguments_and_nesting_behave_as_in_jax_jit():
    x = jnp.ones((4, 4))
    assert float(eqsat.jit(lambda x, k: x * k, static_argnums=-1)(x, 3)[0, 0]) == 3.0
    scaled = eqsat.jit(lambda x, k: x * k if k > 2 else x, static_argnums=1)
    assert float(scaled(x, k=3)[0, 0]) == 3.0
    assert float(eqsat.jit(lambda x, k: x * k, static_argnames="k")(x, k=4)[0, 0]) == 4.0
    nested = jax.jit(lambda x: eqsat.jit(lambda z: z @ x + 1.0)(x))(x)
    np.testing.assert_allclose(nested, x @ x + 1.0)
    with pytest.raises(eqsat.EqsatError, match="out of range"):
        eqsat.jit(lambda x: x, static_argnums=3)


@pytest.fixture
def background(monkeypatch):
    """eqsat.jit as users get it: a first call does not wait for the optimization."""
    monkeypatch.setattr(eqsat.config, "background", True)


def test_a_first_call_runs_the_function_as_written_while_it_is_optimized(background):
    calls = []

    def f(w, b, x):
        calls.append(1)
        return _mlp(w, b, x)

    fn, args = eqsat.jit(f), _args()
    expected = jax.jit(_mlp)(*args)
    np.testing.assert_allclose(fn(*args), expected, rtol=1e-6)  # as written, or optimized if done
    fn.wait()
    (result,) = fn.results.values()
    assert result.program.op_counts().get("linear") == 1
    jaxpr = str(jax.make_jaxpr(lambda *a: fn(*a))(*args))  # traced inside another trace: optimized
    assert jaxpr.count("dot_general") == 1
    np.testing.assert_allclose(fn(*args), expected, rtol=1e-6)  # the optimized program, swapped in
    assert fn.optimizations == 1 and len(calls) == 1  # the function ran once: its trace was kept


def test_what_needs_the_optimized_program_waits_for_it(background):
    fn, args = eqsat.jit(_mlp), _args()
    fn(*args)
    assert fn.result(*args).program.op_counts().get("linear") == 1  # result waits
    fn2 = eqsat.jit(_mlp)
    fn2(*args)
    np.testing.assert_allclose(fn2.lower(*args).compile()(*args), jax.jit(_mlp)(*args), rtol=1e-6)
    assert fn2.optimizations == 1 and not fn2._pending  # lower waited for the optimization


def test_a_differentiated_first_call_is_optimized_before_it_runs(background):
    fn, args = eqsat.jit(_mlp), _args()
    grads = jax.grad(lambda w, b, x: fn(w, b, x).sum())(*args)
    assert fn.optimizations == 1  # waited for inside the trace, not run as written
    np.testing.assert_allclose(grads, jax.grad(lambda *a: _mlp(*a).sum())(*args), rtol=1e-5)


def test_a_first_call_whose_function_as_written_holds_too_much_waits_for_the_optimization(
    background, monkeypatch
):
    """Attention as written holds S x S scores, which the optimized program may never hold: where a
    value the function computes takes far more than its arguments and results (here "far more" is a
    tenth of them: the MLP's hidden layer), the first call does not run it as written."""
    from eqsat import speed

    monkeypatch.setattr(speed, "LARGE_BYTES", 0)
    monkeypatch.setattr(speed, "FAR", 0.1)
    fn, args = eqsat.jit(_mlp), _args()
    np.testing.assert_allclose(fn(*args), jax.jit(_mlp)(*args), rtol=1e-6)
    assert fn.optimizations == 1 and not fn._pending  # optimized before it ran
    (result,) = fn.results.values()
    assert "the first call waited for the optimization: a tensor<" in result.report.note


def test_a_time_limit_that_cuts_the_optimization_short_is_a_warning_once():
    fn = eqsat.jit(_mlp, limits=eqsat.Limits(timeout_s=0.0))
    args = _args()
    with pytest.warns(RuntimeWarning, match="cut short, and is not cached: time limit") as caught:
        fn(*args)
        fn(args[0], args[1], args[2][:4])  # another signature, cut short alike: no second warning
    assert len([w for w in caught if "cut short" in str(w.message)]) == 1
    assert caught[0].filename == __file__  # where the function is defined


def test_a_first_call_the_cache_holds_runs_the_optimized_program_at_once(background, monkeypatch):
    monkeypatch.setattr(eqsat.config, "enable_cache", True)
    args = _args()
    first = eqsat.jit(_mlp)
    first(*args)
    first.wait()  # its result reaches the cache, and a hint that this function has one
    second = eqsat.jit(_mlp)  # as a later process decorating it again
    second(*args)
    assert second.optimizations == 1 and not second._pending
    assert second.result(*args).report.cache == "hit"
