"""XLA flags: what eqsat measures and stores under them is kept apart from what it measures without; under
``ONEDNN_CPU`` (XLA:CPU's convs and products in oneDNN) the conv and fusion rules hold, in float32 and
half precision, and an optimized CNN agrees with the program as written, checked in a child process
(XLA reads its flags at start)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

from eqsat import stored, xla_flags
from eqsat.devices import device_file
from eqsat.frontend.builder import Builder
from eqsat.options import Options
from eqsat.saturate import Limits


def test_flags_are_read_sorted_and_each_once():
    assert xla_flags.current({}) == ()
    assert xla_flags.current({"XLA_FLAGS": " --b=1  --a=2 --b=1 "}) == ("--a=2", "--b=1")
    assert xla_flags.tag({}) == ""
    one, other = xla_flags.tag({"XLA_FLAGS": "--a=2 --b=1"}), xla_flags.tag({"XLA_FLAGS": "--b=1"})
    assert one.startswith("-xla") and one != other
    assert one == xla_flags.tag({"XLA_FLAGS": "--b=1 --a=2"})


def test_a_child_environment_adds_the_flags_to_those_set():
    env = xla_flags.with_flags(xla_flags.ONEDNN_CPU, {"XLA_FLAGS": "--xla_dump_to=/tmp/x", "HOME": "/h"})
    assert env["HOME"] == "/h"
    assert set(env["XLA_FLAGS"].split()) == {"--xla_dump_to=/tmp/x", *xla_flags.ONEDNN_CPU}


def _program():
    b = Builder()
    x = b.input("x", (2, 4, 8, 8))
    w = b.param("w", (4, 1, 3, 3), data=np.ones((4, 1, 3, 3)))
    return b.build(b.relu(b.conv2d(x, w, padding=(1, 1, 1, 1), groups=4)))


def test_timings_and_programs_are_kept_per_set_of_flags(monkeypatch):
    options = Options.of()
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    table, key = device_file("kernels", versioned=True), stored.key(_program(), options, True)[0]
    monkeypatch.setenv("XLA_FLAGS", " ".join(xla_flags.ONEDNN_CPU))
    flagged = device_file("kernels", versioned=True)
    assert xla_flags.tag() in flagged.name and flagged != table
    assert stored.key(_program(), options, True)[0] != key


def test_compiler_options_count_among_the_flags_where_they_are_in_force(monkeypatch):
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    assert xla_flags.as_flags({"a": True, "b": "", "c": 3}) == ("--a=true", "--b=", "--c=3")
    assert xla_flags.in_force() == {} and xla_flags.current() == ()
    with xla_flags.compiling_with(xla_flags.ONEDNN_CPU_OPTIONS):
        assert xla_flags.in_force() == xla_flags.ONEDNN_CPU_OPTIONS
        assert xla_flags.current() == tuple(sorted(xla_flags.ONEDNN_CPU))
        with xla_flags.compiling_with(None):  # an inner program's own (none)
            assert xla_flags.current() == ()
        assert xla_flags.in_force() == xla_flags.ONEDNN_CPU_OPTIONS
    assert xla_flags.in_force() == {}


def test_a_programs_compiler_options_keep_its_timings_and_cache_entry_apart(monkeypatch):
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    plain, onednn = Options.of(), Options.of(compiler_options=xla_flags.ONEDNN_CPU_OPTIONS)
    assert plain.cost.timings.compiler_options == {}
    assert onednn.cost.timings.compiler_options == xla_flags.ONEDNN_CPU_OPTIONS
    assert stored.key(_program(), plain, True)[0] != stored.key(_program(), onednn, True)[0]
    # the options given to the program, or the same flags given to the process: one table, one entry
    monkeypatch.setenv("XLA_FLAGS", " ".join(xla_flags.ONEDNN_CPU))
    assert onednn.cost.timings.path == device_file("kernels", versioned=True) != plain.cost.timings.path
    flagged = Options.of()  # made under the flags
    assert stored.key(_program(), flagged, True)[0] == stored.key(_program(), onednn, True)[0]


def test_eqsat_jit_times_checks_and_runs_a_program_under_its_compiler_options():
    """The kernels it times land in the options' table, compiled under them; the program it returns,
    checked against the function as written, runs its conv in oneDNN."""
    import jax
    import jax.numpy as jnp

    import eqsat
    from eqsat.cost.kernels import KernelTimes

    rng = np.random.default_rng(0)
    w = jnp.asarray(rng.normal(size=(3, 3, 8, 8)) / 5, jnp.float32)

    def block(x):
        y = jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return jax.nn.relu(y) * 2.0

    x = jnp.asarray(rng.normal(size=(2, 12, 12, 8)), jnp.float32)
    for rules in (None, ["cast"]):  # every rule (the conv may become products), or none that changes it
        f = eqsat.jit(
            block,
            rules=rules,
            compiler_options=xla_flags.ONEDNN_CPU_OPTIONS,
            verify=True,
            limits=eqsat.Limits(kernel_seconds=60),
        )
        np.testing.assert_allclose(f(x), block(x), rtol=1e-5, atol=1e-5)
    assert "__onednn$convolution" in f.lower(x).compile().as_text()
    with xla_flags.compiling_with(xla_flags.ONEDNN_CPU_OPTIONS):
        timed = KernelTimes()
    assert len(timed) > 0 and not device_file("kernels", versioned=True).exists()
    assert f.result(x).options.compiler_options == tuple(sorted(xla_flags.ONEDNN_CPU_OPTIONS.items()))


_CHILD = textwrap.dedent(
    """
    import jax, jax.numpy as jnp, numpy as np
    from jax import lax
    import eqsat
    from eqsat.rules import resolve
    from eqsat.verify import check_rule

    x, w = jnp.ones((1, 8, 8, 4)), jnp.ones((3, 3, 1, 4))
    conv = jax.jit(lambda x: lax.conv_general_dilated(
        x, w, (1, 1), [(1, 1), (1, 1)], dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=4))
    assert "__onednn$convolution" in conv.lower(x).compile().as_text(), "the flags did not take effect"
    # on an AMX Xeon, XLA's oneDNN path computes this bfloat16 depthwise conv wrongly (not eqsat's
    # rules: its direct conv is the wrong side), so bfloat16 is checked only where it does not
    dw = jax.jit(lambda x, w: lax.conv_general_dilated(x, w, (1, 2), [(0, 0), (0, 1)], rhs_dilation=(2, 2),
        dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=3))
    rng = np.random.default_rng(0)
    xb, wb = (jnp.asarray(rng.normal(size=s), jnp.bfloat16) for s in ((2, 5, 4, 3), (1, 3, 1, 3)))
    wide = dw(xb.astype(jnp.float32), wb.astype(jnp.float32))
    right = np.allclose(np.asarray(dw(xb, wb), np.float32), wide, rtol=2e-2, atol=2e-2)
    print("bfloat16 convs", "right" if right else "wrong")
    checked = 0
    for rule in resolve(["conv", "fusion"]):
        for seed in (0, 1):
            checked += check_rule(rule, seed).compared
        for dtype in ("float16", "bfloat16") if right else ("float16",):  # where a rule's guard admits them
            checked += check_rule(rule, 3, dtype=dtype).compared
    b = eqsat.Builder()
    rng = np.random.default_rng(0)
    y = b.input("x", (2, 8, 16, 16))
    for groups, k in ((1, 3), (8, 3), (1, 1)):
        w = b.param(f"w{groups}{k}", (8, 8 // groups, k, k), data=rng.normal(size=(8, 8 // groups, k, k)) / 3)
        bias = b.param(f"b{groups}{k}", (8,), data=rng.normal(size=8))
        conv = b.conv2d(y, w, padding=(k // 2,) * 4, groups=groups)
        y = b.relu(b.add(conv, b.reshape(bias, shape=(1, 8, 1, 1))))
    result = eqsat.optimize(b.build(y), verify=True, cache=False)
    print("checked", checked, "ops", sorted(op.name for op in result.program.live_ops()))
    """
)


@pytest.mark.slow
def test_under_onednn_the_conv_rules_hold_and_a_cnn_agrees_with_the_program():
    env = xla_flags.with_flags(xla_flags.ONEDNN_CPU)
    child = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True, text=True)
    if "Unknown flag" in child.stderr:
        pytest.skip(f"this jaxlib has no oneDNN path: {child.stderr.strip().splitlines()[-1]}")
    assert child.returncode == 0, child.stderr[-3000:]
    assert "checked" in child.stdout


def test_a_benchmark_reruns_itself_under_the_flags_once(tmp_path, monkeypatch):
    from bench.common import rerun_under

    (tmp_path / "flagged.py").write_text(
        "import os, sys\nopen(sys.argv[1], 'w').write(os.environ['XLA_FLAGS'])\n"
    )
    seen = tmp_path / "seen.txt"
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    with pytest.raises(SystemExit) as exited:
        rerun_under(xla_flags.ONEDNN_CPU, "flagged", [str(seen)])
    assert exited.value.code == 0
    assert set(seen.read_text().split()) == set(xla_flags.ONEDNN_CPU)
    monkeypatch.setenv("XLA_FLAGS", " ".join(xla_flags.ONEDNN_CPU))
    assert rerun_under(xla_flags.ONEDNN_CPU, "flagged", [str(seen)]) is None  # the child itself goes on


# -- compiler options eqsat chooses: the machine's verdicts stood in for, except where timing is tested


INEXACT = ["matmul-assoc"]  # a rule set admitting inexact rewrites (none of them changes a conv)


def _onednn() -> tuple[tuple[str, object], ...]:
    return xla_flags.normalized(xla_flags.ONEDNN_CPU_OPTIONS)


def _verdicts(monkeypatch, *seconds: list[float] | None):
    """``compared_under`` standing in for this machine: the candidates (the optimized program, then
    the input where they differ; in a second call, the input optimized again under the options) take
    ``seconds[call]`` (the last for later calls) under the options, against 1 s as they are (none:
    2 s, slower); the calls, as (baseline, candidates, options)."""
    from eqsat import pipeline
    from eqsat.speed import Verdict

    calls = []

    def stand_in(baseline, candidates, options, samples=9):
        calls.append((baseline, list(candidates), options))
        taken = seconds[min(len(calls), len(seconds)) - 1] or [2.0] * len(candidates)
        return [Verdict(1.0, s, 0.05, s * 1.05 < 1.0) for s in taken]

    monkeypatch.setattr(pipeline, "compared_under", stand_in)
    return calls


def test_a_program_measured_faster_under_onednns_options_runs_under_them(monkeypatch):
    import eqsat
    from eqsat.lowering import lower

    calls = _verdicts(monkeypatch, [0.5])
    program = _program()
    result = eqsat.optimize(
        program, rules=INEXACT, limits=eqsat.Limits(kernel_seconds=60), cache=False, verify=True
    )
    assert calls == [(program, [program], _onednn())]
    assert result.program is program and result.report.compiler_options == _onednn()
    assert result.compiler_options == _onednn()
    assert "the program as written compiled under oneDNN's options (timed: 500 ms against 1e+03 ms" in (
        result.report.note
    )
    assert "optimized again for oneDNN's options: no other program" in result.report.note
    assert "compiled under: xla_cpu_experimental_onednn_custom_call=True" in str(result.report)
    x = np.random.default_rng(0).normal(size=(2, 4, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(result.fn(x)[0], lower(program)(x)[0], rtol=1e-5, atol=1e-5)


def test_of_the_programs_faster_under_the_options_the_fastest_is_kept(monkeypatch):
    import eqsat
    from eqsat.cost import Roofline

    b = Builder()
    x = b.input("x", (2, 4, 8, 8))
    w, bias = b.param("w", (4, 4, 3, 3), data=np.ones((4, 4, 3, 3))), b.param("b", (4,), data=np.ones(4))
    program = b.build(
        b.relu(b.add(b.conv2d(x, w, padding=(1, 1, 1, 1)), b.reshape(bias, shape=(1, 4, 1, 1))))
    )
    untimed = Roofline("cpu")  # no kernel timed: the optimized program differs from the input
    for faster, kept in (([0.4, 0.6], "optimized"), ([0.6, 0.4], "input")):
        _verdicts(monkeypatch, faster)
        result = eqsat.optimize(program, cost=untimed, limits=eqsat.Limits(kernel_seconds=60), cache=False)
        assert result.report.compiler_options == _onednn()
        assert (result.program is program) == (kept == "input"), result.report.note


def test_where_no_program_ran_faster_under_the_options_none_are_chosen(monkeypatch):
    import eqsat

    calls = _verdicts(monkeypatch, None)
    result = eqsat.optimize(_program(), rules=INEXACT, limits=eqsat.Limits(kernel_seconds=60), cache=False)
    assert len(calls) == 1 and result.report.compiler_options == () and result.compiler_options == ()
    assert "under oneDNN's options: timed: 2e+03 ms against 1e+03 ms, 0.50x" in result.report.note


def test_options_are_not_chosen_where_given_untimed_inexact_turned_off_or_changing_no_kernel(monkeypatch):
    import eqsat
    from eqsat.config import config

    calls = _verdicts(monkeypatch, [0.5])
    timed = eqsat.Limits(kernel_seconds=60)
    b = Builder()
    x, w = b.input("x", (8, 16)), b.param("w", (16, 4), data=np.ones((16, 4)))
    products = b.build(b.relu(b.matmul(x, w)))  # oneDNN's products are not an alternative
    eqsat.optimize(products, rules=INEXACT, limits=timed, cache=False)
    eqsat.optimize(_program(), rules=INEXACT, limits=eqsat.Limits(kernel_seconds=0), cache=False)
    eqsat.optimize(_program(), rules=["reshape-identity"], limits=timed, cache=False)  # exact rules only
    given = eqsat.optimize(
        _program(),
        rules=INEXACT,
        limits=timed,
        cache=False,
        compiler_options={"xla_cpu_use_thunk_runtime": True},
    )
    assert given.compiler_options == (("xla_cpu_use_thunk_runtime", True),)
    monkeypatch.setattr(config, "choose_compiler_options", False)
    eqsat.optimize(_program(), rules=INEXACT, limits=timed, cache=False)
    assert calls == []
    monkeypatch.setenv("XLA_FLAGS", " ".join(xla_flags.ONEDNN_CPU))  # already in force
    assert xla_flags.alternatives("cpu") == () and xla_flags.alternatives("gpu") == ()


def test_chosen_options_are_cached_with_the_program(monkeypatch):
    import eqsat

    calls = _verdicts(monkeypatch, [0.5])
    timed = eqsat.Limits(kernel_seconds=60)
    first = eqsat.optimize(_program(), rules=INEXACT, limits=timed, cache=True)
    again = eqsat.optimize(_program(), rules=INEXACT, limits=timed, cache=True)
    assert (first.report.cache, again.report.cache) == ("stored", "hit") and len(calls) == 1
    assert again.compiler_options == _onednn()
    monkeypatch.setattr(eqsat.config, "choose_compiler_options", False)
    assert eqsat.optimize(_program(), rules=INEXACT, limits=timed, cache=True).report.cache == "stored"


def test_eqsat_jit_runs_a_signature_under_the_options_chosen_for_it(monkeypatch):
    """Called directly, its program compiles under them; traced into another program (a derivative,
    an enclosing jit) it is part of that program, compiled under that one's options."""
    import jax
    import jax.numpy as jnp

    import eqsat

    _verdicts(monkeypatch, [0.5])
    w = jnp.asarray(np.random.default_rng(0).normal(size=(3, 3, 1, 8)) / 3, jnp.float32)

    def depthwise(x):
        y = jax.lax.conv_general_dilated(
            x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=8
        )
        return jax.nn.relu(y)

    f = eqsat.jit(depthwise, rules=INEXACT, limits=eqsat.Limits(kernel_seconds=60), verify=True)
    x = jnp.asarray(np.random.default_rng(1).normal(size=(2, 12, 12, 8)), jnp.float32)
    small = jnp.ones((1, 6, 6, 8), jnp.float32)
    np.testing.assert_allclose(f(x), depthwise(x), rtol=1e-5, atol=1e-5)
    assert f.result(x).compiler_options == _onednn()
    assert "__onednn$convolution" in f.lower(x).compile().as_text()
    np.testing.assert_allclose(f(small), depthwise(small), rtol=1e-5, atol=1e-5)  # a signature of its own
    grad = jax.grad(lambda x: f(x).sum())(x)
    np.testing.assert_allclose(grad, jax.grad(lambda x: depthwise(x).sum())(x), rtol=1e-4, atol=1e-4)
    outer = jax.jit(lambda x: f(x) * 2.0)
    np.testing.assert_allclose(outer(x), depthwise(x) * 2.0, rtol=1e-5, atol=1e-5)
    assert "__onednn$convolution" not in outer.lower(x).compile().as_text()
    f.clear_cache()
    assert not f._routes and not f._under


def test_a_signature_optimized_in_the_background_runs_under_its_options_once_finished(monkeypatch):
    import jax
    import jax.numpy as jnp

    import eqsat

    _verdicts(monkeypatch, [0.5])
    monkeypatch.setattr(eqsat.config, "background", True)
    w = jnp.full((3, 3, 1, 4), 0.1, jnp.float32)

    def depthwise(x):
        y = jax.lax.conv_general_dilated(
            x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"), feature_group_count=4
        )
        return jax.nn.relu(y)

    f = eqsat.jit(depthwise, rules=INEXACT, limits=eqsat.Limits(kernel_seconds=60))
    x = jnp.asarray(np.random.default_rng(2).normal(size=(1, 8, 8, 4)), jnp.float32)
    np.testing.assert_allclose(f(x), depthwise(x), rtol=1e-5, atol=1e-5)  # as written, meanwhile
    f.wait()
    np.testing.assert_allclose(f(x), depthwise(x), rtol=1e-5, atol=1e-5)
    assert list(f._routes.values()) == [_onednn()] and list(f._under) == [_onednn()]
    assert f._under[_onednn()]._cache_size() == 1  # the call after the optimization ran through it


def test_programs_are_timed_under_the_options_together_and_the_verdicts_kept():
    from eqsat.speed import Verdict, compared_under

    program = _program()
    b = Builder()
    x = b.input("x", (2, 4, 8, 8))
    w = b.param("w", (4, 1, 3, 3), data=np.ones((4, 1, 3, 3)))
    other = b.build(b.relu(b.relu(b.conv2d(x, w, padding=(1, 1, 1, 1), groups=4))))  # another text
    verdicts = compared_under(program, [program, other], xla_flags.ONEDNN_CPU_OPTIONS, samples=3)
    assert all(isinstance(v, Verdict) and not v.recorded for v in verdicts)
    again = compared_under(program, [program, other], xla_flags.ONEDNN_CPU_OPTIONS, samples=3)
    assert [(v.before_s, v.after_s) for v in again] == [(v.before_s, v.after_s) for v in verdicts]
    assert all(v.recorded for v in again)
    (refused,) = compared_under(program, [program], {"xla_no_such_flag": True}, samples=3)
    assert isinstance(refused, str) and "compiling under --xla_no_such_flag=true failed" in refused


def test_onednns_fused_relu_maps_nan_to_zero_so_its_alternative_is_inexact():
    """Why ``ALTERNATIVES``' oneDNN is inexact, and what ``verify`` then holds it to: finite results
    close, special values free to differ."""
    from eqsat.lowering import lower
    from eqsat.verify import validate

    program = _program()
    x = np.zeros((2, 4, 8, 8), np.float32)
    x[0, 0, 4, 4] = np.nan
    xla = xla_flags.jit(lower(program), {})(x)[0]
    onednn = xla_flags.jit(lower(program), xla_flags.ONEDNN_CPU_OPTIONS)(x)[0]
    assert np.isnan(xla[0, 0, 4, 4]) and onednn[0, 0, 4, 4] == 0
    assert [a.exact for a in xla_flags.ALTERNATIVES] == [False]
    validate(program, program, rules_fired=[], options=xla_flags.ONEDNN_CPU_OPTIONS)


class _PricedByOptions:
    """The roofline, pricing a conv with its bias and activation (``conv2d_bias_act``) 100x unless
    oneDNN's options are in force: a program optimized again under them comes out another."""

    def __new__(cls, onednn: bool = False):
        from eqsat.cost import Roofline

        class Model(Roofline):
            def op_cost(self, op, attrs, inputs, output):
                cost = super().op_cost(op, attrs, inputs, output)
                return cost if onednn or op != "conv2d_bias_act" else 100 * cost

            def under_options_in_force(self):
                made.append(xla_flags.in_force())
                return _PricedByOptions(onednn=bool(xla_flags.in_force()))

        return Model("cpu")


made: list[dict] = []  # the options each _PricedByOptions was made for, again


def _conv_bias_relu():
    b = Builder()
    x = b.input("x", (2, 4, 8, 8))
    w = b.param("w", (4, 4, 3, 3), data=np.ones((4, 4, 3, 3)) / 9)
    bias = b.param("b", (4,), data=np.arange(4.0))
    return b.build(b.relu(b.add(b.conv2d(x, w, padding=(1, 1, 1, 1)), b.reshape(bias, shape=(1, 4, 1, 1)))))


FUSING = ["conv-bias-epilogue", "conv-activation-epilogue", *INEXACT]
TIMED = Limits(kernel_seconds=60)  # kernels may be timed: eqsat may choose options


def test_where_the_options_ran_a_program_faster_the_input_is_optimized_again_under_them(monkeypatch):
    import eqsat
    from eqsat.lowering import lower

    made.clear()
    calls = _verdicts(monkeypatch, [0.8], [0.5])
    program = _conv_bias_relu()
    result = eqsat.optimize(
        program, rules=FUSING, cost=_PricedByOptions(), limits=TIMED, cache=False, verify=True
    )
    assert made == [xla_flags.ONEDNN_CPU_OPTIONS]
    (first, second) = calls
    assert first[1] == [program] and len(second[1]) == 1 and second[1][0] is result.program
    assert "conv2d_bias_act" in result.program.op_counts()
    assert result.compiler_options == _onednn()
    again = "the program optimized again for oneDNN's options (its kernels timed under them) compiled under"
    assert again in result.report.note
    x = np.random.default_rng(0).normal(size=(2, 4, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(result.fn(x)[0], lower(program)(x)[0], rtol=1e-5, atol=1e-5)
    # the input, faster under the options than that program: the input is kept
    _verdicts(monkeypatch, [0.4], [0.5])
    result = eqsat.optimize(program, rules=FUSING, cost=_PricedByOptions(), limits=TIMED, cache=False)
    assert result.program is program and result.compiler_options == _onednn()


def test_where_no_program_ran_faster_under_the_options_none_is_optimized_again(monkeypatch):
    import eqsat

    made.clear()
    calls = _verdicts(monkeypatch, [1.01])
    result = eqsat.optimize(
        _conv_bias_relu(), rules=FUSING, cost=_PricedByOptions(), limits=TIMED, cache=False
    )
    assert made == [] and len(calls) == 1 and result.compiler_options == ()


def test_a_program_that_disagrees_with_itself_under_the_options_is_not_kept(monkeypatch):
    import eqsat
    from eqsat import pipeline

    _verdicts(monkeypatch, [0.5])
    monkeypatch.setattr(pipeline, "disagreement_under", lambda program, options: "output 0 (out): differs")
    result = eqsat.optimize(_program(), rules=INEXACT, limits=eqsat.Limits(kernel_seconds=60), cache=False)
    assert result.compiler_options == ()
    assert "under oneDNN's options: the program as written disagreed with itself so (output 0 (out): " in (
        result.report.note
    )


def _depthwise_bfloat16():
    b = Builder()
    x = b.input("x", (2, 5, 4, 3), "bfloat16")
    w = b.param("w", (1, 3, 1, 3), data=np.random.default_rng(0).normal(size=(1, 3, 1, 3)), dtype="bfloat16")
    conv = b.conv2d(x, w, strides=(1, 2), padding=(0, 0, 0, 1), dilations=(2, 2), groups=3, layout="NHWC")
    return b.build(conv)


def test_a_program_is_checked_against_itself_under_the_options():
    """On a CPU where XLA's oneDNN path computes this bfloat16 depthwise conv wrongly (an AMX Xeon:
    past its first row of outputs), the check says so; the same conv in float32 agrees everywhere."""
    from eqsat.verify import disagreement_under

    assert disagreement_under(_program(), xla_flags.ONEDNN_CPU_OPTIONS) is None
    problem = disagreement_under(_depthwise_bfloat16(), xla_flags.ONEDNN_CPU_OPTIONS)
    if problem is None:
        pytest.skip("XLA's oneDNN path computes this bfloat16 depthwise conv right on this CPU")
    assert problem.startswith("output 0 (")


def test_options_that_compute_a_program_wrongly_are_not_chosen(monkeypatch):
    import eqsat
    from eqsat.verify import disagreement_under

    if disagreement_under(_depthwise_bfloat16(), xla_flags.ONEDNN_CPU_OPTIONS) is None:
        pytest.skip("XLA's oneDNN path computes this bfloat16 depthwise conv right on this CPU")
    _verdicts(monkeypatch, [0.5])
    result = eqsat.optimize(_depthwise_bfloat16(), rules=INEXACT, limits=eqsat.Limits(kernel_seconds=60))
    assert result.compiler_options == () and "disagreed with itself so" in result.report.note


def test_a_model_that_times_kernels_times_them_under_the_options_in_force_into_their_table(tmp_path):
    from eqsat.cost import Measured, Roofline
    from eqsat.cost.kernels import KernelTimes

    here, measured = Roofline(), Measured()
    given = Roofline(here.device, KernelTimes(tmp_path / "mine.json"))
    assert here.under_options_in_force().timings is here.timings  # the options it was made under
    with xla_flags.compiling_with(xla_flags.ONEDNN_CPU_OPTIONS):
        for model in (here, measured):
            again = model.under_options_in_force()
            assert type(again) is type(model) and again.timings.path != model.timings.path
            assert again.timings.compiler_options == xla_flags.ONEDNN_CPU_OPTIONS
        assert here.under_options_in_force().fingerprint() != here.fingerprint()  # names its table
        assert Roofline("cpu").under_options_in_force() is None  # times nothing
        assert given.under_options_in_force() is None  # its table holds one set of options' timings
        assert Measured(tmp_path / "mine.json").under_options_in_force() is None
