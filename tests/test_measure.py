"""``optimize(..., measure=True)``: where the predicted gain is within the cost model's error, both
programs are timed on this device and the faster is kept."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqsat
from eqsat import Builder
from eqsat.cost import CostModel, Flops


class PrefersBigProducts(CostModel):
    """A model that is wrong on purpose: the larger a product's result, the cheaper it looks."""

    name = "prefers-big-products"
    error = 10.0  # no predicted gain is trusted

    def op_cost(self, op, attrs, inputs, output):
        return 1.0 / (1 + output.size)


class UncertainFlops(Flops):
    error = 10.0


def _chain(slow_first: bool):
    """A (B v) (two products of a vector) or (A B) v (a 512³ product first), A, B 512x512, v 512x1."""
    b = Builder()
    a, m, v = (b.input(n, s) for n, s in (("a", (512, 512)), ("b", (512, 512)), ("v", (512, 1))))
    out = b.matmul(b.matmul(a, m), v) if slow_first else b.matmul(a, b.matmul(m, v))
    return b.build(out)


def test_a_wrong_prediction_is_caught_and_the_input_returned():
    program = _chain(slow_first=False)
    trusted = eqsat.optimize(program, cost=PrefersBigProducts(), cache=False)
    assert trusted.program is not program  # the model's (slow) choice, taken on its word
    measured = eqsat.optimize(program, cost=PrefersBigProducts(), cache=False, measure=True)
    assert measured.program is program
    assert "the input is returned" in measured.report.note
    assert measured.report.cost_after == measured.report.cost_before
    assert measured.report.timings["measure"] > 0


def test_a_real_gain_is_measured_and_kept():
    program = _chain(slow_first=True)
    result = eqsat.optimize(program, cost=UncertainFlops(), cache=False, measure=True)
    assert result.program is not program
    assert "the optimized program is kept" in result.report.note


def test_a_gain_beyond_the_models_error_is_not_measured():
    result = eqsat.optimize(_chain(slow_first=True), cost="flops", cache=False, measure=True)
    assert result.report.cost_after < result.report.cost_before * np.exp(-Flops.error)
    assert "measure" not in result.report.timings


def test_eqsat_jit_measures_at_the_first_call():
    fn = eqsat.jit(lambda a, m, v: a @ (m @ v), cost=PrefersBigProducts(), measure=True)
    args = [jnp.ones(s) for s in ((512, 512), (512, 512), (512, 1))]
    np.testing.assert_allclose(fn(*args), args[0] @ (args[1] @ args[2]), rtol=1e-5)
    (result,) = fn.results.values()
    assert "the input is returned" in result.report.note


@pytest.mark.parametrize("model", ["nodes", "flops", "roofline", "xla"])
def test_built_in_models_state_their_measured_error(model):
    assert 0 < eqsat.cost.get_cost_model(model).error <= 1


def test_a_gain_within_the_noise_of_the_samples_does_not_replace_the_program_as_written():
    from eqsat.speed import MIN_MARGIN, Verdict

    steady = Verdict.of([1.0, 1.01, 1.0], [0.90, 0.91, 0.90])
    assert steady.replaced and steady.margin == MIN_MARGIN
    small = Verdict.of([1.0, 1.0, 1.0], [0.97, 0.97, 0.97])  # 3% faster: within the least margin
    assert not small.replaced
    noisy = Verdict.of([1.0, 1.5, 1.4], [0.8, 1.3, 1.2])  # 25% faster, samples spread 50%
    assert noisy.margin == pytest.approx(0.5) and not noisy.replaced


def test_a_verdict_is_recorded_and_the_next_run_makes_the_same_choice(monkeypatch):
    from eqsat import speed

    program = _chain(slow_first=False)
    measured = eqsat.optimize(program, cost=PrefersBigProducts(), cache=False, measure=True)

    def no_timing(*args, **kwargs):
        raise AssertionError("timed again")

    monkeypatch.setattr(speed, "sampled", no_timing)
    again = eqsat.optimize(program, cost=PrefersBigProducts(), cache=False, measure=True)
    assert "timed (recorded)" in again.report.note and again.program is program
    assert measured.report.note.split("ms, ")[0] in again.report.note.replace(" (recorded)", "")


def test_reproducible_builds_take_no_new_measurement(monkeypatch):
    from eqsat import speed

    monkeypatch.setattr(eqsat.config, "reproducible", True)
    monkeypatch.setattr(speed, "sampled", lambda *a, **k: pytest.fail("timed in a reproducible build"))
    program = _chain(slow_first=False)
    result = eqsat.optimize(program, cost=PrefersBigProducts(), cache=False, measure=True)
    assert result.program is not program  # nothing recorded: the model's choice stands
    assert "no timing recorded (reproducible)" in result.report.note


