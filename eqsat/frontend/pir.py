"""Paddle PIR text dumps -> ``Program``.

Paddle spellings map onto canonical ops; an op not listed here loads as an ``opaque`` op with its
attributes and declared result types, so nothing is refused. Quirks handled:

- ``pd.full_int_array`` / ``pd.full`` feeding a shape, axis or scale operand are read as constants;
- ``pd.reshape``: 0 keeps the input dim, -1 is inferred; its second (``xshape``) result is ignored;
- ``pd.expand`` of a ``pd.full`` to a shape that is not a valid broadcast (as in PIR's own DRR test,
  4x3x16 -> 4x3x16x16) loads as a ``full`` of the target shape: every element is the same value, which
  is also what PIR's pass folded it to. A non-broadcast expand of anything else is an error;
- ``pd.scale(x, s) {bias, bias_after_scale}`` with a constant ``s`` becomes ``scale``, else mul/add;
- ``builtin.combine`` + ``pd.concat(list, axis)`` become one ``concat``;
- ``pd.data`` is an input, ``pd.parameter`` a parameter, ``pd.fetch`` an output.

Every declared result type is checked against the inferred one; a mismatch names the line.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from itertools import combinations
from math import prod
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from eqsat.errors import ParseError, ShapeError
from eqsat.frontend.paddle_json import json_lines
from eqsat.frontend.paddle_params import Params, bind_params
from eqsat.ir import Op, Program, TensorType, Value, new_op
from eqsat.lowering.control_flow import Cond, Loop
from eqsat.ops import FLOAT_DTYPES, OPAQUE, OPS
from eqsat.ops.conv import CONV_AXES
from eqsat.text import (
    DYNAMIC,
    DYNAMIC_DEFAULT,
    NULL_TYPE,
    NULL_VALUE,
    Line,
    parse_lines,
    parse_tensor_type,
    program_lines,
    split_top,
)

# Paddle ops that are one canonical op of the same operands, from the ops' definitions.
_SPELLED = {name: op for op in OPS.values() for name in op.paddle}
# What reading one line gives: a value per result (a list of values for a ``vec`` result).
Results = Sequence[Value | list[Value]]
_IGNORED_ATTRS = {"place", "stop_gradient", "persistable"}
_MAX_KEPT_CONSTANT = 4096  # elements of a constant whose contents the reader keeps
_MAX_SHAPE_ARITHMETIC = 64  # elements of an op's result the reader computes from integer constants


class _Scope(dict[str, "Value | list[Value]"]):
    """The values of a region (a branch of ``pd_op.if``): its own, and those of the enclosing
    program it reads, each of which becomes an input of the region's program the first time it is
    read (``captured``: the enclosing values, in that order)."""

    def __init__(self, program: Program, outer: dict[str, Value | list[Value]]) -> None:
        super().__init__()
        self.program, self.outer = program, outer
        self.captured: list[Value] = []

    def get(self, name: str, default: Any = None) -> Any:
        if name in self.keys():
            return self[name]
        value = self.outer.get(name)
        if not isinstance(value, Value):
            return default if value is None else value
        inner = self.program.add_input(name, value.type)
        self.captured.append(value)
        self[name] = inner
        return inner

    def __contains__(self, name: object) -> bool:
        return name in self.keys() or name in self.outer

    def peek(self, name: str) -> Value | list[Value] | None:
        """The value ``name`` names, here or around, without capturing it."""
        if name in self.keys():
            return self[name]
        return self.outer.peek(name) if isinstance(self.outer, _Scope) else self.outer.get(name)


class _Reader:
    def __init__(self, shapes: Mapping[str, Sequence[int]] | None = None) -> None:
        self.program = Program()
        self.shapes = dict(shapes or {})  # input name -> concrete shape for its dynamic (-1) dims
        self.env: dict[str, Value | list[Value]] = {}
        self.consts: dict[int, np.ndarray] = {}  # id(value) -> known constant contents
        self.int_arrays: dict[str, tuple[int, ...]] = {}  # %name -> contents of pd.full_int_array
        self.dynamic: set[int] = set()  # ids of opaque results whose declared shape has -1 dims
        self.read: set[int] = set()  # ids of values some op reads
        self.ranges: dict[int, _Range] = {}  # id(value) -> an arange whose length depends on values

    def region(self) -> _Reader:
        """A reader for one region of an op of this program: it sees this program's values."""
        inner = _Reader(self.shapes)
        inner.env = _Scope(inner.program, self.env)
        inner.consts, inner.int_arrays, inner.dynamic = self.consts, self.int_arrays, self.dynamic
        inner.ranges = self.ranges
        return inner

    def peek(self, name: str) -> Value | list[Value] | None:
        """The value ``name`` names, without capturing it into a region (only what a handler reads
        becomes an input of its region)."""
        return self.env.peek(name) if isinstance(self.env, _Scope) else self.env.get(name)

    def range_of(self, name: str) -> _Range | None:
        """The ``_Range`` value ``name`` is, if it is one."""
        return self.ranges.get(id(self.peek(name)))

    def tensor(self, line: Line, name: str) -> Value:
        v = self.env.get(name)
        if id(v) in self.ranges:
            raise ParseError(
                f"{name} is an arange whose length depends on tensor values: only its length and its "
                "elements one at a time can be read",
                line=line.number,
                op=line.name,
            )
        if id(v) in self.dynamic:
            raise ParseError(
                f"{name} has a dynamic shape (-1) that Paddle did not resolve", line=line.number, op=line.name
            )
        if v is None:
            if name in self.int_arrays:
                return self.materialize(name)
            raise ParseError(f"undefined value {name}", line=line.number, op=line.name)
        if isinstance(v, list):
            raise ParseError(f"{name} is a list, expected a tensor", line=line.number, op=line.name)
        return v

    def remember(self, value: Value, fill: object) -> None:
        """Keep the contents of a small constant (shape operands, scalars); big ones stay symbolic."""
        if value.type.size <= _MAX_KEPT_CONSTANT:
            self.consts[id(value)] = np.full(value.type.shape, fill)

    def materialize(self, name: str) -> Value:
        data = np.asarray(self.int_arrays[name], dtype=np.int64)
        value = self.program.add_param(f"const{name[1:]}", TensorType(data.shape, "int64"), data)
        self.env[name] = value
        return value

    def constant(self, line: Line, result: str, data: np.ndarray) -> Value:
        """Result ``result`` of ``line`` as a known constant (a parameter with its value), of the dtype
        the line declares for it."""
        index = line.results.index(result)
        dtype = (
            _parse_type(line, line.out_types[index])[1] if index < len(line.out_types) else data.dtype.name
        )
        data = np.asarray(data).astype(dtype)
        value = self.program.add_param(f"const{result[1:]}", TensorType(data.shape, dtype), data)
        self.consts[id(value)] = data
        return value

    def constant_value(self, value: Value) -> np.ndarray | None:
        """The contents of ``value`` where the reader knows them (a small constant, a bound parameter)."""
        if id(value) in self.consts:
            return self.consts[id(value)]
        return self.program.param_values.get(value.name) if value.name else None

    def is_constant(self, name: str) -> bool:
        """Whether the reader knows the contents of value ``name`` (a full_int_array or small full)."""
        return name in self.int_arrays or id(self.env.get(name)) in self.consts

    def shape_operand(self, line: Line, name: str) -> tuple[int, ...]:
        """A shape operand's contents: a constant's, or where Paddle moved the constant into the
        params file (``builtin.constant``), the shape the line declares for its result."""
        if self.is_constant(name):
            return self.int_array(line, name)
        shape, _ = _parse_type(line, line.out_types[0]) if line.out_types else ((), "")
        if not line.out_types or DYNAMIC in shape:
            return self.int_array(line, name)  # the usual error: not a constant
        return shape

    def int_array(self, line: Line, name: str) -> tuple[int, ...]:
        if name in self.int_arrays:
            return self.int_arrays[name]
        v = self.env.get(name)
        if isinstance(v, Value) and id(v) in self.consts:
            return tuple(int(x) for x in self.consts[id(v)].ravel())
        raise ParseError(
            f"{name} must be a constant (pd.full_int_array or pd.full)", line=line.number, op=line.name
        )

    def add(self, line: Line, name: str, inputs: list[Value], **attrs: object) -> Value:
        """A canonical op of ``inputs``; computed now, as a constant, where they are all known small
        constants (shape arithmetic: a cast of a shape that sizes a resize)."""
        try:
            op = new_op(name, inputs, **attrs)  # type: ignore[arg-type]
        except ShapeError as e:
            raise ParseError(str(e), line=line.number, op=line.name) from None
        data = self._computed(op)
        if data is None:
            self.program.ops.append(op)
            return op.output
        value = self.program.add_param(f"folded{len(self.program.params)}", op.output.type, data)
        self.consts[id(value)] = data
        return value

    def _computed(self, op: Op) -> np.ndarray | None:
        """``op``'s result where it is shape arithmetic (a few integers, computed from known integer
        operands), else None: constants of other kinds stay ops the rules see (a ``full`` broadcast)."""
        known = [self.consts.get(id(v)) for v in op.inputs]
        lower = OPS[op.name].lower
        if not known or lower is None or op.output.type.size > _MAX_SHAPE_ARITHMETIC:
            return None
        if any(k is None or k.dtype.kind not in "iub" for k in known):
            return None
        import jax

        with jax.enable_x64(True):  # int64 shape arithmetic as written
            data = np.asarray(lower(*known, **op.attrs))  # type: ignore[operator]
        return data.astype(op.output.type.dtype) if data.shape == op.output.type.shape else None


