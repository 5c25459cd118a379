"""Build a Program in Python, for notebooks and tests.

    b = Builder()
    x = b.input("x", (4, 8))
    w = b.param("w", (8, 16), data=np.ones((8, 16), np.float32))
    y = b.relu(b.matmul(x, w))
    program = b.build(y)

Every canonical op of ``eqsat.ops`` is a method (``b.transpose(x, perm=(1, 0))``); types are inferred
and checked as each op is added.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from eqsat.ir import Program, TensorType, Value
from eqsat.ops import OPS
from eqsat.text import AttrValue


class Builder:
    """Accumulates ops into a Program; ``build(*outputs)`` returns it."""

    def __init__(self) -> None:
        self.program = Program()

    def input(self, name: str, shape: Sequence[int], dtype: str = "float32") -> Value:
        return self.program.add_input(name, TensorType(tuple(shape), dtype))

    def param(self, name: str, shape: Sequence[int], dtype: str = "float32", data: Any = None) -> Value:
        """A named weight; with ``data`` its value is bound, else it becomes a trailing argument."""
        return self.program.add_param(
            name, TensorType(tuple(shape), dtype), None if data is None else np.asarray(data, dtype=dtype)
        )

    def op(self, name: str, *inputs: Value, **attrs: AttrValue) -> Value:
        return self.program.add_op(name, list(inputs), **attrs)

    def __getattr__(self, name: str) -> Callable[..., Value]:
        if name not in OPS:
            raise AttributeError(f"Builder has no op {name!r} (ops: {', '.join(OPS)})")
        return lambda *inputs, **attrs: self.op(name, *inputs, **attrs)

    def build(self, *outputs: Value, names: Sequence[str] | None = None) -> Program:
        for i, v in enumerate(outputs):
            self.program.add_output(v, names[i] if names else None)
        return self.program
