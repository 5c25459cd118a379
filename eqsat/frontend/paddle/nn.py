"""Paddle's layers: convs (and transposed), batch, layer, RMS, group and instance norms, pooling
(adaptive included), resizing, embeddings, RNNs, a CRF's Viterbi decoding and Paddle's fused ops
(``fc``, ``multihead_matmul``, ``fused_conv2d_add_act``, ``fused_bias_residual_layernorm``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from eqsat.errors import ParseError, UnsupportedError
from eqsat.ir import TensorType, Value
from eqsat.ops.conv import CONV_AXES
from eqsat.text import (
    NULL_VALUE,
    Line,
)

from . import crf, rnn
from .reader import (
    Results,
    _arity,
    _flag,
    _known_numbers,
    _number,
    _opaque,
    _optional,
    _Reader,
    handles,
    meaning,
)


@handles("pd.fc")
def _fc(r: _Reader, line: Line) -> Results:
    """``pd.fc`` (Paddle's fused matmul + bias + activation) over the last dim is a ``linear``."""
    act = {"": "none", "relu": "relu"}.get(str(line.attrs.get("activation_type", "")))
    if len(line.operands) != 3 or act is None:
        return _opaque(r, line)
    x, w, b = (r.tensor(line, o) for o in line.operands)
    if line.attrs.get("in_num_col_dims") != x.type.rank - 1:
        return _opaque(r, line)
    return [r.add(line, "linear", [x, w, b], act=act)]


@handles("pd.multihead_matmul")
def _multihead_matmul(r: _Reader, line: Line) -> Results:
    """``pd.multihead_matmul`` (Paddle's fused attention block: x (B, S, D), packed weights (D, 3, N),
    bias (3, N), optional mask) as the canonical ops it stands for: one Q/K/V linear, heads split and
    laid out (B, H, S, N/H), ``attention`` scaled by alpha, heads merged back."""
    x, w, b = (r.tensor(line, o) for o in line.operands[:3])
    heads, alpha = line.attrs.get("head_number"), line.attrs.get("alpha")
    plain = (
        not line.attrs.get("transpose_q")
        and line.attrs.get("transpose_k")
        and not line.attrs.get("transpose_v")
    )
    if not (isinstance(heads, int) and isinstance(alpha, int | float) and plain and x.type.rank == 3):
        return _opaque(r, line)
    (batch, seq, dim), n = x.type.shape, w.type.shape[-1]
    qkv = r.add(
        line,
        "linear",
        [x, r.add(line, "reshape", [w], shape=(dim, 3 * n)), r.add(line, "reshape", [b], shape=(3 * n,))],
    )
    parts = []
    for i in range(3):
        part = r.add(line, "split", [qkv], axis=2, sizes=(n, n, n), index=i)
        part = r.add(line, "reshape", [part], shape=(batch, seq, heads, n // heads))
        parts.append(r.add(line, "transpose", [part], perm=(0, 2, 1, 3)))
    mask_name = line.operands[3] if len(line.operands) > 3 else NULL_VALUE
    mask = r.scalar(line, 0.0, x.type.dtype) if mask_name == NULL_VALUE else r.tensor(line, mask_name)
    keep_all = r.scalar(line, 1.0, "bool")
    out = r.add(line, "attention", [*parts, mask, keep_all], scale=float(alpha))
    out = r.add(line, "transpose", [out], perm=(0, 2, 1, 3))
    return [r.add(line, "reshape", [out], shape=(batch, seq, n))]


def _paddle_padding(
    line: Line, sizes: Sequence[int], kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int]
) -> tuple[int, ...]:
    """Paddle's ``paddings`` / ``padding_algorithm`` as (top, bottom, left, right)."""
    algorithm = str(line.attrs.get("padding_algorithm", "EXPLICIT"))
    if algorithm == "VALID":
        return (0, 0, 0, 0)
    if algorithm == "SAME":  # as TensorFlow: the output is ceil(size / stride), the odd pad at the end
        pads: list[int] = []
        for size, k, stride, dilation in zip(sizes, kernel, strides, dilations, strict=True):
            total = max((-(-size // stride) - 1) * stride + dilation * (k - 1) + 1 - size, 0)
            pads += [total // 2, total - total // 2]
        return tuple(pads)
    paddings = tuple(int(p) for p in line.attrs.get("paddings", (0, 0)))  # type: ignore[union-attr]
    if len(paddings) == 2:
        return (paddings[0], paddings[0], paddings[1], paddings[1])
    if len(paddings) == 4:
        return paddings
    raise ParseError(f"paddings {list(paddings)} are not 2 or 4 numbers", line=line.number, op=line.name)


def _spatial(x: Value, layout: str) -> tuple[int, int]:
    h, w = CONV_AXES[layout].spatial
    return x.type.shape[h], x.type.shape[w]


def _layout(line: Line) -> str:
    layout = str(line.attrs.get("data_format", "NCHW"))
    if layout not in ("NCHW", "NHWC"):
        raise ParseError(f"data_format {layout} (NCHW or NHWC)", line=line.number, op=line.name)
    return layout


@handles("pd.conv2d", "pd.depthwise_conv2d")
def _conv2d(r: _Reader, line: Line) -> list[Value]:
    """``pd.conv2d`` / ``pd.depthwise_conv2d``: filters OIHW whatever the data format (NHWC data takes
    them transposed to HWIO)."""
    _arity(line, 2)
    return [_conv(r, line, *(r.tensor(line, o) for o in line.operands))]


def _conv2d_meaning(
    x: jax.Array,
    w: jax.Array,
    *,
    strides: tuple[int, ...],
    paddings: tuple[int, ...],
    dilations: tuple[int, ...],
    groups: int,
    data_format: str = "NCHW",
    padding_algorithm: str = "EXPLICIT",
    **_: Any,
) -> jax.Array:
    """``pd_op.conv2d`` (filters OIHW; paddings [h, w] or [top, bottom, left, right])."""
    if padding_algorithm in ("SAME", "VALID"):
        padding: Any = padding_algorithm
    elif len(paddings) == 2:
        padding = [(paddings[0], paddings[0]), (paddings[1], paddings[1])]
    else:
        padding = [(paddings[0], paddings[1]), (paddings[2], paddings[3])]
    layout = (data_format, "OIHW", data_format)
    return jax.lax.conv_general_dilated(
        x, w, strides, padding, rhs_dilation=dilations, dimension_numbers=layout, feature_group_count=groups
    )


meaning("pd_op.conv2d", _conv2d_meaning)


_FUSED_ACTIVATIONS = {"identity": None, "relu": "relu"}


@handles("pd.fused_conv2d_add_act")
def _fused_conv2d_add_act(r: _Reader, line: Line) -> Results:
    """``pd.fused_conv2d_add_act(x, filter, bias?, residual?)`` (Paddle's conv fusion pass) is
    ``act(conv2d + bias + residual)`` in canonical ops, so the rules see through it (a batch norm after
    it folds in). Activations other than identity and relu, and split outputs, stay opaque."""
    _arity(line, 4)
    activation = str(line.attrs.get("activation", "identity"))
    if activation not in _FUSED_ACTIVATIONS or line.attrs.get("split_channels"):
        return _opaque(r, line)
    x, w = (r.tensor(line, o) for o in line.operands[:2])
    y = _conv(r, line, x, w)
    axis = CONV_AXES[_layout(line)].channel
    for name in line.operands[2:]:
        if name == NULL_VALUE:
            continue
        term = r.tensor(line, name)
        if term.type.rank == 1:  # a bias per channel
            shape = tuple(term.type.shape[0] if i == axis else 1 for i in range(4))
            term = r.add(line, "reshape", [term], shape=shape)
        y = r.add(line, "add", [y, term])
    act = _FUSED_ACTIVATIONS[activation]
    y = y if act is None else r.add(line, act, [y])
    results: list[Value | list[Value]] = [y, []]
    return results[: len(line.results)]


def _fused_conv2d_add_act_meaning(
    x: jax.Array, w: jax.Array, *tensors: jax.Array, activation: str, operands: str = "t,t,t,t", **attrs: Any
) -> tuple[jax.Array]:
    """``pd_op.fused_conv2d_add_act(x, filter, bias, residual)``: act(conv + bias + residual), a 1-D
    bias per output channel."""
    bias, residual = _optional(tensors, operands, 2, 2)
    out = _conv2d_meaning(x, w, **attrs)
    if bias is not None and bias.ndim == 1 and attrs.get("data_format", "NCHW") == "NCHW":
        bias = bias.reshape(-1, 1, 1)
    out = out if bias is None else out + bias
    out = out if residual is None else out + residual
    acts = {"identity": lambda v: v, "relu": jax.nn.relu}
    return (acts[activation](out),)


meaning("pd_op.fused_conv2d_add_act", _fused_conv2d_add_act_meaning)


def _conv(r: _Reader, line: Line, x: Value, w: Value) -> Value:
    """The conv2d of a Paddle conv line (its strides, dilations, paddings, groups, data format)."""
    layout = _layout(line)
    strides = tuple(int(v) for v in line.attrs.get("strides", (1, 1)))  # type: ignore[union-attr]
    dilations = tuple(int(v) for v in line.attrs.get("dilations", (1, 1)))  # type: ignore[union-attr]
    if w.type.rank != 4:
        raise ParseError(f"filter {w.type} is not OIHW", line=line.number, op=line.name)
    padding = _paddle_padding(line, _spatial(x, layout), w.type.shape[2:], strides, dilations)
    if layout == "NHWC":
        w = r.add(line, "transpose", [w], perm=(2, 3, 1, 0))
    groups = int(line.attrs.get("groups", 1))  # type: ignore[arg-type]
    attrs = {"strides": strides, "padding": padding, "dilations": dilations, "layout": layout}
    return r.add(line, "conv2d", [x, w], groups=groups, **attrs)


@handles("pd.batch_norm_", "pd.batch_norm")
def _batch_norm(r: _Reader, line: Line) -> Results:
    """``pd.batch_norm_(x, mean, variance, scale, bias)`` at inference (``is_test``) is ``batch_norm``;
    its statistics results are the running statistics, its reserve space is never read."""
    if not _flag(line, "is_test", False) or len(line.operands) != 5:
        return _opaque(r, line)
    x, mean, var, scale, bias = (r.tensor(line, o) for o in line.operands)
    axis = 1 if _layout(line) == "NCHW" else x.type.rank - 1
    epsilon = float(line.attrs.get("epsilon", 1e-5))  # type: ignore[arg-type]
    y = r.add(line, "batch_norm", [x, scale, bias, mean, var], epsilon=epsilon, axis=axis)
    reserve = Value(TensorType((0,), "uint8"))
    r.dynamic[id(reserve)] = (line, True)
    return [y, mean, var, mean, var, reserve][: len(line.results)]


def _batch_norm_meaning(
    x: jax.Array,
    mean: jax.Array,
    variance: jax.Array,
    scale: jax.Array,
    bias: jax.Array,
    *,
    epsilon: float,
    is_test: int,
    data_format: str = "NCHW",
    **_: Any,
) -> tuple[jax.Array, ...]:
    """``pd_op.batch_norm_`` in inference form (``is_test``): the running statistics normalize x."""
    if not is_test:
        raise NotImplementedError("batch_norm_ in training mode (batch statistics) has no JAX meaning here")
    channel = 1 if data_format == "NCHW" else x.ndim - 1
    shape = [1] * x.ndim
    shape[channel] = x.shape[channel]
    inv = jax.lax.rsqrt(variance + jnp.asarray(epsilon, variance.dtype)) * scale
    out = (x - mean.reshape(shape)) * inv.reshape(shape) + bias.reshape(shape)
    return out, mean, variance, mean, variance, jnp.zeros((0,), jnp.uint8)


meaning("pd_op.batch_norm_", _batch_norm_meaning)


@handles("pd.layer_norm")
def _layer_norm(r: _Reader, line: Line) -> Results:
    """``pd.layer_norm(x, scale, bias)`` over the last axis of a float32 or float64 ``x`` is
    ``layer_norm`` (an absent scale is 1, an absent bias 0); its mean and variance results are the
    statistics over that axis. Other axes and half-precision ``x`` (whose statistics
    Paddle keeps in float32) stay opaque."""
    x = r.tensor(line, line.operands[0])
    last = x.type.rank - 1
    begin = line.attrs.get("begin_norm_axis", 1)
    if len(line.operands) != 3 or x.type.dtype not in ("float32", "float64") or begin not in (last, -1):
        return _opaque(r, line)
    channels, dtype = (x.type.shape[-1],), x.type.dtype
    params = []
    for name, fill in zip(line.operands[1:], (1.0, 0.0), strict=True):
        value = None if name == NULL_VALUE else r.tensor(line, name)
        if value is not None and value.type != TensorType(channels, dtype):
            return _opaque(r, line)
        params.append(value or r.add(line, "full", [], shape=channels, value=fill, dtype=dtype))
    epsilon = _number(line, "epsilon", 1e-5)
    y = r.add(line, "layer_norm", [x, *params], epsilon=epsilon)
    centered = r.add(line, "sub", [x, r.add(line, "reduce_mean", [x], axis=last, keepdim=1)])
    mean = r.add(line, "reduce_mean", [x], axis=last)
    variance = r.add(line, "reduce_mean", [r.add(line, "mul", [centered, centered])], axis=last)
    return [y, mean, variance][: len(line.results)]


def _layer_norm_meaning(
    x: jax.Array, *params: jax.Array, begin_norm_axis: int, epsilon: float, operands: str = "t,t,t", **_: Any
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``pd_op.layer_norm``: normalized over the dims from ``begin_norm_axis`` on, then scale and bias
    (each optional: ``<<NULL VALUE>>``); also the mean and variance, flattened as Paddle returns them."""
    scale, bias = _optional(params, operands, 1, 2)
    y, mean, var = _normalized(x, tuple(range(begin_norm_axis, x.ndim)), epsilon)
    norm_shape = x.shape[begin_norm_axis:]
    if scale is not None:
        y = y * scale.reshape(norm_shape)
    if bias is not None:
        y = y + bias.reshape(norm_shape)
    lead = x.shape[:begin_norm_axis]
    return y, mean.reshape(lead), var.reshape(lead)


meaning("pd_op.layer_norm", _layer_norm_meaning)


@handles("pd.pool2d")
def _pool2d(r: _Reader, line: Line) -> Results:
    """``pd.pool2d(x, kernel_size)``: max or average (``exclusive``: over the elements inside x),
    global, or adaptive where the output divides the input; ``ceil_mode`` as extra padding at the end
    (not for an inclusive average, which Paddle divides differently there)."""
    _arity(line, 2)
    x = r.tensor(line, line.operands[0])
    layout = _layout(line)
    sizes = _spatial(x, layout)
    kind = str(line.attrs.get("pooling_type", "max"))
    exclusive = _flag(line, "exclusive", True)
    if kind == "avg":
        kind = "avg_exclusive" if exclusive else "avg"
    ceil = _flag(line, "ceil_mode", False)
    window: tuple[int, ...]
    strides: tuple[int, ...]
    padding: tuple[int, ...]
    if _flag(line, "global_pooling", False):
        window, strides, padding = sizes, (1, 1), (0, 0, 0, 0)
    else:
        window = r.int_array(line, line.operands[1])
        window = (window[0], window[0]) if len(window) == 1 else window
        strides = tuple(int(v) for v in line.attrs.get("strides", (1, 1)))  # type: ignore[union-attr]
        if _flag(line, "adaptive", False):  # an output size of -1 (None) keeps the input's
            window = tuple(s if k == -1 else k for s, k in zip(sizes, window, strict=True))
            if any(s % k for s, k in zip(sizes, window, strict=True)):
                return _opaque(r, line)
            window = strides = tuple(s // k for s, k in zip(sizes, window, strict=True))
        padding = _paddle_padding(line, sizes, window, strides, (1, 1))
    if kind not in ("max", "avg", "avg_exclusive") or (ceil and kind == "avg"):
        return _opaque(r, line)
    if ceil:  # the last window may start inside the padding's end: pad so it is whole
        extra = []
        for i, (size, k, stride) in enumerate(zip(sizes, window, strides, strict=True)):
            span = size + padding[2 * i] + padding[2 * i + 1] - k
            extra += [padding[2 * i], padding[2 * i + 1] + (-span) % stride]
        padding = tuple(extra)
    attrs = {"window": tuple(window), "strides": strides, "padding": padding, "layout": layout}
    return [r.add(line, "pool2d", [x], kind=kind, **attrs)]


def _pool2d_meaning(
    x: jax.Array, kernel: Any, *, pooling_type: str, adaptive: int = 0, **attrs: Any
) -> jax.Array:
    """``pool2d`` where eqsat's canonical pool cannot say it: adaptive windows that do not divide the
    input (NCHW)."""
    if not adaptive or attrs.get("data_format", "NCHW") != "NCHW":
        raise UnsupportedError("pd_op.pool2d as an opaque op is supported for adaptive NCHW pooling only")
    out = _adaptive_sizes(x, kernel)
    reduce = (lambda w: jnp.max(w, axis=-1)) if pooling_type == "max" else (lambda w: jnp.mean(w, axis=-1))
    return _stacked(_adaptive_pool(x, out, reduce), x, out)


meaning("pd_op.pool2d", _pool2d_meaning)


def _normalized(
    x: jax.Array, axes: tuple[int, ...], epsilon: float
) -> tuple[jax.Array, jax.Array, jax.Array]:
    mean = jnp.mean(x, axis=axes, keepdims=True)
    variance = jnp.mean(jnp.square(x - mean), axis=axes, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(variance + epsilon), mean, variance


def _fused_bias_residual_layernorm(
    x: jax.Array,
    *tensors: jax.Array,
    begin_norm_axis: int,
    epsilon: float,
    residual_alpha: float = 1.0,
    operands: str = "t,t,t,t,t",
    **_: Any,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """``pd_op.fused_bias_residual_layernorm(x, bias, residual, scale, norm_bias)``: the layer norm of
    ``x + bias + residual_alpha * residual``; also that sum, and the mean and variance (flattened)."""
    bias, residual, scale, norm_bias = _optional(tensors, operands, 1, 4)
    total = x if bias is None else x + bias
    if residual is not None:
        total = total + jnp.asarray(residual_alpha, x.dtype) * residual
    kinds = ",".join(["t", "t" if scale is not None else "n", "t" if norm_bias is not None else "n"])
    params = [t for t in (scale, norm_bias) if t is not None]
    y, mean, var = _layer_norm_meaning(
        total, *params, begin_norm_axis=begin_norm_axis, epsilon=epsilon, operands=kinds
    )
    return y, total, mean.reshape(-1), var.reshape(-1)


def _conv2d_transpose(
    x: jax.Array,
    w: jax.Array,
    output_size: Any = None,
    *,
    strides: tuple[int, ...],
    paddings: tuple[int, ...],
    output_padding: tuple[int, ...] = (),
    dilations: tuple[int, ...] = (1, 1),
    groups: int = 1,
    data_format: str = "NCHW",
    padding_algorithm: str = "EXPLICIT",
    **_: Any,
) -> jax.Array:
    """``pd_op.conv2d_transpose`` (filters (C_in, C_out / groups, kh, kw)): the gradient of a conv, as
    a conv of the input dilated by the strides with the flipped kernel; each spatial size is
    ``(size - 1) * stride - pads + dilation * (k - 1) + 1`` plus ``output_padding``, or the requested
    ``output_size``."""
    if padding_algorithm == "SAME":
        raise UnsupportedError("pd_op.conv2d_transpose with padding_algorithm SAME")
    spatial = (2, 3) if data_format == "NCHW" else (1, 2)
    pads = (0, 0, 0, 0) if padding_algorithm == "VALID" else tuple(paddings)
    pads = (pads[0], pads[0], pads[1], pads[1]) if len(pads) == 2 else pads
    kh, kw = w.shape[2:]
    wanted = [int(v) for v in np.ravel(np.asarray(output_size))] if output_size is not None else []
    padding = []
    for i, (axis, k) in enumerate(zip(spatial, (kh, kw), strict=True)):
        reach = dilations[i] * (k - 1)
        size = (x.shape[axis] - 1) * strides[i] - pads[2 * i] - pads[2 * i + 1] + reach + 1
        extra = wanted[i] - size if wanted else (output_padding[i] if output_padding else 0)
        padding.append((reach - pads[2 * i], reach - pads[2 * i + 1] + extra))
    c_in, c_out = w.shape[0], w.shape[1] * groups
    kernel = w.reshape(groups, c_in // groups, c_out // groups, kh, kw).transpose(0, 2, 1, 3, 4)
    kernel = jnp.flip(kernel.reshape(c_out, c_in // groups, kh, kw), axis=(2, 3))
    return jax.lax.conv_general_dilated(
        x,
        kernel,
        (1, 1),
        padding,
        lhs_dilation=tuple(strides),
        rhs_dilation=tuple(dilations),
        dimension_numbers=(data_format, "OIHW", data_format),
        feature_group_count=groups,
    )


meaning("pd_op.conv2d_transpose", _conv2d_transpose)
meaning("pd_op.fused_bias_residual_layernorm", _fused_bias_residual_layernorm)


def _embedding(ids: jax.Array, weight: jax.Array, *, padding_idx: int = -1, **_: Any) -> jax.Array:
    """``pd_op.embedding``: rows of weight; the row ``padding_idx`` reads as zeros."""
    out = jnp.take(weight, ids, axis=0)
    if padding_idx >= 0:
        out = jnp.where((ids == padding_idx)[..., None], jnp.zeros((), weight.dtype), out)
    return out


meaning("pd_op.embedding", _embedding)


def _rms_norm(
    x: jax.Array,
    *tensors: jax.Array,
    epsilon: float,
    begin_norm_axis: int,
    operands: str = "t,t,t,t,t",
    **_: Any,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``pd_op.rms_norm(x, bias, residual, norm_weight, norm_bias)``: x (+ bias + residual) divided by
    its root mean square over the dims from ``begin_norm_axis``, times the weight (+ norm bias), both
    of those dims' size; also the sum and the inverse RMS (flattened)."""
    bias, residual, weight, norm_bias = _optional(tensors, operands, 1, 4)
    total = x if bias is None else x + bias
    total = total if residual is None else total + residual
    axes = tuple(range(begin_norm_axis, x.ndim))
    inv = jax.lax.rsqrt(jnp.mean(jnp.square(total), axis=axes, keepdims=True) + jnp.asarray(epsilon, x.dtype))
    out = total * inv
    normalized = x.shape[begin_norm_axis:]  # weight and norm bias hold the normalized dims flattened
    out = out if weight is None else out * weight.reshape(normalized)
    out = out if norm_bias is None else out + norm_bias.reshape(normalized)
    return out, total, inv.reshape(-1)


meaning("pd_op.rms_norm", _rms_norm)
meaning("pd_op.rnn", rnn.rnn)
meaning("pd_op.viterbi_decode", crf.viterbi_decode)
meaning("pd_op.fused_rms_norm_quant", _rms_norm)  # Paddle 3.3's name (fused_rms_norm) for it


def _affine(y: jax.Array, scale: jax.Array | None, bias: jax.Array | None, axis: int) -> jax.Array:
    shape = [-1 if i == axis else 1 for i in range(y.ndim)]
    y = y if scale is None else y * scale.reshape(shape)
    return y if bias is None else y + bias.reshape(shape)


def _group_norm(
    x: jax.Array, *tensors: jax.Array, groups: int, epsilon: float, data_format: str = "NCHW", **attrs: Any
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Normalized over each group of channels (and the spatial dims), then scaled and shifted per
    channel; also the groups' means and variances (N, groups)."""
    scale, bias = _optional(tensors, attrs.get("operands", "t,t,t"), 1, 2)
    channels_last = not data_format.startswith("NC")
    moved = jnp.moveaxis(x, -1, 1) if channels_last else x
    grouped = moved.reshape(moved.shape[0], groups, -1)
    y, mean, variance = _normalized(grouped, (2,), epsilon)
    out = _affine(y.reshape(moved.shape), scale, bias, 1)
    out = jnp.moveaxis(out, 1, -1) if channels_last else out
    return out, mean.reshape(x.shape[0], groups), variance.reshape(x.shape[0], groups)


def _instance_norm(
    x: jax.Array, *tensors: jax.Array, epsilon: float, **attrs: Any
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Normalized over the spatial dims of each sample and channel, then scaled and shifted per channel;
    also the means and inverse standard deviations (N × C)."""
    scale, bias = _optional(tensors, attrs.get("operands", "t,t,t"), 1, 2)
    y, mean, variance = _normalized(x, tuple(range(2, x.ndim)), epsilon)
    return _affine(y, scale, bias, 1), mean.reshape(-1), jax.lax.rsqrt(variance + epsilon).reshape(-1)


def _adaptive_windows(size: int, out: int) -> list[tuple[int, int]]:
    """Paddle's adaptive pooling windows: [floor(i n / m), ceil((i + 1) n / m))."""
    return [(i * size // out, -(-(i + 1) * size // out)) for i in range(out)]


def _adaptive_sizes(x: jax.Array, out: Any) -> list[int]:
    """An adaptive pooling's output height and width (one number: both), -1 (None) keeping x's."""
    sizes = [int(k) for k in np.asarray(out).ravel()]
    sizes = sizes * (2 // len(sizes))
    return [n if k == -1 else k for n, k in zip(x.shape[-2:], sizes, strict=True)]


def _adaptive_pool(x: jax.Array, out: Any, reduce: Callable[[jax.Array], Any]) -> list[Any]:
    """``reduce`` of each adaptive window of the last two (H, W) dims of x, row by row, on the windows
    flattened; Paddle's windows: [floor(i n / m), ceil((i + 1) n / m))."""
    height, width = x.shape[-2:]
    rows, cols = (_adaptive_windows(n, int(k)) for n, k in zip((height, width), out, strict=True))
    return [reduce(x[..., r0:r1, c0:c1].reshape(*x.shape[:-2], -1)) for r0, r1 in rows for c0, c1 in cols]


def _stacked(parts: list[jax.Array], x: jax.Array, out: Any) -> jax.Array:
    return jnp.stack(parts, -1).reshape(*x.shape[:-2], *(int(k) for k in out))


def _adaptive_max_with_index(
    x: jax.Array, *, kernel_size: Any, adaptive: int = 0, **_: Any
) -> tuple[jax.Array, jax.Array]:
    """``max_pool2d_with_index {adaptive:true}`` (NCHW): the max of each adaptive window, and where it is
    (its index in the flattened H × W plane)."""
    if not adaptive:
        raise UnsupportedError("pd_op.max_pool2d_with_index is supported with adaptive:true only")
    kernel_size = _adaptive_sizes(x, kernel_size)
    plane = jnp.arange(x.shape[-2] * x.shape[-1], dtype=jnp.int32).reshape(x.shape[-2:])
    where = _adaptive_pool(plane, kernel_size, lambda w: w)
    best = _adaptive_pool(x, kernel_size, lambda w: jnp.argmax(w, axis=-1))
    values = _adaptive_pool(x, kernel_size, lambda w: jnp.max(w, axis=-1))
    index = [w[b] for w, b in zip(where, best, strict=True)]
    return _stacked(values, x, kernel_size), _stacked(index, x, kernel_size)


def _source_index(
    out: int, size: int, scale: float | None, align_corners: bool, half_pixel: bool
) -> jax.Array:
    """Where each output position reads along an axis of ``size`` resized to ``out`` (Paddle's
    interpolation: the ratio from the given scale where there is one)."""
    i = jnp.arange(out, dtype=jnp.float32)
    if align_corners:
        return i * ((size - 1) / (out - 1) if out > 1 else 0.0)
    ratio = 1.0 / scale if scale else size / out
    return (i + 0.5) * ratio - 0.5 if half_pixel else i * ratio


def _interpolate(
    x: jax.Array, *tensors: jax.Array, interp_method: str, operands: str | None = None, **attrs: Any
) -> jax.Array:
    """``nearest_interp`` and ``linear_interp`` / ``bilinear_interp`` / ``trilinear_interp`` (NCW,
    NCHW, NCDHW) to out_w, out_h × out_w or out_d × out_h × out_w (or by ``scale``), with Paddle's
    align_corners and align_mode: nearest reads floor(i · ratio); the linear modes blend, along each
    axis, the two neighbours of (i + 0.5) · ratio - 0.5 (align_mode 0) or of i · ratio (align_mode 1),
    clamped to the input. As Paddle sizes it: a ``size_tensor`` list gives the size (no scale); else
    the scale (``scale_tensor``, else the attribute) and then an ``out_size`` tensor (such as another
    tensor's shape) override the out_* attributes."""
    op = f"pd_op.{interp_method}_interp"
    out_size, sizes, scale_tensor = _optional(tensors, operands, 1, 3)
    spatial = x.ndim - 2
    shape = x.shape[2:]
    scale = [float(s) for s in attrs.get("scale", ())]
    if scale_tensor is not None:
        scale = _known_numbers(op, "scale", scale_tensor)
    scale = (scale * spatial)[:spatial] if scale else [0.0] * spatial
    given = [attrs.get(name, -1) for name in ("out_d", "out_h", "out_w")[-spatial:]]
    outs = [o if o > 0 else int(size * s) for o, size, s in zip(given, shape, scale, strict=True)]
    if out_size is not None:
        outs = [int(v) for v in _known_numbers(op, "output size", out_size)[:spatial]]
    if sizes:
        outs = [int(v) for v in _known_numbers(op, "output size", sizes)[:spatial]]
        scale = [0.0] * spatial
    corners = bool(attrs.get("align_corners", 0))
    for axis, (size, out, s) in enumerate(zip(shape, outs, scale, strict=True), start=2):
        if interp_method == "nearest":
            src = _source_index(out, size, s or None, corners, half_pixel=False)
            index = jnp.clip(jnp.round(src) if corners else jnp.floor(src), 0, size - 1).astype(jnp.int32)
            x = jnp.take(x, index, axis=axis)
            continue
        half = not corners and attrs.get("align_mode", 0) == 0
        src = jnp.maximum(_source_index(out, size, s or None, corners, half), 0.0)
        low = jnp.clip(jnp.floor(src), 0, size - 1).astype(jnp.int32)
        high = jnp.minimum(low + 1, size - 1)
        weight = (src - low).reshape([-1 if i == axis else 1 for i in range(x.ndim)]).astype(x.dtype)
        x = jnp.take(x, low, axis=axis) * (1 - weight) + jnp.take(x, high, axis=axis) * weight
    return x


meaning("pd_op.group_norm", _group_norm)
meaning("pd_op.instance_norm", _instance_norm)
meaning("pd_op.max_pool2d_with_index", _adaptive_max_with_index)
for _method in ("nearest", "linear", "bilinear", "trilinear"):
    meaning(f"pd_op.{_method}_interp", _interpolate)
