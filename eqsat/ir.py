"""The IR: an SSA ``Program`` of ``Op``s over typed ``Value``s, weights kept apart from the graph.

The text form (one op a line, as in Paddle PIR dumps) round-trips: ``parse_program(str(p))`` prints the
same text. Inputs, parameters and outputs appear as the pseudo-ops ``input``, ``param`` and ``output``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from eqsat.errors import ParseError, ShapeError
from eqsat.ops import get_op
from eqsat.text import AttrValue, format_attrs, parse_line, parse_tensor_type, program_lines
from eqsat.types import DTYPES, FLOAT_DTYPES, KEY_DTYPE_PREFIX, MAX_DIM, OPAQUE, TensorType, is_key_dtype

__all__ = [
    "DTYPES",
    "FLOAT_DTYPES",
    "KEY_DTYPE_PREFIX",
    "MAX_DIM",
    "OPAQUE",
    "Op",
    "Program",
    "TensorType",
    "Value",
    "is_key_dtype",
    "parse_program",
]


class Value:
    """An SSA value: the result of one op, a program input or a parameter. Compared by identity."""

    __slots__ = ("name", "type")

    def __init__(self, type: TensorType, name: str | None = None) -> None:
        self.type = type
        self.name = name

    def __repr__(self) -> str:
        return f"Value({self.type}{', ' + self.name if self.name else ''})"


@dataclass(eq=False)
class Op:
    """One op: a canonical name from ``eqsat.ops`` (or ``opaque``), inputs, attributes, outputs.

    ``payload`` carries what an opaque op needs to run (e.g. a JAX primitive); it is not printed.
    """

    name: str
    inputs: tuple[Value, ...]
    attrs: dict[str, AttrValue]
    outputs: tuple[Value, ...]
    payload: Any = None

    @property
    def output(self) -> Value:
        (out,) = self.outputs
        return out


def new_op(name: str, inputs: Sequence[Value], **attrs: AttrValue) -> Op:
    """A canonical op of ``inputs``, its output type inferred (and checked), in no program."""
    spec = get_op(name)
    attrs = spec.normalize([v.type for v in inputs], attrs)
    return Op(name, tuple(inputs), attrs, (Value(spec.infer([v.type for v in inputs], attrs)),))


@dataclass(eq=False)
class Program:
    """Inputs, named parameters (values kept in ``param_values``), ops in topological order, outputs.

    A program loaded with dynamic (-1) input dims left unbound holds one specialization (each such dim
    ``DYNAMIC_DEFAULT``): ``dynamic`` has those inputs' declared shapes, and ``specialize(shapes)``
    reads the program again with the inputs' dims bound by name.
    """

    inputs: list[Value] = field(default_factory=list)
    params: list[Value] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)
    outputs: list[Value] = field(default_factory=list)
    output_names: list[str] = field(default_factory=list)
    param_values: dict[str, np.ndarray] = field(default_factory=dict)
    dynamic: dict[str, tuple[int, ...]] = field(default_factory=dict)
    specialize: Callable[[Mapping[str, Sequence[int]]], Program] | None = field(default=None, repr=False)

    def declared(self, value: Value) -> tuple[int, ...]:
        """An input's shape as declared: ``DYNAMIC`` where its size is left to the call."""
        return self.dynamic.get(value.name or "", value.type.shape)

    def add_input(self, name: str, type: TensorType) -> Value:
        value = Value(type, name)
        self.inputs.append(value)
        return value

    def add_param(self, name: str, type: TensorType, data: np.ndarray | None = None) -> Value:
        value = Value(type, name)
        self.params.append(value)
        if data is not None:
            self.param_values[name] = np.asarray(data)
        return value

    def add_op(self, name: str, inputs: Sequence[Value], **attrs: AttrValue) -> Value:
        """Append a canonical op, inferring (and checking) its output type; return its output."""
        op = new_op(name, inputs, **attrs)
        self.ops.append(op)
        return op.output

    def add_output(self, value: Value, name: str | None = None) -> None:
        self.outputs.append(value)
        self.output_names.append(name or f"out{len(self.outputs) - 1}")

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for op in self.ops:
            key = op.attrs.get("op", op.name) if op.name == "opaque" else op.name
            counts[str(key)] = counts.get(str(key), 0) + 1
        return counts

    def live_ops(self) -> list[Op]:
        """The ops that some output depends on, in program order."""
        needed = set(map(id, self.outputs))
        live = []
        for op in reversed(self.ops):
            if any(id(o) in needed for o in op.outputs):
                live.append(op)
                needed.update(map(id, op.inputs))
        return live[::-1]

    def __str__(self) -> str:
        names: dict[int, str] = {}

        def name(v: Value) -> str:
            return names.setdefault(id(v), f"%{len(names)}")

        lines = ["{"]
        for kind, values in (("input", self.inputs), ("param", self.params)):
            for v in values:
                lines.append(
                    f' ({name(v)}) = "{kind}" () {format_attrs({"name": v.name or ""})} : () -> {v.type}'
                )
        for op in self.ops:
            ins = ", ".join(name(v) for v in op.inputs)
            outs = ", ".join(name(v) for v in op.outputs)
            in_types = ", ".join(str(v.type) for v in op.inputs)
            out_types = ", ".join(str(v.type) for v in op.outputs)
            lines.append(
                f' ({outs}) = "{op.name}" ({ins}) {format_attrs(op.attrs)} : ({in_types}) -> {out_types}'
            )
        for v, out_name in zip(self.outputs, self.output_names, strict=True):
            lines.append(f' () = "output" ({name(v)}) {format_attrs({"name": out_name})} : ({v.type}) -> ()')
        lines.append("}")
        return "\n".join(lines)


