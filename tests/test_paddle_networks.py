"""Whole networks saved by Paddle itself as users save them: paddle.vision CNNs, a
paddle.nn.TransformerEncoder and LSTM/GRU/simple RNN layers (``pd_op.rnn``) at a small input size,
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

# name -> (the network, its input shape without the batch)
NETWORKS: dict[str, tuple[Callable[[], object], tuple[int, ...]]] = {
    "resnet18": (lambda: models.resnet18(num_classes=10), (3, 32, 32)),
    "mobilenet_v2": (lambda: models.mobilenet_v2(scale=0.25, num_classes=10), (3, 32, 32)),
    "mobilenet_v3_small": (lambda: models.mobilenet_v3_small(scale=0.5, num_classes=10), (3, 32, 32)),
    "squeezenet1_0": (lambda: models.squeezenet1_0(num_classes=10), (3, 64, 64)),
    "shufflenet_v2_x0_25": (lambda: models.shufflenet_v2_x0_25(num_classes=10), (3, 32, 32)),
    "transformer_encoder": (
        lambda: paddle.nn.TransformerEncoder(paddle.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.1), 2),
        (8, 32),
    ),
    "lstm": (lambda: paddle.nn.LSTM(16, 32, num_layers=2), (5, 16)),
    "gru_bidirectional": (lambda: paddle.nn.GRU(16, 24, direction="bidirect"), (5, 16)),
    "simple_rnn_relu": (lambda: paddle.nn.SimpleRNN(16, 20, num_layers=2, activation="relu"), (5, 16)),
}


def _save(name: str, root: Path) -> Path:
    make, shape = NETWORKS[name]
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
        spec = [paddle.static.InputSpec([None, *shape], "float32", "x")]
        paddle.jit.save(paddle.jit.to_static(layer, input_spec=spec, full_graph=True), str(root / name))
    return root / f"{name}.json"


def _predict(path: Path, x: np.ndarray) -> list[np.ndarray]:
    config = inference.Config(str(path), str(path.with_suffix(".pdiparams")))
    config.disable_mkldnn()
    config.disable_glog_info()
    predictor = inference.create_predictor(config)
    handle = predictor.get_input_handle(predictor.get_input_names()[0])
    handle.reshape(x.shape)
    handle.copy_from_cpu(x)
    predictor.run()
    return [predictor.get_output_handle(name).copy_to_cpu() for name in predictor.get_output_names()]


@pytest.mark.parametrize("name", sorted(NETWORKS))
def test_a_network_saved_with_a_dynamic_batch_matches_paddle_inference(name, tmp_path):
    path = _save(name, tmp_path)
    program = eqsat.load(path)
    assert program.dynamic == {"x": (-1, *NETWORKS[name][1])}
    result = eqsat.optimize(program)
    assert not [
        op for op in result.program.live_ops() if op.name == "opaque" and "batch_norm" in op.attrs["op"]
    ]
    for batch in (2, 3):
        x = np.random.default_rng(batch).normal(size=(batch, *NETWORKS[name][1])).astype(np.float32)
        outputs = result.fn(x)
        assert len(outputs) == len(_predict(path, x))
        for got, want in zip(outputs, _predict(path, x), strict=True):
            np.testing.assert_allclose(np.asarray(got), want, rtol=1e-4, atol=1e-5 * np.abs(want).max())
