"""Real Paddle 3 programs (tests/data/paddle, printed by PaddlePaddle 3.3.1 itself): every dump loads
as printed, or, for control flow, fails with a ParseError naming the op's line."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import eqsat
from eqsat import ParseError, api
from eqsat.lowering import OPAQUE_LOWERINGS, lower

DUMPS = Path(__file__).resolve().parent / "data" / "paddle" / "dumps"
ALL = sorted(p.name for p in DUMPS.glob("*.pir"))


@pytest.mark.parametrize("name", ALL)
def test_every_dump_loads_as_printed(name):
    program = eqsat.load(DUMPS / name)
    assert program.outputs and program.ops
    text = (DUMPS / name).read_text()
    if '"pd_op.fetch"' in text:
        assert len(program.outputs) == text.count('"pd_op.fetch"')
    names = {p.name for p in program.params}
    assert set(re.findall(r'parameter_name:"([^"]+)"', text)) <= names
    assert set(re.findall(r'"builtin.constant" \(\) \{[^}]*value:"([^"]+)"', text)) <= names


@pytest.mark.parametrize("name", [n for n in ALL if n.startswith("cond_block")])
def test_an_if_runs_its_branches_as_paddle_did(name):
    """``pd_op.if`` with its two regions, in every form Paddle printed it (before and after its passes):
    the branch Paddle took on its input, and the other one, against numpy."""
    program = eqsat.load(DUMPS / name)
    assert "pd_op.if" in [op.attrs["op"] for op in program.ops if op.name == "opaque"]
    if any(p.name not in program.param_values for p in program.params):
        return  # Paddle Inference's passes moved constants into a params file the dump does not have
    ref = np.load(REFS / "cond_block.npz")
    x = ref["in_x"]
    for fn in (lower(program), eqsat.optimize(program).fn):
        np.testing.assert_allclose(np.asarray(fn(x)[0]), ref["out_0"], rtol=1e-6)
        negative = -np.abs(x) - 0.1  # mean below 0: the else branch, tanh
        np.testing.assert_allclose(np.asarray(fn(negative)[0]), np.tanh(negative) + 1, rtol=1e-6)


def test_a_program_without_fetch_outputs_the_values_no_op_reads():
    program = eqsat.load(DUMPS / "mlp.train.pir")
    assert len(program.outputs) == 1 and program.outputs[0].type.shape == (8, 10)
    named = eqsat.parse_pir((DUMPS / "mlp.train.pir").read_text(), outputs=["%9"])
    assert named.output_names == ["9"] and named.outputs[0].type.shape == (8, 64)


REFS = DUMPS.parent / "refs"


def _run_against_paddle(name: str, program: eqsat.Program) -> None:
    """Run on Paddle's inputs and compare with Paddle's outputs: one to one for a fetched program; a
    program printed without fetch also outputs values nothing reads (layer norm's statistics), so
    there each of Paddle's outputs is the one output of its shape."""
    ref = np.load(REFS / f"{name}.npz")
    outs = [np.asarray(o) for o in lower(program)(*(ref[f"in_{v.name}"] for v in program.inputs))]
    expected = [ref[k] for k in sorted(k for k in ref.files if k.startswith("out_"))]
    if len(outs) != len(expected):
        matches = [[o for o in outs if o.shape == want.shape] for want in expected]
        assert all(len(m) == 1 for m in matches), "each of Paddle's outputs has one output of its shape"
        outs = [m[0] for m in matches]
    for out, want in zip(outs, expected, strict=True):
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


RUNNABLE = [
    "conv_bn_relu",
    "encoder_postnorm",
    "layout_chain",
    "llama_mlp",
    "mha_mask",
    "mha_nomask",
    "misc_ops",
    "mlp",
]


@pytest.mark.parametrize("form", ["", ".train", ".passes"])
@pytest.mark.parametrize("name", RUNNABLE)
def test_a_program_runs_and_matches_paddle_before_and_after_optimizing(name, form):
    """The saved model, the program as built (no fetch) and after Paddle's own fusion passes
    (``pd_op.fc``, ``pd_op.multihead_matmul``, ``pd_op.fused_bias_residual_layernorm``)."""
    program = eqsat.load(DUMPS / f"{name}{form}.pir")
    ref = np.load(REFS / f"{name}.npz")
    weights = {p.name: ref[f"param_{p.name}"] for p in program.params if f"param_{p.name}" in ref}
    program.param_values.update(weights)
    _run_against_paddle(name, program)
    result = eqsat.optimize(program)
    _run_against_paddle(name, result.program)
    counts = result.program.op_counts()
    if name.startswith(("mha", "encoder")):
        assert counts["attention"] + counts.get("flash_attention", 0) == 1
    if name == "mlp":  # the exact GELU stays exact (not the tanh form), in a linear's epilogue
        assert counts == {"linear": 3, "softmax": 1}, counts
        assert any(op.attrs.get("act") == "gelu_erf" for op in result.program.live_ops())


MODELS = DUMPS.parent / "models"


@pytest.mark.parametrize("name", [p.stem for p in sorted(MODELS.glob("*.pdiparams"))])
def test_pdiparams_weights_are_read_without_paddle(name):
    program = eqsat.load(DUMPS / f"{name}.pir", params=MODELS / f"{name}.pdiparams")
    ref = np.load(REFS / f"{name}.npz")
    for p in program.params:
        if f"param_{p.name}" in ref:
            np.testing.assert_array_equal(program.param_values[p.name], ref[f"param_{p.name}"])
    _run_against_paddle(name, program)


def test_wrong_weights_are_a_clear_error(tmp_path):
    with pytest.raises(ParseError, match="holds 6 tensors but the program has 4"):
        eqsat.load(DUMPS / "llama_mlp.pir", params=MODELS / "mlp.pdiparams")
    bad = tmp_path / "bad.pdiparams"
    bad.write_bytes((MODELS / "mlp.pdiparams").read_bytes()[:100])
    with pytest.raises(ParseError, match=r"not a Paddle \.pdiparams file"):
        eqsat.load(DUMPS / "mlp.pir", params=bad)
    with pytest.raises(ParseError, match=r"parameter linear_20\.b_0"):
        eqsat.load(DUMPS / "mlp.pir", params={"linear_20.b_0": np.zeros(3, np.float32)})


def test_dynamic_dims_are_bound_by_the_user_or_default_to_one():
    text = (DUMPS / "mlp.pir").read_text().replace("shape:[8,32]", "shape:[-1,32]")
    text = text.replace("tensor<8x", "tensor<-1x")
    default = eqsat.parse_pir(text)
    assert default.inputs[0].type.shape == (1, 32) and default.dynamic == {"x": (-1, 32)}
    program = eqsat.parse_pir(text, shapes={"x": (3, 32)})
    assert program.inputs[0].type.shape == (3, 32) and program.outputs[0].type.shape == (3, 10)
    with pytest.raises(ParseError, match="does not fit"):
        eqsat.parse_pir(text, shapes={"x": (3, 31)})


@pytest.mark.parametrize("name", [p.stem for p in sorted(MODELS.glob("*.json"))])
def test_the_saved_model_runs_without_paddle(name):
    """``model.json`` (the program Paddle 3 saves) and ``model.pdiparams`` (its weights)."""
    weights = MODELS / f"{name}.pdiparams"
    program = eqsat.load(MODELS / f"{name}.json", params=weights if weights.exists() else None)
    _run_against_paddle(name, program)
    _run_against_paddle(name, eqsat.optimize(program).program)


def test_malformed_json_programs_are_parse_errors(tmp_path):
    path = tmp_path / "m.json"
    for text in (
        "{",
        '{"program": {}}',
        '{"program": {"regions": [{"blocks": [{"ops": [{"#": "1.relu"}]}]}]}}',
    ):
        path.write_text(text)
        with pytest.raises(ParseError):
            eqsat.load(path)


def test_more_paddle_ops_have_their_meanings():
    """Ops the shared models do not use, written in Paddle 3's spelling (tests/data/paddle/more_ops.pir),
    against numpy (there are no Paddle outputs for them)."""
    text = (DUMPS.parent / "more_ops.pir").read_text()
    names = [f"%{i}" for i in (5, 9, 10, 11, 13, 14, 16, 21, 23, 24, 25, 26, 28, 29, 30, 31)]
    program = eqsat.parse_pir(text, outputs=names)
    rng = np.random.default_rng(0)
    x, table, ids = (
        rng.normal(size=(4, 6)).astype(np.float32),
        rng.normal(size=(5, 6)).astype(np.float32),
        [0, 3, 4],
    )
    gamma = rng.normal(size=6).astype(np.float32)
    program.param_values.update(table=table, gamma=gamma)
    from eqsat.lowering import lower

    got = [np.asarray(o) for o in lower(program)(x, np.asarray(ids))]
    silu = lambda v: v / (1 + np.exp(-v))  # noqa: E731
    want = [x[1:3], x[:, :2], x[:, 2:], np.where(np.asarray(ids)[:, None] == 0, 0, table[ids]), x > 0]
    want.append(silu(x[:, :3]) * x[:, 3:])
    want.append(x / np.sqrt((x**2).mean(-1, keepdims=True) + 1e-6) * gamma)
    want.append(np.arange(0, 10, 3))
    leaky = np.where(x > 0, x, 0.1 * x)
    want += [np.floor_divide(x, 1.5), np.remainder(x, 1.5), leaky, np.cumsum(x, 1), np.stack([x, leaky], 1)]
    want += [np.argmax(x, 1), np.stack([x, leaky], 1).reshape(4, 12), np.sin(x)]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6)


