"""Ops that pick elements by their order along one axis (ByteIR linalg-ext's ``topk``): the positions
of the k largest, the position of the largest or smallest element, the elements at given positions
(``take_along``), and a sort and its positions (whose first k, descending, are a top-k).

``lax.top_k``'s two results are ``top_k`` (positions) and ``take_along`` of them (values): one kernel
for both, as XLA computes the pair, and a cost model sees that a program reading both pays for one.
``top_k`` orders as XLA's TopK does, by the total order (NaN above +inf, +0 above -0), ties by the
lower position. ``argmax`` and ``argmin`` compare as ``jnp.argmax`` does (NaN is the extreme, -0 ties
+0, the first position wins): a different order from ``top_k``'s, so neither op is the other's k = 1.
Their results are positions (``OpDef.positions``): a rule may replace them by positions that hold the
same values of the ranked operand (``eqsat.verify`` checks it so).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from eqsat.egglog_text import app
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
        return [("", app("vec-set", pattern["s0"], pattern["axis"], pattern["k"]))]


@dataclass(frozen=True)
class Pick(Reduce):
    """A reduction's shape, of an axis that has an element to pick."""

    def infer(self, shapes: Sequence[Shape], attrs: dict) -> Shape:
        if shapes[0][attrs["axis"]] == 0:
            raise ShapeError(f"no position to pick along axis {attrs['axis']} of size 0")
        return super().infer(shapes, attrs)


def _top_k(x: Array, *, axis: int, k: int) -> Array:
    """The positions of ``lax.top_k`` along ``axis`` (moved last and back: older JAX has no ``axis``)."""
    return jnp.moveaxis(lax.top_k(jnp.moveaxis(x, axis, -1), k)[1], -1, axis)


def _top_k_phases(ins: Sequence[TensorType], out: TensorType, attrs: dict) -> list[Kernel]:
    """One pass over the operand keeping the best k of each row, about 3 + k / 48 comparisons an element
    (XLA:CPU's TopK over 8 x 32000 floats: 0.35 ms at k = 1 to 8, 0.40 ms at 40, 0.68 ms at 128), at
    the device's ``order`` rate."""
    x = ins[0]
    return [Kernel(float(x.size) * (3 + attrs["k"] / 48), float(x.nbytes + out.nbytes), kind="order")]


TOP_K = OpDef(
    "top_k",
    1,
    "the positions of the k largest elements along axis (int32), largest first, ties by the lower "
    "position (XLA's TopK order); their values are ``take_along`` of them",
    (AXIS, Attr("k", "int")),
    TopK(),
    dtype="int32",
    phases=_top_k_phases,
    axis_attr="axis",
    # XLA:CPU's TopK of 1 over 8 x 32000 floats took 0.35 ms, an argmax and a max 0.22-0.28 ms: a
    # custom call no roofline prices, so the default cost model times it
    timed=True,
    check=numeric,
    lower=_top_k,
    positions=True,
)


@dataclass(frozen=True)
class TakeAlong(ShapeRule):
    """The positions' shape, which is the operand's but along ``axis``."""

    def infer(self, shapes: Sequence[Shape], attrs: dict) -> Shape:
        x, positions = shapes
        axis = attrs["axis"]
        off_axis = [d for d in range(len(x)) if d != axis]
        if len(x) != len(positions) or any(x[d] != positions[d] for d in off_axis):
            raise ShapeError(f"take_along: positions {positions} do not fit an operand {x} off axis {axis}")
        return positions

    def egglog(self, pattern: dict[str, str]) -> list[EggRule]:
        return [("", pattern["s1"])]


def _take_along(x: Array, positions: Array, *, axis: int) -> Array:
    return jnp.take_along_axis(x, positions, axis=axis, mode="clip")


def _take_along_bytes(ins: Sequence[TensorType], out: TensorType, attrs: dict) -> float:
    """It reads the positions and the elements they pick, and writes those."""
    return float(ins[1].nbytes + 2 * out.nbytes)


def _picks_by_position(types: Sequence[TensorType], attrs: dict) -> str | None:
    """Dtype check: positions of an integer dtype."""
    dtype = types[1].dtype
    return None if dtype in INDEX_DTYPES else f"positions of dtype {dtype}: an integer dtype is needed"


