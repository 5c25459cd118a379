"""``eqsat.calibrate``: a device profile measured here, written as plain JSON where ``Roofline`` finds
it, read back as written or as a user edits it; dot and conv kernels priced by dtype and layout."""

from __future__ import annotations

import json
import math

import pytest

import eqsat
from eqsat.cli import main
from eqsat.cost import Roofline
from eqsat.cost import calibrate as calibration
from eqsat.cost.calibrate import RETRY_SAMPLES, CalibrationError
from eqsat.devices import DEVICES, MIN_OVERHEAD_S, Device, profile_path
from eqsat.ir import TensorType
from eqsat.ops import OPS


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(eqsat.config, "cache_dir", tmp_path)
    return tmp_path


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """One quick calibration, saved into a directory of its own: (the profile, that directory). Where
    this machine's load makes a figure impossible twice, calibration refuses (as tested with planted
    figures below) and the tests of a real profile have none to test."""
    directory = tmp_path_factory.mktemp("calibrated")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(eqsat.config, "cache_dir", directory)
        try:
            device = eqsat.calibrate(quick=True)
        except CalibrationError as e:
            pytest.skip(f"calibration refused on this machine now: {e}")
        yield device, directory


@pytest.mark.slow  # a real calibration
def test_calibrate_measures_every_parameter(measured):
    measured, _ = measured
    numbers = [v for k, v in measured.to_json().items() if isinstance(v, float)]
    assert all(math.isfinite(v) and v >= 0 for v in numbers), measured
    assert measured.peak_flops > 1e8 and measured.bandwidth > 1e8 and 0 < measured.launch_s < 1e-3
    assert measured.cache_bandwidth >= measured.bandwidth / 2
    assert set(dict(measured.peaks)) == {
        "dot:bfloat16",
        "dot:float16",
        "dot:widened:bfloat16",
        "dot:widened:float16",
        "dot:attention:float32",
        "dot:attention:bfloat16",
        "conv:NCHW:float32",
        "conv:NHWC:float32",
        "conv:depthwise:NCHW:float32",
        "conv:depthwise:NHWC:float32",
        "write:dot:float32",
        "write:dot:bfloat16",
        "write:dot:float16",
    }


@pytest.mark.slow  # a real calibration
def test_a_quick_calibration_is_plausible(measured):
    """Every figure within what its own measured peaks allow (``Device.implausible``): none of the
    clamped or impossible figures of #52 (an attention rate 15x the dot peak, a write at 1e12 B/s,
    a launch of 1e-8 s, a loop step of 0 s)."""
    device, _ = measured
    assert device.implausible() == [], device
    assert device.launch_s >= MIN_OVERHEAD_S and device.loop_step_s >= MIN_OVERHEAD_S
    peaks = dict(device.peaks)
    for d in ("float32", "bfloat16", "float16"):
        assert peaks[f"write:dot:{d}"] <= device.cache_bandwidth


@pytest.mark.slow  # a real calibration
def test_the_profile_is_saved_where_roofline_finds_it(cache_dir, measured, monkeypatch):
    assert Roofline().device.name == "cpu"  # nothing calibrated in this directory: the built-in profile
    with pytest.raises(KeyError, match=r"run eqsat\.calibrate"):
        Roofline("calibrated")
    device, directory = measured
    monkeypatch.setattr(eqsat.config, "cache_dir", directory)
    assert profile_path().parent == directory
    assert json.loads(profile_path().read_text())["source"].startswith("measured by eqsat.calibrate")
    assert Roofline().device == device == Roofline("calibrated").device


