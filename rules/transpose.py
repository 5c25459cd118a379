"""Transpose composition, identity removal, transposes moved through elementwise ops, and convs and
poolings in either layout between transposes."""

from __future__ import annotations

import functools
import operator
from typing import Any

from eqsat.ir import TensorType
from eqsat.ops import OPS
from eqsat.ops.conv import ALGORITHMS, POOL_ALGORITHMS
from eqsat.shapes import MAX_RANK

from .base import (
    UNARY_ATTRS,
    Rule,
    Variant,
    both_ways,
    example_dtype,
    per_rank,
    rand_perm,
    rand_shape,
    rand_unit_axes,
    rule,
    unary_pattern,
)
from .conv import PADDING, POOL_WINDOW, STRIDES, WINDOW, window_example
from .softmax import AXIS, FILL, SHIFTED, ZERO_MASKED
from .terms import (
    SCALAR,
    Conv2d,
    Conv2dBiasAct,
    Expand,
    Expr,
    Fact,
    Full,
    MaskedSoftmax,
    Operand,
    Pool2d,
    Reshape,
    Select,
    Softmax,
    TList,
    Transpose,
    Var,
    append,
    at_least,
    call,
    constructor,
    differ,
    dim,
    equal,
    get,
    largest,
    length,
    less,
    rank,
    shape_of,
    smallest,
    var,
    vec,
)

# A conv's algorithm and a pooling's kind and algorithm as pattern variables (as the conv window's)
ALGORITHM, POOL_KIND, POOL_ALGORITHM = var("al"), var("k"), var("pal")
# A concatenation of transposed parts: up to this many parts. SqueezeNet's fire modules join two;
# matching PP-HGNet's joins of six, whose parts' e-classes each hold several transposes alike, grew one
# saturation iteration past 24 GB
CONCAT_PARTS = 3


def _rank_example(rng: Any, *perms: str, dtype: str = "float32") -> dict[str | Var, Any]:
    r = int(rng.integers(2, 5))
    return {"x": TensorType(rand_shape(rng, r), dtype), **{p: rand_perm(rng, r) for p in perms}}


def _through_unary(op: str) -> Rule:
    outer, inner = Transpose(unary_pattern(op, "x"), perm="p"), unary_pattern(op, Transpose("x", perm="p"))

    def example(rng: Any) -> dict[str | Var, Any]:
        attrs: dict[str | Var, Any] = {f"c_{k}": v for k, v in UNARY_ATTRS.get(op, {}).items()}
        return {**_rank_example(rng, "p", dtype=example_dtype(op)), **attrs}

    return Rule(
        f"transpose-through-{op}",
        f"{op} is elementwise, so it commutes with a transpose",
        (Variant(outer, inner), Variant(inner, outer)),
        example,
    )


def _through_binary(op: str) -> Rule:
    make = constructor(op)

    def example(rng: Any) -> dict[str | Var, Any]:
        ex = _rank_example(rng, "p", dtype=example_dtype(op))
        shape, dtype = ex["x"].shape, ex["x"].dtype
        x, y = (rand_unit_axes(rng, shape, 0.8) for _ in range(2))  # broadcasting
        return {**ex, "x": TensorType(x, dtype), "y": TensorType(y, dtype)}

    return rule(
        f"transpose-out-of-{op}",
        f"{op} of two equally transposed tensors of one rank (broadcasting each other) is one transpose",
        make(Transpose("x", perm="p"), Transpose("y", perm="p")),
        Transpose(make("x", "y"), perm="p"),
        equal(rank("x"), rank("y")),
        example=example,
    )


def _scalar_out_of_binary(op: str) -> Rule:
    make = constructor(op)
    scalar, moved = Full(shape=SCALAR, value="c", dtype="d"), Transpose("x", perm="p")

    def example(rng: Any) -> dict[str | Var, Any]:
        ex = _rank_example(rng, "p", dtype=example_dtype(op))
        return {**ex, "c": 2.0, "d": ex["x"].dtype}

    pairs = ((make(moved, scalar), make("x", scalar)), (make(scalar, moved), make(scalar, "x")))
    return Rule(
        f"transpose-out-of-{op}-with-a-scalar",
        f"{op} of a transposed tensor and a scalar (either order) is the transpose of {op} of the two",
        tuple(Variant(lhs, Transpose(inner, perm="p")) for lhs, inner in pairs),
        example,
    )


