"""Matrix products: ``matmul`` (transpose flags, accumulation dtype), the fused ``linear``
(``x @ w + b`` with an activation epilogue), and ``diag`` (a diagonal matrix, which a product reads as
a broadcast factor)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import product

import jax
import jax.numpy as jnp
from jax import lax

from eqsat.egglog_text import app, equal, vec
from eqsat.errors import ShapeError
from eqsat.shapes import Broadcast, EggRule, Shape, ShapeRule, broadcast, egg_batch, egg_dim_from_end
from eqsat.types import TensorType

from .base import ACT, RESULT_DTYPE, Attr, OpDef, spelled
from .elementwise import ACTIVATIONS, available

Array = jax.Array


@dataclass(frozen=True)
class Matmul(ShapeRule):
    """``x @ y`` over the last two dims with transpose flags; batch dims broadcast."""

    rank_bounded = True

    def infer(self, shapes: Sequence[Shape], attrs: dict) -> Shape:
        x, y = shapes
        if len(x) < 2 or len(y) < 2:
            raise ShapeError(f"matmul needs rank >= 2 operands, got {x} and {y}")
        m, kx = (x[-1], x[-2]) if attrs.get("transpose_x", 0) else (x[-2], x[-1])
        ky, n = (y[-1], y[-2]) if attrs["transpose_y"] else (y[-2], y[-1])
        if kx != ky:
            raise ShapeError(f"matmul contracts {kx} with {ky} (shapes {x} and {y})")
        return (*broadcast(x[:-2], y[:-2]), m, n)

    def egglog(self, pattern: dict[str, str]) -> list[EggRule]:
        sx, sy, ty = pattern["s0"], pattern["s1"], pattern["transpose_y"]
        tx = pattern.get("transpose_x")  # absent: never transposed (linear)
        batch = equal("b", app("broadcast-shape", egg_batch(sx), egg_batch(sy)))
        rules = []
        for fx, fy in product((0, 1), (0, 1)):
            if tx is None and fx:
                continue
            m, n = egg_dim_from_end(sx, 1 if fx else 2), egg_dim_from_end(sy, 2 if fy else 1)
            facts = [batch, equal(ty, fy), *([equal(tx, fx)] if tx else [])]
            rules.append((" ".join(facts), app("vec-push", app("vec-push", "b", m), n)))
        return rules

    def demand(self, pattern: dict[str, str]) -> str:
        return app("wants-broadcast-shape", egg_batch(pattern["s0"]), egg_batch(pattern["s1"]))

    def prelude(self, ruleset: str) -> list[str]:
        return Broadcast().prelude(ruleset)


@dataclass(frozen=True)
class Linear(Matmul):
    """``x @ w + b`` (``w`` transposed if ``transpose_y``), ``b`` of the output's last dim."""

    def infer(self, shapes: Sequence[Shape], attrs: dict) -> Shape:
        out = super().infer(shapes[:2], attrs)
        if tuple(shapes[2]) != out[-1:]:
            raise ShapeError(f"linear bias {shapes[2]} must be ({out[-1]},)")
        return out


def matmul_flops(ins: Sequence[TensorType], out: TensorType, attrs: dict) -> float:
    x = ins[0].shape
    k = x[-2] if attrs.get("transpose_x", 0) else x[-1]
    return 2.0 * out.size * k


def _bias_in_result_dtype(types: Sequence[TensorType], attrs: dict) -> str | None:
    if types[2].dtype != attrs["dtype"]:
        return f"bias of dtype {types[2].dtype}, result of dtype {attrs['dtype']}"
    return None


def matmul(x: Array, y: Array, *, transpose_x: int, transpose_y: int, dtype: str) -> Array:
    """Transpose flags become the contraction's dims (no transposed copies); batch dims broadcast;
    products accumulate in ``dtype`` (jax's preferred_element_type)."""
    if not (transpose_x or transpose_y):
        return jnp.matmul(x, y, preferred_element_type=dtype)
    lhs = "...km" if transpose_x else "...mk"
    rhs = "...nk" if transpose_y else "...kn"
    return jnp.einsum(f"{lhs},{rhs}->...mn", x, y, preferred_element_type=dtype)


def matmul_of_transposed(
    x: Array,
    y: Array,
    *,
    perm_x: Sequence[int] | None,
    perm_y: Sequence[int] | None,
    transpose_x: int,
    transpose_y: int,
    dtype: str,
) -> Array | None:
    """``matmul(transpose(x, perm_x), transpose(y, perm_y))`` (None: not transposed) as one product of
    ``x`` and ``y`` whose dimension numbers hold the permutations, as ``jnp.einsum`` writes it; None
    where the batch dims broadcast (the transposes are then made). XLA:CPU computes a half-precision
    product of explicitly transposed operands in float32, at half the speed."""
    px = tuple(perm_x) if perm_x is not None else tuple(range(x.ndim))
    py = tuple(perm_y) if perm_y is not None else tuple(range(y.ndim))
    if len(px) != len(py) or [x.shape[d] for d in px[:-2]] != [y.shape[d] for d in py[:-2]]:
        return None
    kx = px[-2] if transpose_x else px[-1]
    ky = py[-1] if transpose_y else py[-2]
    dims = (((kx,), (ky,)), (px[:-2], py[:-2]))
    return jax.lax.dot_general(x, y, dims, preferred_element_type=available(dtype))