def test_an_edited_profile_is_what_the_model_uses(cache_dir):
    """Plain data: halving the bfloat16 dot peak doubles a compute-bound bfloat16 product's cost."""
    data = DEVICES["cpu"].to_json()
    path = profile_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    args = ("matmul", {"transpose_x": 0, "transpose_y": 0, "dtype": "bfloat16"})
    types = [TensorType((1024, 1024), "bfloat16")] * 2
    costs = []
    for peak in (1e11, 5e10):
        path.write_text(json.dumps({**data, "peaks": {"dot:bfloat16": peak}}))
        model = Roofline()
        costs.append(
            model.op_cost(*args, types, TensorType((1024, 1024), "bfloat16")) - model.device.launch_s
        )
    assert costs[1] == pytest.approx(2 * costs[0])


def test_a_measured_write_bandwidth_prices_a_products_result():
    """q kᵀ over a contraction of 64 writes 64x fewer bytes than it computes flops; a profile with
    ``write:dot:float32`` adds the write of its result at that rate, and nothing to other kernels."""
    data = DEVICES["cpu"].to_json()
    q, scores = TensorType((8, 1024, 64), "float32"), TensorType((8, 1024, 1024), "float32")
    args = ("matmul", {"transpose_x": 0, "transpose_y": 1, "dtype": "float32"}, [q, q], scores)
    written = Device.from_json({**data, "peaks": {"write:dot:float32": 4e9}})
    assert Roofline(written).op_cost(*args) - Roofline(DEVICES["cpu"]).op_cost(*args) == pytest.approx(
        scores.nbytes / 4e9
    )
    exp = ("exp", {}, [scores], scores)
    assert Roofline(written).op_cost(*exp) == Roofline(DEVICES["cpu"]).op_cost(*exp)


@pytest.mark.parametrize(
    ("text", "reason"), [("{not json", "Expecting"), ('{"name": "x"}', "needs"), ("[]", "")]
)
def test_a_profile_that_does_not_read_is_a_warning_and_the_built_in_is_used(cache_dir, text, reason):
    path = profile_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    with pytest.warns(RuntimeWarning, match=f"ignoring the device profile .*{reason}"):
        assert Roofline().device.name == "cpu"


def test_a_profile_with_a_negative_peak_is_refused():
    with pytest.raises(ValueError, match="peak_flops must be positive"):
        Device.from_json({**DEVICES["cpu"].to_json(), "peak_flops": -1})


def test_dot_and_conv_kernels_carry_their_kind():
    bf16 = TensorType((8, 8), "bfloat16")
    for result, kind in (("bfloat16", "dot:bfloat16"), ("float32", "dot:widened:bfloat16")):
        matmul = OPS["matmul"].cost_phases([bf16, bf16], TensorType((8, 8), result), {})
        assert [k.kind for k in matmul] == [kind]
    x, w, dw = (TensorType(s, "float32") for s in ((1, 4, 4, 2), (3, 3, 2, 5), (3, 3, 1, 2)))

    def kinds(kernel, out, **attrs):
        attrs = OPS["conv2d"].normalize([x, kernel], {"layout": "NHWC", **attrs})
        return [k.kind for k in OPS["conv2d"].cost_phases([x, kernel], TensorType(out, "float32"), attrs)]

    assert kinds(w, (1, 2, 2, 5)) == ["conv:NHWC:float32"]
    assert kinds(dw, (1, 2, 2, 2), groups=2) == ["conv:depthwise:NHWC:float32"]
    assert kinds(dw, (1, 2, 2, 2), groups=2, algorithm="shifted") == [""]  # a loop at the elementwise rate
    peaks = (("conv:float32", 7.0), ("conv:depthwise:float32", 0.5), ("dot:bfloat16", 3.0))
    device = Device(**{**DEVICES["cpu"].__dict__, "peaks": peaks})
    got = [device.peak(k) for k in ("dot:bfloat16", "conv:NHWC:float32", "conv:depthwise:NCHW:float32")]
    assert [*got, device.peak("dot:float32")] == [3.0, 7.0, 0.5, device.peak_flops]