def _same(a: Operand, b: Operand) -> Expr:
    """1 where the non-negative integers ``a`` and ``b`` are equal, else 0."""
    return 1 - smallest(1, largest(call("-", a, b), call("-", b, a)))


def _relative(p1: str, p2: str, r: int) -> str:
    """The permutation q (rank ``r``) that ``p1`` composes with into ``p2``: transpose(transpose(y, q), p1)
    is transpose(y, p2), so q[p1[i]] = p2[i], q[j] = Σ_i p2[i]·[p1[i] = j]."""
    return vec(
        functools.reduce(operator.add, (get(p2, i) * _same(get(p1, i), j) for i in range(r)))
        for j in range(r)
    )


# The binary ops whose operands meet in two layouts (a bias added to scores, a factor multiplied into
# probabilities): each further op is 8 more rewrites every saturation matches.
RELAYOUT_OPS = ("add", "mul")


def _keeps_last(p: str) -> Fact:
    """Guard: the permutation ``p`` keeps the last axis last (a relayout of batch-like axes: heads,
    groups; one that moves the contiguous axis, as NCHW <-> NHWC does, is the conv layout rules')."""
    return equal(get(p, length(p) - 1), length(p) - 1)


def _batch_perms_example(rng: Any, dtype: str) -> dict[str | Var, Any]:
    """x of rank 3-4 and two different permutations keeping its last axis last."""
    r = int(rng.integers(3, 5))
    p1, p2 = ((*(int(i) for i in rng.permutation(r - 1)), r - 1) for _ in range(2))
    while p2 == p1:
        p2 = (*(int(i) for i in rng.permutation(r - 1)), r - 1)
    return {"x": TensorType(rand_shape(rng, r), dtype), "p1": p1, "p2": p2}


def _two_layouts(op: str) -> Rule:
    make = constructor(op)

    def example(rng: Any) -> dict[str | Var, Any]:
        ex = _batch_perms_example(rng, example_dtype(op))
        sx, p1, p2 = ex["x"].shape, ex["p1"], ex["p2"]
        sy = [0] * len(sx)
        for a, b in zip(p1, p2, strict=True):
            sy[b] = sx[a] if rng.random() < 0.7 else 1  # broadcast along some axes
        return {**ex, "y": TensorType(tuple(sy), ex["x"].dtype)}

    def variants(r: int) -> tuple[Variant, Variant]:
        lhs = make(Transpose("x", perm="p1"), Transpose("y", perm="p2"))
        guards = (
            equal(length("p1"), r),
            equal(length("p2"), r),
            differ("p1", "p2"),
            *map(_keeps_last, ("p1", "p2")),
        )
        return (
            Variant(
                lhs, Transpose(make("x", Transpose("y", perm=_relative("p1", "p2", r))), perm="p1"), guards
            ),
            Variant(
                lhs, Transpose(make(Transpose("x", perm=_relative("p2", "p1", r)), "y"), perm="p2"), guards
            ),
        )

    return Rule(
        f"transpose-out-of-{op}-of-two-layouts",
        f"{op} of two tensors whose batch-like axes are transposed unlike each other is the transpose "
        f"(either one's) of {op} of one of them and the other laid out like it (a bias in another layout "
        "than the scores it is added to)",
        tuple(v for r in range(3, MAX_RANK + 1) for v in variants(r)),
        example,
    )


def _into_binary_of_a_transpose(op: str) -> Rule:
    make = constructor(op)

    def example(rng: Any) -> dict[str | Var, Any]:
        ex = _batch_perms_example(rng, example_dtype(op))
        sx, p1 = ex["x"].shape, ex["p1"]
        moved = rand_unit_axes(rng, tuple(sx[a] for a in p1), 0.7)  # y broadcasts along some axes
        return {**ex, "y": TensorType(moved, ex["x"].dtype)}

    inner = Transpose("x", perm="p1")
    guards = (equal(rank("x"), rank("y")), _keeps_last("p1"), _keeps_last("p2"))
    pairs = (
        (make("y", inner), make(Transpose("y", perm="p2"), Transpose(inner, perm="p2"))),
        (make(inner, "y"), make(Transpose(inner, perm="p2"), Transpose("y", perm="p2"))),
    )
    return Rule(
        f"transpose-into-{op}-of-a-transpose",
        f"a transpose of {op} of a tensor and a transposed one (either order), both relayouts of batch-like "
        f"axes, is {op} of the two transposed: the transposes of the second compose (to none where they "
        "undo each other, as around an einsum's per-head factor)",
        tuple(Variant(Transpose(lhs, perm="p2"), rhs, guards) for lhs, rhs in pairs),
        example,
    )


