"""Algebra: matmul reassociation, scale hoisting, transposes folded into matmul flags, distributivity.

Reassociation can grow the e-graph combinatorially on long chains; the runner's node and time limits
bound it, and the cost model picks the chain order. Reassociation, distribution and scale motion are
inexact in IEEE arithmetic: they apply to float32/float64 (half precision overflows where the
original did not) and to integers (exact: wrap-around arithmetic is a ring), only to matmuls that
return their operands' dtype, and scale constants they create stay of moderate magnitude. Scales are
floating point only: integer division by a constant keeps integer semantics.
"""

from __future__ import annotations

from typing import Any

from eqsat.ir import TensorType
from eqsat.shapes import MAX_RANK

from .base import Rule, Variant, both_ways, moderate, rand_perm, rule
from .terms import (
    SCALAR,
    Add,
    Div,
    Fact,
    Full,
    Matmul,
    Mul,
    Operand,
    Pow,
    Scale,
    Transpose,
    differ,
    dim,
    dtype_of,
    equal,
    float_dtype,
    get,
    greater,
    last_axis,
    length,
    rank,
    reassociable,
    shape_of,
    var,
    vec,
    wide_float,
)

F32 = "float32"
TX, TY = var("tx"), var("ty")  # a matmul's transpose flags
_FLAGS = {"transpose_x": TX, "transpose_y": TY, "dtype": "d"}
_SCALAR = Full(shape=SCALAR, value="c", dtype="d")


def _same_rank(*names: str) -> tuple[Fact, ...]:
    first, *rest = names
    return tuple(equal(rank(first), rank(n)) for n in rest)


def _contracts_over_several(b: str) -> tuple[Fact, ...]:
    """Guards: the middle operand ``b`` of a chain has both dims it is contracted over > 1. A product
    over one element is an outer product, which XLA computes as an elementwise multiply fused into its
    readers and recomputed in each, with other roundings (FMA contraction): reassociated to the end
    of a chain, a shift ``x - max(x)`` of its result came out positive and ``exp`` overflowed."""
    last = last_axis(b)
    return tuple(greater(dim(b, i), 1) for i in (last, last - 1))


def _chain(rng: Any) -> dict[str, Any]:
    m, p = (int(d) for d in rng.integers(1, 6, 2))
    k, n = (int(d) for d in rng.integers(2, 6, 2))  # contracted over several elements (the guard)
    return {
        "a": TensorType((m, k), F32),
        "b": TensorType((k, n), F32),
        "c": TensorType((n, p), F32),
        "bt": TensorType((n, k), F32),
        "ct": TensorType((p, n), F32),
        "at": TensorType((k, m), F32),
        "d": F32,
    }


def _scaled(rng: Any) -> dict[str, Any]:
    m, k, n = (int(d) for d in rng.integers(1, 6, 3))
    return {
        "x": TensorType((2, m, k), F32),
        "y": TensorType((2, k, n), F32),
        "c": float(rng.uniform(0.1, 2.0)) * float(rng.choice([-1, 1])),
        "c2": float(rng.uniform(0.1, 2.0)),
        "d": F32,
    }


def _swap(r: int) -> str:
    return vec([*range(r - 2), r - 1, r - 2])


def _transpose_flags(r: int) -> tuple[Variant, ...]:
    """A matmul operand transposed by p is the operand transposed by p∘swap with its flag flipped
    (the operand itself, once transpose-identity removes p∘swap = identity)."""
    swapped = vec(get("p", get(_swap(r), i)) for i in range(r))
    of_rank = equal(length("p"), r)
    return (
        Variant(
            Matmul("x", Transpose("y", perm="p"), **_FLAGS),
            Matmul("x", Transpose("y", perm=swapped), **{**_FLAGS, "transpose_y": 1 - TY}),
            (of_rank,),
        ),
        Variant(
            Matmul(Transpose("x", perm="p"), "y", **_FLAGS),
            Matmul(Transpose("x", perm=swapped), "y", **{**_FLAGS, "transpose_x": 1 - TX}),
            (of_rank,),
        ),
    )


def _plain(*names: str) -> tuple[Fact, ...]:
    """Guards: matmuls of ``d`` = the operands' dtype, a dtype that reassociates safely."""
    return (equal("d", dtype_of(names[0])), reassociable("d"))


def _scalable(x: str, *constants: Operand) -> tuple[Fact, ...]:
    """Guards: ``x`` is float32/float64 and every constant is of moderate magnitude."""
    return (wide_float(dtype_of(x)), *(f for c in constants for f in moderate(c)))


