"""Convolutional networks in plain JAX (NCHW and NHWC) and flax (NHWC): ResNet-18 and ResNet-50 at 32,
64 and 224 input (224 at batch 1 and, ``_b8``, 8), MobileNetV2 and a MobileNetV3-small-style network
(depthwise-separable), inference with batch norm on running statistics, weights closed over as a
deployed model's are. eqsat.jit against jax.jit, interleaved in one process, and jax.jit against itself
(the noise).

Each network is optimized until an optimization times no new kernel (the first times those of its
alternatives this device has not timed, later ones, as later processes would, the rest), then timed.

    python -m bench.cnn                    # -> bench/cnn.json
    python -m bench.cnn --only resnet18_32_nchw mobilenet_v2_224_nhwc
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import eqsat
from bench.common import against_jax, interleaved, max_abs_diff, run_cases, settled_jit
from eqsat.common_convs import INVERTED_RESIDUALS

Array = jax.Array


class Net:
    """A network in plain JAX: random weights made as layers are called, in ``layout``."""

    def __init__(self, layout: str, seed: int = 0) -> None:
        self.layout, self.rng = layout, np.random.default_rng(seed)
        self.axis = 1 if layout == "NCHW" else 3

    def conv(self, x: Array, out: int, k: int, stride: int = 1, groups: int = 1) -> Array:
        channels = x.shape[self.axis]
        shape = (out, channels // groups, k, k) if self.layout == "NCHW" else (k, k, channels // groups, out)
        w = self.rng.normal(size=shape).astype(np.float32) * np.sqrt(2.0 / (k * k * channels // groups))
        numbers = ("NCHW", "OIHW", "NCHW") if self.layout == "NCHW" else ("NHWC", "HWIO", "NHWC")
        pad = [(k // 2, k // 2)] * 2
        return lax.conv_general_dilated(
            x, jnp.asarray(w), (stride, stride), pad, dimension_numbers=numbers, feature_group_count=groups
        )

    def bn(self, x: Array) -> Array:
        """Batch norm at inference, written out as flax's BatchNorm computes it: the statistics are
        vectors, broadcast along the channel axis."""
        c = x.shape[self.axis]
        shape = [1, 1, 1, 1]
        shape[self.axis] = c
        mean, var = self.rng.uniform(-0.5, 0.5, c), self.rng.uniform(0.5, 1.5, c)
        scale, bias = self.rng.uniform(0.5, 1.5, c), self.rng.uniform(-0.5, 0.5, c)
        mean_, var_, scale_, bias_ = (jnp.asarray(v.astype(np.float32)) for v in (mean, var, scale, bias))
        factor = lax.rsqrt(var_ + 1e-5) * scale_
        return (x - mean_.reshape(shape)) * factor.reshape(shape) + bias_.reshape(shape)

    def conv_bn(self, x: Array, out: int, k: int, stride: int = 1, groups: int = 1) -> Array:
        return self.bn(self.conv(x, out, k, stride, groups))

    def pool_dense(self, x: Array, classes: int = 1000) -> Array:
        x = jnp.mean(x, axis=(2, 3) if self.layout == "NCHW" else (1, 2))
        w = self.rng.normal(size=(x.shape[1], classes)).astype(np.float32) / np.sqrt(x.shape[1])
        return x @ jnp.asarray(w)

    def max_pool(self, x: Array) -> Array:
        window = (1, 1, 3, 3) if self.layout == "NCHW" else (1, 3, 3, 1)
        strides = (1, 1, 2, 2) if self.layout == "NCHW" else (1, 2, 2, 1)
        pads = [(0, 0), (0, 0), (1, 1), (1, 1)] if self.layout == "NCHW" else [(0, 0), (1, 1), (1, 1), (0, 0)]
        return lax.reduce_window(x, -jnp.inf, lax.max, window, strides, pads)


def resnet(net: Net, x: Array, depth: int) -> Array:
    """ResNet-18 (basic blocks) or ResNet-50 (bottlenecks), as torchvision builds them."""
    blocks = {18: (2, 2, 2, 2), 50: (3, 4, 6, 3)}[depth]
    x = net.max_pool(jax.nn.relu(net.conv_bn(x, 64, 7, 2)))
    for stage, (width, count) in enumerate(zip((64, 128, 256, 512), blocks, strict=True)):
        for i in range(count):
            stride = 2 if stage and not i else 1
            out = width * (4 if depth == 50 else 1)
            if depth == 50:
                y = jax.nn.relu(net.conv_bn(x, width, 1))
                y = jax.nn.relu(net.conv_bn(y, width, 3, stride))
                y = net.conv_bn(y, out, 1)
            else:
                y = net.conv_bn(jax.nn.relu(net.conv_bn(x, width, 3, stride)), width, 3)
            shortcut = net.conv_bn(x, out, 1, stride) if stride > 1 or x.shape[net.axis] != out else x
            x = jax.nn.relu(y + shortcut)
    return net.pool_dense(x)


def mobilenet_v2(net: Net, x: Array) -> Array:
    """MobileNetV2: inverted residuals (expand 1x1, depthwise 3x3, project 1x1), relu6."""
    x = jax.nn.relu6(net.conv_bn(x, 32, 3, 2))
    for expand, out, count, first_stride in INVERTED_RESIDUALS:
        for i in range(count):
            stride = first_stride if i == 0 else 1
            channels = x.shape[net.axis]
            y = jax.nn.relu6(net.conv_bn(x, channels * expand, 1)) if expand > 1 else x
            y = jax.nn.relu6(net.conv_bn(y, y.shape[net.axis], 3, stride, groups=y.shape[net.axis]))
            y = net.conv_bn(y, out, 1)
            x = x + y if stride == 1 and channels == out else y
    return net.pool_dense(jax.nn.relu6(net.conv_bn(x, 1280, 1)))


# kernel, expansion, out, squeeze-excite, hardswish, stride: MobileNetV3-small's blocks
_V3 = (
    (3, 16, 16, True, False, 2),
    (3, 72, 24, False, False, 2),
    (3, 88, 24, False, False, 1),
    (5, 96, 40, True, True, 2),
    (5, 240, 40, True, True, 1),
    (5, 240, 40, True, True, 1),
    (5, 120, 48, True, True, 1),
    (5, 144, 48, True, True, 1),
    (5, 288, 96, True, True, 2),
    (5, 576, 96, True, True, 1),
    (5, 576, 96, True, True, 1),
)


def mobilenet_v3_small(net: Net, x: Array) -> Array:
    """A MobileNetV3-small-style network: depthwise 3x3 and 5x5, squeeze-excite, hardswish."""
    x = jax.nn.hard_swish(net.conv_bn(x, 16, 3, 2))
    spatial = (2, 3) if net.layout == "NCHW" else (1, 2)
    for k, expand, out, se, hardswish, stride in _V3:
        act = jax.nn.hard_swish if hardswish else jax.nn.relu
        y = act(net.conv_bn(x, expand, 1)) if expand != x.shape[net.axis] else x
        y = act(net.conv_bn(y, expand, k, stride, groups=expand))
        if se:
            s = jnp.mean(y, axis=spatial, keepdims=True)
            s = jax.nn.hard_sigmoid(net.conv(jax.nn.relu(net.conv(s, expand // 4, 1)), expand, 1))
            y = y * s
        y = net.conv_bn(y, out, 1)
        x = x + y if stride == 1 and x.shape[net.axis] == out else y
    return net.pool_dense(jax.nn.hard_swish(net.conv_bn(x, 576, 1)))


class FlaxBlock(nn.Module):
    """ResNet-18's basic block in flax."""

    features: int
    stride: int

    @nn.compact
    def __call__(self, x: Array) -> Array:
        bn = lambda: nn.BatchNorm(use_running_average=True)  # noqa: E731
        y = nn.relu(bn()(nn.Conv(self.features, (3, 3), self.stride, use_bias=False)(x)))
        y = bn()(nn.Conv(self.features, (3, 3), use_bias=False)(y))
        if self.stride > 1 or x.shape[-1] != self.features:
            x = bn()(nn.Conv(self.features, (1, 1), self.stride, use_bias=False)(x))
        return nn.relu(x + y)


