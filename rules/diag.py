"""Diagonal matrices (ByteIR linalg-ext's ``diag``): ``jnp.diag(v)`` as JAX writes it (v broadcast where
two iotas agree, zeros elsewhere) is the ``diag`` op, and a product with one scales the other operand's
columns (on the right) or rows (on the left): a broadcast product, not an n x n matrix and a dot. The
``diagonal`` of a diag is its vector.
"""

from __future__ import annotations

from typing import Any

from eqsat.ir import TensorType

from .base import Rule, Variant, rand_shape
from .terms import (
    Diag,
    Diagonal,
    Eq,
    Expand,
    Full,
    Iota,
    Matmul,
    Mul,
    Reshape,
    Select,
    Transpose,
    dim,
    dtype_of,
    equal,
    get,
    largest,
    length,
    rank,
    shape_of,
    smallest,
    vec,
)


def _from_mask(rows: int) -> Variant:
    """``where(iota_rows == iota_cols, expand(r), 0)`` with r one row or column of n values."""
    mask = Eq(Iota(shape="s", dimension=rows, dtype="d"), Iota(shape="s", dimension=1 - rows, dtype="d"))
    lhs = Select(mask, Expand("r", shape="s"), Full(shape="s", value=0.0, dtype="t"))
    n = get("s", 0)
    when = (
        equal(length("s"), 2),
        equal(get("s", 1), n),
        equal(rank("r"), 2),
        equal(smallest(dim("r", 0), dim("r", 1)), 1),
        equal(largest(dim("r", 0), dim("r", 1)), n),
    )
    return Variant(lhs, Diag(Reshape("r", shape=vec([n]))), when)


def _mask_example(rng: Any) -> dict[str, Any]:
    n = int(rng.integers(1, 6))
    column = bool(rng.integers(2))
    r = TensorType((n, 1) if column else (1, n), "float32")
    return {"r": r, "s": (n, n), "d": "int32", "t": "float32"}


def _products() -> tuple[Variant, ...]:
    """``x @ diag(v)`` is x times v along its last axis; ``diag(v) @ x`` is x times v along its rows."""
    same = (
        equal("sv", shape_of("v")),
        equal(length("sv"), 1),
        equal("n", get("sv", 0)),
        equal(dtype_of("x"), "dt"),
        equal(dtype_of("v"), "dt"),
    )
    column, matrix = Reshape("v", shape=vec(["n", 1])), (*same, equal(rank("x"), 2))
    xt = Transpose("x", perm=(1, 0))
    return (
        Variant(Matmul("x", Diag("v"), transpose_x=0, transpose_y="ty", dtype="dt"), Mul("x", "v"), same),
        Variant(Matmul(Diag("v"), "x", transpose_x="tx", transpose_y=0, dtype="dt"), Mul(column, "x"), same),
        Variant(Matmul("x", Diag("v"), transpose_x=1, transpose_y="ty", dtype="dt"), Mul(xt, "v"), matrix),
        Variant(Matmul(Diag("v"), "x", transpose_x="tx", transpose_y=1, dtype="dt"), Mul(column, xt), matrix),
    )


def _product_example(rng: Any, matrix: bool = False) -> dict[str, Any]:
    n = int(rng.integers(1, 6))
    batch = () if matrix else rand_shape(rng, int(rng.integers(0, 2)))
    return {
        "x": TensorType((*batch, n, n), "float32"),
        "v": TensorType((n,), "float32"),
        "tx": int(rng.integers(2)),
        "ty": int(rng.integers(2)),
        "dt": "float32",
    }


RULES = [
    Rule(
        "diagonal-of-diag",
        "the diagonal of diag(v) is v (so a diag of a diag's diagonal is the diag itself)",
        (Variant(Diagonal(Diag("v")), "v"),),
        lambda rng: {"v": TensorType(rand_shape(rng, int(rng.integers(1, 3))), "float32")},
    ),
    Rule(
        "diag-from-mask",
        "v broadcast where the row and column iotas agree, zeros elsewhere, is diag(v) (jnp.diag)",
        (_from_mask(0), _from_mask(1)),
        _mask_example,
    ),
    Rule(
        "product-with-diag",
        "a product with a diagonal matrix scales the other operand's columns (rows): only the "
        "diagonal's terms are not zero (inexact only where the other is inf: the dot's inf * 0 is NaN)",
        _products(),
        _product_example,
        exact=False,
        cases=({"matrix": False}, {"matrix": True}),
    ),
]