def test_a_program_as_written_far_larger_than_the_optimized_one_is_not_run(monkeypatch):
    """The program as written holds a 512² product, the optimized one vectors: with "far larger" any
    amount larger, they are not timed, the note says why, and the cost model's choice stands."""
    from eqsat import speed

    monkeypatch.setattr(speed, "LARGE_BYTES", 0)
    monkeypatch.setattr(speed, "FAR", 1)
    result = eqsat.optimize(_chain(slow_first=True), cost=UncertainFlops(), measure=True, cache=False)
    assert result.program is not result.original
    assert "MiB a measurement may take: the cost model's choice is kept" in result.report.note
    assert "timed" not in result.report.note


def test_a_long_sample_waits_untimed_while_memory_is_given_back(monkeypatch):
    """XLA:CPU frees a call's large buffers after its result is ready: the next call must not pay for
    them. A sample of RELEASE_AFTER_S or more waits until resident memory stops falling, untimed."""
    from eqsat import speed

    falling = [900, 700, 500, 300]  # then 300 for good
    reads: list[int] = []

    def resident_pages() -> int:
        reads.append(falling[min(len(reads), len(falling) - 1)])
        return reads[-1]

    monkeypatch.setattr(speed, "_resident_pages", resident_pages)
    speed.released()
    assert reads[: len(falling)] == falling and len(reads) > len(falling)  # on until it stopped falling

    waits: list[int] = []
    monkeypatch.setattr(speed, "released", lambda: waits.append(1))
    monkeypatch.setattr(speed, "RELEASE_AFTER_S", 0.0)
    speed.sampled([lambda: jnp.ones(3)], samples=3)
    assert len(waits) == 4  # after the warm-up's timed call and after each sample
    monkeypatch.setattr(speed, "RELEASE_AFTER_S", 3600.0)
    speed.sampled([lambda: jnp.ones(3)], samples=3)
    assert len(waits) == 4  # short samples wait for nothing


def test_samples_alternate_their_order() -> None:
    """No thunk always runs right after the same one: rounds go first to last, then last to first."""
    from eqsat import speed

    ran: list[str] = []

    def thunk(name: str) -> Callable[[], jax.Array]:
        return lambda: ran.append(name) or jnp.ones(3)

    times = speed.sampled([thunk("a"), thunk("b"), thunk("c")], samples=4, sample_s=0.0)
    assert ran == list("aabbcc") + list("abccbaabccba")  # two warm-up calls each, then the rounds
    assert [len(t) for t in times] == [4, 4, 4]


class FavorsShiftedPools(CostModel):
    """Every op costs 1 but a shifted pool (0.5): a structural change and a formulation both look cheaper."""

    name = "favors-shifted-pools"
    error = 10.0

    def op_cost(self, op, attrs, inputs, output):
        return 0.5 if op == "pool2d" and attrs["algorithm"] == "shifted" else 1.0


def test_where_the_optimized_program_loses_its_formulations_alone_are_measured(monkeypatch):
    """The machine's verdicts are stood in for: any program whose ops differ from the input's loses,
    one that only computes its ops otherwise wins. The transposes that cancel are left (not a
    formulation); the pool is computed by shifts, and the result agrees with the program as written."""
    from collections import Counter

    from eqsat import accept
    from eqsat.speed import Verdict

    def compared(written, other):
        same = Counter(op.name for op in written.live_ops()) == Counter(op.name for op in other.live_ops())
        return Verdict.of([1.0], [0.5 if same else 2.0])

    monkeypatch.setattr(accept, "compared", compared)
    b = Builder()
    x = b.input("x", (2, 3, 9, 9))
    y = b.pool2d(x, kind="max", window=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1), layout="NCHW")
    program = b.build(b.transpose(b.transpose(b.relu(y), perm=(0, 2, 3, 1)), perm=(0, 3, 1, 2)))
    result = eqsat.optimize(program, cost=FavorsShiftedPools(), cache=False, measure=True, verify=True)
    ops = {op.name: op for op in result.program.live_ops()}
    assert ops["pool2d"].attrs["algorithm"] == "shifted" and "transpose" in ops
    assert "the input is returned; the formulations alone (pool-max-shifted)" in result.report.note
    assert result.report.note.endswith("the optimized program is kept")
    data = np.random.default_rng(0).normal(size=(2, 3, 9, 9)).astype(np.float32)
    np.testing.assert_array_equal(result.fn(data)[0], jax.jit(eqsat.lowering.lower(program))(data)[0])
    monkeypatch.setattr(accept, "compared", lambda written, other: Verdict.of([1.0], [2.0]))  # both lose
    result = eqsat.optimize(program, cost=FavorsShiftedPools(), cache=False, measure=True)
    assert result.program is program
    note = result.report.note
    assert note.endswith("the input is returned") and "the formulations alone (pool-max-shifted)" in note
