"""Ops that pick elements by their order along one axis (ByteIR linalg-ext's ``topk``): the k largest
values and their positions, and the position of the largest or smallest element.

``top_k`` and ``top_k_indices`` are the two results of one ``lax.top_k`` (XLA computes the pair once for
both); they order as XLA's TopK does, by the total order (NaN above +inf, +0 above -0), ties by the
lower position. ``argmax`` and ``argmin`` compare as ``jnp.argmax`` does (NaN is the extreme, -0 ties
+0, the first position wins): a different order from ``top_k``'s, so neither op is the other's k = 1.
Their results are positions (``OpDef.positions``): a rule may replace them by positions that hold the
same values of the ranked operand (``eqsat.verify`` checks it so).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax import lax

from eqsat.errors import ShapeError
from eqsat.shapes import EggRule, Shape, ShapeRule
from eqsat.types import TensorType

from .base import AXIS, Attr, Kernel, OpDef, numeric
from .elementwise import available
from .reduce import Reduce, reduction_flops

Array = jax.Array
INDEX_DTYPES = ("int32", "int64", "uint32", "uint64", "int16", "uint16", "int8", "uint8")


@dataclass(frozen=True)
class TopK(ShapeRule):
    """The operand's shape with ``axis`` of size ``k`` (at most the axis' size)."""

    def infer(self, shapes: Sequence[Shape], attrs: dict) -> Shape:
        (x,) = shapes
        axis, k = attrs["axis"], attrs["k"]
        if not 0 <= k <= x[axis]:
            raise ShapeError(f"top_k: k = {k} outside 0..{x[axis]} (the size of axis {axis})")
        return (*x[:axis], k, *x[axis + 1 :])

    def egglog(self, pattern: dict[str, str]) -> list[EggRule]:
        return [("", f"(vec-set {pattern['s0']} {pattern['axis']} {pattern['k']})")]


@dataclass(frozen=True)
class Pick(Reduce):
    """A reduction's shape, of an axis that has an element to pick."""

    def infer(self, shapes: Sequence[Shape], attrs: dict) -> Shape:
        if shapes[0][attrs["axis"]] == 0:
            raise ShapeError(f"no position to pick along axis {attrs['axis']} of size 0")
        return super().infer(shapes, attrs)


def _top_k(x: Array, axis: int, k: int) -> tuple[Array, Array]:
    """``lax.top_k`` along ``axis`` (moved last and back: older JAX has no ``axis``)."""
    values, indices = lax.top_k(jnp.moveaxis(x, axis, -1), k)
    return jnp.moveaxis(values, -1, axis), jnp.moveaxis(indices, -1, axis)


def _values(x: Array, *, axis: int, k: int) -> Array:
    return _top_k(x, axis, k)[0]


def _indices(x: Array, *, axis: int, k: int) -> Array:
    return _top_k(x, axis, k)[1]


def _top_k_phases(ins: Sequence[TensorType], out: TensorType, attrs: dict) -> list[Kernel]:
    """One pass over the operand keeping the best k of each row: about log2(k + 1) comparisons each."""
    x = ins[0]
    return [Kernel(float(x.size) * math.log2(attrs["k"] + 1), float(x.nbytes + out.nbytes))]


def _top_k_op(name: str, doc: str, dtype: int | str, lower: object, positions: bool) -> OpDef:
    return OpDef(
        name,
        1,
        doc,
        (AXIS, Attr("k", "int")),
        TopK(),
        dtype=dtype,
        phases=_top_k_phases,
        axis_attr="axis",
        check=numeric,
        lower=lower,  # type: ignore[arg-type]
        positions=positions,
    )


TOP_K = _top_k_op("top_k", "the k largest values along axis, largest first (XLA's TopK order)", 0, _values, False)
TOP_K_INDICES = _top_k_op(
    "top_k_indices",
    "the positions of top_k's values along axis (int32), ties by the lower position",
    "int32",
    _indices,
    True,
)


def _index_dtype(types: Sequence[TensorType], attrs: dict) -> str | None:
    """Dtype check: a number to compare, positions of an integer dtype."""
    if attrs.get("dtype") not in INDEX_DTYPES:
        return f"positions of dtype {attrs.get('dtype')}: an integer dtype is needed"
    return numeric(types, attrs)


def _arg(name: str, which: str, find: object) -> OpDef:
    def lower(x: Array, *, axis: int, keepdim: int, dtype: str) -> Array:
        out = find(x, axis, available(dtype))  # type: ignore[operator]
        return jnp.expand_dims(out, axis) if keepdim else out

    return OpDef(
        name,
        1,
        f"the first position of the {which} along axis (NaN counts as the {which}; -0 and +0 tie)",
        (AXIS, Attr("keepdim", "int", 0, (0, 1)), Attr("dtype", "str", "int32")),
        Pick(),
        dtype="dtype",
        flops=reduction_flops,
        axis_attr="axis",
        fusion="reduce",
        check=_index_dtype,
        lower=lower,
        positions=True,
    )


ARGMAX = _arg("argmax", "largest", lax.argmax)
ARGMIN = _arg("argmin", "smallest", lax.argmin)
ORDER = [TOP_K, TOP_K_INDICES, ARGMAX, ARGMIN]
