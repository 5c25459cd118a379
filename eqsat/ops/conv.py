"""Convolution, pooling and batch norm over 2-D windows (NCHW data with OIHW kernels, or NHWC with
HWIO): shape rules, costs and lowerings."""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from math import prod
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from eqsat.egglog_text import app, equal, literal, vec
from eqsat.errors import ShapeError
from eqsat.shapes import EggRule, Shape, ShapeRule
from eqsat.types import TensorType

from . import winograd
from .base import ACT, AXIS, Attr, Kernel, OpDef, contraction_kind, floats, io_bytes, product_kind, spelled
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
    dims = [app("vec-get", x, i) for i in range(4)]
    for i, axis in enumerate(CONV_AXES[layout].spatial):
        lo, hi, stride = app("vec-get", p, 2 * i), app("vec-get", p, 2 * i + 1), app("vec-get", st, i)
        dilated = app("*", app("vec-get", dilation, i), app("-", kernel[i], 1))
        span = app("+", dilated, 1) if dilation else kernel[i]
        padded = app("+", app("vec-get", x, axis), app("+", lo, hi))
        dims[axis] = app("+", app("/", app("-", padded, span), stride), 1)
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
        rules: list[EggRule] = []
        for layout in LAYOUTS:
            axes = CONV_AXES[layout]
            kernel = [app("vec-get", w, k) for k in axes.kernel_spatial]
            dims = _egg_window_dims(pattern, layout, kernel, pattern["dilations"])
            dims[axes.channel] = app("vec-get", w, axes.kernel_out)
            rules.append((equal(pattern["layout"], literal(layout)), vec(dims)))
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
        kernel = [app("vec-get", pattern["window"], i) for i in range(2)]
        return [
            (equal(pattern["layout"], literal(layout)), vec(_egg_window_dims(pattern, layout, kernel, "")))
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


def touching(size: int, k: int, lo: int, stride: int, dilation: int, out: int) -> list[int]:
    """The offsets of a window of ``k`` along one dim (padded by ``lo`` before) that read data, not
    only padding, for some of the ``out`` outputs: at a 1x1 map, a 3x3 SAME kernel's centre alone."""
    return [i for i in range(k) if any(0 <= o * stride + i * dilation - lo < size for o in range(out))]


class Tap(NamedTuple):
    """One kernel offset that reads data: its (row, column) in the kernel and the strided slice of the
    padded data it reads for every output."""

    offset: tuple[int, int]
    start: tuple[int, ...]
    limit: tuple[int, ...]
    step: tuple[int, ...]


def taps(
    x: Sequence[int],
    w: Sequence[int],
    strides: Sequence[int],
    padding: Sequence[int],
    dilations: Sequence[int],
    layout: str,
) -> list[Tap]:
    """The taps of a conv of data shape ``x`` by kernel shape ``w`` that read data (``touching``),
    their slices in the data padded by ``padding`` (the other dims whole)."""
    axes = CONV_AXES[layout]
    reach: list[list[tuple[int, int, int]]] = []  # per spatial dim: (offset, start, limit) in padded data
    for d, (axis, kaxis) in enumerate(zip(axes.spatial, axes.kernel_spatial, strict=True)):
        lo, hi, k = padding[2 * d], padding[2 * d + 1], w[kaxis]
        out = window_out(x[axis], k, lo, hi, strides[d], dilations[d])
        offsets = touching(x[axis], k, lo, strides[d], dilations[d], out)
        reach.append([(i, i * dilations[d], i * dilations[d] + (out - 1) * strides[d] + 1) for i in offsets])
    result = []
    for (i, si, li), (j, sj, lj) in ((a, b) for a in reach[0] for b in reach[1]):
        start, limit, step = [0] * 4, list(x), [1] * 4
        for axis, s, lim, d in zip(axes.spatial, (si, sj), (li, lj), (0, 1), strict=True):
            start[axis], limit[axis], step[axis] = s, lim, strides[d]
        result.append(Tap((i, j), tuple(start), tuple(limit), tuple(step)))
    return result


class Window(NamedTuple):
    """How a conv's kernel slides over its data."""

    strides: tuple[int, ...]
    padding: tuple[int, ...]
    dilations: tuple[int, ...]
    groups: int
    layout: str


def _pads(padding: tuple[int, ...], layout: str) -> list[tuple[int, int]]:
    """(before, after) per dim of 4-D data in ``layout``, from a window's (top, bottom, left, right)."""
    pads = [(0, 0)] * 4
    for i, axis in enumerate(CONV_AXES[layout].spatial):
        pads[axis] = (padding[2 * i], padding[2 * i + 1])
    return pads


def _tap_slices(x: Array, w: Array, window: Window) -> list[tuple[Tap, Array]]:
    """Each tap that reads data, and the strided slice of the padded data it reads for every output."""
    strides, padding, dilations, _, layout = window
    padded = jnp.pad(x, _pads(padding, layout))
    found = taps(x.shape, w.shape, strides, padding, dilations, layout)
    return [(tap, lax.slice(padded, tap.start, tap.limit, tap.step)) for tap in found]


def _tap_weights(w: Array, offset: tuple[int, int], groups: int, layout: str) -> Array:
    """One tap's weights as (groups, input channels per group, output channels per group)."""
    i, j = offset
    tap = w[i, j] if layout == "NHWC" else w[:, :, i, j].T  # (I, O)
    return tap.reshape(tap.shape[0], groups, tap.shape[1] // groups).transpose(1, 0, 2)


def _grouped(x: Array, groups: int, layout: str) -> Array:
    """Data with its channels split into (groups, channels per group), the groups first (sizes given, not
    -1: a size may be 0)."""
    if layout == "NHWC":
        return x.reshape(*x.shape[:3], groups, x.shape[3] // groups)
    return x.reshape(x.shape[0], groups, x.shape[1] // groups, *x.shape[2:])


def _ungrouped(y: Array, layout: str) -> Array:
    if layout == "NHWC":
        return y.reshape(*y.shape[:3], y.shape[3] * y.shape[4])
    return y.reshape(y.shape[0], y.shape[1] * y.shape[2], *y.shape[3:])


def _pointwise_product(s: Array, tap: Array, layout: str) -> Array:
    """A grouped 1x1 conv of grouped data ``s`` by one tap's (groups, I, O) weights: a product over the
    I channels, or where I is 1 (a depthwise conv) a multiply that XLA fuses into one elementwise loop."""
    if tap.shape[1] == 1:
        weights = tap[:, 0, :]  # (groups, O per group)
        if layout == "NHWC":
            return s * weights
        return s * weights[:, :, None, None]
    return jnp.einsum("nhwgi,gio->nhwgo" if layout == "NHWC" else "ngihw,gio->ngohw", s, tap)


def _shifted(x: Array, w: Array, window: Window) -> Array:
    """A conv as the sum, over the taps that read data, of the data shifted to each tap (a strided
    slice of the padded data) times that tap's weights: a product per tap, or for a depthwise conv
    multiply-adds XLA fuses into one loop (XLA:CPU runs lax.conv's depthwise kernel 50-100x slower, and
    its dense kernel 6-30x slower at 1x1 and 2x2 maps)."""
    groups, layout = window.groups, window.layout
    found = _tap_slices(x, w, window)
    if not found:
        return _padding_only(x, w, window)
    terms = [
        _pointwise_product(_grouped(s, groups, layout), _tap_weights(w, tap.offset, groups, layout), layout)
        for tap, s in found
    ]
    return _ungrouped(functools.reduce(operator.add, terms), layout)


def _padding_only(x: Array, w: Array, window: Window) -> Array:
    """The zeros of a conv whose taps read only padding."""
    return jnp.zeros(Conv2d().infer([x.shape, w.shape], window._asdict()), x.dtype)


def _im2col(x: Array, w: Array, window: Window) -> Array:
    """A conv as one product: the slices of the taps that read data stacked (the patches) times the
    stacked taps' weights, contracted over taps and channels together."""
    groups, layout = window.groups, window.layout
    found = _tap_slices(x, w, window)
    if not found:
        return _padding_only(x, w, window)
    patches = _grouped_patches(jnp.stack([s for _, s in found], 3 if layout == "NHWC" else 1), groups, layout)
    weights = jnp.stack([_tap_weights(w, t.offset, groups, layout) for t, _ in found])  # (T, g, I, O)
    spec = "nhwtgi,tgio->nhwgo" if layout == "NHWC" else "ntgihw,tgio->ngohw"
    return _ungrouped(jnp.einsum(spec, patches, weights), layout)


def _grouped_patches(p: Array, groups: int, layout: str) -> Array:
    """Stacked slices (N, H, W, T, C) or (N, T, C, H, W) with C split into (groups, I)."""
    if layout == "NHWC":
        return p.reshape(*p.shape[:4], groups, p.shape[4] // groups)
    return p.reshape(*p.shape[:2], groups, p.shape[2] // groups, *p.shape[3:])


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
    if algorithm != "direct":
        return _FORMULATIONS[algorithm](x, w, Window(strides, padding, dilations, groups, layout))
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
    algorithm: str,
) -> Array:
    dims, steps, pads = _window(layout, window, 1), _window(layout, strides, 1), _pads(padding, layout)
    if algorithm == "shifted":
        return _max_of_shifts(x, window, strides, pads, CONV_AXES[layout].spatial)
    if kind == "max":
        return lax.reduce_window(x, np.asarray(-np.inf, x.dtype), lax.max, dims, steps, pads)
    total = lax.reduce_window(x, np.asarray(0, x.dtype), lax.add, dims, steps, pads)
    if kind == "sum":
        return total
    if kind == "avg":
        return total / np.asarray(window[0] * window[1], x.dtype)
    ones = jnp.ones(x.shape, x.dtype)
    return total / lax.reduce_window(ones, np.asarray(0, x.dtype), lax.add, dims, steps, pads)


def _max_of_shifts(
    x: Array,
    window: tuple[int, ...],
    strides: tuple[int, ...],
    pads: list[tuple[int, int]],
    spatial: tuple[int, ...],
) -> Array:
    """A max pool as maxima of strided slices, padded with -inf: over the window's rows, then its
    columns (each a loop XLA fuses; XLA:CPU's reduce-window visits the window element by element)."""
    x = lax.pad(x, np.asarray(-np.inf, x.dtype), [(lo, hi, 0) for lo, hi in pads])
    for axis, k, step in zip(spatial, window, strides, strict=True):
        n = (x.shape[axis] - k) // step + 1
        if n <= 0:  # the window is larger than the padded data: no output along this dim
            x = lax.slice_in_dim(x, 0, 0, 1, axis)
            continue
        x = functools.reduce(
            lax.max, (lax.slice_in_dim(x, i, i + step * (n - 1) + 1, step, axis) for i in range(k))
        )
    return x


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
# XLA's reduce-window, or (a max pool) the maxima of the data shifted to each tap
POOL_ALGORITHMS = ("window", "shifted")


def _pool_flops(ins: Sequence[TensorType], out: TensorType, attrs: dict) -> float:
    return float(out.size * prod(attrs["window"]))


def _pool_phases(ins: Sequence[TensorType], out: TensorType, attrs: dict) -> list[Kernel]:
    """XLA's reduce-window: one pass; shifted: a pass over the window's rows (the padded data read, the
    rows' maxima written), then one over its columns."""
    (x,) = ins
    if attrs["algorithm"] == "window":
        return [Kernel(_pool_flops(ins, out, attrs), io_bytes(ins, out, attrs))]
    h = CONV_AXES[attrs["layout"]].spatial[0]
    rows = float(x.nbytes * out.shape[h] / max(x.shape[h], 1))
    (kh, kw) = attrs["window"]
    return [Kernel(rows / x.itemsize * kh, x.nbytes + rows), Kernel(float(out.size * kw), rows + out.nbytes)]


def _fits_pool(types: Sequence[TensorType], attrs: dict) -> str | None:
    """Dtype check, and the shifted algorithm for a max pool only."""
    problem = floats(types, attrs)
    if not problem and attrs["algorithm"] == "shifted" and attrs["kind"] != "max":
        return f"the shifted algorithm computes a max pool, not {attrs['kind']}"
    return problem


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
Formulation = Callable[[Array, Array, Window], Array]


def _winograd(m: int) -> Formulation:
    def formulation(x: Array, w: Array, window: Window) -> Array:
        if x.size == 0 or w.size == 0:
            return _padding_only(x, w, window)
        return winograd.conv(x, w, window.padding, CONV_AXES[window.layout].spatial, window.layout, m)

    return formulation


# How a conv is computed (each lowered its own way, equated by a checked rule; the cost model picks):
# XLA's conv kernel, the per-tap products of ``_shifted``, or the one product of ``_im2col``, for any
# window; Winograd's F(2x2, 3x3) or F(4x4, 3x3) (``eqsat.ops.winograd``) for a stride-1, undilated,
# one-group 3x3 conv alone
ALGORITHMS = ("direct", "shifted", "im2col")
WINOGRAD = {"winograd-2x2": 2, "winograd-4x4": 4}
_FORMULATIONS: dict[str, Formulation] = {
    "shifted": _shifted,
    "im2col": _im2col,
    **{name: _winograd(m) for name, m in WINOGRAD.items()},
}
_CONV_ATTRS = (
    *_WINDOW,
    Attr("dilations", "ints", (1, 1)),
    Attr("groups", "int", 1),
    _LAYOUT,
    Attr("algorithm", "str", "direct", (*ALGORITHMS, *WINOGRAD)),
)


def _fits_algorithm(types: Sequence[TensorType], attrs: dict) -> str | None:
    """Dtype check, and a Winograd algorithm only for the convs it computes."""
    problem = floats(types, attrs)
    algorithm = attrs["algorithm"]
    if problem or algorithm not in WINOGRAD or types[1].rank != 4:  # the shape rule names a bad rank
        return problem
    kernel = tuple(types[1].shape[a] for a in CONV_AXES[attrs["layout"]].kernel_spatial)
    window = (tuple(attrs["strides"]), tuple(attrs["dilations"]), attrs["groups"], kernel)
    if window != ((1, 1), (1, 1), 1, (3, 3)):
        strides, dilations, groups, _ = window
        return (
            f"{algorithm} computes stride-1, undilated, one-group 3x3 convs, not strides {strides}, "
            f"dilations {dilations}, {groups} groups, a {kernel[0]}x{kernel[1]} kernel"
        )
    return None


def _conv_phases(ins: Sequence[TensorType], out: TensorType, attrs: dict) -> list[Kernel]:
    """The kernels a conv runs as, by algorithm: XLA's conv over every tap, padding included (direct;
    ``conv:<layout>:<dtype>``, ``conv:depthwise:...`` for a depthwise one, whose rate a device profile
    may give apart); a product per tap that reads data and a loop summing them, or for a depthwise conv
    one elementwise loop (shifted); the patches written, then one product (im2col). A bias and
    activation ride in the last kernel."""
    x, w = ins[:2]
    axes = CONV_AXES[attrs["layout"]]
    written = float(out.nbytes)
    if attrs["algorithm"] in WINOGRAD:
        return winograd.kernels(x, out, axes.channel, axes.spatial, 3, WINOGRAD[attrs["algorithm"]])
    if attrs["algorithm"] == "direct":
        op = "conv:depthwise" if depthwise(ins, attrs) else "conv"
        kind = contraction_kind(op, x.dtype, attrs["layout"])
        nbytes = float(sum(t.nbytes for t in ins) + out.nbytes)
        return [Kernel(_conv_flops(ins, out, attrs), nbytes, kind=kind, written=written)]
    found = len(
        taps(x.shape, w.shape, attrs["strides"], attrs["padding"], attrs["dilations"], attrs["layout"])
    )
    per_tap = 2.0 * out.size * w.shape[axes.kernel_in]
    positions = prod(d for i, d in enumerate(out.shape) if i != axes.channel)  # none divides: sizes may be 0
    sliced = float(positions * x.shape[axes.channel] * x.itemsize)
    kind = product_kind(x.dtype, out.dtype)
    if attrs["algorithm"] == "im2col":
        patches = found * sliced
        product = Kernel(per_tap * found, patches + w.nbytes + written, kind=kind, written=written)
        return [Kernel(0.0, x.nbytes + patches), product]
    if w.shape[axes.kernel_in] == 1:  # a depthwise conv: multiply-adds in one loop
        return [Kernel(per_tap * found, float(x.nbytes + w.nbytes) + written)]
    read = sliced + w.nbytes / max(found, 1) + written
    products = [Kernel(per_tap, read, kind=kind, written=written)] * found
    return products + [Kernel(float(out.size * (found - 1)), written * (found + 1))] * (found > 1)


_IMAGES, _CHANNELS = ((2, 8, 8, 3), "float32"), ((4,), "float32")


@spelled("flax.linen.Conv then relu", _IMAGES, ((3, 3, 3, 4), "float32"), _CHANNELS)
def _flax_conv_relu(x: jax.Array, kernel: jax.Array, bias: jax.Array) -> jax.Array:
    dims = ("NHWC", "HWIO", "NHWC")
    return jax.nn.relu(lax.conv_general_dilated(x, kernel, (1, 1), "SAME", dimension_numbers=dims) + bias)


@spelled("flax.linen.BatchNorm at inference", ((2, 8, 8, 4), "float32"), *[_CHANNELS] * 4)
def _flax_batch_norm(
    x: jax.Array, scale: jax.Array, bias: jax.Array, mean: jax.Array, var: jax.Array
) -> jax.Array:
    return (x - mean) * (lax.rsqrt(var + 1e-5) * scale) + bias


CONV = [
    OpDef(
        "conv2d",
        2,
        "2-D convolution (cross-correlation) of x by kernel w: NCHW data with an OIHW kernel, or NHWC "
        "with HWIO; strides, padding (top, bottom, left, right), dilations of the kernel, groups "
        "(groups = channels: depthwise); algorithm: XLA's conv (direct), the sum over the taps that read "
        "data of the data shifted to the tap times its weights (shifted), those shifted slices "
        "stacked and one product (im2col), or for a stride-1 3x3 conv of one group Winograd's "
        "F(2x2, 3x3) or F(4x4, 3x3) (winograd-2x2, winograd-4x4)",
        _CONV_ATTRS,
        Conv2d(),
        flops=_conv_flops,
        same_dtype=(0, 1),
        contraction="conv",
        timed=True,
        phases=_conv_phases,
        check=_fits_algorithm,
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
        timed=True,
        phases=_conv_phases,
        check=_fits_algorithm,
        lower=_conv2d_bias_act,
        spellings=(_flax_conv_relu,),
    ),
    OpDef(
        "pool2d",
        1,
        "2-D pooling over window: max, sum, avg (divided by the window's size, padding included) or "
        "avg_exclusive (by the count of elements inside the input); padding adds -inf for max, 0 else; "
        "algorithm: XLA's reduce-window (window), or for a max pool the maxima of the data shifted to "
        "each of the window's rows, then columns (shifted)",
        (
            Attr("kind", "str", choices=POOL_KINDS),
            Attr("window", "ints"),
            *_WINDOW,
            _LAYOUT,
            Attr("algorithm", "str", "window", POOL_ALGORITHMS),
        ),
        Pool2d(),
        flops=_pool_flops,
        timed=True,
        phases=_pool_phases,
        check=_fits_pool,
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
        spellings=(_flax_batch_norm,),
    ),
]
