"""One JAX lowering per canonical op (see ``eqsat.ops`` for what each op means)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from . import register

Array = jax.Array

register("add")(jnp.add)
register("sub")(jnp.subtract)
register("mul")(jnp.multiply)
register("maximum")(jnp.maximum)
register("minimum")(jnp.minimum)
register("exp")(jnp.exp)
register("log")(jnp.log)
register("tanh")(jnp.tanh)
register("sigmoid")(jax.nn.sigmoid)
register("relu")(jax.nn.relu)
register("neg")(jnp.negative)
register("sqrt")(jnp.sqrt)
register("rsqrt")(lax.rsqrt)
register("is_finite")(lax.is_finite)
register("sin")(jnp.sin)
register("cos")(jnp.cos)
register("pow")(jnp.power)
register("eq")(jnp.equal)
register("ne")(jnp.not_equal)
register("lt")(jnp.less)
register("le")(jnp.less_equal)
register("gt")(jnp.greater)
register("ge")(jnp.greater_equal)
register("logical_and")(jnp.bitwise_and)
register("logical_or")(jnp.bitwise_or)
register("logical_not")(jnp.bitwise_not)


@register("iota")
def _iota(*, shape: tuple[int, ...], dimension: int, dtype: str) -> Array:
    return lax.broadcasted_iota(jnp.dtype(dtype), shape, dimension)


@register("div")
def _div(x: Array, y: Array) -> Array:
    """lax.div: true division of floats, integer quotients rounded toward zero (not jnp's floor)."""
    return lax.div(*jnp.broadcast_arrays(x, y))


@register("rem")
def _rem(x: Array, y: Array) -> Array:
    return lax.rem(*jnp.broadcast_arrays(x, y))


@register("gelu")
def _gelu(x: Array) -> Array:
    return jax.nn.gelu(x, approximate=True)


@register("full")
def _full(*, shape: tuple[int, ...], value: float, dtype: str) -> Array | np.ndarray:
    """A scalar full stays a numpy constant, so consumers can see its value (e.g. a zero mask)."""
    if int(np.prod(shape)) <= 1:
        return np.full(shape, value, dtype=jnp.dtype(dtype))
    return jnp.full(shape, value, dtype=dtype)


@register("matmul")
def _matmul(x: Array, y: Array, *, transpose_x: int, transpose_y: int, dtype: str) -> Array:
    """Transpose flags become the contraction's dims (no transposed copies); batch dims broadcast;
    products accumulate in ``dtype`` (jax's preferred_element_type)."""
    if not (transpose_x or transpose_y):
        return jnp.matmul(x, y, preferred_element_type=dtype)
    lhs = "...km" if transpose_x else "...mk"
    rhs = "...nk" if transpose_y else "...kn"
    return jnp.einsum(f"{lhs},{rhs}->...mn", x, y, preferred_element_type=dtype)


@register("scale")
def _scale(x: Array, *, scale: float, bias: float) -> Array:
    out = x * jnp.asarray(scale, x.dtype)
    return out + jnp.asarray(bias, x.dtype) if bias else out


@register("cast")
def _cast(x: Array, *, dtype: str) -> Array:
    return lax.convert_element_type(x, jnp.dtype(dtype))


@register("transpose")
def _transpose(x: Array, *, perm: tuple[int, ...]) -> Array:
    return jnp.transpose(x, perm)


@register("reshape")
def _reshape(x: Array, *, shape: tuple[int, ...]) -> Array:
    return jnp.reshape(x, shape)


@register("expand")
def _expand(x: Array, *, shape: tuple[int, ...]) -> Array:
    return jnp.broadcast_to(x, shape)


@register("concat")
def _concat(*xs: Array, axis: int) -> Array:
    return jnp.concatenate(xs, axis=axis)


@register("split")
def _split(x: Array, *, axis: int, sizes: tuple[int, ...], index: int) -> Array:
    start = sum(sizes[:index])
    return lax.slice_in_dim(x, start, start + sizes[index], axis=axis)


def _lowest(dtype: np.dtype) -> Any:
    """The identity of max: -inf, the smallest integer, or False."""
    if jnp.issubdtype(dtype, jnp.floating):
        return -np.inf
    return False if dtype == np.bool_ else jnp.iinfo(dtype).min


def _reduce(x: Array, init: Any, combine: Any, axis: int, keepdim: int) -> Array:
    """lax.reduce in x's own dtype (no promotion of small ints), defined on a size-0 axis too."""
    out = lax.reduce(x, np.asarray(init, x.dtype), combine, (axis,))
    return jnp.expand_dims(out, axis) if keepdim else out


@register("reduce_max")
def _reduce_max(x: Array, *, axis: int, keepdim: int) -> Array:
    return _reduce(x, _lowest(x.dtype), lax.max, axis, keepdim)


@register("reduce_sum")
def _reduce_sum(x: Array, *, axis: int, keepdim: int) -> Array:
    return _reduce(x, 0, lax.add, axis, keepdim)


@register("select")
def _select(cond: Array, x: Array, y: Array) -> Array:
    return jnp.where(cond, x, y)


@register("softmax")
def _softmax(x: Array, *, axis: int) -> Array:
    return jax.nn.softmax(x, axis=axis)


_ACTIVATIONS = {"none": lambda x: x, "relu": jax.nn.relu, "gelu": _gelu}


@register("linear")
def _linear(x: Array, w: Array, b: Array, *, transpose_y: int, act: str, dtype: str) -> Array:
    return _ACTIVATIONS[act](_matmul(x, w, transpose_x=0, transpose_y=transpose_y, dtype=dtype) + b)


@register("fma")
def _fma(x: Array, y: Array, z: Array) -> Array:
    return x * y + z


_CONV_DIMENSIONS = {"NCHW": ("NCHW", "OIHW", "NCHW"), "NHWC": ("NHWC", "HWIO", "NHWC")}


def _pairs(padding: tuple[int, ...]) -> list[tuple[int, int]]:
    return [(padding[0], padding[1]), (padding[2], padding[3])]


@register("conv2d")
def _conv2d(
    x: Array,
    w: Array,
    *,
    strides: tuple[int, ...],
    padding: tuple[int, ...],
    dilations: tuple[int, ...],
    groups: int,
    layout: str,
) -> Array:
    return lax.conv_general_dilated(
        x,
        w,
        window_strides=strides,
        padding=_pairs(padding),
        rhs_dilation=dilations,
        dimension_numbers=_CONV_DIMENSIONS[layout],
        feature_group_count=groups,
    )


@register("conv2d_bias_act")
def _conv2d_bias_act(x: Array, w: Array, b: Array, *, act: str, layout: str, **window: Any) -> Array:
    shape = (1, -1, 1, 1) if layout == "NCHW" else (-1,)
    return _ACTIVATIONS[act](_conv2d(x, w, layout=layout, **window) + b.reshape(shape))


def _window(layout: str, hw: tuple[int, ...], fill: int) -> tuple[int, ...]:
    return (fill, fill, *hw) if layout == "NCHW" else (fill, *hw, fill)


@register("pool2d")
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


@register("batch_norm")
def _batch_norm(
    x: Array, scale: Array, bias: Array, mean: Array, var: Array, *, epsilon: float, axis: int
) -> Array:
    shape = [1] * x.ndim
    shape[axis] = x.shape[axis]
    scale, bias, mean, var = (v.reshape(shape) for v in (scale, bias, mean, var))
    return (x - mean) * lax.rsqrt(var + np.asarray(epsilon, x.dtype)) * scale + bias
