"""Cost models: the cost of one op given its attributes and the types of its operands and result.

Extraction is DAG-aware: a program's cost is the sum over its distinct ops, so a shared subterm is
paid once. Write your own model by subclassing :class:`CostModel` or passing a plain function with the
same signature as :meth:`CostModel.op_cost`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from eqsat.ir import Program, TensorType
from eqsat.ops import OPAQUE, OPS

# Ops that XLA turns into a bitcast or fuses into their consumer: no memory round trip of their own.
VIEW_OPS = frozenset({"reshape", "full", "expand"})


class CostModel:
    """Base class: ``op_cost(op, attrs, inputs, output)`` for a canonical op name or ``"opaque"``."""

    name = "custom"

    def op_cost(
        self, op: str, attrs: dict[str, Any], inputs: Sequence[TensorType], output: TensorType
    ) -> float:
        raise NotImplementedError

    def program_cost(self, program: Program) -> float:
        """The DAG cost of a program: every live op once."""
        return sum(
            self.op_cost(op.name, op.attrs, [v.type for v in op.inputs], out.type)
            for op in program.live_ops()
            for out in op.outputs[:1]
        )


class NodeCount(CostModel):
    """Every op costs 1: the smallest program wins."""

    name = "nodes"

    def op_cost(
        self, op: str, attrs: dict[str, Any], inputs: Sequence[TensorType], output: TensorType
    ) -> float:
        return 1.0


class Flops(CostModel):
    """Arithmetic plus memory traffic: ``flops + bytes_weight * bytes + per_op``.

    ``bytes`` counts operands read and the result written, except for view-like ops (reshape, full,
    expand) that XLA fuses away. ``per_op`` breaks ties toward fewer kernels.
    """

    name = "flops"

    def __init__(self, bytes_weight: float = 1.0, per_op: float = 1.0) -> None:
        self.bytes_weight = bytes_weight
        self.per_op = per_op

    def op_cost(
        self, op: str, attrs: dict[str, Any], inputs: Sequence[TensorType], output: TensorType
    ) -> float:
        flops = OPS[op].flops(inputs, output, attrs) if op != OPAQUE else float(output.size)
        moved = 0 if op in VIEW_OPS else sum(t.nbytes for t in inputs) + output.nbytes
        return flops + self.bytes_weight * moved + self.per_op


class FunctionCost(CostModel):
    """Wrap a plain function ``fn(op, attrs, inputs, output) -> float`` as a cost model."""

    def __init__(self, fn: Callable[[str, dict[str, Any], Sequence[TensorType], TensorType], float]) -> None:
        self.fn = fn
        self.name = getattr(fn, "__name__", "custom")

    def op_cost(
        self, op: str, attrs: dict[str, Any], inputs: Sequence[TensorType], output: TensorType
    ) -> float:
        return float(self.fn(op, attrs, inputs, output))


MODELS: dict[str, Callable[[], CostModel]] = {"nodes": NodeCount, "flops": Flops}


def get_cost_model(cost: str | CostModel | Callable[..., float]) -> CostModel:
    """A cost model from its name (``nodes``, ``flops``), an instance, or a function."""
    if isinstance(cost, CostModel):
        return cost
    if isinstance(cost, str):
        if cost not in MODELS:
            raise KeyError(f"unknown cost model {cost!r} (known: {', '.join(MODELS)})")
        return MODELS[cost]()
    if callable(cost):
        return FunctionCost(cost)
    raise TypeError(f"cost must be a model name, a CostModel or a function, got {type(cost).__name__}")
