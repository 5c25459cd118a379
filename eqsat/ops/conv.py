"""Convolution, pooling and batch norm over 2-D windows (NCHW data with OIHW kernels, or NHWC with
HWIO): shape rules, costs and lowerings."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import prod
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from eqsat.errors import ShapeError
from eqsat.shapes import EggRule, Shape, ShapeRule, vec
from eqsat.types import TensorType

from .base import ACT, AXIS, Attr, OpDef, contraction_kind, floats
from .elementwise import ACTIVATIONS

Array = jax.Array


# 2-D windows (conv2d, pool2d). ``layout`` NCHW: data (N, C, H, W), kernel (O, I, KH, KW); NHWC: data
# (N, H, W, C), kernel (KH, KW, I, O): the pairings of Paddle/PyTorch and of TensorFlow/flax.
class ConvAxes(NamedTuple):
    """Where a layout keeps each dim: of the data (channel, spatial) and of the kernel."""

    channel: int
    spatial: tuple[int, int]
    kernel_in: int
    kernel_out: int
    kernel_spatial: tuple[int, int]


CONV_AXES = {"NCHW": ConvAxes(1, (2, 3), 1, 0, (2, 3)), "NHWC": ConvAxes(3, (1, 2), 2, 3, (0, 1))}
LAYOUTS = tuple(CONV_AXES)


def window_out(size: int, k: int, lo: int, hi: int, stride: int, dilation: int = 1) -> int:
    """The output length of a window of ``k`` (dilated) sliding over ``size`` padded by lo, hi."""
    span = dilation * (k - 1) + 1
    if stride < 1 or dilation < 1 or min(lo, hi) < 0 or size + lo + hi < span:
        raise ShapeError(f"a window of {k} (dilation {dilation}) does not fit {size} padded by {lo}, {hi}")
    return (size + lo + hi - span) // stride + 1


def _egg_window_dims(pattern: dict[str, str], layout: str, kernel: Sequence[str], dilation: str) -> list[str]:
    """egglog expressions of the output dims of a 2-D window over ``pattern``'s data ``s0`` in
    ``layout``: ``kernel`` the window's sizes, ``dilation`` an IVec (or "" for none); channels kept."""
    x, p, st = pattern["s0"], pattern["padding"], pattern["strides"]
    dims = [f"(vec-get {x} {i})" for i in range(4)]
    for i, axis in enumerate(CONV_AXES[layout].spatial):
        lo, hi, stride = f"(vec-get {p} {2 * i})", f"(vec-get {p} {2 * i + 1})", f"(vec-get {st} {i})"
        span = f"(+ (* (vec-get {dilation} {i}) (- {kernel[i]} 1)) 1)" if dilation else kernel[i]
        dims[axis] = f"(+ (/ (- (+ (vec-get {x} {axis}) (+ {lo} {hi})) {span}) {stride}) 1)"
    return dims


def _window_attrs(attrs: dict) -> None:
    if len(attrs["strides"]) != 2 or len(attrs["padding"]) != 4:
        raise ShapeError(
            f"2-D window needs 2 strides and 4 paddings, got {attrs['strides']}, {attrs['padding']}"
        )


@dataclass(frozen=True)
class Conv2d(ShapeRule):
    """2-D convolution: output channels from the kernel, each spatial dim by ``window_out``."""

    def infer(self, shapes: Sequence[Shape], attrs: dict) -> Shape:
        x, w = shapes
        layout, groups = attrs["layout"], attrs["groups"]
        _window_attrs(attrs)
        if len(x) != 4 or len(w) != 4 or len(attrs["dilations"]) != 2:
            raise ShapeError(f"conv2d needs rank-4 data and kernel and 2 dilations, got {x} and {w}")
        axes = CONV_AXES[layout]
        ki, ko = w[axes.kernel_in], w[axes.kernel_out]
        channels = x[axes.channel]
        if groups < 1 or channels != ki * groups or ko % groups:
            raise ShapeError(f"conv2d of {channels} channels, kernel {w} ({layout}) and {groups} groups")
        out = list(x)
        out[axes.channel] = ko
        for i, (axis, kaxis) in enumerate(zip(axes.spatial, axes.kernel_spatial, strict=True)):
            lo, hi = attrs["padding"][2 * i : 2 * i + 2]
            out[axis] = window_out(x[axis], w[kaxis], lo, hi, attrs["strides"][i], attrs["dilations"][i])
        return tuple(out)

    def egglog(self, pattern: dict[str, str]) -> list[EggRule]:
        w = pattern["s1"]
        rules = []
        for layout in LAYOUTS:
            axes = CONV_AXES[layout]
            kernel = [f"(vec-get {w} {k})" for k in axes.kernel_spatial]
            dims = _egg_window_dims(pattern, layout, kernel, pattern["dilations"])
            dims[axes.channel] = f"(vec-get {w} {axes.kernel_out})"
            rules.append((f'(= {pattern["layout"]} "{layout}")', vec(dims)))
        return rules