def _arity(line: Line, n: int) -> None:
    if len(line.operands) != n:
        raise ParseError(f"takes {n} operand(s), got {len(line.operands)}", line=line.number, op=line.name)


def _results(line: Line, n: int) -> None:
    if len(line.results) != n:
        raise ParseError(f"has {n} result(s), got {len(line.results)}", line=line.number, op=line.name)


def _single_type(line: Line) -> TensorType:
    types = _declared(line)
    if len(types) != 1:
        raise ParseError(f"needs one result type, got {len(types)}", line=line.number, op=line.name)
    return types[0]


_TRUE, _FALSE = (1, True, "true", "True"), (0, False, "false", "False")


def _flag(line: Line, key: str, default: bool) -> bool:
    """A boolean attribute, written 0/1 or true/false."""
    value = line.attrs.get(key, default)
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ParseError(f"attribute {key} must be true or false, got {value!r}", line=line.number, op=line.name)


def _attr(line: Line, key: str) -> object:
    if key not in line.attrs:
        raise ParseError(f"missing attribute {key!r}", line=line.number, op=line.name)
    return line.attrs[key]


def _full(r: _Reader, line: Line) -> list[Value]:
    _arity(line, 0)
    shape, value, dtype = _attr(line, "shape"), _attr(line, "value"), _attr(line, "dtype")
    if isinstance(shape, int):
        shape = (shape,)
    if not isinstance(value, int | float):
        raise ParseError(f"bad attribute value: {value!r} is not a number", line=line.number, op=line.name)
    out = r.add(line, "full", [], shape=shape, value=float(value), dtype=dtype)
    r.remember(out, value)
    return [out]


def _full_int_array(r: _Reader, line: Line) -> list[Value]:
    _arity(line, 0)
    _results(line, 1)
    value = _attr(line, "value")
    if not isinstance(value, tuple) or not all(isinstance(v, int) for v in value):
        raise ParseError(
            f"bad attribute value: {value!r} is not an int array", line=line.number, op=line.name
        )
    r.int_arrays[line.results[0]] = value
    return []


def _reshape(r: _Reader, line: Line) -> list[Value]:
    _arity(line, 2)
    x = r.tensor(line, line.operands[0])
    spec = list(r.shape_operand(line, line.operands[1]))
    if any(d == 0 and i >= x.type.rank for i, d in enumerate(spec)):
        raise ParseError(
            f"reshape target {spec}: 0 (keep the input dim) beyond the input's rank {x.type.rank}",
            line=line.number,
            op=line.name,
        )
    if any(d < -1 for d in spec):
        raise ParseError(f"reshape target {spec} has a negative dim", line=line.number, op=line.name)
    shape = [x.type.shape[i] if d == 0 else d for i, d in enumerate(spec)]
    if shape.count(-1) > 1:
        raise ParseError("reshape with more than one -1", line=line.number, op=line.name)
    if -1 in shape:
        known = prod(d for d in shape if d != -1)
        shape[shape.index(-1)] = x.type.size // known if known else 0
    return [r.add(line, "reshape", [x], shape=tuple(shape))]


def _expand(r: _Reader, line: Line) -> list[Value]:
    _arity(line, 2)
    x = r.tensor(line, line.operands[0])
    target = r.shape_operand(line, line.operands[1])
    pad = len(target) - x.type.rank
    shape = tuple(x.type.shape[i - pad] if d == -1 and i >= pad else d for i, d in enumerate(target))
    producer = next((op for op in reversed(r.program.ops) if op.outputs[0] is x), None)
    if producer is not None and producer.name == "full":
        try:
            return [r.program.add_op("expand", [x], shape=shape)]
        except ShapeError:
            out = r.add(line, "full", [], shape=shape, value=producer.attrs["value"], dtype=x.type.dtype)
            r.remember(out, producer.attrs["value"])
            return [out]
    return [r.add(line, "expand", [x], shape=shape)]


def _transpose(r: _Reader, line: Line) -> list[Value]:
    _arity(line, 1)
    return [r.add(line, "transpose", [r.tensor(line, line.operands[0])], perm=_attr(line, "perm"))]


def _cast(r: _Reader, line: Line) -> list[Value]:
    _arity(line, 1)
    return [r.add(line, "cast", [r.tensor(line, line.operands[0])], dtype=_attr(line, "dtype"))]


def _integer_scale(r: _Reader, line: Line, x: Value, scale: float, bias: float, after: bool) -> Results:
    """``scale`` of an integer tensor by integral constants (a loop counter's ``i + 1``): a product and a
    sum in its dtype; other constants stay opaque."""
    if scale != int(scale) or bias != int(bias):
        return _opaque(r, line)

    def constant(value: float) -> Value:
        return r.add(line, "full", [], shape=(), value=value, dtype=x.type.dtype)

    def times(v: Value) -> Value:
        return v if scale == 1 else r.add(line, "mul", [v, constant(scale)])

    def plus(v: Value) -> Value:
        return v if bias == 0 else r.add(line, "add", [v, constant(bias)])

    return [plus(times(x)) if after else times(plus(x))]


def _softmax(r: _Reader, line: Line) -> list[Value]:
    _arity(line, 1)
    return [r.add(line, "softmax", [r.tensor(line, line.operands[0])], axis=line.attrs.get("axis", -1))]


def _matmul(r: _Reader, line: Line) -> list[Value]:
    _arity(line, 2)
    x, y = (r.tensor(line, o) for o in line.operands)
    flags = {k: int(_flag(line, k, False)) for k in ("transpose_x", "transpose_y")}
    return [r.add(line, "matmul", [x, y], **flags)]


def _scale(r: _Reader, line: Line) -> Results:
    _arity(line, 2)
    x, s = (r.tensor(line, o) for o in line.operands)
    bias = line.attrs.get("bias", 0.0)
    if isinstance(bias, str | tuple):
        raise ParseError(f"bias {bias!r} is not a number", line=line.number, op=line.name)
    bias = float(bias)
    after = _flag(line, "bias_after_scale", True)
    const = r.consts.get(id(s))
    if const is not None and const.size == 1 and x.type.dtype not in FLOAT_DTYPES:
        return _integer_scale(r, line, x, float(const.ravel()[0]), bias, after)
    if const is not None and const.size == 1:
        value = float(const.ravel()[0])
        return [r.add(line, "scale", [x], scale=value, bias=bias if after else bias * value)]
    if not after:
        x = r.add(line, "scale", [x], scale=1.0, bias=bias)
    out = r.add(line, "mul", [x, s])
    return [r.add(line, "scale", [out], scale=1.0, bias=bias)] if after and bias else [out]


def _combine(r: _Reader, line: Line) -> list[Value]:
    _results(line, 1)
    r.env[line.results[0]] = [r.tensor(line, o) for o in line.operands]
    return []


def _concat(r: _Reader, line: Line) -> list[Value]:
    _arity(line, 2)
    xs = r.env.get(line.operands[0])
    if not isinstance(xs, list):
        raise ParseError(f"{line.operands[0]} must be a builtin.combine list", line=line.number, op=line.name)
    axes = _concat_axis(r, line, xs)
    if len(axes) != 1:
        raise ParseError(f"concat axis must be one value, got {list(axes)}", line=line.number, op=line.name)
    return [r.add(line, "concat", xs, axis=axes[0])]


def _concat_axis(r: _Reader, line: Line, xs: list[Value]) -> tuple[int, ...]:
    """The concat axis: a constant, or where Paddle moved it into the params file, the one axis along
    which the declared result is the inputs' sizes added up."""
    name = line.operands[1]
    if r.is_constant(name) or not line.out_types:
        return r.int_array(line, name)
    out, _ = _parse_type(line, line.out_types[0])
    fits = [
        a
        for a in range(len(out))
        if out[a] == sum(x.type.shape[a] for x in xs)
        and all(x.type.shape[:a] + x.type.shape[a + 1 :] == out[:a] + out[a + 1 :] for x in xs)
    ]
    return tuple(fits) if len(fits) == 1 else r.int_array(line, name)