class FlaxResNet18(nn.Module):
    @nn.compact
    def __call__(self, x: Array) -> Array:
        x = nn.relu(nn.BatchNorm(use_running_average=True)(nn.Conv(64, (7, 7), 2, use_bias=False)(x)))
        x = nn.max_pool(x, (3, 3), (2, 2), padding="SAME")
        for stage, width in enumerate((64, 128, 256, 512)):
            for i in range(2):
                x = FlaxBlock(width, 2 if stage and not i else 1)(x)
        return nn.Dense(1000)(jnp.mean(x, axis=(1, 2)))


def _plain(make: Callable[[Net, Array], Array], size: int, batch: int, layout: str) -> Any:
    shape = (batch, 3, size, size) if layout == "NCHW" else (batch, size, size, 3)
    x = jnp.asarray(np.random.default_rng(1).normal(size=shape), jnp.float32)
    return (lambda x: make(Net(layout), x)), (x,)  # the same weights (seed 0) at every trace


def _flax_resnet18(size: int, batch: int) -> Any:
    keys = iter(jax.random.split(jax.random.key(0), 64))
    x = jax.random.normal(next(keys), (batch, size, size, 3))
    model = FlaxResNet18()
    variables = model.init(next(keys), x)
    stats = jax.tree_util.tree_map_with_path(  # means about 0, variances about 1: activations stay alive
        lambda path, v: jax.random.uniform(next(keys), v.shape) + (0.5 if path[-1].key == "var" else -0.5),
        variables["batch_stats"],
    )
    variables = {**variables, "batch_stats": stats}
    return (lambda x: model.apply(variables, x)), (x,)


