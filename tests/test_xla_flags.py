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
    checked = 0
    for rule in resolve(["conv", "fusion"]):
        for seed in (0, 1):
            checked += check_rule(rule, seed).compared
        for dtype in ("float16", "bfloat16"):  # where a rule's guard admits them
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