def _past_a(i: Operand) -> Expr:
    """Axis ``i`` of a tensor without axis ``a``, as an axis of the tensor with it: i, or i + 1 from a
    on."""
    return call("+", i, smallest(1, largest(0, call("-", i, "a") + 1)))


def _reduction_out_of_transpose(op: str, r: int) -> Variant:
    """A transpose p of ``op(x, a)`` (which drops axis a of x, rank r) is ``op`` over the last axis of x
    transposed by p (renumbered past a) with a last."""
    shifted = [_past_a(get("p", i)) for i in range(r - 1)]
    reduce = constructor(op)
    return Variant(
        Transpose(reduce("x", axis="a"), perm="p"),
        reduce(Transpose("x", perm=vec([*shifted, "a"])), axis=r - 1),
        (equal(length("p"), r - 1),),
    )


def _reduction_to_last(op: str, r: int) -> Variant:
    """``op`` over axis a of x (rank r, a not last) is ``op`` over the last axis of x transposed to
    move a last, the other axes in order (the layout a softmax's exp and sum may take it in)."""
    rest = [_past_a(i) for i in range(r - 1)]
    reduce = constructor(op)
    return Variant(
        reduce("x", axis="a"),
        reduce(Transpose("x", perm=vec([*rest, "a"])), axis=r - 1),
        (equal(rank("x"), r), less("a", r - 1)),
    )


def _permuted(shape: str, r: int) -> str:
    """``shape`` permuted by ``p`` (rank ``r``): entry i is ``shape[p[i]]``."""
    return vec(get(shape, get("p", i)) for i in range(r))


def _unit_axes_only(r: int) -> Variant:
    """A transpose (not the identity: ``transpose-identity`` drops it) that keeps the axes of size other
    than 1 in their order is a reshape: for every pair i < j of output axes, one of them has size 1 or
    p[i] < p[j] (products of sizes minus one and of the axes' order, so that any pair with a unit axis
    passes)."""
    size = [get("sx", get("p", i)) for i in range(r)]
    ordered = [
        at_least((size[i] - 1) * (size[j] - 1) * (get("p", j) - get("p", i)), 0)
        for i in range(r)
        for j in range(i + 1, r)
    ]
    return Variant(
        Transpose("x", perm="p"),
        Reshape("x", shape=_permuted("sx", r)),
        (equal(length("p"), r), differ("p", vec(range(r))), equal("sx", shape_of("x")), *ordered),
    )


def _unit_axis_appended(rng: Any) -> dict[str | Var, Any]:
    """x, a permutation p of its axes and s: x transposed by p with an axis of size 1 appended."""
    ex = _rank_example(rng, "p")
    return {**ex, "s": (*(ex["x"].shape[i] for i in ex["p"]), 1)}


def _unit_example(rng: Any) -> dict[str | Var, Any]:
    """x with some axes of size 1 (at least one), and a permutation other than the identity that moves
    only those among the others."""
    r = int(rng.integers(2, 5))
    shape = list(rand_unit_axes(rng, rand_shape(rng, r, 2, 5), 0.5))
    unit = int(rng.integers(r))
    shape[unit] = 1
    perm = [int(i) for i in rng.permutation(r)]
    slots = [k for k, axis in enumerate(perm) if shape[axis] != 1]
    for k, axis in zip(slots, sorted(perm[k] for k in slots), strict=True):
        perm[k] = axis
    if perm == list(range(r)):  # move the unit axis to the other end
        rest = [a for a in perm if a != unit]
        perm = [*rest, unit] if unit == 0 else [unit, *rest]
    return {"x": TensorType(tuple(shape), "float32"), "p": tuple(perm)}