def _cases() -> dict[str, Callable[[], Any]]:
    cases: dict[str, Callable[[], Any]] = {}
    for size, batch in ((32, 8), (64, 8), (224, 1), (224, 8)):
        for depth in (18, 50):
            for layout in ("NCHW", "NHWC"):
                batched = f"_b{batch}" if size == 224 and batch > 1 else ""
                cases[f"resnet{depth}_{size}{batched}_{layout.lower()}"] = (
                    lambda d=depth, s=size, b=batch, lay=layout: _plain(
                        lambda n, x: resnet(n, x, d), s, b, lay
                    )
                )
    for name, make in (("mobilenet_v2", mobilenet_v2), ("mobilenet_v3_small", mobilenet_v3_small)):
        for layout in ("NCHW", "NHWC"):
            cases[f"{name}_224_{layout.lower()}"] = lambda m=make, lay=layout: _plain(m, 224, 1, lay)
    cases["flax_resnet18_64"] = lambda: _flax_resnet18(64, 8)
    return cases


CASES = _cases()


def measure(name: str, repeats: int) -> dict[str, Any]:
    fn, args = CASES[name]()
    plain, again = jax.jit(fn), jax.jit(fn)
    first, result, timed, optimized = settled_jit(lambda: eqsat.jit(fn), args)
    diff = max_abs_diff(optimized(*args), plain(*args))
    scale = max_abs_diff(plain(*args), jax.tree_util.tree_map(jnp.zeros_like, plain(*args)))
    times = interleaved(
        {"eqsat": lambda: optimized(*args), "jax": lambda: plain(*args), "jax_again": lambda: again(*args)},
        repeats,
    )
    ops = result.program.live_ops()
    algorithms = Counter(
        f"{op.attrs['algorithm']} {op.attrs['layout']}" for op in ops if op.name.startswith("conv2d")
    )
    return {
        "model": name,
        **against_jax(times),
        "first_optimize_s": sum(first.report.timings.values()),
        "kernels_timed": timed,
        "optimize_s": sum(result.report.timings.values()),
        "conv_algorithms": dict(algorithms),
        "transposes": sum(op.name == "transpose" for op in ops),
        "max_rel_error": diff / (scale or 1.0),
        "compiler_options": dict(result.report.compiler_options),  # eqsat's choice; jax.jit's are XLA's own
    }


def _line(row: dict[str, Any]) -> str:
    speed = f"{row['speedup']:5.2f}x (noise {row['noise']:.2f}x)"
    timing = f"eqsat {row['eqsat_s'] * 1e3:8.2f} ms  jax {row['jax_s'] * 1e3:8.2f} ms"
    return f"{row['model']:26s} {speed}  {timing}  {row['conv_algorithms']}"


if __name__ == "__main__":
    sys.exit(run_cases("cnn", __doc__, list(CASES), measure, _line))