def parse_program(text: str) -> Program:
    """Parse eqsat's text form (what ``str(program)`` prints); errors name the line and the reason."""
    program = Program()
    env: dict[str, Value] = {}
    for number, raw in program_lines(text):
        line = parse_line(raw, number)

        def fail(reason: str, line: Any = line) -> ParseError:
            return ParseError(reason, line=line.number, op=line.name)

        for r in line.results:
            if r in env:
                raise fail(f"value {r} is defined twice")
        try:
            operands = [env[o] for o in line.operands]
        except KeyError as e:
            raise fail(f"undefined value {e.args[0]}") from None
        out_types = [TensorType(*parse_tensor_type(t, number)) for t in line.out_types if t]
        if len(line.in_types) != len(operands) or any(
            TensorType(*parse_tensor_type(t, number)) != v.type
            for t, v in zip(line.in_types, operands, strict=False)
        ):
            raise fail("operand types do not match the values' types")
        if line.name in ("input", "param"):
            if operands or len(out_types) != 1 or len(line.results) != 1:
                raise fail(f"{line.name} takes no operands and has one result")
            add = program.add_input if line.name == "input" else program.add_param
            env[line.results[0]] = add(str(line.attrs.get("name", "")), out_types[0])
            continue
        if line.name == "output":
            if len(operands) != 1 or line.results:
                raise fail("output takes one operand and has no result")
            program.add_output(operands[0], str(line.attrs.get("name", "")))
            continue
        if len(line.results) != len(out_types):
            raise fail(f"{len(line.results)} results but {len(out_types)} result types")
        if line.name == OPAQUE:
            outs = tuple(Value(t) for t in out_types)
            program.ops.append(Op(OPAQUE, tuple(operands), dict(line.attrs), outs))
        else:
            try:
                out = program.add_op(line.name, operands, **line.attrs)
            except (ShapeError, KeyError) as e:
                raise fail(str(e).strip("'\"")) from None
            if [out.type] != out_types:
                raise fail(f"declared type {', '.join(map(str, out_types))} but the op gives {out.type}")
            outs = (out,)
        env.update(zip(line.results, outs, strict=True))
    return program
