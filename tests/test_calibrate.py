"""``eqsat.calibrate``: a device profile measured here, written as plain JSON where ``Roofline`` finds
it, read back as written or as a user edits it; dot and conv kernels priced by dtype and layout."""

from __future__ import annotations

import json
import math

import pytest

import eqsat
from eqsat.cli import main
from eqsat.cost import Roofline
from eqsat.devices import DEVICES, Device, profile_path
from eqsat.ir import TensorType
from eqsat.ops import OPS


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setattr(eqsat.config, "cache_dir", tmp_path)
    return tmp_path


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """One quick calibration, saved into a directory of its own: (the profile, that directory)."""
    directory = tmp_path_factory.mktemp("calibrated")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(eqsat.config, "cache_dir", directory)
        yield eqsat.calibrate(quick=True), directory


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


def test_cli_calibrate_prints_the_profile(cache_dir, capsys):
    assert main(["calibrate", "--quick", "--no-save"]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "calibrated:cpu"
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