def _transposed_operands(rng: Any) -> dict[str, Any]:
    r = int(rng.integers(2, 5))
    d = int(rng.integers(2, 5))  # square: every variant's operands fit, whatever the flags
    if rng.random() < 0.5:
        batch, perm = tuple(int(d) for d in rng.integers(1, 3, r - 2)), (*range(r - 2), r - 1, r - 2)
    else:  # any permutation: all dims equal, so every transposed operand still fits
        batch, perm = (d,) * (r - 2), rand_perm(rng, r)
    return {
        "x": TensorType((*batch, d, d), F32),
        "y": TensorType((*batch, d, d), F32),
        "p": perm,
        "tx": int(rng.integers(0, 2)),
        "ty": int(rng.integers(0, 2)),
        "d": F32,
    }


def _distribute(rng: Any) -> dict[str, Any]:
    m, k, n = (int(d) for d in rng.integers(1, 6, 3))
    return {
        "x": TensorType((m, k), F32),
        "y": TensorType((m, k), F32),
        "w": TensorType((k, n), F32),
        "wl": TensorType((n, m), F32),
        "d": F32,
    }


def _transposed_product(r: int) -> Variant:
    """(a·b)ᵀ = bᵀ·aᵀ over the last two dims: a transpose p of a product is the transpose p∘swap of
    the swapped product (the identity, removed, when p swaps the last two dims)."""
    composed = vec(get(_swap(r), get("p", i)) for i in range(r))
    return Variant(
        Transpose(Matmul("a", "b", transpose_x="tx", transpose_y="ty", dtype="d"), perm="p"),
        Transpose(Matmul("b", "a", transpose_x=1 - TY, transpose_y=1 - TX, dtype="d"), perm=composed),
        (equal(length("p"), r),),
    )


def _product_example(rng: Any) -> dict[str, Any]:
    ex = _transposed_operands(rng)
    return {"a": ex["x"], "b": ex["y"], "tx": ex["tx"], "ty": ex["ty"], "d": F32, "p": ex["p"]}


# What regrouping products of run-time data assumes (the new grouping's partial products are others)
PRODUCTS_IN_RANGE = "the products of its inputs in either grouping stay in range"

_ONE = Full(shape=SCALAR, value=1.0, dtype="d")  # a scalar one of x's dtype
_TWO = Full(shape=SCALAR, value=2.0, dtype="d")


def _batch_factor() -> tuple[Variant, ...]:
    """x·f or f·x as either operand of a product, f constant along the matrix dims (its last two 1)."""
    guards = (
        equal(rank("f"), rank("x")),
        equal(dim("f", last_axis("f")), 1),
        equal(dim("f", last_axis("f") - 1), 1),
        equal("d", dtype_of("x")),
    )
    out = Mul(Matmul("x", "y", **_FLAGS), "f")
    return (
        *(
            Variant(Matmul(factored, "y", **_FLAGS), out, guards)
            for factored in (Mul("x", "f"), Mul("f", "x"))
        ),
        *(
            Variant(Matmul("y", factored, **_FLAGS), Mul(Matmul("y", "x", **_FLAGS), "f"), guards)
            for factored in (Mul("x", "f"), Mul("f", "x"))
        ),
    )


def _batch_factor_example(rng: Any) -> dict[str, Any]:
    """x and y square in their matrix dims (any flags fit), a factor varying along some batch dims."""
    b, h, n = (int(d) for d in rng.integers(1, 4, 3))
    return {
        "x": TensorType((b, h, n, n), F32),
        "y": TensorType((1, h, n, n), F32),
        "f": TensorType((b if rng.random() < 0.5 else 1, h, 1, 1), F32),
        "tx": int(rng.integers(2)),
        "ty": int(rng.integers(2)),
        "d": F32,
    }


