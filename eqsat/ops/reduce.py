"""Reductions over one axis (max, sum), softmax and masked softmax."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from eqsat.egglog_text import app, equal
from eqsat.errors import ShapeError
from eqsat.shapes import EggRule, Shape, ShapeRule, broadcasts_to
from eqsat.types import FLOAT_DTYPES, HALF_DTYPES, TensorType

from .base import AXIS, RESULT_DTYPE, SHIFTED, Attr, Kernel, OpDef, floats, spelled
from .elementwise import available

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
        return [(equal(k, 1), app("vec-set", s, a, 1)), (equal(k, 0), app("vec-remove", s, a))]


def reduction_flops(ins: Sequence[TensorType], out: TensorType, attrs: dict) -> float:
    return float(ins[0].size)


def lowest(dtype: np.dtype) -> Any:
    """The identity of max: -inf, the smallest integer, or False."""
    if jnp.issubdtype(dtype, jnp.floating):
        return -np.inf
    return False if dtype == np.bool_ else jnp.iinfo(dtype).min


def _reduce(x: Array, init: Any, combine: Any, axis: int, keepdim: int) -> Array:
    """lax.reduce in x's own dtype (no promotion of small ints), defined on a size-0 axis too."""
    out = lax.reduce(x, np.asarray(init, x.dtype), combine, (axis,))
    return jnp.expand_dims(out, axis) if keepdim else out


def _reduce_max(x: Array, *, axis: int, keepdim: int) -> Array:
    return _reduce(x, lowest(x.dtype), lax.max, axis, keepdim)


def _reduce_sum(x: Array, *, axis: int, keepdim: int) -> Array:
    return _reduce(x, 0, lax.add, axis, keepdim)


def _reduction(name: str, doc: str, lower: Any) -> OpDef:
    attrs = (AXIS, Attr("keepdim", "int", 0))
    return OpDef(
        name, 1, doc, attrs, Reduce(), flops=reduction_flops, axis_attr="axis", fusion="reduce", lower=lower
    )


REDUCTIONS = [
    _reduction("reduce_max", "max over one axis", _reduce_max),
    _reduction("reduce_sum", "sum over one axis", _reduce_sum),
]


def softmax_passes(x: TensorType, out: TensorType, axis: int) -> list[Kernel]:
    """A softmax as XLA:CPU runs it (its optimized HLO): the exponentials of x shifted by its max, written
    in at least float32; their sum, which reads them back; the sums' reciprocals; and the normalization,
    which reads the exponentials again. A float32 or float64 x is read by one kernel for the max and
    the exponentials; a half-precision one, upcast for ``exp``, by a max of its own and then the
    exponentials. Against ``exp(x) / sum(exp(x))`` as written, the max is the extra work."""
    rows = x.size / max(x.shape[axis], 1)
    half = x.dtype in HALF_DTYPES
    exps = float(4 * x.size if half else x.nbytes)
    shifted = [Kernel(3.0 * x.size, x.nbytes + exps)]
    if half:
        shifted = [Kernel(float(x.size), float(x.nbytes)), Kernel(2.0 * x.size, x.nbytes + exps)]
    return [
        *shifted,
        Kernel(float(x.size), exps),
        Kernel(rows, 8.0 * rows),
        Kernel(2.0 * x.size, exps + out.nbytes),
    ]


def softmax(x: Array, *, axis: int, shifted: int = 1) -> Array:
    """exp(x - max) / sum(exp(x - max)) along axis, or unshifted, exp(x) / sum(exp(x)), as written."""
    if shifted:
        return jax.nn.softmax(x, axis=axis)
    e = jnp.exp(x)
    return e / jnp.sum(e, axis=axis, keepdims=True)


_ROWS = ((4, 16), "float32")


@spelled("jax.nn.softmax", _ROWS)
def _jax_softmax(x: Array) -> Array:
    return jax.nn.softmax(x)


@spelled("flax's attention weights: masked logits filled with the dtype's minimum", _ROWS, ((4, 16), "bool"))
def _filled_softmax(x: Array, mask: Array) -> Array:
    return jax.nn.softmax(jnp.where(mask, x, jnp.finfo(x.dtype).min))


SOFTMAX = OpDef(
    "softmax",
    1,
    "exp(x - max) / sum(exp(x - max)) along axis; unshifted (shifted = 0), exp(x) / sum(exp(x)), "
    "its overflow included",
    (AXIS, SHIFTED),
    phases=lambda i, o, a: softmax_passes(i[0], o, a["axis"]),
    axis_attr="axis",
    check=floats,
    fusion="reduce",
    lower=softmax,
    spellings=(_jax_softmax,),
)


@dataclass(frozen=True)
class MaskedSoftmax(ShapeRule):
    """x's shape; the mask broadcasts to it."""

    def infer(self, shapes: Sequence[Shape], attrs: dict) -> Shape:
        x, mask = shapes
        if not broadcasts_to(mask, x):
            raise ShapeError(f"masked_softmax: mask {mask} does not broadcast to {x}")
        return x

    def egglog(self, pattern: dict[str, str]) -> list[EggRule]:
        return [("", pattern["s0"])]


def _masked_operands(types: Sequence[TensorType], attrs: dict) -> str | None:
    if types[0].dtype not in FLOAT_DTYPES or attrs["dtype"] not in FLOAT_DTYPES:
        return f"needs floating-point x and dtype, got {types[0].dtype} and {attrs['dtype']}"
    return None if types[1].dtype == "bool" else f"mask must be bool, got {types[1].dtype}"


def _masked_softmax(
    x: Array, mask: Array, *, fill: float, zero_masked: int, axis: int, dtype: str, shifted: int
) -> Array:
    """As written: the fill where the mask is false (in x's dtype), cast to ``dtype``, softmax (shifted
    or not), and the masked probabilities zeroed."""
    keep = None if isinstance(mask, np.ndarray) and bool(mask.all()) else mask
    if keep is not None:
        x = jnp.where(keep, x, jnp.asarray(fill, x.dtype))
    p = softmax(lax.convert_element_type(x, available(dtype)), axis=axis, shifted=shifted)
    return jnp.where(keep, p, jnp.asarray(0, p.dtype)) if zero_masked and keep is not None else p


def _masked_phases(ins: Sequence[TensorType], out: TensorType, attrs: dict) -> list[Kernel]:
    """As written: the fill where masked (unless the mask is a scalar), the softmax, the zeroing."""
    x, mask = ins
    passes = (mask.size > 1) * (1 + attrs["zero_masked"])
    where = Kernel(float(x.size), 2.0 * x.nbytes + mask.nbytes)
    return [*([where] * passes), *softmax_passes(x, out, attrs["axis"])]


MASKED_SOFTMAX = OpDef(
    "masked_softmax",
    2,
    "softmax along axis of where(mask, x, fill) cast to dtype (x, mask); zero_masked: the probabilities "
    "where the mask is false are 0 (a fully masked row gives 0, not the uniform average or NaN)",
    (
        Attr("fill", "float", -np.inf),
        Attr("zero_masked", "int", 0, (0, 1)),
        AXIS,
        RESULT_DTYPE,
        SHIFTED,
    ),
    MaskedSoftmax(),
    "dtype",
    lambda i, o, a: 6.0 * i[0].size,
    phases=_masked_phases,
    axis_attr="axis",
    fusion="reduce",
    check=_masked_operands,
    lower=_masked_softmax,
    spellings=(_filled_softmax,),
)