def _into_softmax(r: int) -> Variant:
    """``transpose(softmax(x, a), p)`` with a not last and ``p[r - 1] = a`` is the softmax over the last
    axis of x transposed: the canonical layout attention is recognized in (only that direction: each
    transposed softmax in every layout grows the e-graph, and extraction through their cycles)."""
    return Variant(
        Transpose(Softmax("x", axis=AXIS, shifted=SHIFTED), perm="p"),
        Softmax(Transpose("x", perm="p"), axis=r - 1, shifted=SHIFTED),
        (equal(length("p"), r), equal(get("p", r - 1), AXIS), less(AXIS, r - 1)),
    )


def _into_masked_softmax(r: int) -> Variant:
    """``transpose(masked_softmax(x, m, a), p)`` with ``p[r - 1] = a`` and a mask of x's rank is the
    masked softmax over the last axis of x and m transposed (as ``_into_softmax``, one direction)."""
    attrs = {"fill": FILL, "zero_masked": ZERO_MASKED, "dtype": "d", "shifted": SHIFTED}
    return Variant(
        Transpose(MaskedSoftmax("x", "m", axis=AXIS, **attrs), perm="p"),
        MaskedSoftmax(Transpose("x", perm="p"), Transpose("m", perm="p"), axis=r - 1, **attrs),
        (
            equal(length("p"), r),
            equal(get("p", r - 1), AXIS),
            equal(rank("m"), r),
        ),
    )


def _masked_softmax_last_example(rng: Any) -> dict[str | Var, Any]:
    """``_softmax_last_example`` with a mask of x's rank (some axes broadcast) and the masked
    softmax's attributes; the axis may already be last."""
    ex = _softmax_last_example(rng)
    r = len(ex["x"].shape)
    a = int(rng.integers(r))
    rest = [i for i in rng.permutation(r) if i != a]
    mask = rand_unit_axes(rng, ex["x"].shape, 0.7)
    fill = float(rng.choice([-1e9, float("-inf")]))
    attrs: dict[str | Var, Any] = {FILL: fill, ZERO_MASKED: int(rng.integers(2)), "d": "float32"}
    return {**ex, AXIS: a, "p": tuple(int(i) for i in (*rest, a)), "m": TensorType(mask, "bool"), **attrs}


def _softmax_last_example(rng: Any) -> dict[str | Var, Any]:
    """x, an axis a that is not its last, and a permutation moving a last."""
    ex = _rank_example(rng, "p")
    r = len(ex["x"].shape)
    a = int(rng.integers(r - 1))
    rest = [i for i in rng.permutation(r) if i != a]
    return {**ex, AXIS: a, "p": tuple(int(i) for i in (*rest, a)), SHIFTED: int(rng.integers(0, 2))}


def _expand_example(rng: Any) -> dict[str | Var, Any]:
    ex = _rank_example(rng, "p")
    shape = ex["x"].shape
    small = rand_unit_axes(rng, shape, 0.5)
    return {**ex, "x": TensorType(small, "float32"), "s": shape}


def _reduction_example(rng: Any) -> dict[str | Var, Any]:
    r = int(rng.integers(2, 5))
    return {
        "x": TensorType(rand_shape(rng, r), "float32"),
        "a": int(rng.integers(r)),
        "p": rand_perm(rng, r - 1),
    }


def _transpose_out_of_masked_select(r: int, k: int) -> Variant:
    """``where(mask, transpose(x, p), fill)`` for a mask of rank ``k`` broadcast to rank ``r`` that
    varies over the last two axes only, and p fixes those two: the mask is the same after p."""
    units = (equal(dim("m", i), 1) for i in range(k - 2))
    return Variant(
        Select(Expand("m", shape="s"), Transpose("x", perm="p"), Full(shape="s", value="v", dtype="d")),
        Transpose(Select(Expand("m", shape="sx"), "x", Full(shape="sx", value="v", dtype="d")), perm="p"),
        (
            equal(length("p"), r),
            equal(get("p", r - 2), r - 2),
            equal(get("p", r - 1), r - 1),
            equal(rank("m"), k),
            *units,
            equal("sx", shape_of("x")),
        ),
    )


def _masked_select_example(rng: Any) -> dict[str | Var, Any]:
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


