"""The conv layers of common CNNs, one small program each, for ``eqsat calibrate --common``: timing
their formulations ahead of time means a later optimization of such a network reads the kernel table
instead of spending its first call's time limit on it.

The layers follow from the architectures' definitions (ResNet-18's basic blocks, ResNet-50's
bottlenecks, MobileNetV2's inverted residuals) at a given input size and batch, not from a list of
shapes: change the size and every layer follows.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

import numpy as np

from eqsat.frontend.builder import Builder
from eqsat.ir import Program

STAGES = (64, 128, 256, 512)  # the ResNets' stage widths, at 1/4, 1/8, 1/16, 1/32 of the input
# MobileNetV2's inverted residual stages: expansion, output channels, blocks, first block's stride
INVERTED_RESIDUALS = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


class ConvLayer(NamedTuple):
    """A conv's channels, square kernel, stride and groups, at an input of ``size`` x ``size``."""

    channels_in: int
    channels_out: int
    kernel: int
    stride: int
    size: int
    groups: int = 1

    @property
    def name(self) -> str:
        """Like ``3x3 64->64 /1 at 56x56``, or ``3x3 depthwise 96->96 /2 at 112x112``."""
        kind = " depthwise" if self.groups > 1 else ""
        return (
            f"{self.kernel}x{self.kernel}{kind} {self.channels_in}->{self.channels_out} /{self.stride} "
            f"at {self.size}x{self.size}"
        )

    def window(self, layout: str) -> dict[str, Any]:
        """The conv's attributes, SAME padding, in ``layout``."""
        pad = (self.kernel - 1) // 2
        return {
            "strides": (self.stride,) * 2,
            "padding": (pad,) * 4,
            "dilations": (1, 1),
            "groups": self.groups,
            "layout": layout,
        }


def _resnet18(size: int) -> Iterator[ConvLayer]:
    yield ConvLayer(3, 64, 7, 2, size)
    width_in, at = 64, size // 4
    for width in STAGES:
        if width != width_in:  # the stage's first block halves the map: a strided 3x3 and a 1x1 shortcut
            yield ConvLayer(width_in, width, 3, 2, at)
            yield ConvLayer(width_in, width, 1, 2, at)
            at //= 2
        yield ConvLayer(width, width, 3, 1, at)
        width_in = width


def _resnet50(size: int) -> Iterator[ConvLayer]:
    yield ConvLayer(3, 64, 7, 2, size)
    width_in, at = 64, size // 4
    for width in STAGES:
        stride = 1 if width == STAGES[0] else 2
        yield ConvLayer(width_in, width, 1, 1, at)
        yield ConvLayer(width, width, 3, stride, at)
        yield ConvLayer(width_in, 4 * width, 1, stride, at)  # the shortcut
        at //= stride
        yield ConvLayer(width, 4 * width, 1, 1, at)
        yield ConvLayer(4 * width, width, 1, 1, at)
        yield ConvLayer(width, width, 3, 1, at)
        width_in = 4 * width


def _mobilenet_v2(size: int) -> Iterator[ConvLayer]:
    yield ConvLayer(3, 32, 3, 2, size)
    channels, at = 32, size // 2
    for expansion, out, blocks, first_stride in INVERTED_RESIDUALS:
        for block in range(blocks):
            stride = first_stride if block == 0 else 1
            hidden = channels * expansion
            if expansion != 1:
                yield ConvLayer(channels, hidden, 1, 1, at)
            yield ConvLayer(hidden, hidden, 3, stride, at, groups=hidden)
            at //= stride
            yield ConvLayer(hidden, out, 1, 1, at)
            channels = out
    yield ConvLayer(channels, 1280, 1, 1, at)


NETWORKS = {"resnet18": _resnet18, "resnet50": _resnet50, "mobilenet_v2": _mobilenet_v2}


def common_layers(size: int = 224) -> list[ConvLayer]:
    """Every distinct conv layer of the networks in ``NETWORKS`` at this input size (maps of at least
    1x1), in order of first appearance."""
    layers = (layer for network in NETWORKS.values() for layer in network(size) if layer.size >= 1)
    return list(dict.fromkeys(layers))


def layer_program(layer: ConvLayer, batch: int, layout: str) -> Program:
    """The layer as a network computes it, with SAME padding and its weights known (as a deployed
    model's are): alone, with its bias (before a residual add), and with its bias and relu."""
    rng = np.random.default_rng(0)
    ci, co, k, size = layer.channels_in, layer.channels_out, layer.kernel, layer.size
    kernel = (co, ci // layer.groups, k, k) if layout == "NCHW" else (k, k, ci // layer.groups, co)
    image = (batch, ci, size, size) if layout == "NCHW" else (batch, size, size, ci)
    b = Builder()
    x = b.input("x", image)
    w = b.param("w", kernel, data=rng.normal(size=kernel) / np.sqrt(k * k * ci / layer.groups))
    bias = b.param("bias", (co,), data=rng.normal(size=co))
    window = layer.window(layout)
    outputs = [b.conv2d(x, w, **window)]
    outputs += [b.conv2d_bias_act(x, w, bias, act=act, **window) for act in ("none", "relu")]
    return b.build(*outputs)


def common_programs(size: int = 224, batch: int = 1) -> Iterator[tuple[str, Program]]:
    """Each common layer, named like ``3x3 64->64 /1 at 56x56``, in NCHW: the ``conv-layout`` rule
    offers its NHWC form too, so both layouts' kernels are timed."""
    for layer in common_layers(size):
        yield layer.name, layer_program(layer, batch, "NCHW")
