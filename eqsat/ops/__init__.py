"""The canonical ops, one home each, grouped by family: ``elementwise``, ``layout``, ``linear``,
``reduce``, ``scan``, ``order``, ``attention``, ``conv``, ``norm``.
An op's ``OpDef`` (``eqsat.ops.base``) holds its attributes, its
shape and dtype rule (one source for the Python check and the e-graph's analysis), its cost features,
its JAX lowering and the JAX primitives and Paddle ops that map to it. Everything else is derived from
``OPS``: the egglog constructors (``transpose`` -> ``(Transpose Tensor IVec)``), the frontends' tables of
spellings, the lowering registry. Adding an op is one entry in its family's module.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Set

from eqsat.egglog_text import negative_zero
from eqsat.shapes import MAX_RANK
from eqsat.types import FLOAT_DTYPES, OPAQUE, accumulation_dtype

from .attention import ATTENTION, SCORES
from .base import (
    ACCUMULATE,
    EGG_SORT,
    LIKE_INPUT,
    VARIADIC,
    Attr,
    Kernel,
    Lowering,
    OpDef,
)
from .conv import CONV
from .elementwise import ARITHMETIC, FMA, FULL, IOTA, SELECT, UNARY
from .layout import LAYOUT, REVERSE
from .linear import DIAG, DIAGONAL, LINEAR, MATMUL
from .norm import NORMS
from .order import ORDER
from .reduce import MASKED_SOFTMAX, REDUCTIONS, SOFTMAX
from .scan import SCAN

__all__ = [
    "ACCUMULATE",
    "EGG_SORT",
    "FLOAT_DTYPES",
    "FOLDABLE",
    "LIKE_INPUT",
    "OPAQUE",
    "OPS",
    "VARIADIC",
    "Attr",
    "Kernel",
    "Lowering",
    "OpDef",
    "accumulation_dtype",
    "folds",
    "get_op",
    "needs_opaque",
]

# In the order the e-graph's schema declares them (kept from before the families: the greedy extractor
# breaks cost ties by it).
_ORDER = [
    FULL,
    MATMUL,
    *ARITHMETIC,
    IOTA,
    *UNARY,
    *LAYOUT,
    *REDUCTIONS,
    LINEAR,
    FMA,
    *ATTENTION,
    SELECT,
    SOFTMAX,
]
OPS: dict[str, OpDef] = {
    op.name: op
    for op in [*_ORDER, *CONV, SCORES, MASKED_SOFTMAX, *NORMS, SCAN, *ORDER, DIAG, DIAGONAL, REVERSE]
}
# Ops XLA's constant folding evaluates at compile time when all their inputs are constants: weights
# packed (concat), laid out, or rescaled (a batch norm folded into a conv's weights) cost nothing.
FOLDABLE = frozenset(
    {"concat", "reshape", "transpose", "expand"} | {n for n, op in OPS.items() if op.elementwise}
)


def folds(op: str, inputs: Set[Hashable], constants: Set[Hashable], fulls: Set[Hashable]) -> bool:
    """Whether XLA computes ``op`` at compile time: it is foldable and its inputs are constants or
    ``full``s, at least one a constant (XLA keeps an op of broadcast scalars alone a broadcast)."""
    return op in FOLDABLE and bool(inputs & constants) and inputs <= constants | fulls


def get_op(name: str) -> OpDef:
    """The definition of canonical op ``name``; ``KeyError`` with the known names otherwise."""
    try:
        return OPS[name]
    except KeyError:
        raise KeyError(f"unknown op {name!r} (known: {', '.join(OPS)}, {OPAQUE})") from None


def needs_opaque(name: str, attrs: Mapping[str, object], ranks: Iterable[int]) -> bool:
    """Op ``name`` (of ``attrs``, its values of ``ranks``) is encoded as opaque: canonical ops whose
    rank-dependent rules were not generated, and ops with a -0.0 attribute (egglog's f64 equates -0.0
    with 0.0, so the sign of zero would be lost)."""
    if name == OPAQUE:
        return True
    if OPS[name].shape.rank_bounded and max(ranks, default=0) > MAX_RANK:
        return True
    return name != "full" and any(negative_zero(v) for v in attrs.values())