def _data(r: _Reader, line: Line) -> list[Value]:
    """An input; its dynamic (-1) dims take the sizes the user binds (``shapes={"x": (8, 32)}``), or
    else ``DYNAMIC_DEFAULT`` (the program records its declared shape in ``dynamic``)."""
    _arity(line, 0)
    _results(line, 1)
    name = str(line.attrs.get("name", line.results[0][1:]))
    if len(line.out_types) != 1:
        raise ParseError(f"needs one result type, got {len(line.out_types)}", line=line.number, op=line.name)
    declared, dtype = _parse_type(line, line.out_types[0])
    shape = tuple(r.shapes.get(name, declared))
    if DYNAMIC in declared:
        r.program.dynamic[name] = declared
    if DYNAMIC in shape:
        shape = tuple(DYNAMIC_DEFAULT if d == DYNAMIC else d for d in shape)
    if len(shape) != len(declared) or any(
        d not in (DYNAMIC, s) for d, s in zip(declared, shape, strict=False)
    ):
        reason = f"shapes[{name!r}] = {shape} does not fit the declared {list(declared)}"
        raise ParseError(reason, line=line.number, op=line.name)
    try:
        return [r.program.add_input(name, TensorType(shape, dtype))]
    except ShapeError as e:
        raise ParseError(str(e), line=line.number, op=line.name) from None


def _parameter(r: _Reader, line: Line) -> list[Value]:
    """A weight, whose value the params file holds; a non-persistable one (an RNN's dropout state,
    which Paddle does not save) starts at zeros, as Paddle starts it."""
    _arity(line, 0)
    _results(line, 1)
    name = line.attrs.get("parameter_name", line.attrs.get("name", line.results[0][1:]))
    kind = _single_type(line)
    persistable = line.attrs.get("persistable", True)
    if not (persistable[0] if isinstance(persistable, tuple) and persistable else persistable):
        return [r.program.add_param(str(name), kind, np.zeros(kind.shape, kind.dtype))]
    return [r.program.add_param(str(name), kind)]


def _constant(r: _Reader, line: Line) -> list[Value]:
    """``builtin.constant {value:"name"}``: a weight kept in the params file under that name."""
    _arity(line, 0)
    _results(line, 1)
    return [r.program.add_param(str(_attr(line, "value")), _single_type(line))]


def _split_list(r: _Reader, line: Line) -> list[Value]:
    """``builtin.split``: the elements of a list value."""
    _arity(line, 1)
    values = r.env.get(line.operands[0])
    if not isinstance(values, list) or len(values) != len(line.results):
        raise ParseError(
            f"{line.operands[0]} must be a list of {len(line.results)} values", line=line.number, op=line.name
        )
    return values


def _if(r: _Reader, line: Line) -> Results:
    """``pd_op.if (cond) -> types {then} else {other}``: an op that runs ``lax.cond`` over its two
    branches, each read as a Program of the values it reads from the program around it (its operands
    after the condition, the first branch's then the second's). Rules do not cross it; each branch is
    optimized on its own."""
    _arity(line, 1)
    if len(line.regions) != 2:
        raise ParseError(
            f"expected two regions (then, else), got {len(line.regions)}", line=line.number, op=line.name
        )
    cond = r.tensor(line, line.operands[0])
    if cond.type.size != 1 or cond.type.dtype != "bool":
        raise ParseError(f"the condition must be one bool, got {cond.type}", line=line.number, op=line.name)
    branches, captured = [], []
    for region in line.regions:
        inner = r.region()
        _read(inner, region)
        branches.append(inner.program)
        assert isinstance(inner.env, _Scope)
        captured += inner.env.captured
    types = [[v.type for v in b.outputs] for b in branches]
    if types[0] != types[1] or len(types[0]) != len(line.results):
        raise ParseError(f"the branches yield {types[0]} and {types[1]}", line=line.number, op=line.name)
    outs = tuple(Value(t) for t in types[0])
    attrs = {"op": line.name, **{k: v for k, v in line.attrs.items() if k not in _IGNORED_ATTRS}}
    r.program.ops.append(Op(OPAQUE, (cond, *captured), attrs, outs, payload=Cond((branches[0], branches[1]))))
    return list(outs)


def _while(r: _Reader, line: Line) -> Results:
    """``pd_op.while (cond, values...) { ^args ... yield (next cond, next values) }``: an op that runs
    ``lax.while_loop``; its body is read as a Program of the loop values (its block arguments) and of
    the values it reads from around it (the op's operands after the loop values)."""
    cond, *values = (r.tensor(line, o) for o in line.operands)
    (region,), (args,) = line.regions, line.region_args
    if len(args) != len(values) or len(line.results) != len(values):
        raise ParseError(
            f"{len(values)} loop values, {len(args)} block arguments, {len(line.results)} results",
            line=line.number,
            op=line.name,
        )
    inner = r.region()
    for name, value in zip(args, values, strict=True):
        inner.env[name] = inner.program.add_input(name, value.type)
    _read(inner, region)
    assert isinstance(inner.env, _Scope)
    yielded = [v.type for v in inner.program.outputs]
    if yielded != [cond.type, *(v.type for v in values)]:
        raise ParseError(
            f"the body yields {yielded}, not the condition and the loop values",
            line=line.number,
            op=line.name,
        )
    outs = tuple(Value(v.type) for v in values)
    attrs = {"op": line.name, **{k: v for k, v in line.attrs.items() if k not in _IGNORED_ATTRS}}
    payload = Loop(inner.program, len(values))
    r.program.ops.append(Op(OPAQUE, (cond, *values, *inner.env.captured), attrs, outs, payload=payload))
    return list(outs)


def _yield(r: _Reader, line: Line) -> list[Value]:
    """``cf.yield``: a region's results."""
    for name in line.operands:
        r.program.add_output(r.tensor(line, name))
    return []


def _fetch(r: _Reader, line: Line) -> list[Value]:
    _arity(line, 1)
    r.program.add_output(r.tensor(line, line.operands[0]), str(line.attrs.get("name", "")) or None)
    return []


def _gelu(r: _Reader, line: Line) -> Results:
    """``approximate:true`` is the tanh form, eqsat's ``gelu``; the exact (erf) form stays opaque and
    runs as ``jax.nn.gelu(approximate=False)``."""
    _arity(line, 1)
    if _flag(line, "approximate", False):
        return [r.add(line, "gelu", [r.tensor(line, line.operands[0])])]
    return _opaque(r, replace(line, name="pd_op.gelu"))


# Paddle's dropout modes at inference: ``upscale_in_train`` leaves x as it is (training scaled by
# 1/(1-p)); ``downgrade_in_infer`` (``downscale_in_infer`` in paddle.nn) multiplies it by 1 - p.
_DROPOUT_MODES = {"upscale_in_train": False, "downgrade_in_infer": True, "downscale_in_infer": True}


def _dropout(r: _Reader, line: Line) -> Results:
    """At inference (``is_test:true``) dropout is the identity or, in ``downgrade_in_infer`` mode, a
    scaling by 1 - p (p: the third operand); its mask result may not be read."""
    if not _flag(line, "is_test", False):
        return _opaque(r, line)
    mode = line.attrs.get("mode", "upscale_in_train")
    if mode not in _DROPOUT_MODES:
        raise ParseError(
            f"unknown dropout mode {mode!r} (known: {', '.join(_DROPOUT_MODES)})",
            line=line.number,
            op=line.name,
        )
    x = r.tensor(line, line.operands[0])
    out = _downscaled(r, line, x) if _DROPOUT_MODES[str(mode)] else x
    mask = Value(TensorType(x.type.shape, "uint8"))
    r.dynamic.add(id(mask))
    return [out, mask][: len(line.results)]


def _downscaled(r: _Reader, line: Line, x: Value) -> Value:
    """``x * (1 - p)``: a ``scale`` for a constant p, else computed from the p tensor."""
    if len(line.operands) < 3 or line.operands[2] == NULL_VALUE:
        raise ParseError(
            "downgrade_in_infer dropout needs its probability operand p", line=line.number, op=line.name
        )
    p = r.tensor(line, line.operands[2])
    const = r.consts.get(id(p))
    if const is not None and const.size == 1:
        return r.add(line, "scale", [x], scale=1.0 - float(const.ravel()[0]))
    keep = r.add(line, "scale", [r.add(line, "cast", [p], dtype=x.type.dtype)], scale=-1.0, bias=1.0)
    return r.add(line, "mul", [x, keep])


