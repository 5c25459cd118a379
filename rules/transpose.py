"""Transpose composition, identity removal, and transposes moved through elementwise ops."""

from __future__ import annotations

from typing import Any

from eqsat.ir import TensorType
from eqsat.ops import OPS
from eqsat.shapes import MAX_RANK

from .base import (
    UNARY_ATTRS,
    Rule,
    Variant,
    example_dtype,
    per_rank,
    rand_perm,
    rand_shape,
    rule,
    unary_pattern,
)
from .terms import Expand, Full, Select, Transpose, constructor, equal, shape_of, vec


def _rank_example(rng: Any, *perms: str, dtype: str = "float32") -> dict[str, Any]:
    r = int(rng.integers(2, 5))
    return {"x": TensorType(rand_shape(rng, r), dtype), **{p: rand_perm(rng, r) for p in perms}}


def _through_unary(op: str) -> Rule:
    outer, inner = Transpose(unary_pattern(op, "x"), perm="p"), unary_pattern(op, Transpose("x", perm="p"))

    def example(rng: Any) -> dict[str, Any]:
        attrs = {f"c_{k}": v for k, v in UNARY_ATTRS.get(op, {}).items()}
        return {**_rank_example(rng, "p", dtype=example_dtype(op)), **attrs}

    return Rule(
        f"transpose-through-{op}",
        f"{op} is elementwise, so it commutes with a transpose",
        (Variant(outer, inner), Variant(inner, outer)),
        example,
    )


def _through_binary(op: str) -> Rule:
    make = constructor(op)

    def example(rng: Any) -> dict[str, Any]:
        ex = _rank_example(rng, "p", dtype=example_dtype(op))
        return {**ex, "y": ex["x"]}

    return rule(
        f"transpose-out-of-{op}",
        f"{op} of two equally transposed, equal-shape tensors is one transpose",
        make(Transpose("x", perm="p"), Transpose("y", perm="p")),
        Transpose(make("x", "y"), perm="p"),
        equal(shape_of("x"), shape_of("y")),
        example=example,
    )


def _reduction_out_of_transpose(op: str, r: int) -> Variant:
    """A transpose p of ``op(x, a)`` (which drops axis a of x, rank r) is ``op`` over the last axis of x
    transposed by p (renumbered past a) with a last."""
    shifted = [f"(+ (vec-get p {i}) (min 1 (max 0 (+ (- (vec-get p {i}) a) 1))))" for i in range(r - 1)]
    reduce = constructor(op)
    return Variant(
        Transpose(reduce("x", axis="a"), perm="p"),
        reduce(Transpose("x", perm=vec([*shifted, "a"])), axis=r - 1),
        (equal("(vec-length p)", r - 1),),
    )


def _reduction_example(rng: Any) -> dict[str, Any]:
    r = int(rng.integers(2, 5))
    return {
        "x": TensorType(rand_shape(rng, r), "float32"),
        "a": int(rng.integers(r)),
        "p": rand_perm(rng, r - 1),
    }


def _transpose_out_of_masked_select(r: int, k: int) -> Variant:
    """``where(mask, transpose(x, p), fill)`` for a mask of rank ``k`` broadcast to rank ``r`` that
    varies over the last two axes only, and p fixes those two: the mask is the same after p."""
    units = (equal(f"(vec-get {shape_of('m')} {i})", 1) for i in range(k - 2))
    return Variant(
        Select(Expand("m", shape="s"), Transpose("x", perm="p"), Full(shape="s", value="v", dtype="d")),
        Transpose(Select(Expand("m", shape="sx"), "x", Full(shape="sx", value="v", dtype="d")), perm="p"),
        (
            equal("(vec-length p)", r),
            equal(f"(vec-get p {r - 2})", r - 2),
            equal(f"(vec-get p {r - 1})", r - 1),
            equal(f"(vec-length {shape_of('m')})", k),
            *units,
            equal("sx", shape_of("x")),
        ),
    )


def _masked_select_example(rng: Any) -> dict[str, Any]:
    r = int(rng.integers(3, 5))
    k = int(rng.integers(2, r + 1))
    x = TensorType(rand_shape(rng, r), "float32")
    p = (*rand_perm(rng, r - 2), r - 2, r - 1)
    return {
        "x": x,
        "m": TensorType((1,) * (k - 2) + x.shape[-2:], "bool"),
        "p": p,
        "s": tuple(x.shape[i] for i in p),
        "v": -3.0,
        "d": "float32",
    }


RULES = [
    per_rank(
        "transpose-compose",
        "two transposes are one, by the composed permutation p1[p2[i]]",
        lambda r: Variant(
            Transpose(Transpose("x", perm="p1"), perm="p2"),
            Transpose("x", perm=vec(f"(vec-get p1 (vec-get p2 {i}))" for i in range(r))),
            (equal("(vec-length p2)", r),),
        ),
        example=lambda rng: _rank_example(rng, "p1", "p2"),
    ),
    per_rank(
        "transpose-identity",
        "a transpose by the identity permutation does nothing",
        lambda r: Variant(Transpose("x", perm="p"), "x", (equal("p", vec(range(r))),)),
        example=lambda rng: (lambda ex: {**ex, "p": tuple(range(len(ex["x"].shape)))})(_rank_example(rng)),
    ),
    *(_through_unary(op) for op, spec in OPS.items() if spec.elementwise and spec.arity == 1),
    *(_through_binary(op) for op, spec in OPS.items() if spec.elementwise and spec.arity == 2),
    Rule(
        "transpose-into-reduction",
        "a transposed reduction is the reduction of the transposed input (its reduced axis last)",
        tuple(
            _reduction_out_of_transpose(op, r)
            for op in ("reduce_max", "reduce_sum")
            for r in range(2, MAX_RANK + 1)
        ),
        _reduction_example,
    ),
    Rule(
        "transpose-out-of-masked-select",
        "a broadcast mask over the last two axes is unchanged by a transpose fixing them",
        tuple(_transpose_out_of_masked_select(r, k) for r in range(3, MAX_RANK + 1) for k in range(2, r + 1)),
        _masked_select_example,
    ),
]
