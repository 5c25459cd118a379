"""Scans (``cumsum``, ``cummax``, ...): what a program reads of one that a reduction gives alone.

The element an inclusive scan ends with (the last, or the first of a reversed one) is the reduction of
its whole axis: a program that reads only that (a running total's final value, the last position id)
needs no scan, and one that reads both may take the reduction from the scan's own end. The max's is
exact; the sum's regroups the additions (the scan's order is a tree's, the reduction's a loop's), so it
is inexact and applies where sums regroup safely (float32, float64, integers).

A running sum of a constant is a count (an iota times it); exp of a running sum of logs is the running
product where x is known positive; a running sum along a short last axis is a product with a
triangular matrix of ones, which the cost model weighs against the scan timed on the device; along a
long one it is blocked: short running sums within blocks, plus the running sum of the blocks' totals.
"""

from __future__ import annotations

from typing import Any

from eqsat.ir import TensorType

from .base import Rule, Variant, rand_shape
from .terms import (
    SCALAR,
    Add,
    Cast,
    Exp,
    Fact,
    Full,
    Ge,
    Gt,
    Iota,
    Le,
    Log,
    Lt,
    Matmul,
    Mul,
    ReduceMax,
    ReduceSum,
    Reshape,
    Scan,
    Split,
    Sub,
    append,
    as_f64,
    at_least,
    at_most,
    dim,
    dtype_of,
    equal,
    get,
    greater,
    last_axis,
    length,
    range_lo,
    rank,
    reassociable,
    set_item,
    shape_of,
    var,
    vec,
    wide_float,
)

_REDUCTIONS = {"add": ReduceSum, "max": ReduceMax}


def _end(combine: str, reverse: int) -> Variant:
    """The scan's end element (split off as a part of size 1) is the reduction, kept as a size-1 axis."""
    index = 0 if reverse else 1
    scan = Scan("x", axis="a", combine=combine, reverse=reverse, exclusive=0)
    when: tuple[Fact, ...] = (equal(length("s"), 2), equal(get("s", index), 1))
    if combine == "add":
        when = (*when, reassociable(dtype_of("x")))
    return Variant(
        Split(scan, axis="a", sizes="s", index=index), _REDUCTIONS[combine]("x", axis="a", keepdim=1), when
    )


def _counted(reverse: int, exclusive: int) -> Variant:
    """A running sum of a constant c is c times how many elements it has summed: iota + 1 forward
    (iota exclusive), n - iota reversed (n - 1 - iota exclusive)."""
    iota = Iota(shape="s", dimension="a", dtype="d")
    n = get("s", "a")
    if reverse:
        count = Sub(Full(shape=SCALAR, value=as_f64(n - exclusive), dtype="d"), iota)
    else:
        count = iota if exclusive else Add(iota, Full(shape=SCALAR, value=1.0, dtype="d"))
    scan = Scan(
        Full(shape="s", value="c", dtype="d"), axis="a", combine="add", reverse=reverse, exclusive=exclusive
    )
    return Variant(scan, Mul(count, Full(shape=SCALAR, value="c", dtype="d")), (reassociable("d"),))


def _constant_example(rng: Any) -> dict[str, Any]:
    """A shape, an axis of it, a small integer constant (the float check compares k * c with a sum;
    nonnegative: a full's value is one every dtype the checks use holds, unsigned ones included)."""
    shape = rand_shape(rng, int(rng.integers(1, 4)))
    return {"s": shape, "a": int(rng.integers(len(shape))), "c": float(rng.integers(0, 4)), "d": "float32"}


def _product_in_logs() -> Variant:
    """exp of a running sum of logs is the running product, where x is known positive (its range), in
    float32 or float64 (the logs of half precision round too coarsely for exp to undo them)."""
    flags = {"axis": "a", "reverse": "r", "exclusive": "e"}
    return Variant(
        Exp(Scan(Log("x"), combine="add", **flags)),
        Scan("x", combine="mul", **flags),
        (greater(range_lo("x"), 0.0), wide_float(dtype_of("x"))),
    )


_SHORT = 128  # the longest axis a scan is a product over: the product's work grows as its square


def _triangular(reverse: int, exclusive: int) -> Variant:
    """A running sum along x's last axis (of n <= 128) as x times a triangular matrix of ones:
    ``out[j] = sum_i x[i] t[i, j]``, t[i, j] = 1 where i <= j (i >= j reversed; strictly, exclusive)."""
    rows, cols = (Iota(shape=vec(["n", "n"]), dimension=d, dtype="int32") for d in (0, 1))
    compare = {(0, 0): Le, (0, 1): Lt, (1, 0): Ge, (1, 1): Gt}[reverse, exclusive]
    ones = Cast(compare(rows, cols), dtype="d")
    return Variant(
        Scan("x", axis="a", combine="add", reverse=reverse, exclusive=exclusive),
        Matmul("x", ones, transpose_x=0, transpose_y=0, dtype="d"),
        (
            equal("a", last_axis("x")),
            at_least(rank("x"), 2),
            equal("n", dim("x", "a")),
            at_most("n", _SHORT),
            equal("d", dtype_of("x")),
            wide_float("d"),
        ),
    )


