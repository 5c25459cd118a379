"""Reductions over one axis (max, sum) and softmax."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from eqsat.shapes import EggRule, Shape, ShapeRule
from eqsat.types import TensorType

from .base import AXIS, Attr, OpDef, floats

Array = jax.Array


@dataclass(frozen=True)
class Reduce(ShapeRule):
    """Reduction over one ``axis``, keeping it as size 1 when ``keepdim``."""

    def infer(self, shapes: Sequence[Shape], attrs: dict) -> Shape:
        (x,) = shapes
        axis = attrs["axis"]
        return (*x[:axis], 1, *x[axis + 1 :]) if attrs["keepdim"] else (*x[:axis], *x[axis + 1 :])

    def egglog(self, pattern: dict[str, str]) -> list[EggRule]:
        s, a, k = pattern["s0"], pattern["axis"], pattern["keepdim"]
        return [(f"(= {k} 1)", f"(vec-set {s} {a} 1)"), (f"(= {k} 0)", f"(vec-remove {s} {a})")]


def _reduce_flops(ins: Sequence[TensorType], out: TensorType, attrs: dict) -> float:
    return float(ins[0].size)


def _lowest(dtype: np.dtype) -> Any:
    """The identity of max: -inf, the smallest integer, or False."""
    if jnp.issubdtype(dtype, jnp.floating):
        return -np.inf
    return False if dtype == np.bool_ else jnp.iinfo(dtype).min


def _reduce(x: Array, init: Any, combine: Any, axis: int, keepdim: int) -> Array:
    """lax.reduce in x's own dtype (no promotion of small ints), defined on a size-0 axis too."""
    out = lax.reduce(x, np.asarray(init, x.dtype), combine, (axis,))
    return jnp.expand_dims(out, axis) if keepdim else out


def _reduce_max(x: Array, *, axis: int, keepdim: int) -> Array:
    return _reduce(x, _lowest(x.dtype), lax.max, axis, keepdim)


def _reduce_sum(x: Array, *, axis: int, keepdim: int) -> Array:
    return _reduce(x, 0, lax.add, axis, keepdim)


def _reduction(name: str, doc: str, lower: Any) -> OpDef:
    attrs = (AXIS, Attr("keepdim", "int", 0))
    return OpDef(name, 1, doc, attrs, Reduce(), flops=_reduce_flops, axis_attr="axis", lower=lower)


REDUCTIONS = [
    _reduction("reduce_max", "max over one axis", _reduce_max),
    _reduction("reduce_sum", "sum over one axis", _reduce_sum),
]
SOFTMAX = OpDef(
    "softmax",
    1,
    "exp(x - max) / sum(exp(x - max)) along axis",
    (AXIS,),
    flops=lambda i, o, a: 5.0 * i[0].size,
    axis_attr="axis",
    check=floats,
    lower=lambda x, *, axis: jax.nn.softmax(x, axis=axis),
)
