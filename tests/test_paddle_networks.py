"""Whole networks saved by Paddle itself as users save them: paddle.vision CNNs, a
paddle.nn.TransformerEncoder, a paddle.nn.Transformer (encoder and decoder, two inputs) and
LSTM/GRU/simple RNN layers (``pd_op.rnn``) at a small input size,
random weights and randomized batch- norm statistics (so folding is exercised), saved with
``paddle.jit.save`` and a batch of ``None``. eqsat loads each with no help, optimizes it, and runs
it at two batch sizes; Paddle Inference's predictor runs the same file."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import eqsat

paddle = pytest.importorskip("paddle")
inference = pytest.importorskip("paddle.inference")
models = paddle.vision.models

Shapes = tuple[tuple[int, ...], ...]
# name -> (the network, the shapes of its inputs without the batch)
NETWORKS: dict[str, tuple[Callable[[], object], Shapes]] = {
    "resnet18": (lambda: models.resnet18(num_classes=10), ((3, 32, 32),)),
    "mobilenet_v2": (lambda: models.mobilenet_v2(scale=0.25, num_classes=10), ((3, 32, 32),)),
    "mobilenet_v3_small": (lambda: models.mobilenet_v3_small(scale=0.5, num_classes=10), ((3, 32, 32),)),
    "squeezenet1_0": (lambda: models.squeezenet1_0(num_classes=10), ((3, 64, 64),)),
    "shufflenet_v2_x0_25": (lambda: models.shufflenet_v2_x0_25(num_classes=10), ((3, 32, 32),)),
    "transformer_encoder": (
        lambda: paddle.nn.TransformerEncoder(paddle.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.1), 2),
        ((8, 32),),
    ),
    "transformer": (
        lambda: paddle.nn.Transformer(32, 4, 2, 2, 64, dropout=0.1),
        ((8, 32), (6, 32)),  # source and target sequences of different lengths
    ),
    "lstm": (lambda: paddle.nn.LSTM(16, 32, num_layers=2), ((5, 16),)),
    "gru_bidirectional": (lambda: paddle.nn.GRU(16, 24, direction="bidirect"), ((5, 16),)),
    "simple_rnn_relu": (lambda: paddle.nn.SimpleRNN(16, 20, num_layers=2, activation="relu"), ((5, 16),)),
}


def _names(shapes: Shapes) -> list[str]:
    return ["x"] if len(shapes) == 1 else [f"x{i}" for i in range(len(shapes))]


def _save(name: str, root: Path) -> Path:
    make, shapes = NETWORKS[name]
    paddle.seed(0)
    rng = np.random.default_rng(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        layer = make()
        layer.eval()
        for key, buffer in layer.named_buffers():  # batch-norm statistics away from 0 and 1
            if key.endswith(("_mean", "_variance")):
                low = 0.5 if key.endswith("_variance") else -0.5
                buffer.set_value(rng.uniform(low, low + 1.0, buffer.shape).astype("float32"))
        names = _names(shapes)
        spec = [paddle.static.InputSpec([None, *s], "float32", n) for n, s in zip(names, shapes, strict=True)]
        paddle.jit.save(paddle.jit.to_static(layer, input_spec=spec, full_graph=True), str(root / name))
    return root / f"{name}.json"


def _predict(path: Path, xs: list[np.ndarray]) -> list[np.ndarray]:
    config = inference.Config(str(path), str(path.with_suffix(".pdiparams")))
    config.disable_mkldnn()
    config.disable_glog_info()
    predictor = inference.create_predictor(config)
    for name, x in zip(predictor.get_input_names(), xs, strict=True):
        handle = predictor.get_input_handle(name)
        handle.reshape(x.shape)
        handle.copy_from_cpu(x)
    predictor.run()
    return [predictor.get_output_handle(name).copy_to_cpu() for name in predictor.get_output_names()]


@pytest.mark.parametrize("name", sorted(NETWORKS))
def test_a_network_saved_with_a_dynamic_batch_matches_paddle_inference(name, tmp_path):
    path = _save(name, tmp_path)
    program = eqsat.load(path)
    shapes = NETWORKS[name][1]
    assert program.dynamic == {n: (-1, *shape) for n, shape in zip(_names(shapes), shapes, strict=True)}
    result = eqsat.optimize(program)
    assert not [
        op for op in result.program.live_ops() if op.name == "opaque" and "batch_norm" in op.attrs["op"]
    ]
    for batch in (2, 3):
        rng = np.random.default_rng(batch)
        xs = [rng.normal(size=(batch, *shape)).astype(np.float32) for shape in shapes]
        outputs = result.fn(*xs)
        assert len(outputs) == len(_predict(path, xs))
        for got, want in zip(outputs, _predict(path, xs), strict=True):
            np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5 * np.abs(want).max())