BLOCKS = (16, 64)  # XLA:CPU ran a running sum of 4096 or 65536 blocked so 2-2.5x faster than its scan


def _blocked(reverse: int, exclusive: int, block: int) -> Variant:
    """A running sum along a long last axis (n > 128, a multiple of ``block``) in two levels: x as rows
    of ``block``, each row's running sum (a short scan: a product) plus the exclusive running sum of the
    rows' totals (a scan ``block`` times shorter, blocked again where it is long)."""
    n = var("n")
    flags = {"combine": "add", "reverse": reverse}
    outer = set_item("s", "a", n / block)
    rows = Reshape("x", shape=append(outer, vec([block])))
    totals = ReduceSum(rows, axis=length("s"), keepdim=0)
    before = Scan(totals, axis="a", exclusive=1, **flags)
    within = Scan(rows, axis=length("s"), exclusive=exclusive, **flags)
    lifted = Reshape(before, shape=append(outer, vec([1])))
    return Variant(
        Scan("x", axis="a", exclusive=exclusive, **flags),
        Reshape(Add(within, lifted), shape="s"),
        (
            equal("s", shape_of("x")),
            equal("a", last_axis("x")),
            equal("n", dim("x", "a")),
            at_least("n", _SHORT + 1),
            equal(n % block, 0),
            wide_float(dtype_of("x")),
        ),
    )


def _long_rows_example(rng: Any) -> dict[str, Any]:
    """x of rank 1 or 2 whose last axis (the scan's) is long: 64 to 256 times the largest block."""
    shape = (*rand_shape(rng, int(rng.integers(0, 2)), low=2, high=4), 64 * int(rng.integers(3, 9)))
    return {"x": TensorType(shape, "float32"), "a": len(shape) - 1}


def _rows_example(rng: Any) -> dict[str, Any]:
    """x of rank 2 or 3, its last axis the scan's."""
    shape = rand_shape(rng, int(rng.integers(2, 4)), low=2, high=9)
    return {"x": TensorType(shape, "float32"), "a": len(shape) - 1}


def _positive_example(rng: Any) -> dict[str, Any]:
    """x (drawn positive: the check states its range), an axis, the scan's flags."""
    shape = rand_shape(rng, int(rng.integers(1, 4)))
    flags = {"r": int(rng.integers(2)), "e": int(rng.integers(2))}
    return {"x": TensorType(shape, "float32"), "a": int(rng.integers(len(shape))), **flags}


def _example(rng: Any, reverse: int = 0) -> dict[str, Any]:
    """x, an axis, and the sizes that split the scan's end element off (first, if ``reverse``)."""
    shape = rand_shape(rng, int(rng.integers(1, 4)), low=2)
    axis = int(rng.integers(len(shape)))
    end = (shape[axis] - 1, 1)
    return {"x": TensorType(shape, "float32"), "a": axis, "s": end[::-1] if reverse else end}


RULES = [
    Rule(
        "scan-as-triangular-product",
        "a running sum along a short last axis is a product with a triangular matrix of ones, which "
        "XLA:CPU runs faster than its scan's log2(n) passes where the rows are many (the scan is timed)",
        tuple(_triangular(r, e) for r in (0, 1) for e in (0, 1)),
        _rows_example,
        exact=False,
    ),
    Rule(
        "scan-blocked",
        "a running sum along a long last axis is a short running sum within blocks plus the running "
        "sum of the blocks' totals: XLA:CPU runs the short ones as products, 2-2.5x faster than its scan",
        tuple(_blocked(r, e, b) for r in (0, 1) for e in (0, 1) for b in BLOCKS),
        _long_rows_example,
        exact=False,
    ),
    Rule(
        "scan-of-logs",
        "exp of a running sum of logs is the running product, where x is known positive (a parameter's "
        "range): one scan and no transcendental per element",
        (_product_in_logs(),),
        _positive_example,
        exact=False,
        positive=("x",),
    ),
    Rule(
        "scan-of-constant",
        "a running sum of a constant is the constant times a count (position ids of ones: an iota)",
        tuple(_counted(r, e) for r in (0, 1) for e in (0, 1)),
        _constant_example,
        exact=False,
    ),
    Rule(
        "scan-end-is-max",
        "the last element of a running max (the first of a reversed one) is the max of the axis",
        (_end("max", 0), _end("max", 1)),
        _example,
        cases=({"reverse": 0}, {"reverse": 1}),
    ),
    Rule(
        "scan-end-is-sum",
        "the last element of a running sum (the first of a reversed one) is the sum of the axis",
        (_end("add", 0), _end("add", 1)),
        _example,
        exact=False,
        cases=({"reverse": 0}, {"reverse": 1}),
    ),
]