# data NCHW -> NHWC and back; kernels OIHW <-> HWIO
_TO_NHWC, _TO_NCHW = vec([0, 2, 3, 1]), vec([0, 3, 1, 2])
_OIHW_TO_HWIO, _HWIO_TO_OIHW = vec([2, 3, 1, 0]), vec([3, 2, 0, 1])


def _relaid(layout: str) -> tuple[Variant, ...]:
    """A conv (with its bias and epilogue or not) or a pooling in ``layout`` is the same op in the other
    layout between transposes of its data, kernel and result: transposes that cancel across a chain
    of convs, elementwise ops and poolings leave a region in one layout, transposed at its edges."""
    nchw = layout == "NCHW"
    other = "NHWC" if nchw else "NCHW"
    into, back = (_TO_NHWC, _TO_NCHW) if nchw else (_TO_NCHW, _TO_NHWC)
    kernel = _OIHW_TO_HWIO if nchw else _HWIO_TO_OIHW
    window = {**WINDOW, "algorithm": ALGORITHM}
    x, w = Transpose("x", perm=into), Transpose("w", perm=kernel)
    pool = {
        "kind": POOL_KIND,
        "window": POOL_WINDOW,
        "strides": STRIDES,
        "padding": PADDING,
        "algorithm": POOL_ALGORITHM,
    }
    return (
        *both_ways(
            Conv2d("x", "w", **window, layout=layout),
            Transpose(Conv2d(x, w, **window, layout=other), perm=back),
        ),
        *both_ways(
            Conv2dBiasAct("x", "w", "c", **window, act="act", layout=layout),
            Transpose(Conv2dBiasAct(x, w, "c", **window, act="act", layout=other), perm=back),
        ),
        *both_ways(Pool2d("x", **pool, layout=layout), Transpose(Pool2d(x, **pool, layout=other), perm=back)),
    )


def _relaid_example(rng: Any) -> dict[str | Var, Any]:
    example = window_example(rng)
    kind = str(rng.choice(["max", "avg"]))
    pooled = str(rng.choice(POOL_ALGORITHMS)) if kind == "max" else "window"
    return {
        **example,
        ALGORITHM: str(rng.choice(ALGORITHMS)),
        POOL_KIND: kind,
        POOL_WINDOW: (2, 2),
        POOL_ALGORITHM: pooled,
    }


def _concat_of_transposes(parts: int) -> Variant:
    xs = [f"x{i}" for i in range(parts)]
    concat = constructor("concat")
    return Variant(
        concat(TList(*(Transpose(x, perm="p") for x in xs)), axis="ax"),
        Transpose(concat(TList(*xs), axis=get("p", "ax")), perm="p"),
    )


def _concat_example(rng: Any) -> dict[str | Var, Any]:
    """Parts of rank 2-4 that differ along the axis ``p`` moves to ``ax``."""
    rank = int(rng.integers(2, 5))
    p, ax = rand_perm(rng, rank), int(rng.integers(rank))
    shape = rand_shape(rng, rank)
    parts: dict[str | Var, Any] = {}
    for i in range(CONCAT_PARTS):
        own = list(shape)
        own[p[ax]] = int(rng.integers(1, 5))
        parts[f"x{i}"] = TensorType(tuple(own), "float32")
    return {**parts, "p": p, "ax": ax}