def _reduction(op: str) -> Handler:
    """``pd.sum`` / ``pd.mean`` / ``pd.max`` over the axes of a constant operand (none: all axes), as
    one-axis ``reduce_sum`` / ``reduce_max`` ops; a mean is a sum scaled by 1/n."""

    def handler(r: _Reader, line: Line) -> list[Value]:
        _arity(line, 2)
        x = r.tensor(line, line.operands[0])
        axes = _reduced_axes(r, line, x) or tuple(range(x.type.rank))
        if any(not -x.type.rank <= a < x.type.rank for a in axes):
            raise ParseError(
                f"axes {list(axes)} out of range for rank {x.type.rank}", line=line.number, op=line.name
            )
        keep = int(_flag(line, "keepdim", False))
        out, count = x, 1
        for axis in sorted({a % x.type.rank for a in axes}, reverse=True):
            count *= x.type.shape[axis]
            out = r.add(line, "reduce_max" if op == "max" else "reduce_sum", [out], axis=axis, keepdim=keep)
        if op == "mean":
            out = r.add(line, "scale", [out], scale=1.0 / count if count else float("nan"))
        return [out]

    return handler


def _reduced_axes(r: _Reader, line: Line, x: Value) -> tuple[int, ...]:
    """The axes operand of a reduction; where Paddle moved it into the params file, the axes the
    declared result shape implies (all of them, if that is ambiguous for the values)."""
    name = line.operands[1]
    if r.is_constant(name) or not line.out_types:
        return r.int_array(line, name)
    out, _ = _parse_type(line, line.out_types[0])
    dims = x.type.shape
    if _flag(line, "keepdim", False) and len(out) == len(dims):
        return tuple(a for a in range(len(dims)) if out[a] == 1)  # reducing a size-1 dim changes nothing
    kept = [c for c in combinations(range(len(dims)), len(out)) if tuple(dims[a] for a in c) == tuple(out)]
    if len(kept) != 1:
        return r.int_array(line, name)  # the usual error: not a constant
    return tuple(a for a in range(len(dims)) if a not in kept[0])


def _square(r: _Reader, line: Line) -> Results:
    """``pd.square`` and ``pd.pow {y:2}`` are x * x; other powers stay opaque."""
    _arity(line, 1)
    if _canonical(line.name) == "pd.pow" and line.attrs.get("y") != 2:
        return _opaque(r, replace(line, name="pd_op.pow"))
    x = r.tensor(line, line.operands[0])
    return [r.add(line, "mul", [x, x])]


def _silu(r: _Reader, line: Line) -> list[Value]:
    _arity(line, 1)
    x = r.tensor(line, line.operands[0])
    return [r.add(line, "mul", [x, r.add(line, "sigmoid", [x])])]


def _clip(r: _Reader, line: Line, x: Value, low: float, high: float) -> Value:
    """``min(max(x, low), high)`` with scalar constants of x's dtype."""
    bound = [r.add(line, "full", [], shape=(), value=float(v), dtype=x.type.dtype) for v in (low, high)]
    return r.add(line, "minimum", [r.add(line, "maximum", [x, bound[0]]), bound[1]])


def _leaky_relu(r: _Reader, line: Line) -> Results:
    """``where(x >= 0, x, negative_slope * x)`` in canonical ops (rules see through it); integers stay
    opaque."""
    _arity(line, 1)
    x = r.tensor(line, line.operands[0])
    if x.type.dtype not in FLOAT_DTYPES:
        return _opaque(r, line)
    zero = r.add(line, "full", [], shape=(), value=0.0, dtype=x.type.dtype)
    scaled = r.add(line, "scale", [x], scale=_number(line, "negative_slope", 0.01))
    return [r.add(line, "select", [r.add(line, "ge", [x, zero]), x, scaled])]


def _clip_line(r: _Reader, line: Line) -> Results:
    """``pd.clip(x, min, max)`` with constant bounds: ``min(max(x, min), max)``; others stay opaque."""
    _arity(line, 3)
    x, low, high = (r.tensor(line, o) for o in line.operands)
    bounds = [r.consts.get(id(v)) for v in (low, high)]
    if any(b is None or b.size != 1 for b in bounds):
        return _opaque(r, line)
    return [_clip(r, line, x, *(float(b.ravel()[0]) for b in bounds if b is not None))]


def _number(line: Line, key: str, default: float) -> float:
    value = line.attrs.get(key, default)
    if not isinstance(value, int | float):
        raise ParseError(f"{key} {value!r} is not a number", line=line.number, op=line.name)
    return float(value)


def _hard_activation(r: _Reader, line: Line) -> list[Value]:
    """Paddle's piecewise-linear activations as canonical ops (rules see through them): ``relu6``
    min(max(x, 0), 6); ``hardtanh`` min(max(x, t_min), t_max); ``hardsigmoid`` min(max(x·slope + offset,
    0), 1); ``hardswish`` x · min(max(x + 3, 0), 6) / 6."""
    _arity(line, 1)
    x = r.tensor(line, line.operands[0])
    kind = _canonical(line.name)
    if kind == "pd.relu6":
        return [_clip(r, line, x, 0.0, 6.0)]
    if kind == "pd.hardtanh":
        return [_clip(r, line, x, _number(line, "t_min", -1.0), _number(line, "t_max", 1.0))]
    if kind == "pd.hardsigmoid":
        slope, offset = _number(line, "slope", 1 / 6), _number(line, "offset", 0.5)
        return [_clip(r, line, r.add(line, "scale", [x], scale=slope, bias=offset), 0.0, 1.0)]
    gate = _clip(r, line, r.add(line, "scale", [x], scale=1.0, bias=3.0), 0.0, 6.0)
    six = r.add(line, "full", [], shape=(), value=6.0, dtype=x.type.dtype)
    return [r.add(line, "div", [r.add(line, "mul", [x, gate]), six])]


def _squeezed(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, ...]:
    """Paddle's squeeze: the dims of size 1 among ``axes`` (every dim of size 1 where none) removed."""
    gone = {a % len(shape) for a in axes} if axes else set(range(len(shape)))
    return tuple(d for i, d in enumerate(shape) if not (i in gone and d == 1))


def _unsqueezed(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, ...]:
    """Paddle's unsqueeze: a 1 inserted at each axis in turn, a negative one counted from the end of
    the shape as it is then."""
    out = list(shape)
    for axis in axes:
        out.insert(axis + len(out) + 1 if axis < 0 else axis, 1)
    return tuple(out)


def _flattened(shape: tuple[int, ...], start: int, stop: int) -> tuple[int, ...]:
    """Paddle's flatten: the dims from ``start`` to ``stop`` (both included) as one."""
    if not shape:
        return (1,)
    start, stop = start % len(shape), stop % len(shape)
    return (*shape[:start], prod(shape[start : stop + 1]), *shape[stop + 1 :])


def _meant_shape(r: _Reader, line: Line, x: Value) -> tuple[int, ...] | None:
    """The result shape ``pd.squeeze`` / ``pd.unsqueeze`` / ``pd.flatten`` gives ``x``, by the op's
    meaning (its axes a constant, or its attributes); None where the axes are not known."""
    kind = _canonical(line.name)
    if kind == "pd.flatten":
        start, stop = line.attrs.get("start_axis", 1), line.attrs.get("stop_axis", -1)
        if not isinstance(start, int) or not isinstance(stop, int):
            return None
        return _flattened(x.type.shape, start, stop)
    if len(line.operands) < 2 or not r.is_constant(line.operands[1]):
        return None
    axes = r.int_array(line, line.operands[1])
    if any(not -x.type.rank - len(axes) <= a <= x.type.rank + len(axes) for a in axes):
        raise ParseError(f"axes {list(axes)} out of range for {x.type}", line=line.number, op=line.name)
    return _squeezed(x.type.shape, axes) if kind == "pd.squeeze" else _unsqueezed(x.type.shape, axes)


