"""Kernel timings (eqsat.cost.kernels): kept per device on disk, one table for every model, read by
the default cost model for the ops no roofline predicts (convs), and taken before extraction for the
alternatives that could change its choice, within a budget; ``Measured`` times into the same table.
Timings here are planted or only counted: no test depends on how fast this machine runs a kernel."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

import eqsat
import eqsat.deadline
from eqsat import Builder, Limits, Roofline, config
from eqsat.cost import Measured, kernels
from eqsat.cost.kernels import Call, KernelTimes, alternatives_first
from eqsat.ir import TensorType
from eqsat.ops.conv import ALGORITHMS, WINOGRAD

F32 = "float32"
RULES = ["conv-shifted", "conv-im2col", "conv-winograd-2x2", "conv-winograd-4x4"]
ALL = (*ALGORITHMS, *WINOGRAD)
_WINDOW = {"strides": (1, 1), "padding": (1, 1, 1, 1), "dilations": (1, 1), "groups": 1, "layout": "NCHW"}


def _conv():
    b = Builder()
    x, w = b.input("x", (2, 8, 2, 2)), b.input("w", (8, 8, 3, 3))
    return b.build(b.relu(b.conv2d(x, w, padding=(1, 1, 1, 1))))


def _calls() -> dict[str, Call]:
    x, w = TensorType((2, 8, 2, 2), F32), TensorType((8, 8, 3, 3), F32)
    return {a: Call("conv2d", {**_WINDOW, "algorithm": a}, (x, w), x) for a in ALL}


def _timed(path) -> dict[str, float]:
    """The seconds the table file at ``path`` holds, by call (each record's fields typed)."""
    return {Call.from_json(r).key: r["seconds"] for r in json.loads(path.read_text())}


def _algorithms(program) -> list[str]:
    return [op.attrs["algorithm"] for op in program.ops if op.name == "conv2d"]


@pytest.mark.parametrize("fastest", ALL)
def test_the_default_model_picks_the_algorithm_its_timings_favour(tmp_path, fastest):
    """The roofline alone keeps XLA's conv here; planted timings decide instead."""
    table = KernelTimes(tmp_path / "kernels.json")
    for algorithm, call in _calls().items():
        table.put(call, 1e-5 if algorithm == fastest else 1e-2)
    model = Roofline("cpu", timings=table)
    result = eqsat.optimize(_conv(), RULES, cost=model, limits=Limits(kernel_seconds=0), verify=True)
    assert _algorithms(result.program) == [fastest]
    assert _algorithms(eqsat.optimize(_conv(), RULES, cost="roofline:cpu").program) == ["direct"]


def test_optimize_times_each_alternative_once_then_reads_the_table(tmp_path):
    path = tmp_path / "kernels.json"
    model = Roofline("cpu", timings=KernelTimes(path, repeats=1))
    eqsat.optimize(_conv(), RULES, cost=model, limits=Limits(kernel_seconds=60))
    timed = _timed(path)
    assert set(timed) == {c.key for c in _calls().values()} and all(s > 0 for s in timed.values())
    again = Roofline("cpu", timings=KernelTimes(path))
    assert again.time_kernels([list(_calls().values())], 60) == (0, 0)
    assert again.call_cost(_calls()["shifted"]) == timed[_calls()["shifted"].key]


def test_no_kernel_is_timed_without_a_budget_or_a_choice(tmp_path):
    path = tmp_path / "kernels.json"
    model = Roofline("cpu", timings=KernelTimes(path))
    eqsat.optimize(_conv(), RULES, cost=model, limits=Limits(kernel_seconds=0))
    eqsat.optimize(_conv(), [], cost=model, limits=Limits(kernel_seconds=60))  # one alternative each
    assert not path.exists()


def test_timing_stops_starting_kernels_once_its_budget_has_passed(tmp_path, monkeypatch):
    now = iter(range(1000))
    monkeypatch.setattr(kernels, "clock", lambda: float(next(now)))
    table = KernelTimes(tmp_path / "kernels.json", repeats=1, workers=1)
    # the clock ticks a second at each reading: 0 at the start, 1 before the first kernel, 2 after it
    # (it took 1); 3 before the second, which would end near 3 + 1 > 3.5: a budget of 3.5 times one
    assert table.time(list(_calls().values()), 3.5) == 1


def test_alternatives_are_timed_where_they_can_change_the_choice_costliest_first():
    calls = _calls()
    lone = Call(
        "conv2d", {**_WINDOW, "algorithm": "direct"}, calls["direct"].inputs[:1] * 2, calls["direct"].output
    )
    cost = {"direct": 3.0, "shifted": 1.0, "im2col": 2.0}
    groups = [
        [lone],
        [calls["shifted"]],
        [calls["shifted"], calls["im2col"]],
        [calls["direct"], calls["im2col"]],
    ]
    ordered = alternatives_first(groups, lambda c: cost[c.attrs["algorithm"]])
    # the groups of several, costliest first; then the calls alone (a transpose a layout switch takes)
    assert ordered == [calls["direct"], calls["im2col"], calls["shifted"], lone]


def test_another_programs_timings_leave_a_cached_program_cached(tmp_path):
    """A cached optimization timed every kernel its choice read, and a timing never changes: the
    model's fingerprint is the device's, not the table's, so another program's timings do not evict
    it (every new timing did before: a second ``eqsat demo`` optimized again)."""
    table = KernelTimes(tmp_path / "kernels.json", repeats=1)
    model = Roofline("cpu", timings=table)
    before = model.fingerprint()
    limits = Limits(kernel_seconds=60)
    first = eqsat.optimize(_conv(), RULES, cost=model, limits=limits, cache=True)
    b = Builder()
    x, w = b.input("x", (1, 4, 3, 3)), b.input("w", (4, 4, 3, 3))
    other = b.build(b.conv2d(x, w, padding=(1, 1, 1, 1)))
    eqsat.optimize(other, RULES, cost=model, limits=limits, cache=True)
    assert len(table.of("conv2d")) > len(_calls()) and model.fingerprint() == before
    again = eqsat.optimize(_conv(), RULES, cost=model, limits=limits, cache=True)
    assert (first.report.cache, again.report.cache) == ("stored", "hit")
    assert str(again.program) == str(first.program)
    untimed = eqsat.optimize(_conv(), RULES, cost=model, limits=Limits(kernel_seconds=0), cache=True)
    assert untimed.report.cache == "stored"  # estimates where timing is off are kept apart
    assert (
        Roofline("cpu").fingerprint() != model.fingerprint() != Roofline("h100", timings=table).fingerprint()
    )


def test_the_default_model_times_this_devices_kernels_a_named_profile_does_not():
    assert Roofline().timed_ops == {
        "conv2d",
        "conv2d_bias_act",
        "pool2d",
        "transpose",
        "scan",
        "top_k",
        "sort",
        "argsort",
    }
    assert not Roofline("cpu").timed_ops and not Roofline("h100").timed_ops


def test_a_kernel_is_timed_with_its_weights_as_constants_where_the_program_has_them(tmp_path):
    """XLA lays out (or folds what is computed from) a constant kernel once: the timing of a conv of a
    weight is not the timing of a conv of an argument, and the program's own is read."""
    b = Builder()
    x = b.input("x", (2, 8, 2, 2))
    w = b.param("w", (8, 8, 3, 3), data=np.ones((8, 8, 3, 3), np.float32))
    program = b.build(b.relu(b.conv2d(x, w, padding=(1, 1, 1, 1))))
    path = tmp_path / "kernels.json"
    model = Roofline("cpu", timings=KernelTimes(path, repeats=1))
    eqsat.optimize(program, RULES, cost=model, limits=Limits(kernel_seconds=60))
    constant = {c._replace(constant=(False, True)).key for c in _calls().values()}
    assert set(_timed(path)) == constant


def test_two_processes_timing_into_one_table_keep_both(tmp_path, monkeypatch):
    """Each saves what it timed into the file as it is then, not its own copy over the other's."""
    monkeypatch.setattr(kernels, "compiled", lambda call, options: (None, []))
    monkeypatch.setattr(kernels, "run_seconds", lambda kernels, repeats, enough_s: [1e-3] * len(kernels))
    path = tmp_path / "kernels.json"
    first, second = KernelTimes(path, workers=1), KernelTimes(path, workers=1)  # both read it empty
    calls = list(_calls().values())
    assert first.time(calls[:1], 60) == 1 and second.time(calls[1:2], 60) == 1
    assert set(_timed(path)) == {calls[0].key, calls[1].key}


def test_a_compilation_running_past_the_budget_is_left_unused(tmp_path, monkeypatch):
    """Optimization goes on to extraction when the time is up, not when a slow compilation ends."""
    monkeypatch.setattr(kernels, "compiled", lambda call, options: time.sleep(5))
    table = KernelTimes(tmp_path / "kernels.json", workers=1)
    start = time.perf_counter()
    assert table.time(list(_calls().values()), 0.2) == 0
    assert time.perf_counter() - start < 3 and not table.of("conv2d")


def test_a_program_resting_on_kernels_timed_alone_is_timed_whole(tmp_path):
    """Kernels timed alone can mislead about the program they compose: where the extraction runs a
    formulation the input does not, both programs are timed and the faster kept (which one, this
    machine decides; the report says)."""
    table = KernelTimes(tmp_path / "kernels.json")
    for algorithm, call in _calls().items():
        table.put(call, 1e-5 if algorithm == "shifted" else 1e-2)
    model = Roofline("cpu", timings=table)
    result = eqsat.optimize(_conv(), RULES, cost=model, limits=Limits(kernel_seconds=60))
    assert "timed: as written" in result.report.note and "measure" in result.report.timings
    assert _algorithms(result.program) in (["shifted"], ["direct"])
    unchecked = eqsat.optimize(_conv(), RULES, cost=model, limits=Limits(kernel_seconds=0))
    assert _algorithms(unchecked.program) == ["shifted"] and "timed" not in unchecked.report.note


def test_a_later_process_reading_the_timings_hits_the_cache(tmp_path, monkeypatch):
    """An optimization is cached under the timings it used, not those it started from: the next
    process, whose table holds them, skips optimizing. One whose timing limit left kernels untimed
    says how many, and is not cached: the next process times them and optimizes again."""
    monkeypatch.setattr(config, "cache_dir", tmp_path)
    monkeypatch.setattr(kernels, "run_seconds", lambda kernels, repeats, enough_s: [1e-3] * len(kernels))
    limits = Limits(kernel_seconds=60)
    model = Roofline("cpu", timings=KernelTimes(tmp_path / "k.json"))
    first = eqsat.optimize(_conv(), RULES, cost=model, limits=limits, cache=True)
    assert first.report.kernels_timed and not first.report.kernels_left and first.report.cache == "stored"
    later = Roofline("cpu", timings=KernelTimes(tmp_path / "k.json"))  # a new process reads the table
    assert eqsat.optimize(_conv(), RULES, cost=later, limits=limits, cache=True).report.cache == "hit"

    monkeypatch.setattr(kernels, "compiled", lambda call, options: time.sleep(5))
    model = Roofline("cpu", timings=KernelTimes(tmp_path / "other.json"))
    short = eqsat.optimize(_conv(), RULES, cost=model, limits=Limits(kernel_seconds=0.2), cache=True)
    assert short.report.kernels_left == len(ALL) and not short.report.kernels_timed
    assert f"{len(ALL)} kernels were left untimed" in short.report.cut_short
    assert short.report.cache == "not cached: cut short by a time limit"


def test_the_common_layers_follow_the_architectures_at_any_input_size():
    """``eqsat.common_convs``: ResNet-18, ResNet-50 and MobileNetV2's layers derived from their
    definitions, so each input size gives its own maps."""
    from eqsat.common_convs import ConvLayer, common_layers

    at_224 = common_layers(224)
    assert ConvLayer(3, 64, 7, 2, 224) in at_224  # the ResNets' stem
    assert ConvLayer(512, 512, 3, 1, 7) in at_224  # ResNet-18's last stage
    assert ConvLayer(2048, 512, 1, 1, 7) in at_224  # ResNet-50's last bottleneck
    assert ConvLayer(960, 960, 3, 1, 7, groups=960) in at_224  # MobileNetV2's last depthwise conv
    assert len(at_224) == len(set(at_224))
    assert ConvLayer(512, 512, 3, 1, 2) in common_layers(64)
    assert all(layer.size >= 1 for layer in common_layers(16))


def test_calibrate_common_times_each_layer_in_both_layouts_with_and_without_its_epilogue(
    tmp_path, monkeypatch
):
    """A common layer's program (plain, biased, biased and relu) times its formulations in NCHW and,
    through ``conv-layout``, NHWC: a network in either layout later reads them."""
    from eqsat.cli import _time_kernels_of
    from eqsat.common_convs import ConvLayer, layer_program

    monkeypatch.setattr(config, "cache_dir", tmp_path)
    program = layer_program(ConvLayer(8, 8, 3, 1, 4), batch=1, layout="NCHW")
    assert _time_kernels_of([("layer", program)], seconds=120.0) == 0
    (table,) = tmp_path.glob("kernels-*.json")
    calls = [Call.from_json(record) for record in json.loads(table.read_text())]
    timed = {(c.op, c.attrs["layout"], c.attrs.get("act")) for c in calls if "conv" in c.op}
    for layout in ("NCHW", "NHWC"):
        assert {("conv2d", layout, None), ("conv2d_bias_act", layout, "none")} <= timed, timed
        assert ("conv2d_bias_act", layout, "relu") in timed, timed


def test_timing_kernels_does_not_count_against_the_searchs_time_limit(tmp_path, monkeypatch):
    """Measurement is not search: a timing longer than the whole time limit leaves extraction its time
    (on a clock that moves only while kernels are timed)."""
    now = [0.0]
    monkeypatch.setattr(eqsat.deadline, "clock", lambda: now[0])

    def slow_timing(self, calls, seconds):
        now[0] += 1000.0
        for call in calls:
            self.put(call, 1e-3)
        return len(calls)

    monkeypatch.setattr(KernelTimes, "time", slow_timing)
    model = Roofline("cpu", timings=KernelTimes(tmp_path / "kernels.json"))
    result = eqsat.optimize(_conv(), RULES, cost=model, limits=Limits(kernel_seconds=60))
    assert result.report.kernels_timed and not result.report.cut_short, result.report


def test_a_kernel_far_larger_than_the_programs_inputs_and_outputs_is_not_timed(tmp_path, monkeypatch):
    """Timing a kernel holds its operands and result: where they take more than a measurement may
    (here: half of the program's arguments and results, ``eqsat.speed.too_large``), it is estimated,
    the note says so, and nothing is cut short."""
    from eqsat import speed

    monkeypatch.setattr(speed, "LARGE_BYTES", 0)
    monkeypatch.setattr(speed, "FAR", 0.5)
    path = tmp_path / "kernels.json"
    model = Roofline("cpu", timings=KernelTimes(path))
    result = eqsat.optimize(_conv(), RULES, cost=model, limits=Limits(kernel_seconds=60), cache=False)
    assert not path.exists()
    assert result.report.kernels_timed == result.report.kernels_left == 0
    assert f"{len(ALL)} kernels not timed for their memory (the largest, a conv2d" in result.report.note
    assert not result.report.cut_short


def test_kernels_are_compiled_side_by_side_only_while_they_fit_together():
    """A few kernels are compiled and timed at once, as many as the workers, unless their operands and
    results together pass the budget: then fewer, and one larger than it alone."""
    small, large = _calls()["direct"], _calls()["shifted"]._replace(output=TensorType((2, 8, 64, 64), F32))
    runs = list(kernels._side_by_side([small, small, small, large, small], 2, large.nbytes))
    assert [len(r) for r in runs] == [2, 1, 1, 1]
    assert runs[2] == [large]
    assert [len(r) for r in kernels._side_by_side([small] * 5, 2, 10**9)] == [2, 2, 1]


def _quick(monkeypatch) -> None:
    """Every kernel timed takes 1 ms."""
    monkeypatch.setattr(kernels, "run_seconds", lambda kernels, repeats, enough_s: [1e-3] * len(kernels))


def test_a_call_is_kept_field_by_field_and_read_back_as_it_was():
    call = _calls()["direct"]._replace(constant=(False, True))
    back = Call.from_json(json.loads(json.dumps(call.to_json())))
    assert (back.op, back.attrs, back.inputs, back.output, back.known) == (*call[:4], call.known)
    assert isinstance(back.attrs["padding"], tuple) and back.key == call.key


def test_measured_and_the_default_roofline_share_one_table(monkeypatch):
    """``Measured`` times what it is asked about into the table ``Roofline()`` reads, by the same
    timing: one file per device, no other."""
    _quick(monkeypatch)
    call = _calls()["direct"]
    model = Measured(repeats=1)
    assert model.op_cost(call.op, call.attrs, call.inputs, call.output) == 1e-3 and model.measured_now == 1
    assert Roofline().call_cost(call) == 1e-3
    assert [p.name.split("-")[0] for p in config.cache_dir.iterdir()] == ["kernels"]


def test_measured_interpolates_by_the_timed_calls_of_the_same_op(tmp_path, monkeypatch):
    """Past its budget an op is the roofline's estimate scaled by the median timed/estimated ratio of
    the same op's timings in the table, a call the default roofline timed with its weight a constant
    among them."""
    _quick(monkeypatch)
    path = tmp_path / "kernels.json"
    timed = _calls()["direct"]._replace(constant=(False, True))
    assert KernelTimes(path, workers=1).time([timed], 60) == 1
    model = Measured(path, budget=0)
    ratio = 1e-3 / model.roofline.op_cost(timed.op, timed.attrs, timed.inputs, timed.output)
    other = _calls()["im2col"]
    estimate = model.roofline.op_cost(other.op, other.attrs, other.inputs, other.output)
    assert model.op_cost(other.op, other.attrs, other.inputs, other.output) == pytest.approx(estimate * ratio)
    assert model.measured_now == 0


def test_a_table_of_an_earlier_format_is_timed_again(tmp_path, monkeypatch):
    """Timings kept by text key (as eqsat kept them before) are not read back: their calls are timed
    again and the file holds the new table."""
    _quick(monkeypatch)
    path, call = tmp_path / "kernels.json", _calls()["direct"]
    path.write_text(json.dumps({call.key: 1.0}))
    table = KernelTimes(path, workers=1)
    assert table.get(call) is None and table.time([call], 60) == 1
    assert _timed(path) == {call.key: 1e-3}