NETS = DUMPS.parent.parent / "paddle_nets"


def test_dropout_downscale_in_infer_scales_by_one_minus_p():
    """paddle.vision's squeezenet/alexnet/googlenet dropout: at inference ``downgrade_in_infer`` multiplies
    by 1 - p (it was read as the identity: outputs 2x off at p = 0.5). Against Paddle's own outputs."""
    ref = np.load(NETS / "mini_dropout_downscale.npz")
    program = eqsat.load(
        NETS / "mini_dropout_downscale_fix.json", params=NETS / "mini_dropout_downscale_fix.pdiparams"
    )
    assert "scale" in program.op_counts()
    for result in (eqsat.optimize(program, rules=[]), eqsat.optimize(program)):
        (out,) = result.fn(ref["in_x"])
        np.testing.assert_allclose(np.asarray(out), ref["out_0"], rtol=1e-5, atol=1e-6)


DROPOUT = "\n".join(
    [
        "{{",
        ' (%0) = "pd_op.data" () {{dtype:float32,name:"x",place:Place(cpu),shape:[2,3],stop_gradient:[true]}}'
        " : () -> tensor<2x3xf32>",
        " (%1) = {p}",
        ' (%2, %3) = "pd_op.dropout" (%0, <<NULL VALUE>>, %1) {{fix_seed:false,is_test:{test},mode:"{mode}",'
        "seed:0}} : (tensor<2x3xf32>, <<NULL TYPE>>, tensor<1xf32>) -> tensor<2x3xf32>, tensor<2x3xu8>",
        ' () = "pd_op.fetch" (%2) {{col:0,name:"out"}} : (tensor<2x3xf32>) -> tensor<2x3xf32>',
        "}}",
    ]
)
CONSTANT_P = '"pd_op.full" () {dtype:float32,place:Place(cpu),shape:[1],value:0.25} : () -> tensor<1xf32>'
FED_P = (
    '"pd_op.data" () {dtype:float32,name:"p",place:Place(cpu),shape:[1],stop_gradient:[true]}'
    " : () -> tensor<1xf32>"
)


