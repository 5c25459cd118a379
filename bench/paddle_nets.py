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

import eqsat
from eqsat.ir import Program

models = paddle.vision.models
nn = paddle.nn

# PP-LCNet's depthwise-separable stages (PaddleClas): kernel, channels in, channels out, stride,
# squeeze-excitation, each channel count times the network's scale
_LCNET = (
    (3, 16, 32, 1, False),
    (3, 32, 64, 2, False),
    (3, 64, 64, 1, False),
    (3, 64, 128, 2, False),
    (3, 128, 128, 1, False),
    (3, 128, 256, 2, False),
    *((5, 256, 256, 1, False),) * 5,
    (5, 256, 512, 2, True),
    (5, 512, 512, 1, True),
)


def _conv_bn(
    c_in: int,
    c_out: int,
    k: int,
    stride: int = 1,
    groups: int = 1,
    act: Callable[[], nn.Layer] | None = nn.Hardswish,
) -> nn.Layer:
    """A conv without bias, batch norm and an activation (hardswish, PP-LCNet's; ``None``: none)."""
    conv = nn.Conv2D(c_in, c_out, k, stride, (k - 1) // 2, groups=groups, bias_attr=False)
    return nn.Sequential(conv, nn.BatchNorm2D(c_out), *([act()] if act else []))


class _SqueezeExcite(nn.Layer):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.reduce, self.expand = (
            nn.Conv2D(channels, channels // 4, 1),
            nn.Conv2D(channels // 4, channels, 1),
        )

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        gate = self.expand(nn.functional.relu(self.reduce(nn.functional.adaptive_avg_pool2d(x, 1))))
        return x * nn.functional.hardsigmoid(gate)


def pp_lcnet(scale: float = 1.0, classes: int = 1000) -> nn.Layer:
    """PP-LCNet (PaddleClas' CPU network): a strided stem, depthwise-separable blocks (3x3 then 5x5
    depthwise convs, squeeze-excitation in the last two), hardswish, a 1280-wide 1x1 head."""

    def width(c: int) -> int:
        return max(8, int(c * scale + 4) // 8 * 8)

    layers = [_conv_bn(3, width(16), 3, 2)]
    for k, c_in, c_out, stride, se in _LCNET:
        layers.append(_conv_bn(width(c_in), width(c_in), k, stride, groups=width(c_in)))
        layers += [_SqueezeExcite(width(c_in))] if se else []
        layers.append(_conv_bn(width(c_in), width(c_out), 1))
    head = nn.Sequential(
        nn.AdaptiveAvgPool2D(1), nn.Conv2D(width(512), 1280, 1), nn.Hardswish(), nn.Flatten()
    )
    return nn.Sequential(*layers, head, nn.Linear(1280, classes))


class _VdBottleneck(nn.Layer):
    """ResNet-vd's bottleneck: 1x1, 3x3 (strided), 1x1 to four times the width; a shortcut that
    changes the shape average-pools 2x2 (when strided) before its 1x1 conv, instead of striding it."""

    def __init__(self, c_in: int, width: int, stride: int) -> None:
        super().__init__()
        c_out = 4 * width
        self.body = nn.Sequential(
            _conv_bn(c_in, width, 1, act=nn.ReLU),
            _conv_bn(width, width, 3, stride, act=nn.ReLU),
            _conv_bn(width, c_out, 1, act=None),
        )
        self.shortcut = None
        if c_in != c_out or stride != 1:
            pool = [nn.AvgPool2D(2, 2, ceil_mode=True)] if stride != 1 else []
            self.shortcut = nn.Sequential(*pool, _conv_bn(c_in, c_out, 1, act=None))

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        short = x if self.shortcut is None else self.shortcut(x)
        return nn.functional.relu(self.body(x) + short)


def resnet50_vd(classes: int = 1000) -> nn.Layer:
    """ResNet50-vd (PaddleClas): a stem of three 3x3 convs, then bottleneck stages of 3, 4, 6 and 3
    blocks whose shortcuts average-pool before their 1x1 conv."""
    stem = [_conv_bn(3, 32, 3, 2, act=nn.ReLU), _conv_bn(32, 32, 3, act=nn.ReLU)]
    layers = [*stem, _conv_bn(32, 64, 3, act=nn.ReLU), nn.MaxPool2D(3, 2, 1)]
    c_in = 64
    for stage, (blocks, width) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512), strict=True)):
        for i in range(blocks):
            layers.append(_VdBottleneck(c_in, width, 2 if stage and not i else 1))
            c_in = 4 * width
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2D(1), nn.Flatten(), nn.Linear(c_in, classes))