TAKE_ALONG = OpDef(
    "take_along",
    2,
    "the elements of x at positions along axis (``jnp.take_along_axis``; positions within the axis)",
    (AXIS,),
    TakeAlong(),
    bytes=_take_along_bytes,
    axis_attr="axis",
    check=_picks_by_position,
    lower=_take_along,
)


def _sort_phases(ins: Sequence[TensorType], out: TensorType, attrs: dict) -> list[Kernel]:
    """A comparison sort of each row: about n log2 n comparisons, the data read and written once;
    XLA:CPU calls its comparator for each, about 12 times slower than a TopK's (argsort of 8 x 512,
    64 x 4096 and 8 x 32000 floats: 0.3, 17 and 23 ms), as 12 of them."""
    x = ins[0]
    n = max(x.shape[attrs["axis"]], 2)
    return [Kernel(12 * float(x.size) * math.log2(n), float(x.nbytes + out.nbytes), kind="order")]


def _argsort(x: Array, *, axis: int, descending: int) -> Array:
    """The positions of ``lax.sort``'s stable order (x sorted with its positions along); descending, as
    ``jnp.argsort`` sorts so: x reversed, ascending, its positions reversed back (ties keep their order)."""
    positions = lax.broadcasted_iota(jnp.int32, x.shape, axis)
    if not descending:
        return lax.sort((x, positions), dimension=axis, is_stable=True, num_keys=1)[1]
    backwards = (lax.rev(x, (axis,)), lax.rev(positions, (axis,)))
    return lax.rev(lax.sort(backwards, dimension=axis, is_stable=True, num_keys=1)[1], (axis,))


_SORT_ORDER = "stable, ascending, as lax.sort compares: NaNs last, -0 and +0 tie"
SORT = OpDef(
    "sort",
    1,
    f"x sorted along axis ({_SORT_ORDER}); ``take_along`` of argsort where its positions are read too",
    (AXIS,),
    phases=_sort_phases,
    axis_attr="axis",
    timed=True,  # the comparator-driven sort is the slowest kernel per element XLA runs
    check=numeric,
    lower=lambda x, *, axis: lax.sort(x, dimension=axis, is_stable=True),
)
ARGSORT = OpDef(
    "argsort",
    1,
    f"the positions of x's elements in its sort along axis (int32; {_SORT_ORDER}); descending: the "
    "largest first, ties still in their order",
    (AXIS, Attr("descending", "int", 0, (0, 1))),
    dtype="int32",
    phases=_sort_phases,
    axis_attr="axis",
    timed=True,
    check=numeric,
    lower=_argsort,
    positions=True,
)


def _index_dtype(types: Sequence[TensorType], attrs: dict) -> str | None:
    """Dtype check: positions of an integer dtype (of any operand: bools compare as 0 and 1)."""
    if attrs.get("dtype") not in INDEX_DTYPES:
        return f"positions of dtype {attrs.get('dtype')}: an integer dtype is needed"
    return None


def _first_position(extreme: Any) -> Any:
    """``lax.argmax`` (``extreme`` jnp.max) or ``argmin`` (jnp.min) as two reductions XLA:CPU runs
    several times faster than its variadic one (0.16 against 0.67 ms over 8 x 32000 floats): the
    extreme (NaN where there is one), then the first position holding it, or a NaN."""

    def lower(x: Array, *, axis: int, keepdim: int, dtype: str) -> Array:
        best = extreme(x, axis=axis, keepdims=True)
        held = (x == best) | (x != x)
        where = lax.broadcasted_iota(jnp.int32, x.shape, axis)
        first = jnp.min(jnp.where(held, where, x.shape[axis]), axis=axis, keepdims=bool(keepdim))
        return lax.convert_element_type(first, available(dtype))

    return lower


def _arg(name: str, which: str, extreme: Any) -> OpDef:
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
        lower=_first_position(extreme),
        positions=True,
    )


ARGMAX = _arg("argmax", "largest", jnp.max)
ARGMIN = _arg("argmin", "smallest", jnp.min)
ORDER = [TOP_K, ARGMAX, ARGMIN, TAKE_ALONG, SORT, ARGSORT]