@dataclass(frozen=True)
class Pool2d(ShapeRule):
    """2-D pooling over a ``window`` attribute: channels kept, each spatial dim by ``window_out``."""

    def infer(self, shapes: Sequence[Shape], attrs: dict) -> Shape:
        (x,) = shapes
        _window_attrs(attrs)
        if len(x) != 4 or len(attrs["window"]) != 2:
            raise ShapeError(f"pool2d needs rank-4 data and a 2-D window, got {x} and {attrs['window']}")
        out = list(x)
        for i, axis in enumerate(CONV_AXES[attrs["layout"]].spatial):
            lo, hi = attrs["padding"][2 * i : 2 * i + 2]
            out[axis] = window_out(x[axis], attrs["window"][i], lo, hi, attrs["strides"][i])
        return tuple(out)

    def egglog(self, pattern: dict[str, str]) -> list[EggRule]:
        kernel = [f"(vec-get {pattern['window']} {i})" for i in range(2)]
        return [
            (f'(= {pattern["layout"]} "{layout}")', vec(_egg_window_dims(pattern, layout, kernel, "")))
            for layout in LAYOUTS
        ]


@dataclass(frozen=True)
class Conv2dBias(Conv2d):
    """A conv2d and a bias of its output channels."""

    def infer(self, shapes: Sequence[Shape], attrs: dict) -> Shape:
        out = super().infer(shapes[:2], attrs)
        channels = out[CONV_AXES[attrs["layout"]].channel]
        if tuple(shapes[2]) != (channels,):
            raise ShapeError(f"conv2d bias {shapes[2]} must be ({channels},)")
        return out


_CONV_DIMENSIONS = {"NCHW": ("NCHW", "OIHW", "NCHW"), "NHWC": ("NHWC", "HWIO", "NHWC")}


def _pairs(padding: tuple[int, ...]) -> list[tuple[int, int]]:
    return [(padding[0], padding[1]), (padding[2], padding[3])]


def depthwise(types: Sequence[TensorType], attrs: dict) -> bool:
    """A conv of one kernel per channel (groups = channels = output channels)."""
    axes = CONV_AXES[attrs["layout"]]
    x, w = types[0].shape, types[1].shape
    return attrs["groups"] == x[axes.channel] == w[axes.kernel_out] and w[axes.kernel_in] == 1