class _EffectiveSqueezeExcite(nn.Layer):
    """PP-HGNet's squeeze-excitation: one 1x1 conv (with bias) of the pooled map, a sigmoid gate."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.gate = nn.Conv2D(channels, channels, 1)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return x * nn.functional.sigmoid(self.gate(nn.functional.adaptive_avg_pool2d(x, 1)))


class _HGBlock(nn.Layer):
    """PP-HGNet's block: a chain of 3x3 conv-bn-relus whose outputs, with the block's input, are
    concatenated along channels and aggregated by a 1x1 conv-bn-relu, then gated; ``residual``: plus
    the input."""

    def __init__(self, c_in: int, mid: int, c_out: int, layers: int, residual: bool) -> None:
        super().__init__()
        self.chain = nn.LayerList(
            [_conv_bn(c_in if i == 0 else mid, mid, 3, act=nn.ReLU) for i in range(layers)]
        )
        self.aggregate = _conv_bn(c_in + layers * mid, c_out, 1, act=nn.ReLU)
        self.gate = _EffectiveSqueezeExcite(c_out)
        self.residual = residual

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        features = [x]
        for layer in self.chain:
            features.append(layer(features[-1]))
        y = self.gate(self.aggregate(paddle.concat(features, axis=1)))
        return y + x if self.residual else y


# PP-HGNet-tiny's stages (PaddleClas): channels in, mid, out, blocks, whether it downsamples first
_HGNET_TINY = (
    (96, 96, 224, 1, False),
    (224, 128, 448, 1, True),
    (448, 160, 512, 2, True),
    (512, 192, 768, 1, True),
)


def pp_hgnet_tiny(classes: int = 1000) -> nn.Layer:
    """PP-HGNet-tiny (PaddleClas' GPU-oriented CNN): a stem of three 3x3 convs and a max pool, four
    stages of HG blocks (five 3x3 convs each) the last three opened by a strided depthwise conv-bn,
    then a pooled 2048-wide 1x1 conv (no bias), relu, and the classifier."""
    layers = [
        _conv_bn(3, 48, 3, 2, act=nn.ReLU),
        _conv_bn(48, 48, 3, act=nn.ReLU),
        _conv_bn(48, 96, 3, act=nn.ReLU),
        nn.MaxPool2D(3, 2, 1),
    ]
    for c_in, mid, c_out, blocks, downsample in _HGNET_TINY:
        layers += [_conv_bn(c_in, c_in, 3, 2, groups=c_in, act=None)] if downsample else []
        layers += [_HGBlock(c_in if i == 0 else c_out, mid, c_out, 5, residual=i > 0) for i in range(blocks)]
    head = [nn.AdaptiveAvgPool2D(1), nn.Conv2D(768, 2048, 1, bias_attr=False), nn.ReLU(), nn.Flatten()]
    return nn.Sequential(*layers, *head, nn.Linear(2048, classes))


Shapes = tuple[tuple[int, ...], ...]
# name -> (the network, the shapes of its inputs without the batch)
NETWORKS: dict[str, tuple[Callable[[], object], Shapes]] = {
    "resnet18": (lambda: models.resnet18(num_classes=10), ((3, 32, 32),)),
    "mobilenet_v2": (lambda: models.mobilenet_v2(scale=0.25, num_classes=10), ((3, 32, 32),)),
    "mobilenet_v3_small": (lambda: models.mobilenet_v3_small(scale=0.5, num_classes=10), ((3, 32, 32),)),
    "squeezenet1_0": (lambda: models.squeezenet1_0(num_classes=10), ((3, 64, 64),)),
    "shufflenet_v2_x0_25": (lambda: models.shufflenet_v2_x0_25(num_classes=10), ((3, 32, 32),)),
    "pp_lcnet_x0_5": (lambda: pp_lcnet(0.5, classes=10), ((3, 32, 32),)),
    "resnet50_vd": (lambda: resnet50_vd(classes=10), ((3, 32, 32),)),
    "pp_hgnet_tiny": (lambda: pp_hgnet_tiny(classes=10), ((3, 32, 32),)),
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
    "pp_lcnet_224": (lambda: pp_lcnet(1.0), ((3, 224, 224),)),
    "resnet50_224": (lambda: models.resnet50(), ((3, 224, 224),)),
    "resnet50_vd_224": (lambda: resnet50_vd(), ((3, 224, 224),)),
    "mobilenet_v3_large_224": (lambda: models.mobilenet_v3_large(), ((3, 224, 224),)),
    "pp_hgnet_tiny_224": (lambda: pp_hgnet_tiny(), ((3, 224, 224),)),
    "squeezenet1_0_224": (lambda: models.squeezenet1_0(), ((3, 224, 224),)),
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
        for key, buffer in layer.named_buffers():  # type: ignore[attr-defined]  # statistics away from 0, 1
            if key.endswith(("_mean", "_variance")):
                low = 0.5 if key.endswith("_variance") else -0.5
                buffer.set_value(rng.uniform(low, low + 1.0, buffer.shape).astype("float32"))
    return save_layer(layer, shapes, root / name)


def save_layer(layer: object, shapes: Shapes, path: Path) -> Path:
    """Save ``layer`` for inference (``eval()``, ``paddle.jit.save``) with inputs of ``shapes`` after a
    batch of None, at ``path``; its .json."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        layer.eval()  # type: ignore[attr-defined]
        names = input_names(shapes)
        spec = [paddle.static.InputSpec([None, *s], "float32", n) for n, s in zip(names, shapes, strict=True)]
        paddle.jit.save(paddle.jit.to_static(layer, input_spec=spec, full_graph=True), str(path))
    return path.with_suffix(".json")


def loaded(name: str, path: Path, batch: int) -> Program:
    """Network ``name`` as ``save`` wrote it at ``path``, loaded by eqsat with its batch of None bound
    to ``batch``."""
    program = eqsat.load(path)
    assert program.specialize is not None  # saved with a batch of None
    shapes = _ALL[name][1]
    return program.specialize({n: (batch, *s) for n, s in zip(program.dynamic, shapes, strict=True)})


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
