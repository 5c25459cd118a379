"""Normalizations: ``reduce_mean`` (the statistic they take), ``rms_norm`` and ``layer_norm`` over the
last axis. Each computes in its input's dtype, in the order the common spellings write it (a program
in half precision that normalizes in float32 holds the casts around the op), so that recognizing one
from its expansion changes at most the grouping of a product (``rules/normalize.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from eqsat.errors import ShapeError
from eqsat.shapes import EggRule, Shape, ShapeRule, broadcasts_to
from eqsat.types import FLOAT_DTYPES, TensorType

from .base import AXIS, Attr, Kernel, OpDef, floats, spelled
from .reduce import Reduce

Array = jax.Array


def _mean(x: Array, axis: int, keepdim: bool) -> Array:
    """The sum along ``axis`` divided by its length, in x's dtype (as ``jnp.mean`` traces for float32:
    a division, or a product by the inverse where that is exact)."""
    total = lax.reduce(x, np.asarray(0, x.dtype), lax.add, (axis,))
    total = jnp.expand_dims(total, axis) if keepdim else total
    return total / jnp.asarray(x.shape[axis], x.dtype)


def _reduce_mean(x: Array, *, axis: int, keepdim: int) -> Array:
    return _mean(x, axis, bool(keepdim))


_ROWS, _VECTOR = ((4, 16), "float32"), ((16,), "float32")


@spelled("jnp.mean", _ROWS)
def _jnp_mean(x: Array) -> Array:
    return jnp.mean(x, axis=-1)


@spelled("flax.linen.RMSNorm", _ROWS, _VECTOR)
def _flax_rms_norm(x: Array, scale: Array) -> Array:
    mean_square = jnp.mean(lax.square(x), axis=-1, keepdims=True)
    return x * lax.rsqrt(mean_square + 1e-6) * scale


@spelled("flax.linen.LayerNorm (its fast variance)", _ROWS, _VECTOR, _VECTOR)
def _flax_layer_norm(x: Array, scale: Array, bias: Array) -> Array:
    mean = jnp.mean(x, axis=-1, keepdims=True)
    variance = jnp.maximum(0.0, jnp.mean(lax.square(x), axis=-1, keepdims=True) - lax.square(mean))
    return (x - mean) * (lax.rsqrt(variance + 1e-6) * scale) + bias


REDUCE_MEAN = OpDef(
    "reduce_mean",
    1,
    "mean over one axis: the sum divided by the axis's length, in x's dtype",
    (AXIS, Attr("keepdim", "int", 0)),
    Reduce(),
    flops=lambda i, o, a: float(i[0].size),
    axis_attr="axis",
    check=floats,
    fusion="reduce",
    lower=_reduce_mean,
    spellings=(_jnp_mean,),
)


@dataclass(frozen=True)
class LastAxisNorm(ShapeRule):
    """x's shape; the scale (and the bias) broadcast along x's last axis only."""

    def infer(self, shapes: Sequence[Shape], attrs: dict) -> Shape:
        x, *vectors = shapes
        if not x:
            raise ShapeError("a normalization needs an axis to normalize over")
        for v in vectors:
            if not broadcasts_to(v, (x[-1],)):
                raise ShapeError(f"a normalization's scale or bias {v} must broadcast to ({x[-1]},)")
        return x

    def egglog(self, pattern: dict[str, str]) -> list[EggRule]:
        return [("", pattern["s0"])]


def _same_dtypes(types: Sequence[TensorType], attrs: dict) -> str | None:
    if types[0].dtype not in FLOAT_DTYPES:
        return f"needs a floating-point input, got {types[0].dtype}"
    other = [t.dtype for t in types[1:] if t.dtype != types[0].dtype]
    return f"scale and bias must be of x's dtype, got {other[0]}" if other else None


def _scaled(y: Array, scale: Array) -> Array:
    """y times the scale, unless the scale is known to be all ones."""
    return y if isinstance(scale, np.ndarray) and bool((scale == 1).all()) else y * scale


def _biased(y: Array, bias: Array) -> Array:
    """y plus the bias, unless the bias is known to be all zeros."""
    return y if isinstance(bias, np.ndarray) and not bias.any() else y + bias


def _rms_norm(x: Array, scale: Array, *, epsilon: float) -> Array:
    mean_square = _mean(x * x, x.ndim - 1, True)
    return _scaled(x * lax.rsqrt(mean_square + jnp.asarray(epsilon, x.dtype)), scale)


def _layer_norm(
    x: Array, scale: Array, bias: Array, *, epsilon: float, fast_variance: int, distributed: int
) -> Array:
    axis = x.ndim - 1
    mean = _mean(x, axis, True)
    centered = x - mean
    if fast_variance:  # E[x²] - E[x]², clamped at 0
        variance = jnp.maximum(jnp.asarray(0, x.dtype), _mean(x * x, axis, True) - mean * mean)
    else:
        variance = _mean(centered * centered, axis, True)
    root = lax.rsqrt(variance + jnp.asarray(epsilon, x.dtype))
    if distributed:  # Keras's order: x * inv + (-mean * inv + bias), inv = root * scale
        inv = _scaled(root, scale)
        return x * inv + _biased(-mean * inv, bias)
    return _biased(_scaled(centered * root, scale), bias)


def _norm_phases(ins: Sequence[TensorType], out: TensorType, attrs: dict) -> list[Kernel]:
    """A pass computing the statistics, one normalizing (XLA fuses each); a scale or bias that is not a
    scalar (a scalar 1 or 0 is skipped) is one more product or sum per element, and its read."""
    x, *vectors = ins
    extra = [v for v in vectors if v.size > 1]
    normalize = Kernel((4.0 + len(extra)) * x.size, 2.0 * x.nbytes + sum(v.nbytes for v in extra))
    return [Kernel(3.0 * x.size, float(x.nbytes)), normalize]


_EPSILON = Attr("epsilon", "float")
NORMS = [
    REDUCE_MEAN,
    OpDef(
        "rms_norm",
        2,
        "x * rsqrt(mean(x², last axis) + epsilon) * scale (x, scale), in x's dtype",
        (_EPSILON,),
        LastAxisNorm(),
        phases=_norm_phases,
        fusion="reduce",
        check=_same_dtypes,
        lower=_rms_norm,
        spellings=(_flax_rms_norm,),
    ),
    OpDef(
        "layer_norm",
        3,
        "(x - mean) * rsqrt(variance + epsilon) * scale + bias over the last axis (x, scale, bias), in "
        "x's dtype; the variance is mean((x - mean)²), or with fast_variance max(0, mean(x²) - mean²); "
        "distributed: x * inv + (-mean * inv + bias), inv = rsqrt(variance + epsilon) * scale (Keras's "
        "order of the same operations)",
        (_EPSILON, Attr("fast_variance", "int", 0, (0, 1)), Attr("distributed", "int", 0, (0, 1))),
        LastAxisNorm(),
        phases=_norm_phases,
        fusion="reduce",
        check=_same_dtypes,
        lower=_layer_norm,
        spellings=(_flax_layer_norm,),
    ),
]
