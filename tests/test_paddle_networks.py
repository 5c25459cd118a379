"""Whole networks saved by Paddle itself as users save them (bench/paddle_nets.py): paddle.vision
CNNs, a paddle.nn.TransformerEncoder, a paddle.nn.Transformer (encoder and decoder, two inputs) and
LSTM/GRU/simple RNN layers (``pd_op.rnn``) at a small input size, random weights and randomized
batch-norm statistics (so folding is exercised), saved with ``paddle.jit.save`` and a batch of
``None``. eqsat loads each with no help, optimizes it, and runs it at two batch sizes; Paddle
Inference's predictor runs the same file."""

from __future__ import annotations

import numpy as np
import paddle
import pytest

import eqsat
from bench.paddle_nets import NETWORKS, input_names, inputs, predictor, save
from eqsat.cli import main
from tests.zoo_architectures import INFERENCE_FAILS, ZOO, Encoder, Segmenter, Tagger


@pytest.mark.parametrize("name", sorted(NETWORKS))
def test_a_network_saved_with_a_dynamic_batch_matches_paddle_inference(name, tmp_path):
    path = save(name, tmp_path)
    program = eqsat.load(path)
    shapes = NETWORKS[name][1]
    assert program.dynamic == {n: (-1, *shape) for n, shape in zip(input_names(shapes), shapes, strict=True)}
    result = eqsat.optimize(program)
    assert not [
        op for op in result.program.live_ops() if op.name == "opaque" and "batch_norm" in op.attrs["op"]
    ]
    paddle_inference = predictor(path)
    for batch in (2, 3):
        xs = inputs(name, batch, seed=batch)
        outputs, wanted = result.fn(*xs), paddle_inference(xs)
        assert len(outputs) == len(wanted)
        for got, want in zip(outputs, wanted, strict=True):
            np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5 * np.abs(want).max())


def test_a_dynamic_batch_is_optimized_once_for_every_size(tmp_path):
    """Batch 2 is optimized (the template: batch 1's program drops the batch); 3, 5 and 8 carry its
    choices, found in their own e-graphs: no kernel timed, the template's ops (its copies of a repeated
    layer's constants are one value in an e-graph), Paddle's outputs."""
    name = "transformer_encoder"
    path = save(name, tmp_path)
    result = eqsat.optimize(eqsat.load(path))
    template = result.specialized(*inputs(name, 2))
    assert template.report.extractor != "carried"
    paddle_inference = predictor(path)
    for batch in (3, 5, 8):
        xs = inputs(name, batch, seed=batch)
        carried = result.specialized(*xs)
        assert carried.report.extractor == "carried", carried.report.note
        assert carried.report.kernels_timed == 0
        ops, kept = carried.program.op_counts(), template.program.op_counts()
        assert ops.keys() == kept.keys() and all(ops[k] <= kept[k] for k in ops), (ops, kept)
        (got,), (want,) = result.fn(*xs), paddle_inference(xs)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5 * np.abs(want).max())


class _Branching(paddle.nn.Layer):
    """``to_static`` code with an ``if`` on a tensor: a ``pd_op.if`` whose branches read a weight."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = paddle.nn.Linear(8, 8)

    def forward(self, x):
        if paddle.mean(x) > 0:  # noqa: SIM108  (an if statement: to_static makes it a pd_op.if)
            y = paddle.nn.functional.relu(self.fc(x)) * 2
        else:
            y = paddle.tanh(x)
        return y + 1


def test_an_if_on_a_tensor_saved_by_to_static_matches_paddle_inference(tmp_path):
    paddle.seed(0)
    layer = _Branching()
    layer.eval()
    spec = [paddle.static.InputSpec([None, 8], "float32", "x")]
    paddle.jit.save(paddle.jit.to_static(layer, input_spec=spec, full_graph=True), str(tmp_path / "if"))
    path = tmp_path / "if.json"
    at_two = eqsat.optimize(eqsat.load(path, shapes={"x": (2, 8)}))
    (cond,) = [op for op in at_two.program.ops if op.name == "opaque"]
    then, _ = cond.payload.branches  # each branch optimized on its own: the fc and relu are one linear
    assert then.op_counts() == {"linear": 1, "scale": 1}
    result = eqsat.optimize(eqsat.load(path))
    paddle_inference = predictor(path)
    rng = np.random.default_rng(0)
    for batch, shift in ((2, 1.0), (3, 1.0), (2, -1.0), (3, -1.0)):  # both branches, two batch sizes
        x = (np.abs(rng.normal(size=(batch, 8))) * shift).astype(np.float32)
        (got,), (want,) = result.fn(x), paddle_inference([x])
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)


class _Looping(paddle.nn.Layer):
    """``to_static`` code with a ``while`` over a tensor bound: a ``pd_op.while`` whose body reads a
    weight and the bound, and counts with an integer ``scale``."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = paddle.nn.Linear(8, 8)

    def forward(self, x, n):
        i = paddle.zeros([1], "int64")
        while i < n:
            x = paddle.tanh(self.fc(x)) + x * 0.5
            i = i + 1
        return x


