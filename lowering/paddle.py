"""JAX meanings of Paddle ops that load as opaque (no canonical op says what they compute)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from eqsat.errors import UnsupportedError

from . import paddle_rnn
from .registry import register_opaque


def _optional(tensors: tuple[jax.Array, ...], operands: str, first: int, count: int) -> list[Any]:
    """The operands ``first`` .. ``first + count - 1`` of an op, None where absent: ``tensors`` are the
    ones present after ``first``'s predecessors, ``operands`` the layout (``t`` present, ``n`` absent)."""
    present = iter(tensors)
    return [next(present) if kind == "t" else None for kind in operands.split(",")[first : first + count]]


def _gelu(x: jax.Array, *, approximate: int = 0, **_: Any) -> jax.Array:
    """``pd_op.gelu``: the exact erf form unless ``approximate``."""
    return jax.nn.gelu(x, approximate=bool(approximate))


register_opaque("pd_op.gelu", _gelu)
register_opaque("pd.gelu", _gelu)


def _pow(x: jax.Array, *, y: float, **_: Any) -> jax.Array:
    return jnp.power(x, jnp.asarray(y, x.dtype))


def _normalized(
    x: jax.Array, axes: tuple[int, ...], epsilon: float
) -> tuple[jax.Array, jax.Array, jax.Array]:
    mean = jnp.mean(x, axis=axes, keepdims=True)
    variance = jnp.mean(jnp.square(x - mean), axis=axes, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(variance + epsilon), mean, variance


def _layer_norm(
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
    y, mean, var = _layer_norm(
        total, *params, begin_norm_axis=begin_norm_axis, epsilon=epsilon, operands=kinds
    )
    return y, total, mean.reshape(-1), var.reshape(-1)


def _conv2d(
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


def _fused_conv2d_add_act(
    x: jax.Array, w: jax.Array, *tensors: jax.Array, activation: str, operands: str = "t,t,t,t", **attrs: Any
) -> tuple[jax.Array]:
    """``pd_op.fused_conv2d_add_act(x, filter, bias, residual)``: act(conv + bias + residual), a 1-D
    bias per output channel."""
    bias, residual = _optional(tensors, operands, 2, 2)
    out = _conv2d(x, w, **attrs)
    if bias is not None and bias.ndim == 1 and attrs.get("data_format", "NCHW") == "NCHW":
        bias = bias.reshape(-1, 1, 1)
    out = out if bias is None else out + bias
    out = out if residual is None else out + residual
    acts = {"identity": lambda v: v, "relu": jax.nn.relu}
    return (acts[activation](out),)


def _batch_norm(
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


register_opaque("pd_op.conv2d", _conv2d)
register_opaque("pd_op.conv2d_transpose", _conv2d_transpose)
register_opaque("pd_op.fused_conv2d_add_act", _fused_conv2d_add_act)
register_opaque("pd_op.batch_norm_", _batch_norm)
register_opaque("pd_op.pow", _pow)
register_opaque("pd_op.fused_bias_residual_layernorm", _fused_bias_residual_layernorm)
register_opaque("pd_op.layer_norm", _layer_norm)


def _slice(
    x: jax.Array,
    starts: Any,
    ends: Any,
    *,
    axes: tuple[int, ...],
    decrease_axis: tuple[int, ...] = (),
    **_: Any,
) -> jax.Array:
    """``pd_op.slice``: starts and ends (constants) along axes; ``decrease_axis`` dims dropped."""
    index = [slice(None)] * x.ndim
    for axis, start, end in zip(axes, np.asarray(starts).ravel(), np.asarray(ends).ravel(), strict=True):
        index[axis] = slice(int(start), int(end))
    out = x[tuple(index)]
    return jnp.squeeze(out, axis=tuple(decrease_axis)) if decrease_axis else out


def _split(x: jax.Array, sections: Any, axis: Any, **_: Any) -> tuple[jax.Array, ...]:
    """``pd_op.split``: sizes along an axis (one size may be -1: the rest)."""
    sizes = [int(s) for s in np.asarray(sections).ravel()]
    axis = int(np.asarray(axis).ravel()[0]) % x.ndim
    if -1 in sizes:
        sizes[sizes.index(-1)] = x.shape[axis] - (sum(sizes) + 1)
    return tuple(jnp.split(x, np.cumsum(sizes)[:-1].tolist(), axis=axis))


def _embedding(ids: jax.Array, weight: jax.Array, *, padding_idx: int = -1, **_: Any) -> jax.Array:
    """``pd_op.embedding``: rows of weight; the row ``padding_idx`` reads as zeros."""
    out = jnp.take(weight, ids, axis=0)
    if padding_idx >= 0:
        out = jnp.where((ids == padding_idx)[..., None], jnp.zeros((), weight.dtype), out)
    return out


def _swiglu(x: jax.Array, *rest: jax.Array, operands: str = "t,t", **_: Any) -> jax.Array:
    """``pd_op.swiglu``: silu(x) * y, or with y absent, of x's two halves along the last dim."""
    y = rest[0] if rest else None
    if y is None:
        x, y = jnp.split(x, 2, axis=-1)
    return jax.nn.silu(x) * y


_ELEMENTWISE = {
    "greater_than": jnp.greater,
    "greater_equal": jnp.greater_equal,
    "less_than": jnp.less,
    "less_equal": jnp.less_equal,
    "equal": jnp.equal,
    "not_equal": jnp.not_equal,
    "logical_and": jnp.logical_and,
    "logical_or": jnp.logical_or,
    "logical_not": jnp.logical_not,
    "where": jnp.where,
    "erf": jax.scipy.special.erf,
    "floor": jnp.floor,
    "ceil": jnp.ceil,
    "sign": jnp.sign,
    "sin": jnp.sin,
    "cos": jnp.cos,
    "tan": jnp.tan,
    "log1p": jnp.log1p,
    "expm1": jnp.expm1,
    "reciprocal": jnp.reciprocal,
    "isnan": jnp.isnan,
    "isinf": jnp.isinf,
    "isfinite": jnp.isfinite,
    "elementwise_pow": jnp.power,
    "floor_divide": jnp.floor_divide,  # Paddle floors, as Python does
    "remainder": jnp.remainder,  # the sign of the divisor, as Python's %
}
for _name, _fn in _ELEMENTWISE.items():
    register_opaque(f"pd_op.{_name}", lambda *xs, _fn=_fn, **_: _fn(*xs))
register_opaque("pd_op.slice", _slice)
register_opaque("pd_op.split", _split)
register_opaque("pd_op.embedding", _embedding)
register_opaque("pd_op.swiglu", _swiglu)
register_opaque(
    "pd_op.full_like", lambda x, value, *, dtype, **_: jnp.full_like(x, np.asarray(value).item(), dtype)
)


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


def _arange(start: Any, end: Any, step: Any, *, dtype: str, **_: Any) -> jax.Array:
    """``pd_op.arange`` of constant start, end and step."""
    first, last, stride = (np.asarray(v).item() for v in (start, end, step))
    return jnp.arange(first, last, stride, dtype=dtype)


register_opaque(
    "pd_op.full_with_tensor",
    lambda value, shape, *, dtype, **_: jnp.full(
        tuple(int(d) for d in np.asarray(shape)), value.reshape(()), dtype
    ),
)
register_opaque("pd_op.rms_norm", _rms_norm)
register_opaque("pd_op.rnn", paddle_rnn.rnn)
register_opaque("pd_op.fused_rms_norm_quant", _rms_norm)  # Paddle 3.3's name (fused_rms_norm) for it
register_opaque("pd_op.arange", _arange)


def _axis(axis: Any) -> int:
    return int(np.asarray(axis).ravel()[0])


register_opaque("pd_op.leaky_relu", lambda x, *, negative_slope, **_: jax.nn.leaky_relu(x, negative_slope))
register_opaque("pd_op.clip", lambda x, lo, hi, **_: jnp.clip(x, lo, hi))
register_opaque("pd_op.cumsum", lambda x, axis, **_: jnp.cumsum(x, axis=_axis(axis)))


def _roll(x: jax.Array, shifts: Any, *, axis: Any = (), **_: Any) -> jax.Array:
    """Paddle's roll: ``shifts`` along ``axis`` (each its own), or over the flattened tensor where
    ``axis`` is empty."""
    steps = tuple(int(s) for s in np.ravel(np.asarray(shifts)))
    axes = tuple(int(a) for a in np.ravel(np.asarray(axis, dtype=np.int64)))
    if not axes:
        return jnp.roll(x.reshape(-1), steps[0]).reshape(x.shape)
    return jnp.roll(x, steps, axes)


register_opaque("pd_op.roll", _roll)
register_opaque("pd_op.triu", lambda x, *, diagonal=0, **_: jnp.triu(x, diagonal))
register_opaque("pd_op.tril", lambda x, *, diagonal=0, **_: jnp.tril(x, diagonal))
register_opaque("pd_op.meshgrid", lambda *xs, **_: tuple(jnp.meshgrid(*xs, indexing="ij")))
register_opaque("pd_op.stack", lambda *xs, axis, **_: jnp.stack(xs, axis=axis))
register_opaque(
    "pd_op.argmax",
    lambda x, axis, *, keepdims, dtype="int64", **_: jnp.argmax(
        x, axis=_axis(axis), keepdims=bool(keepdims)
    ).astype(dtype),
)


def _softplus(x: jax.Array, *, beta: float = 1.0, threshold: float = 20.0, **_: Any) -> jax.Array:
    """``log(1 + exp(beta x)) / beta``, and x itself where ``beta x`` exceeds ``threshold``."""
    scaled = x * beta
    return jnp.where(scaled > threshold, x, jnp.logaddexp(scaled, 0.0) / beta)


def _mish(x: jax.Array, **attrs: Any) -> jax.Array:
    """``x tanh(softplus(x))``, softplus linear past ``lambda``."""
    return x * jnp.tanh(_softplus(x, threshold=attrs.get("lambda", 20.0)))


def _prelu(x: jax.Array, alpha: jax.Array, *, mode: str, data_format: str = "NCHW", **_: Any) -> jax.Array:
    """max(x, 0) + alpha min(x, 0): one alpha (``all``), one per channel, or one per element."""
    if mode == "channel":
        axis = 1 if data_format.startswith("NC") else x.ndim - 1
        alpha = alpha.reshape([-1 if i == axis else 1 for i in range(x.ndim)])
    elif mode == "element":
        alpha = alpha.reshape(x.shape[1:])
    return jnp.where(x > 0, x, alpha * x)


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def _pad3d(
    x: jax.Array, paddings: Any, *, mode: str, pad_value: float, data_format: str, **_: Any
) -> jax.Array:
    """``pad3d``: paddings (left, right, top, bottom, front, back) of the W, H and D axes."""
    p = [int(v) for v in np.asarray(paddings).ravel()]
    spatial = [(p[4], p[5]), (p[2], p[3]), (p[0], p[1])]
    widths = [(0, 0), (0, 0), *spatial] if data_format == "NCDHW" else [(0, 0), *spatial, (0, 0)]
    extra = {"constant_values": pad_value} if mode == "constant" else {}
    return jnp.pad(x, widths, mode=_PAD_MODES[mode], **extra)


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


def _pool2d(x: jax.Array, kernel: Any, *, pooling_type: str, adaptive: int = 0, **attrs: Any) -> jax.Array:
    """``pool2d`` where eqsat's canonical pool cannot say it: adaptive windows that do not divide the
    input (NCHW)."""
    if not adaptive or attrs.get("data_format", "NCHW") != "NCHW":
        raise UnsupportedError("pd_op.pool2d as an opaque op is supported for adaptive NCHW pooling only")
    out = _adaptive_sizes(x, kernel)
    reduce = (lambda w: jnp.max(w, axis=-1)) if pooling_type == "max" else (lambda w: jnp.mean(w, axis=-1))
    return _stacked(_adaptive_pool(x, out, reduce), x, out)


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


def _operand_groups(tensors: tuple[Any, ...], operands: str) -> list[Any]:
    """The operands after the first, by the layout ``operands`` records: a tensor (``t``), None where
    absent (``n``), or a list of n (``l<n>``)."""
    present = iter(tensors)
    groups: list[Any] = []
    for kind in operands.split(",")[1:]:
        if kind == "n":
            groups.append(None)
        elif kind.startswith("l"):
            groups.append([next(present) for _ in range(int(kind[1:]))])
        else:
            groups.append(next(present))
    return groups


def _known_ints(op: str, what: str, values: Any) -> list[float]:
    """The numbers in an operand that sizes a result: known when the program is read (shape arithmetic
    on the bound inputs), not computed from tensor values."""
    parts = values if isinstance(values, list) else [values]
    if any(isinstance(v, jax.core.Tracer) for v in parts):
        raise UnsupportedError(f"{op}: its {what} is computed from tensor values, not from shapes")
    return [float(v) for part in parts for v in np.asarray(part).ravel()]


def _interpolate(
    x: jax.Array, *tensors: jax.Array, interp_method: str, operands: str = "t", **attrs: Any
) -> jax.Array:
    """``nearest_interp`` / ``bilinear_interp`` (NCHW) to out_h × out_w (or by ``scale``), with Paddle's
    align_corners and align_mode: nearest reads floor(i · ratio); bilinear blends the two neighbours of
    (i + 0.5) · ratio - 0.5 (align_mode 0) or of i · ratio (align_mode 1), clamped to the input. As
    Paddle sizes it: a ``size_tensor`` list gives the size (no scale); else the scale (``scale_tensor``,
    else the attribute) and then an ``out_size`` tensor (such as another tensor's shape) override
    out_h and out_w."""
    op = f"pd_op.{interp_method}_interp"
    out_size, sizes, scale_tensor = ([*_operand_groups(tensors, operands), None, None, None])[:3]
    height, width = x.shape[-2:]
    scale = [float(s) for s in attrs.get("scale", ())]
    if scale_tensor is not None:
        scale = _known_ints(op, "scale", scale_tensor)
    scale = (scale * 2)[:2] if scale else [0.0, 0.0]
    out_h = attrs["out_h"] if attrs["out_h"] > 0 else int(height * scale[0])
    out_w = attrs["out_w"] if attrs["out_w"] > 0 else int(width * scale[1])
    if out_size is not None:
        out_h, out_w = (int(v) for v in _known_ints(op, "output size", out_size)[:2])
    if sizes:
        out_h, out_w = (int(v) for v in _known_ints(op, "output size", sizes)[:2])
        scale = [0.0, 0.0]
    corners = bool(attrs.get("align_corners", 0))
    for axis, (size, out, s) in enumerate(zip((height, width), (out_h, out_w), scale, strict=True)):
        axis = x.ndim - 2 + axis
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


register_opaque("pd_op.elu", lambda x, *, alpha=1.0, **_: jax.nn.elu(x, alpha))
register_opaque("pd_op.softplus", _softplus)
register_opaque("pd_op.mish", _mish)
register_opaque("pd_op.prelu", _prelu)
register_opaque("pd_op.pad3d", _pad3d)
register_opaque("pd_op.group_norm", _group_norm)
register_opaque("pd_op.instance_norm", _instance_norm)
register_opaque("pd_op.max_pool2d_with_index", _adaptive_max_with_index)
register_opaque("pd_op.pool2d", _pool2d)
register_opaque("pd_op.nearest_interp", _interpolate)
register_opaque("pd_op.bilinear_interp", _interpolate)