@pytest.mark.slow  # a real calibration
def test_cli_calibrate_prints_the_profile(cache_dir, capsys):
    """It prints the profile; or, where this machine's load made a figure impossible twice, it says so
    and exits 2 (what a refused calibration does: see below). Nothing is saved either way."""
    code = main(["calibrate", "--quick", "--no-save"])
    out, err = capsys.readouterr()
    if code == 2:
        assert "calibrate measured figures no device can have, twice" in err
    else:
        assert code == 0 and json.loads(out)["name"] == "calibrated:cpu"
    assert not profile_path().exists()


def test_on_cpu_a_half_precision_product_accumulated_in_float32_runs_at_float32s_rate():
    """The built-in CPU profile: XLA:CPU runs a bfloat16 product returned in bfloat16 at about twice
    float32's rate, and computes one returned in float32 (flash attention's blocks) in float32."""
    cpu = DEVICES["cpu"]
    assert cpu.peak("dot:bfloat16") > 1.5 * cpu.peak("dot:float32")
    assert cpu.peak("dot:widened:bfloat16") == cpu.peak("dot:float32") == cpu.peak_flops
    q = TensorType((8, 1024, 64), "bfloat16")
    attrs = {"causal": 1, "scale": 0.125, "fill": float("-inf"), "divisor": 1.0, "zero_masked": 0}
    flash = OPS["flash_attention"].cost_phases(
        [q, q, q, TensorType((), "bfloat16"), TensorType((), "bool")], q, attrs
    )
    assert {k.kind for k in flash} == {"dot:widened:bfloat16"}


def test_every_built_in_profile_is_plausible():
    assert {name: device.implausible() for name, device in DEVICES.items()} == {name: [] for name in DEVICES}


PLAUSIBLE = {"peak": 1e11, "conv": 8e10, "launch": 5e-7, "stream": 2e10, "cached": 6e10, "write": 5e9}


@pytest.fixture
def fake(monkeypatch, cache_dir):
    """``calibrate`` over fake measurements (plausible ones, as ``PLAUSIBLE``) that record the
    samples they were asked for; a test replaces one of them with ``fake.figure(name, first, again)``:
    ``first`` at 5 samples a timing, ``again`` when measured again with more."""

    class Fake:
        def __init__(self):
            self.samples = []

        def figure(self, name, first, again=None):
            def measured(*args, samples, **kwargs):
                self.samples.append(samples)
                value = first if samples < RETRY_SAMPLES or again is None else again
                return value(*args) if callable(value) else value

            monkeypatch.setattr(calibration, name, measured)

    fake = Fake()
    fake.figure("dot_peak", PLAUSIBLE["peak"])
    fake.figure("conv_peak", PLAUSIBLE["conv"])
    fake.figure("kernel_cost", PLAUSIBLE["launch"])
    fake.figure("memory", (PLAUSIBLE["stream"], PLAUSIBLE["cached"], 2.0**24))
    fake.figure("dot_write_bandwidth", PLAUSIBLE["write"])
    fake.figure("attention_peak", 0.6 * PLAUSIBLE["peak"])
    fake.figure("loop_step_cost", 1e-4)
    return fake