@pytest.mark.parametrize(("mode", "factor"), [("upscale_in_train", 1.0), ("downgrade_in_infer", 0.75)])
@pytest.mark.parametrize("p", [CONSTANT_P, FED_P], ids=["constant-p", "fed-p"])
def test_dropout_at_inference_by_mode(mode, factor, p):
    program = eqsat.parse_pir(DROPOUT.format(p=p, test="true", mode=mode))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    args = [x, np.full((1,), 0.25, np.float32)][: len(program.inputs)]
    (out,) = eqsat.optimize(program).fn(*args)
    np.testing.assert_allclose(np.asarray(out), x * factor)


def test_an_unknown_dropout_mode_is_a_parse_error():
    with pytest.raises(ParseError, match=r"line 4: pd_op.dropout: unknown dropout mode 'sideways'"):
        eqsat.parse_pir(DROPOUT.format(p=CONSTANT_P, test="true", mode="sideways"))


def test_egglog_stays_quiet_when_another_library_sets_the_root_logger_to_info(caplog):
    """``import paddle`` sets the root logger to INFO; egglog then logged every command (1 MB)."""
    with caplog.at_level("INFO"):
        eqsat.optimize(eqsat.parse_pir(DROPOUT.format(p=CONSTANT_P, test="true", mode="upscale_in_train")))
    assert not [r for r in caplog.records if r.name.startswith("egglog")]