RULES = [
    per_rank(
        "transpose-compose",
        "two transposes are one, by the composed permutation p1[p2[i]]",
        lambda r: Variant(
            Transpose(Transpose("x", perm="p1"), perm="p2"),
            Transpose("x", perm=vec(get("p1", get("p2", i)) for i in range(r))),
            (equal(length("p2"), r),),
        ),
        example=lambda rng: _rank_example(rng, "p1", "p2"),
    ),
    per_rank(
        "transpose-identity",
        "a transpose by the identity permutation does nothing",
        lambda r: Variant(Transpose("x", perm="p"), "x", (equal("p", vec(range(r))),)),
        example=lambda rng: (lambda ex: {**ex, "p": tuple(range(len(ex["x"].shape)))})(_rank_example(rng)),
    ),
    Rule(
        "transpose-out-of-concat",
        "a concatenation of parts transposed alike is the transpose of the parts' concatenation, along "
        "the axis the transpose moves there: a layout carried across a join",
        tuple(_concat_of_transposes(n) for n in range(2, CONCAT_PARTS + 1)),
        _concat_example,
    ),
    *(_through_unary(op) for op, spec in OPS.items() if spec.elementwise and spec.arity == 1),
    *(_through_binary(op) for op, spec in OPS.items() if spec.elementwise and spec.arity == 2),
    *(_scalar_out_of_binary(op) for op, spec in OPS.items() if spec.elementwise and spec.arity == 2),
    *(_two_layouts(op) for op in RELAYOUT_OPS),
    *(_into_binary_of_a_transpose(op) for op in RELAYOUT_OPS),
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
        "transpose-of-unit-axes",
        "a transpose that moves only axes of size 1 (the others keep their order) is a reshape",
        tuple(_unit_axes_only(r) for r in range(2, MAX_RANK + 1)),
        _unit_example,
    ),
    rule(
        "unit-axis-into-transpose",
        "a transposed tensor reshaped to append an axis of size 1 is the tensor with that axis appended, "
        "transposed keeping it last (a per-row divisor in the layout of its rows)",
        Reshape(Transpose("x", perm="p"), shape="s"),
        Transpose(Reshape("x", shape=append("sx", vec([1]))), perm=append("p", vec([length("p")]))),
        equal("sx", shape_of("x")),
        equal("s", append(shape_of(Transpose("x", perm="p")), vec([1]))),
        example=_unit_axis_appended,
    ),
    Rule(
        "transpose-into-softmax",
        "a softmax over an inner axis, transposed to put that axis last, is the softmax over the last axis "
        "of the transposed input",
        tuple(_into_softmax(r) for r in range(2, MAX_RANK + 1)),
        _softmax_last_example,
    ),
    Rule(
        "transpose-into-masked-softmax",
        "a masked softmax transposed to put its axis last (or keep it there) is the masked softmax over "
        "the last axis of the transposed scores and mask: attention with its heads after the query axis",
        tuple(_into_masked_softmax(r) for r in range(2, MAX_RANK + 1)),
        _masked_softmax_last_example,
    ),
    Rule(
        "transpose-through-select",
        "select is elementwise: a transposed select is the select of the transposed condition and values",
        (
            Variant(
                Transpose(Select("c", "x", "y"), perm="p"),
                Select(Transpose("c", perm="p"), Transpose("x", perm="p"), Transpose("y", perm="p")),
                (equal(shape_of("c"), shape_of("x")),),
            ),
        ),
        lambda rng: (lambda ex: {**ex, "c": TensorType(ex["x"].shape, "bool"), "y": ex["x"]})(
            _rank_example(rng, "p")
        ),
    ),
    Rule(
        "transpose-through-expand",
        "a transposed broadcast is the broadcast of the transposed input (of the same rank)",
        tuple(
            Variant(
                Transpose(Expand("x", shape="s"), perm="p"),
                Expand(Transpose("x", perm="p"), shape=_permuted("s", r)),
                (equal(length("p"), r), equal(rank("x"), r)),
            )
            for r in range(1, MAX_RANK + 1)
        ),
        _expand_example,
    ),
    Rule(
        "reduction-over-last-axis",
        "a reduction over an inner axis is the reduction over the last axis of the input transposed "
        "to put that axis last (the others kept in order)",
        tuple(
            _reduction_to_last(op, r) for op in ("reduce_max", "reduce_sum") for r in range(2, MAX_RANK + 1)
        ),
        lambda rng: (lambda ex: {**ex, "a": int(rng.integers(len(ex["x"].shape) - 1))})(
            _reduction_example(rng)
        ),
    ),
    Rule(
        "transpose-out-of-masked-select",
        "a broadcast mask over the last two axes is unchanged by a transpose fixing them",
        tuple(_transpose_out_of_masked_select(r, k) for r in range(3, MAX_RANK + 1) for k in range(2, r + 1)),
        _masked_select_example,
    ),
    Rule(
        "conv-layout",
        "a conv or pooling in one layout is the same op in the other between transposes of its operands "
        "and result: regions of convs run in either layout, transposed at their edges",
        (*_relaid("NCHW"), *_relaid("NHWC")),
        _relaid_example,
        exact=False,  # the same products, summed in another order
    ),
]