def test_fake_measurements_calibrate_and_save(fake):
    device = eqsat.calibrate(quick=True)
    assert device.implausible() == [] and set(fake.samples) == {calibration.SAMPLES}
    assert Roofline().device == device


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        # the figures #52 found in a quick calibration
        (
            "attention_peak",
            15 * PLAUSIBLE["peak"],
            r"dot:attention:float32 = 1\.5e\+12 flop/s: above 2e\+11 flop/s",
        ),
        (
            "dot_write_bandwidth",
            1e12,
            r"write:dot:bfloat16 = 1e\+12 B/s: above 6e\+10 B/s \(the cache bandwidth",
        ),
        ("kernel_cost", 1e-8, r"launch_s = 1e-08 s: below 1e-07 s"),
        ("loop_step_cost", 0.0, r"loop_step_s = 0 s: below 1e-07 s"),
        # and what else noise or a clamp can make of a difference of timings
        ("attention_peak", math.inf, r"dot:attention:bfloat16 = inf flop/s: above 2e\+11"),
        ("conv_peak", 5 * PLAUSIBLE["peak"], r"conv:NHWC:float32 = 5e\+11 flop/s: above 4e\+11 flop/s"),
        ("kernel_cost", -2e-7, r"launch_s = -2e-07 s: below"),
        ("loop_step_cost", math.nan, r"loop_step_s = nan s"),
        ("memory", (2e11, 6e10, 2.0**24), r"bandwidth = 2e\+11 B/s: above 1\.2e\+11 B/s \(2x the cache"),
        ("memory", (2e10, 1e16, 2.0**24), r"cache_bandwidth = 1e\+16 B/s: above 1e\+15"),
        ("dot_peak", 1e18, r"peak_flops = 1e\+18 flop/s: above 1e\+17"),
    ],
)
def test_impossible_figures_are_measured_again_then_refused(fake, name, value, message):
    fake.figure(name, value)
    with pytest.raises(CalibrationError, match=f"twice .*saved nothing: .*{message}"):
        eqsat.calibrate(quick=True)
    assert RETRY_SAMPLES in fake.samples  # measured again, with more samples, before refusing
    assert not profile_path().exists()


def test_a_figure_that_is_plausible_measured_again_is_kept(fake):
    steps = []
    fake.figure("attention_peak", 15 * PLAUSIBLE["peak"], 0.6 * PLAUSIBLE["peak"])
    device = eqsat.calibrate(quick=True, progress=steps.append)
    assert dict(device.peaks)["dot:attention:float32"] == 0.6 * PLAUSIBLE["peak"]
    assert any(
        step.startswith("implausible:") and "dot:attention:float32 = 1.5e+12" in step for step in steps
    )
    assert f"measured again with {RETRY_SAMPLES} samples" in device.source
    assert Roofline().device == device  # saved


def test_cli_calibrate_refuses_an_impossible_profile(fake, capsys):
    fake.figure("kernel_cost", 1e-8)
    assert main(["calibrate", "--quick"]) == 2
    err = capsys.readouterr().err
    assert "eqsat: error: calibrate measured figures no device can have" in err
    assert "launch_s = 1e-08 s: below 1e-07 s" in err
    assert not profile_path().exists()


def test_a_saved_implausible_profile_is_ignored_with_a_warning(cache_dir):
    """As one that does not read: an edited or older profile whose attention rate is 15x its dot peak."""
    data = DEVICES["cpu"].to_json()
    path = profile_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**data, "peaks": {"dot:attention:float32": 15 * data["peak_flops"]}}))
    with pytest.warns(
        RuntimeWarning, match=r"ignoring the device profile .*dot:attention:float32 = 1\.89e\+12"
    ):
        assert Roofline().device.name == "cpu"


def test_a_write_hidden_by_its_arithmetic_is_priced_at_the_cache_bandwidth(monkeypatch):
    """Where a product takes no longer than its arithmetic at the peak (the bfloat16 product on
    XLA:CPU, in noise), its write is hidden: the cache bandwidth, not a clamp at 1e12 B/s."""
    flops, written = 2.0 * 4 * 64 * 64 * 64, 4.0 * 64 * 64 * 4
    for seconds, expected in ((0.99 * flops / 1e11, 6e10), (flops / 1e11 + written / 4e9, 4e9)):
        monkeypatch.setattr(calibration, "timed_with_peak", lambda *args, s=seconds: (s, 1e11))
        rate = calibration.dot_write_bandwidth("float32", (64,), 64, 0.0, 6e10, samples=5)
        assert rate == pytest.approx(expected)


def test_attention_left_no_time_is_an_infinite_rate_not_a_clamped_one(monkeypatch):
    monkeypatch.setattr(calibration, "median_seconds", lambda *args, samples: 1e-9)
    assert calibration.attention_peak(DEVICES["cpu"], "float32", 64, samples=5) == math.inf