def _shifted(
    x: Array,
    w: Array,
    strides: tuple[int, ...],
    padding: tuple[int, ...],
    dilations: tuple[int, ...],
    layout: str,
) -> Array:
    """A depthwise conv as a sum over the kernel's taps of the data shifted to each tap (a strided
    slice of the padded data) times that tap's weight per channel: elementwise work XLA fuses into one
    loop (XLA:CPU runs lax.conv's depthwise kernel 50-100x slower)."""
    axes = CONV_AXES[layout]
    pads = [(0, 0)] * 4
    for i, axis in enumerate(axes.spatial):
        pads[axis] = (padding[2 * i], padding[2 * i + 1])
    padded = jnp.pad(x, pads)
    kh, kw = (w.shape[k] for k in axes.kernel_spatial)
    out_hw = [
        window_out(x.shape[axis], w.shape[k], *pads[axis], strides[i], dilations[i])
        for i, (axis, k) in enumerate(zip(axes.spatial, axes.kernel_spatial, strict=True))
    ]
    channels = w.reshape(-1, w.shape[axes.kernel_out]) if layout == "NHWC" else w.reshape(w.shape[0], -1).T
    total = None
    for tap in range(kh * kw):
        i, j = divmod(tap, kw)
        start, limit, step = [0] * 4, list(padded.shape), [1] * 4
        for d, (axis, offset) in enumerate(zip(axes.spatial, (i, j), strict=True)):
            start[axis] = offset * dilations[d]
            limit[axis] = start[axis] + (out_hw[d] - 1) * strides[d] + 1
            step[axis] = strides[d]
        weight = channels[tap].reshape((1, -1, 1, 1) if layout == "NCHW" else (1, 1, 1, -1))
        term = lax.slice(padded, start, limit, step) * weight
        total = term if total is None else total + term
    assert total is not None
    return total


def _conv2d(
    x: Array,
    w: Array,
    *,
    strides: tuple[int, ...],
    padding: tuple[int, ...],
    dilations: tuple[int, ...],
    groups: int,
    layout: str,
    algorithm: str = "direct",
) -> Array:
    if algorithm == "shifted":
        return _shifted(x, w, strides, padding, dilations, layout)
    return lax.conv_general_dilated(
        x,
        w,
        window_strides=strides,
        padding=_pairs(padding),
        rhs_dilation=dilations,
        dimension_numbers=_CONV_DIMENSIONS[layout],
        feature_group_count=groups,
    )


def _conv2d_bias_act(x: Array, w: Array, b: Array, *, act: str, layout: str, **window: Any) -> Array:
    shape = (1, -1, 1, 1) if layout == "NCHW" else (-1,)
    return ACTIVATIONS[act](_conv2d(x, w, layout=layout, **window) + b.reshape(shape))


def _window(layout: str, hw: tuple[int, ...], fill: int) -> tuple[int, ...]:
    return (fill, fill, *hw) if layout == "NCHW" else (fill, *hw, fill)


def _pool2d(
    x: Array,
    *,
    kind: str,
    window: tuple[int, ...],
    strides: tuple[int, ...],
    padding: tuple[int, ...],
    layout: str,
) -> Array:
    dims, steps = _window(layout, window, 1), _window(layout, strides, 1)
    pads = [(0, 0), (0, 0), *_pairs(padding)] if layout == "NCHW" else [(0, 0), *_pairs(padding), (0, 0)]
    if kind == "max":
        return lax.reduce_window(x, np.asarray(-np.inf, x.dtype), lax.max, dims, steps, pads)
    total = lax.reduce_window(x, np.asarray(0, x.dtype), lax.add, dims, steps, pads)
    if kind == "sum":
        return total
    if kind == "avg":
        return total / np.asarray(window[0] * window[1], x.dtype)
    ones = jnp.ones(x.shape, x.dtype)
    return total / lax.reduce_window(ones, np.asarray(0, x.dtype), lax.add, dims, steps, pads)


def _batch_norm(
    x: Array, scale: Array, bias: Array, mean: Array, var: Array, *, epsilon: float, axis: int
) -> Array:
    shape = [1] * x.ndim
    shape[axis] = x.shape[axis]
    scale, bias, mean, var = (v.reshape(shape) for v in (scale, bias, mean, var))
    return (x - mean) * lax.rsqrt(var + np.asarray(epsilon, x.dtype)) * scale + bias


def _conv_flops(ins: Sequence[TensorType], out: TensorType, attrs: dict) -> float:
    """Two flops per multiply-add: each output element sums (input channels / groups) x KH x KW."""
    return 2.0 * out.size * prod(ins[1].shape) / max(ins[1].shape[CONV_AXES[attrs["layout"]].kernel_out], 1)


POOL_KINDS = ("max", "sum", "avg", "avg_exclusive")


def _pool_flops(ins: Sequence[TensorType], out: TensorType, attrs: dict) -> float:
    return float(out.size * prod(attrs["window"]))