def _reshaped_as_meant(r: _Reader, line: Line) -> list[Value]:
    """``pd.squeeze`` / ``pd.unsqueeze`` / ``pd.flatten``: a reshape to the shape the op gives its
    input (its dynamic dims resolved from the bound inputs), which must agree with the declared one
    where that is static; with unknown axes, the declared shape, one dynamic (-1) dim there (a
    dynamic batch) holding the elements the others leave."""
    x = r.tensor(line, line.operands[0])
    shape, _ = _parse_type(line, line.out_types[0]) if line.out_types else ((DYNAMIC, DYNAMIC), "")
    meant = _meant_shape(r, line, x)
    if meant is not None:
        if len(meant) != len(shape) or any(d not in (DYNAMIC, m) for d, m in zip(shape, meant, strict=False)):
            raise ParseError(
                f"gives {x.type} the shape {list(meant)}, declared {list(shape)}",
                line=line.number,
                op=line.name,
            )
        return [r.add(line, "reshape", [x], shape=meant)]
    known = prod(d for d in shape if d != DYNAMIC)
    if shape.count(DYNAMIC) > 1 or (DYNAMIC in shape and (known == 0 or x.type.size % known)):
        raise ParseError(f"the result shape {list(shape)} is dynamic (-1)", line=line.number, op=line.name)
    shape = tuple(x.type.size // known if d == DYNAMIC else d for d in shape)
    return [r.add(line, "reshape", [x], shape=shape)]


def _split_with_num(r: _Reader, line: Line) -> Results:
    """``pd.split_with_num {num}`` along a constant axis: a list of ``split`` parts."""
    _arity(line, 2)
    x = r.tensor(line, line.operands[0])
    num = line.attrs.get("num")
    name = line.operands[1]
    if r.is_constant(name) or not line.out_types:
        (axis,) = r.int_array(line, name)[:1] or (0,)
    else:  # the axis moved into the params file: where the declared parts are 1/num of x
        part, _ = _parse_type(line, _types(line, line.out_types[0])[0])
        fits = [a for a, (p, d) in enumerate(zip(part, x.type.shape, strict=False)) if p != d]
        (axis,) = fits if len(fits) == 1 else r.int_array(line, name)[:1]
    if not isinstance(num, int) or num <= 0 or not -x.type.rank <= axis < x.type.rank:
        raise ParseError(f"split of {x.type} into {num!r} along {axis}", line=line.number, op=line.name)
    axis %= x.type.rank
    if x.type.shape[axis] % num:
        raise ParseError(
            f"dim {x.type.shape[axis]} does not split into {num}", line=line.number, op=line.name
        )
    sizes = (x.type.shape[axis] // num,) * num
    return [[r.add(line, "split", [x], axis=axis, sizes=sizes, index=i) for i in range(num)]]


def _fc(r: _Reader, line: Line) -> Results:
    """``pd.fc`` (Paddle's fused matmul + bias + activation) over the last dim is a ``linear``."""
    act = {"": "none", "relu": "relu"}.get(str(line.attrs.get("activation_type", "")))
    if len(line.operands) != 3 or act is None:
        return _opaque(r, line)
    x, w, b = (r.tensor(line, o) for o in line.operands)
    if line.attrs.get("in_num_col_dims") != x.type.rank - 1:
        return _opaque(r, line)
    return [r.add(line, "linear", [x, w, b], act=act)]


def _multihead_matmul(r: _Reader, line: Line) -> Results:
    """``pd.multihead_matmul`` (Paddle's fused attention block: x (B, S, D), packed weights (D, 3, N),
    bias (3, N), optional mask) as the canonical ops it stands for: one Q/K/V linear, heads split and
    laid out (B, H, S, N/H), ``attention`` scaled by alpha, heads merged back."""
    x, w, b = (r.tensor(line, o) for o in line.operands[:3])
    heads, alpha = line.attrs.get("head_number"), line.attrs.get("alpha")
    plain = (
        not line.attrs.get("transpose_q")
        and line.attrs.get("transpose_k")
        and not line.attrs.get("transpose_v")
    )
    if not (isinstance(heads, int) and isinstance(alpha, int | float) and plain and x.type.rank == 3):
        return _opaque(r, line)
    (batch, seq, dim), n = x.type.shape, w.type.shape[-1]
    qkv = r.add(
        line,
        "linear",
        [x, r.add(line, "reshape", [w], shape=(dim, 3 * n)), r.add(line, "reshape", [b], shape=(3 * n,))],
    )
    parts = []
    for i in range(3):
        part = r.add(line, "split", [qkv], axis=2, sizes=(n, n, n), index=i)
        part = r.add(line, "reshape", [part], shape=(batch, seq, heads, n // heads))
        parts.append(r.add(line, "transpose", [part], perm=(0, 2, 1, 3)))
    mask_name = line.operands[3] if len(line.operands) > 3 else NULL_VALUE
    mask = (
        r.add(line, "full", [], shape=(), value=0.0, dtype=x.type.dtype)
        if mask_name == NULL_VALUE
        else r.tensor(line, mask_name)
    )
    keep_all = r.add(line, "full", [], shape=(), value=1.0, dtype="bool")
    out = r.add(line, "attention", [*parts, mask, keep_all], scale=float(alpha))
    out = r.add(line, "transpose", [out], perm=(0, 2, 1, 3))
    return [r.add(line, "reshape", [out], shape=(batch, seq, n))]


def _paddle_padding(
    line: Line, sizes: Sequence[int], kernel: Sequence[int], strides: Sequence[int], dilations: Sequence[int]
) -> tuple[int, ...]:
    """Paddle's ``paddings`` / ``padding_algorithm`` as (top, bottom, left, right)."""
    algorithm = str(line.attrs.get("padding_algorithm", "EXPLICIT"))
    if algorithm == "VALID":
        return (0, 0, 0, 0)
    if algorithm == "SAME":  # as TensorFlow: the output is ceil(size / stride), the odd pad at the end
        pads: list[int] = []
        for size, k, stride, dilation in zip(sizes, kernel, strides, dilations, strict=True):
            total = max((-(-size // stride) - 1) * stride + dilation * (k - 1) + 1 - size, 0)
            pads += [total // 2, total - total // 2]
        return tuple(pads)
    paddings = tuple(int(p) for p in line.attrs.get("paddings", (0, 0)))  # type: ignore[union-attr]
    if len(paddings) == 2:
        return (paddings[0], paddings[0], paddings[1], paddings[1])
    if len(paddings) == 4:
        return paddings
    raise ParseError(f"paddings {list(paddings)} are not 2 or 4 numbers", line=line.number, op=line.name)


def _spatial(x: Value, layout: str) -> tuple[int, int]:
    h, w = CONV_AXES[layout].spatial
    return x.type.shape[h], x.type.shape[w]


def _layout(line: Line) -> str:
    layout = str(line.attrs.get("data_format", "NCHW"))
    if layout not in ("NCHW", "NHWC"):
        raise ParseError(f"data_format {layout} (NCHW or NHWC)", line=line.number, op=line.name)
    return layout


def _conv2d(r: _Reader, line: Line) -> list[Value]:
    """``pd.conv2d`` / ``pd.depthwise_conv2d``: filters OIHW whatever the data format (NHWC data takes
    them transposed to HWIO)."""
    _arity(line, 2)
    return [_conv(r, line, *(r.tensor(line, o) for o in line.operands))]


_FUSED_ACTIVATIONS = {"identity": None, "relu": "relu"}


def _fused_conv2d_add_act(r: _Reader, line: Line) -> Results:
    """``pd.fused_conv2d_add_act(x, filter, bias?, residual?)`` (Paddle's conv fusion pass) is
    ``act(conv2d + bias + residual)`` in canonical ops, so the rules see through it (a batch norm after
    it folds in). Activations other than identity and relu, and split outputs, stay opaque."""
    _arity(line, 4)
    activation = str(line.attrs.get("activation", "identity"))
    if activation not in _FUSED_ACTIVATIONS or line.attrs.get("split_channels"):
        return _opaque(r, line)
    x, w = (r.tensor(line, o) for o in line.operands[:2])
    y = _conv(r, line, x, w)
    axis = CONV_AXES[_layout(line)].channel
    for name in line.operands[2:]:
        if name == NULL_VALUE:
            continue
        term = r.tensor(line, name)
        if term.type.rank == 1:  # a bias per channel
            shape = tuple(term.type.shape[0] if i == axis else 1 for i in range(4))
            term = r.add(line, "reshape", [term], shape=shape)
        y = r.add(line, "add", [y, term])
    act = _FUSED_ACTIVATIONS[activation]
    y = y if act is None else r.add(line, act, [y])
    results: list[Value | list[Value]] = [y, []]
    return results[: len(line.results)]


def _conv(r: _Reader, line: Line, x: Value, w: Value) -> Value:
    """The conv2d of a Paddle conv line (its strides, dilations, paddings, groups, data format)."""
    layout = _layout(line)
    strides = tuple(int(v) for v in line.attrs.get("strides", (1, 1)))  # type: ignore[union-attr]
    dilations = tuple(int(v) for v in line.attrs.get("dilations", (1, 1)))  # type: ignore[union-attr]
    if w.type.rank != 4:
        raise ParseError(f"filter {w.type} is not OIHW", line=line.number, op=line.name)
    padding = _paddle_padding(line, _spatial(x, layout), w.type.shape[2:], strides, dilations)
    if layout == "NHWC":
        w = r.add(line, "transpose", [w], perm=(2, 3, 1, 0))
    groups = int(line.attrs.get("groups", 1))  # type: ignore[arg-type]
    attrs = {"strides": strides, "padding": padding, "dilations": dilations, "layout": layout}
    return r.add(line, "conv2d", [x, w], groups=groups, **attrs)


def _batch_norm(r: _Reader, line: Line) -> Results:
    """``pd.batch_norm_(x, mean, variance, scale, bias)`` at inference (``is_test``) is ``batch_norm``;
    its statistics results are the running statistics, its reserve space is never read."""
    if not _flag(line, "is_test", False) or len(line.operands) != 5:
        return _opaque(r, line)
    x, mean, var, scale, bias = (r.tensor(line, o) for o in line.operands)
    axis = 1 if _layout(line) == "NCHW" else x.type.rank - 1
    epsilon = float(line.attrs.get("epsilon", 1e-5))  # type: ignore[arg-type]
    y = r.add(line, "batch_norm", [x, scale, bias, mean, var], epsilon=epsilon, axis=axis)
    reserve = Value(TensorType((0,), "uint8"))
    r.dynamic.add(id(reserve))
    return [y, mean, var, mean, var, reserve][: len(line.results)]


def _layer_norm(r: _Reader, line: Line) -> Results:
    """``pd.layer_norm(x, scale, bias)`` over the last axis of a float32 or float64 ``x`` is
    ``layer_norm`` (an absent scale is 1, an absent bias 0); its mean and variance results are the
    statistics over that axis. Other axes and half-precision ``x`` (whose statistics
    Paddle keeps in float32) stay opaque."""
    x = r.tensor(line, line.operands[0])
    last = x.type.rank - 1
    begin = line.attrs.get("begin_norm_axis", 1)
    if len(line.operands) != 3 or x.type.dtype not in ("float32", "float64") or begin not in (last, -1):
        return _opaque(r, line)
    channels, dtype = (x.type.shape[-1],), x.type.dtype
    params = []
    for name, fill in zip(line.operands[1:], (1.0, 0.0), strict=True):
        value = None if name == NULL_VALUE else r.tensor(line, name)
        if value is not None and value.type != TensorType(channels, dtype):
            return _opaque(r, line)
        params.append(value or r.add(line, "full", [], shape=channels, value=fill, dtype=dtype))
    epsilon = _number(line, "epsilon", 1e-5)
    y = r.add(line, "layer_norm", [x, *params], epsilon=epsilon)
    centered = r.add(line, "sub", [x, r.add(line, "reduce_mean", [x], axis=last, keepdim=1)])
    mean = r.add(line, "reduce_mean", [x], axis=last)
    variance = r.add(line, "reduce_mean", [r.add(line, "mul", [centered, centered])], axis=last)
    return [y, mean, variance][: len(line.results)]


def _pool2d(r: _Reader, line: Line) -> Results:
    """``pd.pool2d(x, kernel_size)``: max or average (``exclusive``: over the elements inside x),
    global, or adaptive where the output divides the input; ``ceil_mode`` as extra padding at the end
    (not for an inclusive average, which Paddle divides differently there)."""
    _arity(line, 2)
    x = r.tensor(line, line.operands[0])
    layout = _layout(line)
    sizes = _spatial(x, layout)
    kind = str(line.attrs.get("pooling_type", "max"))
    exclusive = _flag(line, "exclusive", True)
    if kind == "avg":
        kind = "avg_exclusive" if exclusive else "avg"
    ceil = _flag(line, "ceil_mode", False)
    window: tuple[int, ...]
    strides: tuple[int, ...]
    padding: tuple[int, ...]
    if _flag(line, "global_pooling", False):
        window, strides, padding = sizes, (1, 1), (0, 0, 0, 0)
    else:
        window = r.int_array(line, line.operands[1])
        window = (window[0], window[0]) if len(window) == 1 else window
        strides = tuple(int(v) for v in line.attrs.get("strides", (1, 1)))  # type: ignore[union-attr]
        if _flag(line, "adaptive", False):  # an output size of -1 (None) keeps the input's
            window = tuple(s if k == -1 else k for s, k in zip(sizes, window, strict=True))
            if any(s % k for s, k in zip(sizes, window, strict=True)):
                return _opaque(r, line)
            window = strides = tuple(s // k for s, k in zip(sizes, window, strict=True))
        padding = _paddle_padding(line, sizes, window, strides, (1, 1))
    if kind not in ("max", "avg", "avg_exclusive") or (ceil and kind == "avg"):
        return _opaque(r, line)
    if ceil:  # the last window may start inside the padding's end: pad so it is whole
        extra = []
        for i, (size, k, stride) in enumerate(zip(sizes, window, strides, strict=True)):
            span = size + padding[2 * i] + padding[2 * i + 1] - k
            extra += [padding[2 * i], padding[2 * i + 1] + (-span) % stride]
        padding = tuple(extra)
    attrs = {"window": tuple(window), "strides": strides, "padding": padding, "layout": layout}
    return [r.add(line, "pool2d", [x], kind=kind, **attrs)]


def _spelled(r: _Reader, line: Line) -> list[Value]:
    op = _SPELLED[_canonical(line.name)]
    _arity(line, op.arity)
    return [r.add(line, op.name, [r.tensor(line, o) for o in line.operands])]


def _opaque(r: _Reader, line: Line) -> Results:
    """An op eqsat does not know. Operands that are lists (``builtin.combine``) are flattened and absent
    ones (``<<NULL VALUE>>``) dropped; ``operands`` records the layout (``t`` a tensor, ``l<n>`` a list
    of n, ``n`` absent) for its lowering. A ``vec[...]`` result is a list of values."""
    ins: list[Value] = []
    layout = []
    for name in line.operands:
        value = None if name == NULL_VALUE else r.env.get(name)
        if isinstance(value, list):
            ins.extend(value)
            layout.append(f"l{len(value)}")
        elif name == NULL_VALUE:
            layout.append("n")
        else:
            ins.append(r.tensor(line, name))
            layout.append("t")
    results: list[Value | list[Value]] = []
    outs: list[Value] = []
    attrs = {"op": line.name, **{k: v for k, v in line.attrs.items() if k not in _IGNORED_ATTRS}}
    if set(layout) != {"t"} and layout:
        attrs["operands"] = ",".join(layout)
    constants = {i: c for i, v in enumerate(ins) if (c := r.constant_value(v)) is not None}
    if len(constants) == len(ins) and len(line.out_types) == len(line.results):
        folded = _folded(line, attrs, [constants[i] for i in range(len(ins))])
        if folded is not None and len(folded) == len(line.results):
            return [r.constant(line, res, value) for res, value in zip(line.results, folded, strict=True)]
    inferred = _inferred_shapes(line, ins, attrs, constants)
    for text in line.out_types:
        group = []
        for t in _types(line, text):
            if t.strip() == NULL_TYPE:  # an absent result: a placeholder nothing may read
                group.append(Value(TensorType((), "uint8")))
                r.dynamic.add(id(group[-1]))
                continue
            shape, dtype = _parse_type(line, t)
            known = inferred.pop(0) if inferred else None
            if DYNAMIC in shape and known is not None and len(known) == len(shape):
                shape = tuple(k if d == DYNAMIC else d for d, k in zip(shape, known, strict=True))
            value = Value(TensorType(tuple(0 if d == DYNAMIC else d for d in shape), dtype))
            if DYNAMIC in shape:  # e.g. batch_norm's unused saved statistics
                r.dynamic.add(id(value))
            group.append(value)
        outs.extend(group)
        results.append(group if text.strip().startswith("vec[") else group[0])
    r.program.ops.append(Op(OPAQUE, tuple(ins), attrs, tuple(outs)))
    return results


def _folded(line: Line, attrs: dict, constants: list[np.ndarray]) -> list[np.ndarray] | None:
    """The results of an opaque op with a meaning whose operands are all known small constants (shape
    arithmetic: ``slice``, ``stack``, ``full_with_tensor`` of a shape), computed as the reader reads
    (they become constants of the program), or None."""
    from eqsat.lowering import opaque_lowering

    fn = opaque_lowering(line.name)
    if fn is None or any(c.size > _MAX_KEPT_CONSTANT for c in constants):
        return None
    try:
        outs = fn(*constants, **{k: v for k, v in attrs.items() if k != "op"})
    except Exception:  # the meaning does not apply to these operands: the op stays as it is
        return None
    outs = [np.asarray(o) for o in (outs if isinstance(outs, tuple | list) else [outs])]
    return outs if all(o.size <= _MAX_KEPT_CONSTANT for o in outs) else None


class _Range(NamedTuple):
    """``arange(start, end, step)`` of a value-dependent length (``for _ in range(n)`` over a tensor
    ``n`` in ``to_static`` code): kept as its bounds, a constant integer step, for its length and its
    elements to be computed where they are read."""

    start: str  # the names of its bounds, read (captured) where the range is
    end: str
    step: int


def _arange(r: _Reader, line: Line) -> Results:
    """``pd.arange(start, end, step)``: computed where its bounds are known (or its shape inferred from
    them); an integer one whose length depends on tensor values is kept as a ``_Range``."""
    _arity(line, 3)
    results = _opaque(r, line)
    value = results[0]
    if (
        not isinstance(value, Value)
        or id(value) not in r.dynamic
        or not value.type.dtype.startswith(("int", "uint"))
    ):
        return results
    step = r.constant_value(r.tensor(line, line.operands[2]))
    if step is not None and step.size == 1 and int(step.item()) != 0:
        start, end = (r.tensor(line, name) for name in line.operands[:2])
        if start.type.size == end.type.size == 1:
            r.ranges[id(value)] = _Range(*line.operands[:2], int(step.item()))
    return results


def _scalar(r: _Reader, line: Line, value: Value, dtype: str) -> Value:
    """``value`` (one element) as a scalar of ``dtype``."""
    value = r.add(line, "reshape", [value], shape=())
    return value if value.type.dtype == dtype else r.add(line, "cast", [value], dtype=dtype)


def _range_length(r: _Reader, line: Line, span: _Range, dtype: str) -> Value:
    """max(ceil((end - start) / step), 0), a scalar of ``dtype``."""

    def number(v: int) -> Value:
        return r.add(line, "full", [], shape=(), value=float(v), dtype=dtype)

    start, end = (_scalar(r, line, r.tensor(line, name), dtype) for name in (span.start, span.end))
    distance = r.add(line, "sub", [end, start] if span.step > 0 else [start, end])
    stride = abs(span.step)
    if stride != 1:  # rounded up; a negative distance rounds toward zero, then is clamped
        distance = r.add(line, "div", [r.add(line, "add", [distance, number(stride - 1)]), number(stride)])
    return r.add(line, "maximum", [distance, number(0)])


def _shape_of(r: _Reader, line: Line) -> list[Value]:
    """``pd.shape`` / ``pd.shape64``: the (concrete) shape of its operand, a constant; of a ``_Range``,
    its length computed from its bounds."""
    _arity(line, 1)
    _results(line, 1)
    span = r.range_of(line.operands[0])
    if span is not None:
        _, dtype = _parse_type(line, line.out_types[0]) if line.out_types else ((), "int64")
        return [r.add(line, "reshape", [_range_length(r, line, span, dtype)], shape=(1,))]
    x = r.tensor(line, line.operands[0])
    return [r.constant(line, line.results[0], np.asarray(x.type.shape))]


def _slice(r: _Reader, line: Line) -> Results:
    """``pd.slice``: Paddle's meaning (an opaque op), but of a ``_Range`` one element
    (``decrease_axis``, as ``for _ in range(n)`` reads it): ``start + i * step``, a negative ``i``
    counted from its end."""
    span = r.range_of(line.operands[0])
    if span is None:
        return _opaque(r, line)
    if line.attrs.get("axes") != (0,) or line.attrs.get("decrease_axis") != (0,):
        raise ParseError(
            f"{line.operands[0]} is an arange whose length depends on tensor values: only one element "
            "at a time can be sliced from it",
            line=line.number,
            op=line.name,
        )
    dtype = r.tensor(line, span.start).type.dtype
    i = _scalar(r, line, r.tensor(line, line.operands[1]), dtype)
    zero = r.add(line, "full", [], shape=(), value=0.0, dtype=dtype)
    wrapped = r.add(line, "add", [i, _range_length(r, line, span, dtype)])
    i = r.add(line, "select", [r.add(line, "lt", [i, zero]), wrapped, i])
    step = r.add(line, "full", [], shape=(), value=float(span.step), dtype=dtype)
    start = _scalar(r, line, r.tensor(line, span.start), dtype)
    return [r.add(line, "add", [start, r.add(line, "mul", [i, step])])]


def _assign_value(r: _Reader, line: Line) -> list[Value]:
    """``pd.assign_value_(x) {shape, values}`` (``paddle.to_tensor`` in ``to_static`` code): a constant
    of the listed values, in the declared dtype."""
    values, shape = line.attrs.get("values"), line.attrs.get("shape")
    if not isinstance(values, tuple | list) or not isinstance(shape, tuple | list):
        raise ParseError("needs its values and shape as attributes", line=line.number, op=line.name)
    data = np.asarray(values)
    if data.size != prod(shape):
        raise ParseError(f"{data.size} values for the shape {list(shape)}", line=line.number, op=line.name)
    return [r.constant(line, line.results[0], data.reshape(tuple(shape)))]


def _inferred_shapes(
    line: Line, ins: list[Value], attrs: dict, constants: Mapping[int, np.ndarray]
) -> list[tuple[int, ...]]:
    """The result shapes of an opaque op with a registered JAX meaning, where the dump declares dynamic
    (-1) dims: found by tracing that meaning on the inputs' shapes (``jax.eval_shape``), the operands
    whose contents are known (split sections, axes) given as they are."""
    if not any("-1" in t for t in line.out_types):
        return []
    import jax

    from eqsat.lowering import opaque_lowering

    fn = opaque_lowering(line.name)
    if fn is None:
        return []
    traced = [i for i in range(len(ins)) if i not in constants]
    specs = [jax.ShapeDtypeStruct(ins[i].type.shape, ins[i].type.dtype) for i in traced]
    kwargs = {k: v for k, v in attrs.items() if k != "op"}

    def meaning(*xs: jax.Array) -> object:
        args = dict(constants) | dict(zip(traced, xs, strict=True))
        return fn(*(args[i] for i in range(len(ins))), **kwargs)

    try:
        outs = jax.eval_shape(meaning, *specs)
    except Exception:  # the meaning does not apply to these inputs: the dims stay dynamic
        return []
    return [tuple(o.shape) for o in (outs if isinstance(outs, tuple | list) else [outs])]


def _types(line: Line, text: str) -> list[str]:
    """The tensor types in a result type: one, or the elements of ``vec[...]``."""
    text = text.strip()
    if text.startswith("vec[") and text.endswith("]"):
        return split_top(text[4:-1])
    return [text]


def _parse_type(line: Line, text: str) -> tuple[tuple[int, ...], str]:
    """A declared type, dynamic (-1) dims kept; a value with one is given 0 there and may not be read."""
    try:
        shape, dtype = parse_tensor_type(text, line.number, dynamic=True)
        TensorType(tuple(max(d, 0) for d in shape), dtype)  # validates dims and dtype
        return shape, dtype
    except ShapeError as e:
        raise ParseError(str(e), line=line.number, op=line.name) from None


def _declared(line: Line) -> list[TensorType]:
    types = []
    for t in line.out_types:
        try:
            types.append(TensorType(*parse_tensor_type(t, line.number)))
        except ShapeError as e:
            raise ParseError(str(e), line=line.number, op=line.name) from None
    return types


Handler = Callable[[_Reader, Line], Results]
HANDLERS: dict[str, Handler] = {
    "pd.full": _full,
    "pd.full_int_array": _full_int_array,
    "pd.reshape": _reshape,
    "pd.expand": _expand,
    "pd.transpose": _transpose,
    "pd.cast": _cast,
    "pd.softmax": _softmax,
    "pd.matmul": _matmul,
    "pd.scale": _scale,
    "builtin.combine": _combine,
    "builtin.split": _split_list,
    "builtin.parameter": _parameter,
    "builtin.constant": _constant,
    "pd.concat": _concat,
    "pd.data": _data,
    "pd.parameter": _parameter,
    "pd.fetch": _fetch,
    "pd.leaky_relu": _leaky_relu,
    "pd.clip": _clip_line,
    "pd.if": _if,
    "pd.while": _while,
    "cf.yield": _yield,
    "pd.gelu": _gelu,
    "pd.dropout": _dropout,
    "pd.conv2d": _conv2d,
    "pd.depthwise_conv2d": _conv2d,
    "pd.fused_conv2d_add_act": _fused_conv2d_add_act,
    "pd.layer_norm": _layer_norm,
    "pd.batch_norm_": _batch_norm,
    "pd.batch_norm": _batch_norm,
    "pd.pool2d": _pool2d,
    "pd.sum": _reduction("sum"),
    "pd.mean": _reduction("mean"),
    "pd.max": _reduction("max"),
    "pd.square": _square,
    "pd.pow": _square,
    "pd.silu": _silu,
    "pd.swish": _silu,
    **dict.fromkeys(("pd.relu6", "pd.hardtanh", "pd.hardsigmoid", "pd.hardswish"), _hard_activation),
    "pd.squeeze": _reshaped_as_meant,
    "pd.unsqueeze": _reshaped_as_meant,
    "pd.flatten": _reshaped_as_meant,
    "pd.split_with_num": _split_with_num,
    "pd.shape": _shape_of,
    "pd.shape64": _shape_of,
    "pd.arange": _arange,
    "pd.slice": _slice,
    "pd.assign_value_": _assign_value,
    "pd.fc": _fc,
    "pd.multihead_matmul": _multihead_matmul,
    **dict.fromkeys(_SPELLED, _spelled),
}


def _check_declared(line: Line, results: Results) -> None:
    """Each tensor result has its declared type (a dynamic -1 dim matches any size); lists (``vec``
    results) are checked element by element where they are split."""
    if _canonical(line.name) in ("pd.full_int_array", "builtin.combine", "builtin.split"):
        return
    for name, got, text in zip(line.results, results, line.out_types, strict=False):
        if isinstance(got, list) or text.strip() == NULL_TYPE:
            continue
        shape, dtype = _parse_type(line, text)
        dims = zip(shape, got.type.shape, strict=False)
        want = TensorType(tuple(g if d == DYNAMIC else d for d, g in dims), dtype)
        if len(shape) != got.type.rank or got.type != want:
            raise ParseError(
                f"declared type of {name} is {text.strip()} but the op gives {got.type}",
                line=line.number,
                op=line.name,
            )


def _check_operands(r: _Reader, line: Line) -> None:
    """Each tensor operand must have the type the line declares for it (lists are not checked)."""
    for name, declared in zip(line.operands, line.in_types, strict=False):
        value = r.peek(name)
        if not isinstance(value, Value) or not declared.strip().endswith(">") or "vec[" in declared:
            continue
        try:
            want = TensorType(*parse_tensor_type(declared, line.number))
        except (ParseError, ShapeError):
            continue
        if want != value.type:
            raise ParseError(
                f"operand {name} is {value.type} but the line declares {want}", line=line.number, op=line.name
            )


def _canonical(name: str) -> str:
    """Paddle 3 prints ``pd_op.matmul`` where older dumps print ``pd.matmul``: one spelling here."""
    return "pd." + name[len("pd_op.") :] if name.startswith("pd_op.") else name


def parse_pir(
    text: str, outputs: Sequence[str] | None = None, shapes: Mapping[str, Sequence[int]] | None = None
) -> Program:
    """Parse a Paddle PIR text dump into a ``Program``; errors name the line, the op and the reason.

    The outputs are the ``pd.fetch``ed values; a program without fetch (``print(main_program)``) has as
    outputs the values ``outputs`` names (``["%15"]``), or else every value no op reads. ``shapes`` binds
    the dynamic (-1) dims of inputs by name: eqsat optimizes for static shapes.
    """
    return read_lines(parse_lines(program_lines(text)), outputs, shapes)


def read_lines(
    lines: Iterable[Line],
    outputs: Sequence[str] | None = None,
    shapes: Mapping[str, Sequence[int]] | None = None,
) -> Program:
    """The Program of PIR op lines, however they were written (text dump or saved JSON). Dynamic
    input dims ``shapes`` leaves unbound take ``DYNAMIC_DEFAULT``; the program can be read again at
    other sizes (``Program.specialize``)."""
    lines = list(lines)
    r = _Reader(shapes)
    try:
        produced = _read(r, lines)
    except ParseError as e:
        raise _with_shape_hint(e, r, shapes) from None
    inputs = [v.name for v in r.program.inputs]
    unknown = sorted(set(shapes or {}) - set(inputs))
    if unknown:
        raise ParseError(
            f"shapes names {unknown[0]!r}, which is no input of the program (its inputs: {inputs})"
        )
    if not r.program.outputs:
        _outputs_without_fetch(r, produced, outputs)
    if r.program.dynamic:
        r.program.specialize = lambda bound: read_lines(lines, outputs, {**(shapes or {}), **bound})
    return r.program


def _with_shape_hint(error: ParseError, r: _Reader, shapes: Mapping[str, Sequence[int]] | None) -> ParseError:
    """``error``, saying which inputs' dynamic dims were taken as ``DYNAMIC_DEFAULT`` for want of a
    size: a program that fails at those sizes needs them bound (an image's height and width)."""
    guessed = {name: declared for name, declared in r.program.dynamic.items() if name not in (shapes or {})}
    if not guessed:
        return error
    which = ", ".join(f"{name!r} declared {list(d)}" for name, d in guessed.items())
    hint = (
        f"{error.reason} (the dynamic dims of {which} were taken as {DYNAMIC_DEFAULT}: bind them, "
        f"shapes={{{next(iter(guessed))!r}: (...)}} or --shape NAME=D0,D1,...)"
    )
    return ParseError(hint, line=error.line, op=error.op)


def _read(r: _Reader, lines: Iterable[Line]) -> list[tuple[str, Value]]:
    """Read ``lines`` into ``r``; the values they compute (not inputs or weights), by name."""
    produced: list[tuple[str, Value]] = []
    for line in lines:
        number = line.number
        for res in line.results:
            if res in r.env or res in r.int_arrays:
                raise ParseError(f"value {res} is defined twice", line=number, op=line.name)
        _check_operands(r, line)
        handler = HANDLERS.get(_canonical(line.name))
        try:
            results = handler(r, line) if handler else _opaque(r, line)
        except ShapeError as e:
            raise ParseError(str(e), line=number, op=line.name) from None
        _check_declared(line, results)
        for name in line.operands:
            value = r.peek(name)
            r.read.update(map(id, value if isinstance(value, list) else [value]))
        for res, value in zip(line.results, results, strict=False):
            r.env[res] = value
            if isinstance(value, Value) and handler not in (_data, _parameter, _constant):
                produced.append((res, value))
    return produced


def _outputs_without_fetch(
    r: _Reader, produced: list[tuple[str, Value]], names: Sequence[str] | None
) -> None:
    if names is not None:
        for name in names:
            value = r.env.get(name)
            if not isinstance(value, Value):
                raise ParseError(f"output {name} is not a tensor value of the program")
            r.program.add_output(value, name.lstrip("%"))
        return
    for name, value in produced:
        if id(value) not in r.read and id(value) not in r.dynamic:
            r.program.add_output(value, name.lstrip("%"))
    if not r.program.outputs:
        raise ParseError("the program computes nothing: no pd.fetch and every value is read")


def load(
    path: str | Path, params: Params | None = None, shapes: Mapping[str, Sequence[int]] | None = None
) -> Program:
    """Load a program from a file: a PIR dump (``pd.*`` / ``pd_op.*`` ops), Paddle 3's saved program
    (``model.json``), or eqsat's own text form.

    ``params``: the weights — Paddle's ``.pdiparams`` file saved with the model (read without Paddle;
    for ``model.json``, ``model.pdiparams`` beside it is read by default), an ``.npz`` file or a dict
    of arrays by parameter name; they become the parameters' values. ``shapes`` binds inputs' dynamic
    (-1) dims by input name (``{"x": (8, 32)}``); unbound, they are 1 in the program returned, and
    ``eqsat.optimize(program).fn`` specializes on the shapes it is called with.
    """
    from eqsat.ir import parse_program

    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ParseError(f"{path} is not UTF-8 text (byte {e.start}): not a program dump") from None
    pir = any(f'"{prefix}' in text for prefix in ("pd.", "pd_op.", "builtin.", "onednn_op."))
    if str(path).endswith(".json"):
        program = read_lines(json_lines(text), shapes=shapes)
    else:
        program = parse_pir(text, shapes=shapes) if pir else parse_program(text)
    if params is None and str(path).endswith(".json") and Path(path).with_suffix(".pdiparams").exists():
        params = Path(path).with_suffix(".pdiparams")  # saved beside the program, as Paddle saves it
    if params is not None:
        bind_params(program, params)
    return _with_weights(program)


def _with_weights(program: Program) -> Program:
    """The program, whose specializations (other sizes of its dynamic dims) keep its weights."""
    read = program.specialize
    if read is None:
        return program

    def specialize(shapes: Mapping[str, Sequence[int]]) -> Program:
        special = read(shapes)
        for name, value in program.param_values.items():  # the weights; its own constants stay its own
            special.param_values.setdefault(name, value)
        return _with_weights(special)

    program.specialize = specialize
    return program
