"""Products that share a right operand, stacked: independent ``x_i @ w`` (a recurrent cell's input
projections over its time steps, one weight applied to several inputs) as one product of the ``x_i``
stacked along their first dim, each ``x_i @ w`` a part of it. It reads ``w`` once instead of once per
product. The opposite of the shared-input merge (one ``x`` by several weights).

A pattern that matches any number of products, in any order, would enumerate their orderings in the
e-graph; this reads the program instead: one group per right operand, the products whose left operands
do not depend on one another's results (stacking those would make a cycle). Each product's stacked
form is an alternative beside it in the e-graph (``Alternative``); the cost model decides.
"""

from __future__ import annotations

from dataclasses import dataclass

from eqsat.ir import Op, Program, Value, new_op

MIN_STACKED = 2


@dataclass(frozen=True)
class Alternative:
    """``ops``, in order, compute a value equal to ``value``: the last op's output. Alternatives of one
    group read one ``shared`` value (the stacked product): it pays only where they are taken together,
    so extraction weighs them together."""

    value: Value
    ops: tuple[Op, ...]
    reason: str
    shared: Value


def stacked_products(program: Program) -> list[Alternative]:
    """For each group of at least ``MIN_STACKED`` independent ``matmul(x_i, w)`` of one ``w`` (rank
    2, no transposed ``x``, the ``x_i`` of one dtype and equal shapes past their first dim): each
    product's part of the one product of the stacked ``x_i``."""
    live = program.live_ops()
    groups: dict[tuple[int, tuple[int, ...], str, str], list[Op]] = {}
    for op in live:
        if _stackable(op):
            x, w = op.inputs
            key = (id(w), x.type.shape[1:], x.type.dtype, str(sorted(op.attrs.items())))
            groups.setdefault(key, []).append(op)
    candidates = [ops for ops in groups.values() if len(ops) >= MIN_STACKED]
    bit = {id(op): 1 << i for i, op in enumerate(op for ops in candidates for op in ops)}
    reached = _products_reached(live, bit) if bit else {}
    found: list[Alternative] = []
    for ops in candidates:
        taken, mask = [], 0  # in program order, each left operand depending on no product taken
        for op in ops:
            if not reached.get(id(op.inputs[0]), 0) & mask:
                taken.append(op)
                mask |= bit[id(op)]
        if len(taken) >= MIN_STACKED:
            found.extend(_stacked(taken))
    return found


def _stackable(op: Op) -> bool:
    if op.name != "matmul" or op.attrs["transpose_x"]:
        return False
    x, w = op.inputs
    return w.type.rank == 2 and x.type.rank >= 2


def _products_reached(live: list[Op], bit: dict[int, int]) -> dict[int, int]:
    """For each value, the products it depends on: the or of their ``bit`` (by op id)."""
    reached: dict[int, int] = {}
    for op in live:
        mask = bit.get(id(op), 0)
        for v in op.inputs:
            mask |= reached.get(id(v), 0)
        for out in op.outputs:
            reached[id(out)] = mask
    return reached


def _stacked(ops: list[Op]) -> list[Alternative]:
    lefts = [op.inputs[0] for op in ops]
    stacked = new_op("concat", lefts, axis=0)
    product = new_op("matmul", [stacked.output, ops[0].inputs[1]], **ops[0].attrs)
    sizes = tuple(x.type.shape[0] for x in lefts)
    reason = f"{len(ops)} products of one weight stacked into one"
    parts = [new_op("split", [product.output], axis=0, sizes=sizes, index=i) for i in range(len(ops))]
    return [
        Alternative(op.output, (stacked, product, part), reason, product.output)
        for op, part in zip(ops, parts, strict=True)
    ]