def _per_channel(types: Sequence[TensorType], attrs: dict) -> str | None:
    problem = floats(types, attrs)
    channels = types[0].shape[attrs["axis"]]
    bad = [t.shape for t in types[1:] if t.shape != (channels,)]
    return problem or (f"per-channel operands must be ({channels},), got {bad[0]}" if bad else None)


_WINDOW = (
    Attr("strides", "ints", (1, 1)),
    Attr("padding", "ints", (0, 0, 0, 0)),  # (top, bottom, left, right)
)
_LAYOUT = Attr("layout", "str", "NCHW", LAYOUTS)
# How a conv is computed (each lowered its own way, equated by a checked rule; the cost model picks):
# XLA's conv kernel, or (depthwise only) the shifted multiply-adds of ``_shifted``
ALGORITHMS = ("direct", "shifted")
_CONV_ATTRS = (
    *_WINDOW,
    Attr("dilations", "ints", (1, 1)),
    Attr("groups", "int", 1),
    _LAYOUT,
    Attr("algorithm", "str", "direct", ALGORITHMS),
)


def _conv_operands(types: Sequence[TensorType], attrs: dict) -> str | None:
    if attrs["algorithm"] == "shifted" and not depthwise(types, attrs):
        return "the shifted algorithm computes depthwise convs only (one kernel per channel)"
    return floats(types, attrs)


def _conv_kind(types: Sequence[TensorType], attrs: dict) -> str:
    """The kernel a conv runs as: XLA's conv (``conv:<layout>:<dtype>``, ``conv:depthwise:...`` for a
    depthwise one, whose rate a device profile may give apart), or for the shifted algorithm a loop
    of multiply-adds (no kind: the device's elementwise rate)."""
    if attrs["algorithm"] == "shifted":
        return ""
    op = "conv:depthwise" if depthwise(types, attrs) else "conv"
    return contraction_kind(op, types[0].dtype, attrs["layout"])


CONV = [
    OpDef(
        "conv2d",
        2,
        "2-D convolution (cross-correlation) of x by kernel w: NCHW data with an OIHW kernel, or NHWC "
        "with HWIO; strides, padding (top, bottom, left, right), dilations of the kernel, groups "
        "(groups = channels: depthwise); algorithm: XLA's conv (direct), or for a depthwise conv a sum "
        "of the data shifted to each tap times its weights (shifted)",
        _CONV_ATTRS,
        Conv2d(),
        flops=_conv_flops,
        same_dtype=(0, 1),
        contraction="conv",
        kernel_kind=_conv_kind,
        check=_conv_operands,
        lower=_conv2d,
    ),
    OpDef(
        "conv2d_bias_act",
        3,
        "conv2d of x by w, + a bias b of the output channels, then the epilogue act (none, relu, gelu): "
        "one kernel (Paddle's fused_conv2d_add_act, cuDNN's conv-bias-activation)",
        (*_CONV_ATTRS, ACT),
        Conv2dBias(),
        flops=_conv_flops,
        same_dtype=(0, 1, 2),
        contraction="conv",
        kernel_kind=_conv_kind,
        check=_conv_operands,
        lower=_conv2d_bias_act,
    ),
    OpDef(
        "pool2d",
        1,
        "2-D pooling over window: max, sum, avg (divided by the window's size, padding included) or "
        "avg_exclusive (by the count of elements inside the input); padding adds -inf for max, 0 else",
        (Attr("kind", "str", choices=POOL_KINDS), Attr("window", "ints"), *_WINDOW, _LAYOUT),
        Pool2d(),
        flops=_pool_flops,
        check=floats,
        lower=_pool2d,
    ),
    OpDef(
        "batch_norm",
        5,
        "inference batch norm: (x - mean) * rsqrt(var + epsilon) * scale + bias, the per-channel vectors "
        "(scale, bias, mean, var) along axis",
        (Attr("epsilon", "float"), AXIS),
        flops=lambda i, o, a: 4.0 * o.size,
        same_dtype=(0, 1, 2, 3, 4),
        axis_attr="axis",
        check=_per_channel,
        fusion="loop",
        lower=_batch_norm,
    ),
]
