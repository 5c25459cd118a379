"""Elementwise ops (arithmetic, comparisons, logic, activations, casts, select) and the constant
makers ``full`` and ``iota``: each op's definition, JAX lowering and framework spellings together."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from eqsat.errors import ShapeError
from eqsat.shapes import Broadcast, FromAttr, SameAs, broadcast
from eqsat.types import FLOAT_DTYPES, TensorType

from .base import Attr, Lowering, OpDef, elementwise_flops, floats, no_flops, numeric, spelled

Array = jax.Array


def _bits(types: Sequence[TensorType], attrs: dict) -> str | None:
    bad = [t.dtype for t in types if t.dtype != "bool" and "int" not in t.dtype]
    return f"needs bool or integer operands, got {bad[0]}" if bad else None


def _transcendental(name: str, doc: str, lower: Lowering, **spelled_as: Any) -> OpDef:
    """An expensive function of one float operand, spelled (``jax=``, ``paddle=``, ``spellings=``) as
    given, not by its name."""
    return OpDef(name, 1, doc, elementwise=True, expensive=True, check=floats, lower=lower, **spelled_as)


def _unary(
    name: str,
    doc: str,
    lower: Lowering,
    *,
    jax: str | None = None,
    floats_only: bool = True,
    expensive: bool = False,
) -> OpDef:
    """An op of one float (or numeric) operand, Paddle's op of its name; its JAX primitive is also its
    name unless ``jax`` names another ("" for none)."""
    check = floats if floats_only else numeric
    primitive = name if jax is None else jax
    return OpDef(
        name,
        1,
        doc,
        elementwise=True,
        expensive=expensive,
        check=check,
        lower=lower,
        jax=(primitive,) if primitive else (),
        paddle=(f"pd.{name}",),
    )


def _binary(
    name: str,
    doc: str,
    lower: Lowering,
    *,
    jax: tuple[str, ...] = (),
    paddle: tuple[str, ...] = (),
    arithmetic: bool = True,
    floats_only: bool = False,
    expensive: bool = False,
) -> OpDef:
    check = floats if floats_only else numeric if arithmetic else None
    return OpDef(
        name,
        2,
        doc,
        shape=Broadcast(),
        elementwise=True,
        expensive=expensive,
        check=check,
        lower=lower,
        jax=jax,
        paddle=paddle,
    )


def _compare(name: str, doc: str, lower: Lowering, paddle: str) -> OpDef:
    return OpDef(
        name,
        2,
        doc,
        shape=Broadcast(),
        dtype="bool",
        elementwise=True,
        lower=lower,
        jax=(name,),
        paddle=(paddle,),
    )


def _logical(name: str, arity: int, doc: str, lower: Lowering, jax: str) -> OpDef:
    """Bitwise for integers, logical for bool: Paddle's ``bitwise_*`` (its ``logical_*`` turn integers
    into bool first, so they are not this op)."""
    shape = Broadcast() if arity == 2 else SameAs()
    paddle = f"pd.bitwise_{name.removeprefix('logical_')}"
    return OpDef(
        name,
        arity,
        doc,
        shape=shape,
        elementwise=True,
        check=_bits,
        lower=lower,
        jax=(jax,),
        paddle=(paddle,),
    )


def _fill_fits(types: Sequence[TensorType], attrs: dict) -> str | None:
    """An integer or bool full holds an integer value."""
    value, dtype = attrs["value"], attrs["dtype"]
    if dtype in FLOAT_DTYPES or (math.isfinite(value) and value == int(value)):
        return None
    return f"value {value} does not fit dtype {dtype}"


def available(dtype: str) -> np.dtype:
    """The dtype JAX computes ``dtype`` in: without ``jax_enable_x64``, float64 and int64 are float32
    and int32, as JAX would truncate them; asked for this way, JAX does not warn that it truncates."""
    return jax.dtypes.canonicalize_dtype(dtype)


def _full(*, shape: tuple[int, ...], value: float, dtype: str) -> Array | np.ndarray:
    """A scalar full stays a numpy constant, so consumers can see its value (e.g. a zero mask)."""
    if int(np.prod(shape)) <= 1:
        return np.full(shape, value, dtype=jnp.dtype(dtype))
    return jnp.full(shape, value, dtype=available(dtype))


def _iota_dimension(types: Sequence[TensorType], attrs: dict) -> str | None:
    if not 0 <= attrs["dimension"] < len(attrs["shape"]):
        return f"dimension {attrs['dimension']} out of range for shape {attrs['shape']}"
    return None if attrs["dtype"] != "bool" else "needs a numeric dtype"


def _iota(*, shape: tuple[int, ...], dimension: int, dtype: str) -> Array:
    return lax.broadcasted_iota(available(dtype), shape, dimension)


def _div(x: Array, y: Array) -> Array:
    """lax.div: true division of floats, integer quotients rounded toward zero (not jnp's floor)."""
    return lax.div(*jnp.broadcast_arrays(x, y))


def _rem(x: Array, y: Array) -> Array:
    return lax.rem(*jnp.broadcast_arrays(x, y))


def gelu(x: Array) -> Array:
    """GELU, tanh approximation."""
    return jax.nn.gelu(x, approximate=True)


def gelu_erf(x: Array) -> Array:
    """GELU, exact: ``0.5 · x · erfc(-x · √½)``, √½ in x's dtype, as ``jax.nn.gelu`` computes it."""
    return jax.nn.gelu(x, approximate=False)


# The epilogues a fused op (linear, conv2d_bias_act) may apply, by its ``act`` attribute.
# What libraries write for the ops no JAX primitive spells (``OpDef.spellings``)
_ROWS = ((4, 16), "float32")


@spelled("jax.nn.gelu (flax, haiku, HF Flax GPT-2)", _ROWS)
def _gelu_tanh(x: Array) -> Array:
    return jax.nn.gelu(x)


@spelled("jax.nn.gelu(approximate=False) (HF Flax BERT, Whisper)", _ROWS)
def _gelu_exact(x: Array) -> Array:
    return jax.nn.gelu(x, approximate=False)


@spelled("a product by a constant plus an offset", _ROWS)
def _scaled(x: Array) -> Array:
    return x * 0.5 + 0.25


@spelled("a product plus a tensor", _ROWS, _ROWS, _ROWS)
def _multiply_add(x: Array, y: Array, z: Array) -> Array:
    return x * y + z


ACTIVATIONS: dict[str, Any] = {"none": lambda x: x, "relu": jax.nn.relu, "gelu": gelu, "gelu_erf": gelu_erf}


def _scale(x: Array, *, scale: float, bias: float) -> Array:
    out = x * jnp.asarray(scale, x.dtype)
    return out + jnp.asarray(bias, x.dtype) if bias else out


def _cast(x: Array, *, dtype: str) -> Array:
    return lax.convert_element_type(x, available(dtype))


@dataclass(frozen=True)
class Fma(SameAs):
    """``x * y + z``: the product broadcasts to exactly z's shape."""

    index: int = 2

    def infer(self, shapes: Sequence[tuple[int, ...]], attrs: dict) -> tuple[int, ...]:
        if broadcast(shapes[0], shapes[1]) != shapes[2]:
            raise ShapeError(f"fma: x*y of shapes {shapes[0]}, {shapes[1]} must have z's shape {shapes[2]}")
        return shapes[2]


@dataclass(frozen=True)
class Select(SameAs):
    """``select(cond, x, y)``: x and y of one shape; cond of that shape or a scalar."""

    index: int = 1

    def infer(self, shapes: Sequence[tuple[int, ...]], attrs: dict) -> tuple[int, ...]:
        cond, x, y = shapes
        if x != y or cond not in ((), x):
            raise ShapeError(f"select needs equal shapes (cond may be a scalar), got {cond}, {x}, {y}")
        return x


def _bool_condition(types: Sequence[TensorType], attrs: dict) -> str | None:
    return None if types[0].dtype == "bool" else "needs a bool condition"


FULL = OpDef(
    "full",
    0,
    "a tensor filled with one value",
    (Attr("shape", "ints"), Attr("value", "float"), Attr("dtype", "str")),
    FromAttr("shape"),
    "dtype",
    no_flops,
    view=True,
    check=_fill_fits,
    lower=_full,
)
ARITHMETIC = [
    _binary("add", "x + y (broadcasting)", jnp.add, jax=("add", "add_any"), paddle=("pd.add",)),
    _binary("sub", "x - y (broadcasting)", jnp.subtract, jax=("sub",), paddle=("pd.subtract",)),
    _binary("mul", "x * y (broadcasting)", jnp.multiply, jax=("mul",), paddle=("pd.multiply",)),
    _binary(
        "div",
        "x / y (broadcasting); integers: the quotient rounded toward zero (lax.div)",
        _div,
        paddle=("pd.divide",),
        expensive=True,
    ),
    _binary(
        "rem",
        "x - y * div(x, y) (broadcasting): the remainder with the sign of x (lax.rem)",
        _rem,
        jax=("rem",),
        expensive=True,
    ),
    _binary(
        "maximum",
        "max(x, y) (broadcasting)",
        jnp.maximum,
        jax=("max",),
        paddle=("pd.maximum",),
        arithmetic=False,
    ),
    _binary(
        "minimum",
        "min(x, y) (broadcasting)",
        jnp.minimum,
        jax=("min",),
        paddle=("pd.minimum",),
        arithmetic=False,
    ),
    _binary(
        "pow",
        "x ** y (broadcasting; floating point; JAX's pow, whose exponent may be an integer, is read by "
        "the JAX frontend's _pow)",
        jnp.power,
        floats_only=True,
        expensive=True,
    ),
    _compare("eq", "x == y (broadcasting), bool", jnp.equal, "pd.equal"),
    _compare("ne", "x != y (broadcasting), bool", jnp.not_equal, "pd.not_equal"),
    _compare("lt", "x < y (broadcasting), bool", jnp.less, "pd.less_than"),
    _compare("le", "x <= y (broadcasting), bool", jnp.less_equal, "pd.less_equal"),
    _compare("gt", "x > y (broadcasting), bool", jnp.greater, "pd.greater_than"),
    _compare("ge", "x >= y (broadcasting), bool", jnp.greater_equal, "pd.greater_equal"),
    _logical(
        "logical_and",
        2,
        "x & y (broadcasting): logical for bool, bitwise for integers",
        jnp.bitwise_and,
        "and",
    ),
    _logical(
        "logical_or", 2, "x | y (broadcasting): logical for bool, bitwise for integers", jnp.bitwise_or, "or"
    ),
    _logical("logical_not", 1, "~x: logical for bool, bitwise for integers", jnp.bitwise_not, "not"),
]
IOTA = OpDef(
    "iota",
    0,
    "0, 1, 2, ... along dimension, broadcast over the other dims of shape",
    (Attr("shape", "ints"), Attr("dimension", "int"), Attr("dtype", "str")),
    FromAttr("shape"),
    "dtype",
    check=_iota_dimension,
    fusion="loop",
    lower=_iota,
)
UNARY = [
    _unary("exp", "e**x", jnp.exp, expensive=True),
    _unary("log", "natural logarithm", jnp.log, expensive=True),
    _unary("tanh", "hyperbolic tangent", jnp.tanh, expensive=True),
    _unary("sigmoid", "1 / (1 + e**-x)", jax.nn.sigmoid, jax="logistic", expensive=True),
    _unary("relu", "max(x, 0)", jax.nn.relu, jax="", floats_only=False),
    _unary("abs", "|x| (integers: the minimum stays itself, as it wraps)", jnp.abs, floats_only=False),
    _transcendental("gelu", "GELU, tanh approximation", gelu, spellings=(_gelu_tanh,)),
    _transcendental(
        "gelu_erf",
        "GELU, exact: x · Φ(x) = 0.5 · x · erfc(-x · √½), as jax.nn.gelu(approximate=False) computes it",
        gelu_erf,
        spellings=(_gelu_exact,),
    ),
    _transcendental(
        "erfc",
        "1 - erf(x), the complementary error function (what jax.nn.gelu's exact form is written with)",
        lax.erfc,
        jax=("erfc",),
    ),
    OpDef("neg", 1, "-x", elementwise=True, check=numeric, lower=jnp.negative, jax=("neg",)),
    OpDef(
        "stop_gradient",
        1,
        "x itself forward; no gradient flows back through it (not the identity: rules see no further)",
        flops=no_flops,
        elementwise=True,
        lower=lax.stop_gradient,
        jax=("stop_gradient",),
    ),
    _unary("sqrt", "square root", jnp.sqrt, expensive=True),
    _unary("rsqrt", "1 / sqrt(x)", lax.rsqrt, expensive=True),
    _unary("sin", "sine", jnp.sin, expensive=True),
    _unary("cos", "cosine", jnp.cos, expensive=True),
    OpDef(
        "is_finite",
        1,
        "true where x is neither infinite nor NaN",
        dtype="bool",
        flops=elementwise_flops,
        elementwise=True,
        check=floats,
        lower=lax.is_finite,
        jax=("is_finite",),
        paddle=("pd.isfinite",),
    ),
    OpDef(
        "scale",
        1,
        "x * scale, then + bias unless bias is 0 (floating point only; scale and bias in x's dtype)",
        (Attr("scale", "float"), Attr("bias", "float", 0.0)),
        elementwise=True,
        check=floats,
        lower=_scale,
        spellings=(_scaled,),
    ),
    OpDef(
        "cast",
        1,
        "convert to dtype",
        (Attr("dtype", "str"),),
        dtype="dtype",
        flops=no_flops,
        elementwise=True,
        lower=_cast,
    ),
]
SELECT = OpDef(
    "select",
    3,
    "where(cond, x, y): x where cond is true, else y",
    shape=Select(),
    dtype=1,
    same_dtype=(1, 2),
    check=_bool_condition,
    fusion="loop",
    lower=jnp.where,
)
FMA = OpDef(
    "fma",
    3,
    "x * y + z in one pass",
    shape=Fma(),
    dtype=2,
    flops=lambda i, o, a: 2.0 * o.size,
    same_dtype=(0, 1, 2),
    fusion="loop",
    lower=lambda x, y, z: x * y + z,
    spellings=(_multiply_add,),
)