class _Ranging(paddle.nn.Layer):
    """``to_static`` code with ``for _ in range(n)`` over a tensor ``n``: a ``while`` over the elements
    of an ``arange`` whose length is ``n``'s value."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = paddle.nn.Linear(8, 8)

    def forward(self, x, n):
        for _ in range(n):
            x = paddle.tanh(self.fc(x))
        return x


@pytest.mark.parametrize("layer_type", [_Looping, _Ranging])
def test_a_while_over_a_tensor_bound_matches_paddle_inference(tmp_path, layer_type):
    paddle.seed(0)
    layer = layer_type()
    layer.eval()
    spec = [paddle.static.InputSpec([None, 8], "float32", "x"), paddle.static.InputSpec([1], "int64", "n")]
    paddle.jit.save(paddle.jit.to_static(layer, input_spec=spec, full_graph=True), str(tmp_path / "loop"))
    path = tmp_path / "loop.json"
    result = eqsat.optimize(eqsat.load(path))
    paddle_inference = predictor(path)
    rng = np.random.default_rng(0)
    for batch, steps in ((2, 0), (2, 3), (4, 1)):
        x, n = rng.normal(size=(batch, 8)).astype(np.float32), np.array([steps], np.int64)
        (got,), (want,) = result.fn(x, n), paddle_inference([x, n])
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)


def test_control_flow_as_paddle_prints_it_runs_as_paddle_runs_it():
    """``print(program)`` of ``static.nn.cond`` and ``static.nn.while_loop``: the text form of both
    ops (a while's ``cond=``/``inputs=`` operands and ``^`` block arguments), against Paddle's executor."""
    paddle.enable_static()
    try:
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main, startup):
            x = paddle.static.data("x", [3, 8], "float32")
            y = paddle.static.nn.cond(
                paddle.mean(x) > 0, lambda: paddle.nn.functional.relu(x) * 2, lambda: -x
            )
            n = paddle.full([1], 3, "int64")
            _, out = paddle.static.nn.while_loop(
                lambda i, acc: i < n, lambda i, acc: [i + 1, acc * 0.5 + 1.0], [paddle.zeros([1], "int64"), y]
            )
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        text = str(main)
        rng = np.random.default_rng(0)
        feeds = [rng.normal(size=(3, 8)).astype(np.float32) + s for s in (1.0, -1.0)]
        wants = [exe.run(main, feed={"x": f}, fetch_list=[out])[0] for f in feeds]
    finally:
        paddle.disable_static()
    assert '"pd_op.while"' in text and '"pd_op.if"' in text
    program = eqsat.parse_pir(text, outputs=[_result_of_last_op(text)])
    for feed, want in zip(feeds, wants, strict=True):
        (got,) = eqsat.optimize(program).fn(feed)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-6)


def _result_of_last_op(text: str) -> str:
    """The value the last op at the program's top level defines (the output of a printed program)."""
    top = [line.strip() for line in text.splitlines() if line.startswith("    (%")]
    return top[-1].split(")", 1)[0].strip("(").split(",")[-1].strip()


def test_an_encoder_saved_with_dynamic_batch_and_sequence_matches_paddle_inference(tmp_path, capsys):
    """Saved with ids of shape [None, None], as PaddleNLP exports its encoders: the mask's unsqueeze
    declares [-1, 1, 1, -1], resolved from the bound ids; attention and layer norm become one op each."""
    paddle.seed(0)
    layer = Encoder()
    layer.eval()
    spec = [paddle.static.InputSpec([None, None], "int64", "ids")]
    paddle.jit.save(paddle.jit.to_static(layer, input_spec=spec, full_graph=True), str(tmp_path / "encoder"))
    path = tmp_path / "encoder.json"
    paddle_inference = predictor(path)
    rng = np.random.default_rng(0)
    for shape in ((2, 16), (3, 9)):
        result = eqsat.optimize(eqsat.load(path, shapes={"ids": shape}))
        counts = result.program.op_counts()
        assert counts["attention"] == 2 and counts["layer_norm"] == 5, counts
        ids = rng.integers(1, 50, size=shape).astype(np.int64)
        ids[0, -3:] = 0  # padding
        (got,), (want,) = result.fn(ids), paddle_inference([ids])
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
    # the command line's check runs both programs on int64 ids
    assert main(["optimize", str(path), "--shape", "ids=2,16", "--check"]) == 0
    assert "agrees with the original" in capsys.readouterr().out


def test_a_gru_crf_tagger_saved_as_lac_exports_matches_paddle_inference(tmp_path):
    """LAC as PaddleNLP exports it: ids [None, None] and lengths [None]; sentences of several lengths
    padded to the longest (the GRUs keep each one's state past its end, the CRF decodes each to its
    length). Scores and tag paths are Paddle Inference's at two sizes."""
    paddle.seed(0)
    layer = Tagger()
    layer.eval()
    spec = [
        paddle.static.InputSpec([None, None], "int64", "ids"),
        paddle.static.InputSpec([None], "int64", "lengths"),
    ]
    paddle.jit.save(paddle.jit.to_static(layer, input_spec=spec, full_graph=True), str(tmp_path / "lac"))
    path = tmp_path / "lac.json"
    paddle_inference = predictor(path)
    rng = np.random.default_rng(0)
    for batch, longest in ((3, 9), (2, 5)):
        result = eqsat.optimize(eqsat.load(path, shapes={"ids": (batch, longest), "lengths": (batch,)}))
        lengths = np.concatenate([[longest], rng.integers(1, longest + 1, batch - 1)]).astype(np.int64)
        ids = rng.integers(1, 50, (batch, longest)).astype(np.int64)
        ids[np.arange(longest) >= lengths[:, None]] = 0  # padding
        got, want = result.fn(ids, lengths), paddle_inference([ids, lengths])
        assert len(got) == len(want) == 2
        np.testing.assert_allclose(np.asarray(got[0]), want[0], rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(np.asarray(got[1]), want[1])


@pytest.mark.parametrize("op", ["squeeze", "unsqueeze", "flatten"])
def test_the_shapes_squeeze_unsqueeze_and_flatten_give_are_paddles(op):
    """The loader reshapes by the op's meaning (its dynamic dims resolved from the bound inputs): on
    random shapes and axes, the shape Paddle gives."""
    from eqsat.frontend.paddle.layout import _flattened, _squeezed, _unsqueezed

    rng = np.random.default_rng(0)
    for _ in range(40):
        rank = int(rng.integers(0 if op == "flatten" else 1, 5))
        shape = tuple(int(d) for d in rng.choice([1, 2, 3], size=rank))
        x = paddle.zeros(shape)
        if op == "flatten":
            start = int(rng.integers(0, max(rank, 1)))
            stop = int(rng.integers(start, max(rank, 1)))
            start, stop = (start - rank, stop) if rank and rng.random() < 0.5 else (start, stop)
            want, got = paddle.flatten(x, start, stop).shape, _flattened(shape, start, stop)
        elif op == "squeeze":
            axes = tuple(
                int(a)
                for a in rng.choice(range(-rank, rank), size=int(rng.integers(0, rank + 1)), replace=False)
            )
            want, got = paddle.squeeze(x, list(axes)).shape, _squeezed(shape, axes)
        else:
            count = int(rng.integers(1, 4))
            axes = tuple(int(rng.integers(-rank - i - 1, rank + i + 1)) for i in range(count))
            want, got = paddle.unsqueeze(x, list(axes)).shape, _unsqueezed(shape, axes)
        assert tuple(want) == got, (op, shape, want, got)


def test_a_segmenter_resizing_to_other_tensors_sizes_matches_paddle_inference(tmp_path, capsys):
    """Saved with ``[None, 3, None, None]``, as PaddleSeg exports: each resize's size comes through
    ``shape64 -> slice -> cast``, computed from the call's shapes as the program is read."""
    paddle.seed(0)
    layer = Segmenter()
    layer.eval()
    spec = [paddle.static.InputSpec([None, 3, None, None], "float32", "x")]
    paddle.jit.save(paddle.jit.to_static(layer, input_spec=spec, full_graph=True), str(tmp_path / "seg"))
    path = tmp_path / "seg.json"
    fn = eqsat.optimize(eqsat.load(path)).fn  # specializes on each call's shapes
    paddle_inference = predictor(path)
    rng = np.random.default_rng(0)
    for shape in ((2, 3, 32, 32), (1, 3, 24, 40)):
        x = rng.normal(size=shape).astype(np.float32)
        (got,), (want,) = fn(x), paddle_inference([x])
        assert got.shape == want.shape == (shape[0], 3, *shape[2:])
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
    # the command line invents no image size: it asks for one
    assert main(["optimize", str(path), "-q"]) == 2
    assert (
        "input 'x' is declared [-1, 3, -1, -1]: its sizes are the caller's to give" in capsys.readouterr().err
    )
    assert main(["optimize", str(path), "-q", "--shape", "x=1,3,24,40", "--check"]) == 0


def _seeded(layer_type: type[paddle.nn.Layer]) -> paddle.nn.Layer:
    paddle.seed(0)
    layer = layer_type()
    layer.eval()
    return layer


@pytest.mark.parametrize("name", sorted(ZOO))
def test_a_zoo_architecture_saved_with_dynamic_sizes_matches_paddle_inference(name, tmp_path):
    """Saved as the zoos export (dynamic batch, image or sequence sizes), loaded with no help, run at
    two sizes against Paddle Inference. Where the dims nothing binds (taken as 1) cannot run (a 4x4
    stem on a 1x1 image), the load names the input to bind; bound once, ``fn`` still specializes on
    each call's shapes. Where Paddle Inference cannot run the file, Paddle runs the layer."""
    arch = ZOO[name]
    layer, eager = (_seeded(arch.layer) for _ in range(2))  # the same weights: one saved, one run eagerly
    names = input_names(arch.inputs)
    specs = [paddle.static.InputSpec(s, arch.dtype, n) for s, n in zip(arch.inputs, names, strict=True)]
    paddle.jit.save(paddle.jit.to_static(layer, input_spec=specs, full_graph=True), str(tmp_path / name))
    path = tmp_path / f"{name}.json"
    try:
        program = eqsat.load(path)
    except eqsat.ParseError as e:
        assert f"were taken as 1: bind them, shapes={{{names[0]!r}" in str(e)
        program = eqsat.load(path, shapes=dict.fromkeys(names, arch.calls[0]))
    fn = eqsat.optimize(program).fn
    paddle_inference = predictor(path)
    rng = np.random.default_rng(0)
    for shape in arch.calls:
        if arch.dtype == "int64":
            xs = [rng.integers(0, high, shape) for high in arch.vocab]
        else:
            xs = [rng.normal(size=shape).astype(np.float32)]
        if name in INFERENCE_FAILS:
            outputs = eager(*map(paddle.to_tensor, xs))
            want = [t.numpy() for t in (outputs if isinstance(outputs, tuple | list) else [outputs])]
        else:
            want = paddle_inference(xs)
        got = fn(*xs)
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(np.asarray(g), w, rtol=1e-5, atol=1e-5 * np.abs(w).max())


class _SummingARange(paddle.nn.Layer):
    def forward(self, x, n):
        return x + paddle.arange(n).astype("float32").sum()


def test_an_arange_read_whole_whose_length_depends_on_a_value_is_one_clear_error(tmp_path):
    """JAX cannot give a tensor a length computed from a value: the error names the arange."""
    spec = [paddle.static.InputSpec([2], "float32", "x"), paddle.static.InputSpec([1], "int64", "n")]
    layer = paddle.jit.to_static(_SummingARange(), input_spec=spec, full_graph=True)
    paddle.jit.save(layer, str(tmp_path / "arange"))
    with pytest.raises(eqsat.ParseError, match="an arange whose length depends on tensor values"):
        eqsat.load(tmp_path / "arange.json")