def _linear(x: Array, w: Array, b: Array, *, transpose_y: int, act: str, dtype: str) -> Array:
    return ACTIVATIONS[act](matmul(x, w, transpose_x=0, transpose_y=transpose_y, dtype=dtype) + b)


_FLAG_X = Attr("transpose_x", "int", 0, (0, 1))
_FLAG_Y = Attr("transpose_y", "int", 0, (0, 1))
MATMUL = OpDef(
    "matmul",
    2,
    "batched matrix product over the last two dims, with transpose flags; products are accumulated "
    "in and returned as dtype (int8 x int8 -> int32, f16 x f16 -> f32, as jax's preferred_element_type)",
    (_FLAG_X, _FLAG_Y, RESULT_DTYPE),
    Matmul(),
    "dtype",
    matmul_flops,
    same_dtype=(0, 1),
    contraction="dot",
    lower=matmul,
)


@spelled("flax.linen.Dense: x @ kernel + bias", ((4, 8), "float32"), ((8, 16), "float32"), ((16,), "float32"))
def _dense(x: jax.Array, kernel: jax.Array, bias: jax.Array) -> jax.Array:
    return jnp.dot(x, kernel) + bias


LINEAR = OpDef(
    "linear",
    3,
    "x @ w + b, then the epilogue act (none, relu, gelu): one kernel; the product and b in dtype",
    (_FLAG_Y, ACT, RESULT_DTYPE),
    Linear(),
    "dtype",
    flops=matmul_flops,
    same_dtype=(0, 1),
    contraction="dot",
    check=_bias_in_result_dtype,
    lower=_linear,
    spellings=(_dense,),
)


@dataclass(frozen=True)
class Diagonal(ShapeRule):
    """``(..., n)`` -> ``(..., n, n)``."""

    def infer(self, shapes: Sequence[Shape], attrs: dict) -> Shape:
        (v,) = shapes
        if not v:
            raise ShapeError("diag needs a vector (rank >= 1), got a scalar")
        return (*v, v[-1])

    def egglog(self, pattern: dict[str, str]) -> list[EggRule]:
        s = pattern["s0"]
        return [("", app("vec-append", s, vec([egg_dim_from_end(s, 1)])))]


def _diag(v: Array) -> Array:
    """``jnp.diag(v)`` (``diag_embed`` over leading axes): v on the diagonal, zeros elsewhere."""
    n = v.shape[-1]
    on = lax.broadcasted_iota(jnp.int32, (n, n), 0) == lax.broadcasted_iota(jnp.int32, (n, n), 1)
    return jnp.where(on, v[..., None, :], jnp.zeros((), v.dtype))


@spelled("jnp.diag", ((6,), "float32"))
def _jnp_diag(v: Array) -> Array:
    return jnp.diag(v)


class MainDiagonal(ShapeRule):
    """``(..., n, m)`` -> ``(..., min(n, m))``."""

    def infer(self, shapes: Sequence[Shape], attrs: dict) -> Shape:
        (x,) = shapes
        if len(x) < 2:
            raise ShapeError(f"diagonal needs a matrix (rank >= 2), got rank {len(x)}")
        return (*x[:-2], min(x[-2:]))

    def egglog(self, pattern: dict[str, str]) -> list[EggRule]:
        s = pattern["s0"]
        last = app("-", app("vec-length", s), 1)
        rows, cols = app("vec-get", s, app("-", last, 1)), app("vec-get", s, last)
        return [("", app("vec-set", app("vec-remove", s, last), app("-", last, 1), app("min", rows, cols)))]


def _diagonal_bytes(ins: Sequence[TensorType], out: TensorType, attrs: dict) -> float:
    """It reads the diagonal's elements only, and writes them."""
    return float(2 * out.nbytes)


def _diagonal(x: Array) -> Array:
    return jnp.diagonal(x, axis1=-2, axis2=-1)


DIAGONAL = OpDef(
    "diagonal",
    1,
    "the main diagonal of x's last two axes (``jnp.diagonal`` of a matrix, Paddle's ``diag`` of one): "
    "of a ``diag``, its vector",
    shape=MainDiagonal(),
    bytes=_diagonal_bytes,
    lower=_diagonal,
)
DIAG = OpDef(
    "diag",
    1,
    "the matrices with v's last axis on their diagonal and zeros elsewhere (``jnp.diag``, "
    "``diag_embed``); a product with one is a broadcast product",
    shape=Diagonal(),
    fusion="loop",
    lower=_diag,
    spellings=(_jnp_diag,),
)
