"""Whole Paddle networks as users save them (random weights, randomized batch-norm statistics, a batch
of ``None``), and Paddle Inference's predictor for a saved file: what tests/test_paddle_networks.py
checks eqsat against and bench/paddle_inference.py times it against."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import paddle
from paddle import inference

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


# the vision networks as deployed: ImageNet's 224x224 images, 1000 classes, full width (benchmarked only)
DEPLOYED: dict[str, tuple[Callable[[], object], Shapes]] = {
    "resnet18_224": (lambda: models.resnet18(), ((3, 224, 224),)),
    "mobilenet_v2_224": (lambda: models.mobilenet_v2(), ((3, 224, 224),)),
}
_ALL = {**NETWORKS, **DEPLOYED}


def input_names(shapes: Shapes) -> list[str]:
    return ["x"] if len(shapes) == 1 else [f"x{i}" for i in range(len(shapes))]


def save(name: str, root: Path) -> Path:
    """Build network ``name`` (seed 0), save it with ``paddle.jit.save`` and a batch of None; its .json."""
    make, shapes = _ALL[name]
    paddle.seed(0)
    rng = np.random.default_rng(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        layer = make()
        layer.eval()  # type: ignore[attr-defined]
        for key, buffer in layer.named_buffers():  # type: ignore[attr-defined]  # statistics away from 0, 1
            if key.endswith(("_mean", "_variance")):
                low = 0.5 if key.endswith("_variance") else -0.5
                buffer.set_value(rng.uniform(low, low + 1.0, buffer.shape).astype("float32"))
        names = input_names(shapes)
        spec = [paddle.static.InputSpec([None, *s], "float32", n) for n, s in zip(names, shapes, strict=True)]
        paddle.jit.save(paddle.jit.to_static(layer, input_spec=spec, full_graph=True), str(root / name))
    return root / f"{name}.json"


def inputs(name: str, batch: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(batch, *shape)).astype(np.float32) for shape in _ALL[name][1]]


def predictor(
    path: Path, onednn: bool = False, threads: int = 1
) -> Callable[[list[np.ndarray]], list[np.ndarray]]:
    """Paddle Inference on CPU for the saved file, oneDNN on or off, its math library on ``threads``
    threads (Paddle's default is 1): a function of the inputs to the outputs."""
    config = inference.Config(str(path), str(path.with_suffix(".pdiparams")))
    config.set_cpu_math_library_num_threads(threads)
    if onednn:
        config.enable_mkldnn()
    else:
        config.disable_mkldnn()
    config.disable_glog_info()
    run = inference.create_predictor(config)

    def predict(xs: list[np.ndarray]) -> list[np.ndarray]:
        for input_name, x in zip(run.get_input_names(), xs, strict=True):
            handle = run.get_input_handle(input_name)
            handle.reshape(x.shape)
            handle.copy_from_cpu(x)
        run.run()
        return [run.get_output_handle(n).copy_to_cpu() for n in run.get_output_names()]

    return predict
