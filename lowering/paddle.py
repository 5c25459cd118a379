"""JAX meanings of Paddle ops that load as opaque (no canonical op says what they compute)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from . import paddle_rnn, register_opaque


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


def _layer_norm(
    x: jax.Array, *params: jax.Array, begin_norm_axis: int, epsilon: float, operands: str = "t,t,t", **_: Any
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``pd_op.layer_norm``: normalized over the dims from ``begin_norm_axis`` on, then scale and bias
    (each optional: ``<<NULL VALUE>>``); also the mean and variance, flattened as Paddle returns them."""
    scale, bias = _optional(params, operands, 1, 2)
    axes = tuple(range(begin_norm_axis, x.ndim))
    mean = jnp.mean(x, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=axes, keepdims=True)
    y = (x - mean) * jax.lax.rsqrt(var + epsilon)
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
register_opaque("pd_op.fused_conv2d_add_act", _fused_conv2d_add_act)
register_opaque("pd_op.batch_norm_", _batch_norm)
register_opaque("pd_op.pow", _pow)
register_opaque("pd_op.fused_bias_residual_layernorm", _fused_bias_residual_layernorm)
register_opaque("pd_op.abs", lambda x, **_: jnp.abs(x))
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
    return jnp.arange(*(np.asarray(v).item() for v in (start, end, step)), dtype=dtype)


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
register_opaque("pd_op.stack", lambda *xs, axis, **_: jnp.stack(xs, axis=axis))
register_opaque(
    "pd_op.argmax",
    lambda x, axis, *, keepdims, dtype="int64", **_: jnp.argmax(
        x, axis=_axis(axis), keepdims=bool(keepdims)
    ).astype(dtype),
)