RULES = [
    Rule(
        "matmul-assoc",
        "(AB)C = A(BC), also with transposed operands; the cost model picks the cheaper order",
        (
            *both_ways(
                Matmul(Matmul("a", "b", dtype="d"), "c", dtype="d"),
                Matmul("a", Matmul("b", "c", dtype="d"), dtype="d"),
                *_same_rank("a", "b", "c"),
                *_plain("a"),
                *_contracts_over_several("b"),
            ),
            *both_ways(
                Matmul(Matmul("a", "b", dtype="d"), "ct", transpose_y=1, dtype="d"),
                Matmul("a", Matmul("b", "ct", transpose_y=1, dtype="d"), dtype="d"),
                *_same_rank("a", "b", "ct"),
                *_plain("a"),
                *_contracts_over_several("b"),
            ),
            *both_ways(
                Matmul("at", Matmul("b", "c", dtype="d"), transpose_x=1, dtype="d"),
                Matmul(Matmul("at", "b", transpose_x=1, dtype="d"), "c", dtype="d"),
                *_same_rank("at", "b", "c"),
                *_plain("at"),
                *_contracts_over_several("b"),
            ),
        ),
        _chain,
        exact=False,
        assumes=PRODUCTS_IN_RANGE,
    ),
    Rule(
        "scale-through-matmul",
        "(c·x)·y = c·(x·y) = x·(c·y): the scale moves to whichever tensor is smallest",
        (
            *both_ways(
                Matmul(Scale("x", scale="c"), "y", **_FLAGS),
                Scale(Matmul("x", "y", **_FLAGS), scale="c"),
                equal("d", dtype_of("x")),
                *_scalable("x", "c"),
            ),
            *both_ways(
                Matmul("x", Scale("y", scale="c"), **_FLAGS),
                Scale(Matmul("x", "y", **_FLAGS), scale="c"),
                equal("d", dtype_of("x")),
                *_scalable("x", "c"),
            ),
        ),
        lambda rng: {**_scaled(rng), "tx": 0, "ty": 0},
        exact=False,
    ),
    Rule(
        "batch-factor-out-of-matmul",
        "(x·f)·y = (x·y)·f, and y·(x·f) = (y·x)·f, for f constant along the product's matrix dims (HF "
        "BERT's per-head mask on attention probabilities): the factor moves after the product",
        _batch_factor(),
        _batch_factor_example,
        exact=False,
        assumes=PRODUCTS_IN_RANGE,
    ),
    rule(
        "scale-compose",
        "two scales without bias are one scale by the product",
        Scale(Scale("x", scale="c"), scale="c2"),
        Scale("x", scale=var("c") * "c2"),
        *_scalable("x", "c", "c2", var("c") * "c2"),
        example=_scaled,
        exact=False,
    ),
    Rule(
        "mul-by-one",
        "x times a scalar 1, either order, is x (x * 1 is x, NaN and signed zeros included): what "
        "1 / sqrt(u) leaves once the division is a product by rsqrt(u) (Keras' Gemma RMS norm)",
        (
            Variant(Mul("x", _ONE), "x", (equal("d", dtype_of("x")),)),
            Variant(Mul(_ONE, "x"), "x", (equal("d", dtype_of("x")),)),
        ),
        _scaled,
    ),
    Rule(
        "pow-two-is-square",
        "x ** 2 is x * x (the one rounding of x², as a correctly rounded power gives it; Keras' "
        "ops.power(x, 2) in Llama's RMS norm)",
        (Variant(Pow("x", _TWO), Mul("x", "x"), (equal("d", dtype_of("x")),)),),
        _scaled,
    ),
    Rule(
        "scalar-mul-to-scale",
        "multiplying a floating-point tensor by a scalar constant is a scale",
        (
            Variant(Mul("x", _SCALAR), Scale("x", scale="c"), (float_dtype("d"),)),
            Variant(Mul(_SCALAR, "x"), Scale("x", scale="c"), (float_dtype("d"),)),
        ),
        _scaled,
    ),
    Rule(
        "shift-is-add",
        "a scale by 1 with a bias is an addition of the bias (Paddle writes x + eps so: an RMS norm's)",
        (
            Variant(
                Scale("x", scale=1.0, bias="c"),
                Add("x", _SCALAR),
                (equal("d", dtype_of("x")), float_dtype("d"), differ("c", 0.0)),
            ),
        ),
        _scaled,
    ),
    rule(
        "scalar-div-to-scale",
        "dividing by a scalar constant is a scale by its inverse (within 1 ulp; floats only)",
        Div("x", _SCALAR),
        Scale("x", scale=1.0 / var("c")),
        *_scalable("x", "c"),
        example=lambda rng: {**_scaled(rng), "c": float(rng.uniform(0.5, 2.0))},
        exact=False,
    ),
    Rule(
        "transpose-of-matmul",
        "(a·b)ᵀ = bᵀ·aᵀ: a transposed product is the product of the swapped operands, flags flipped",
        tuple(_transposed_product(r) for r in range(2, MAX_RANK + 1)),
        _product_example,
    ),
    Rule(
        "transpose-into-matmul",
        "a transpose of the last two dims of a matmul operand is the operand's transpose flag",
        tuple(v for r in range(2, MAX_RANK + 1) for v in _transpose_flags(r)),
        _transposed_operands,
    ),
    Rule(
        "matmul-distribute",
        "x@w + y@w = (x+y)@w and w@x + w@y = w@(x+y): one matmul instead of two",
        (
            Variant(
                Add(Matmul("x", "w", dtype="d"), Matmul("y", "w", dtype="d")),
                Matmul(Add("x", "y"), "w", dtype="d"),
                (equal(shape_of("x"), shape_of("y")), *_plain("x")),
            ),
            Variant(
                Add(Matmul("wl", "x", dtype="d"), Matmul("wl", "y", dtype="d")),
                Matmul("wl", Add("x", "y"), dtype="d"),
                (equal(shape_of("x"), shape_of("y")), *_plain("x")),
            ),
        ),
        _distribute,
        exact=False,
    ),
]