@pytest.mark.parametrize("name", ["mini_conv_squeeze", "mini_dropout_downscale"])
def test_a_model_saved_with_a_dynamic_batch_runs_at_any_batch(name, monkeypatch):
    """Saved with ``InputSpec([None, ...])``, as deployed models are: it loads as saved (weights from
    the .pdiparams beside it), and the optimized program specializes per batch size on first call, once
    each (optimized at 2, carried to others); Paddle's -1 on squeeze's result is inferred from the
    elements. Against Paddle's outputs."""
    ref = np.load(NETS / f"{name}.npz")
    program = eqsat.load(NETS / f"{name}_dyn.json")
    assert program.dynamic == {"x": (-1, *ref["in_x"].shape[1:])}
    result = eqsat.optimize(program)
    specializations = []
    optimize_with = api.optimize_with
    monkeypatch.setattr(
        api, "optimize_with", lambda p, o, **kw: specializations.append(p) or optimize_with(p, o, **kw)
    )
    for batch in (2, 1, 2, 3):
        x = np.concatenate([ref["in_x"]] * 2)[:batch]
        (out,) = result.fn(x)
        want = np.concatenate([ref["out_0"]] * 2)[:batch]  # each row depends on its own input only
        np.testing.assert_allclose(np.asarray(out), want, rtol=1e-5, atol=1e-5)
    # batch 1 was the default; 2 is optimized (the size choices are made at), 3 carries them
    assert [p.inputs[0].type.shape[0] for p in specializations] == [2]
    assert result.specialized(np.concatenate([ref["in_x"]] * 2)[:3]).report.extractor == "carried"


def test_a_call_with_a_wrong_rank_dtype_or_size_names_the_input():
    fn = eqsat.optimize(eqsat.load(NETS / "mini_conv_squeeze_dyn.json")).fn
    x = np.zeros((2, 3, 8, 8), np.float32)
    for bad, message in [
        (x[0], r"input 'x' must be \?x3x8x8 of float32, got \(3, 8, 8\)"),
        (x.astype(np.int32), "got .* of int32"),
        (x[:, :2], r"got \(2, 2, 8, 8\)"),
    ]:
        with pytest.raises(eqsat.ShapeError, match=message):
            fn(bad)


def test_an_op_falling_back_to_opaque_keeps_the_files_name(monkeypatch):
    """Training-mode dropout has no meaning of eqsat's; the user's meaning, registered under the name
    the file uses, runs it."""
    monkeypatch.setitem(OPAQUE_LOWERINGS, "pd_op.dropout", lambda x, p, **attrs: (x * 2, x > 0))
    program = eqsat.parse_pir(DROPOUT.format(p=CONSTANT_P, test="false", mode="upscale_in_train"))
    assert program.op_counts()["pd_op.dropout"] == 1
    (out,) = eqsat.optimize(program).fn(np.ones((2, 3), np.float32))
    np.testing.assert_array_equal(np.asarray(out), np.full((2, 3), 2.0))


def test_mobilenets_hard_activations_are_canonical_ops():
    """``Hardsigmoid()(x) * x`` (mobilenet_v3): hardsigmoid, relu6, hardswish and hardtanh load as
    canonical ops (min/max of a scale) that rules see through, not opaque ops. Against Paddle."""
    ref = np.load(NETS / "mini_hardsigmoid.npz")
    result = eqsat.optimize(eqsat.load(NETS / "mini_hardsigmoid_dyn.json"))
    assert not [op for op in result.program.live_ops() if op.name == "opaque"]
    (out,) = result.fn(ref["in_x"])
    np.testing.assert_allclose(np.asarray(out), ref["out_0"], rtol=1e-5, atol=1e-6)


def test_a_loaded_program_called_with_too_few_inputs_says_how_many_it_takes():
    program = eqsat.load(Path(__file__).parent / "data" / "paddle_nets" / "mini_conv_squeeze_dyn.json")
    with pytest.raises(TypeError, match=r"takes 1 argument \('x'\), got 0"):
        eqsat.optimize(program).fn()


def test_shapes_naming_no_input_is_an_error():
    path = Path(__file__).parent / "data" / "paddle_nets" / "mini_conv_squeeze_dyn.json"
    with pytest.raises(eqsat.ParseError, match="'y', which is no input"):
        eqsat.load(path, shapes={"y": (1, 3, 8, 8)})


def test_a_program_that_fails_at_guessed_sizes_says_which_input_needs_them():
    """[None, 3, None, None], as image models are saved: loaded with no help, H = W = 1 is a guess the
    first conv cannot take; the error names the input to bind (#41)."""
    path = Path(__file__).parent / "data" / "paddle_nets" / "mini_conv_pool_dyn_hw.json"
    with pytest.raises(ParseError, match=r"'x' declared \[-1, 3, -1, -1\] were taken as 1: bind them"):
        eqsat.load(path)
    (out,) = eqsat.optimize(eqsat.load(path, shapes={"x": (2, 3, 16, 16)})).fn(
        np.ones((2, 3, 16, 16), np.float32)
    )
    assert out.shape == (2, 4, 7, 7)
