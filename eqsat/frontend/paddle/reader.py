"""Reading Paddle PIR op lines into a ``Program``: the reader's state (values by name, known
constants, regions), the helpers handlers share, opaque ops (computed where their operands are known,
their shapes inferred from their meanings), and the tables every Paddle op is claimed in once: its
handler (``handles``: its translation into canonical ops) and, where it stays opaque, its JAX meaning
(``meaning``). A name claimed twice is an error when the tables are built."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np

from eqsat.errors import ParseError, ShapeError, UnsupportedError
from eqsat.ir import Op, Program, TensorType, Value, new_op
from eqsat.ops import OPAQUE, OPS, Lowering
from eqsat.ops.opaque import OPAQUE_LOWERINGS, meaning_attrs, register_opaque
from eqsat.text import (
    DYNAMIC,
    NULL_TYPE,
    NULL_VALUE,
    Line,
    parse_tensor_type,
    split_top,
)

# Paddle ops that are one canonical op of the same operands, from the ops' definitions.
_SPELLED = {name: op for op in OPS.values() for name in op.paddle}
# What reading one line gives: a value per result (a list of values for a ``vec`` result).
Results = Sequence[Value | list[Value]]
_IGNORED_ATTRS = {"place", "stop_gradient", "persistable"}
_MAX_KEPT_CONSTANT = 4096  # elements of a constant whose contents the reader keeps
_MAX_SHAPE_ARITHMETIC = 64  # elements of an op's result the reader computes from integer constants
# The lines that declare the program's inputs and weights: what they give is not computed by it.
_DECLARATIONS = {"pd.data", "pd.parameter", "builtin.parameter", "builtin.constant"}


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
        # results that may not be read, by id: the line that made them, and whether the result is
        # absent (dropout's mask at inference, a NULL result) rather than of a shape Paddle left -1
        self.dynamic: dict[int, tuple[Line, bool]] = {}
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
            raise _unreadable(name, *self.dynamic[id(v)], line)
        if v is None:
            if name in self.int_arrays:
                return self.materialize(name)
            raise ParseError(f"undefined value {name}", line=line.number, op=line.name)
        if isinstance(v, list):
            raise ParseError(f"{name} is a list, expected a tensor", line=line.number, op=line.name)
        return v

    def scalar(self, line: Line, value: float, dtype: str) -> Value:
        """A scalar ``full`` of ``dtype``: a constant operand of the ops a line becomes."""
        return self.add(line, "full", [], shape=(), value=float(value), dtype=dtype)

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


def _ints(line: Line, key: str) -> tuple[int, ...]:
    """An attribute that is a list of integers (a shape)."""
    value = _attr(line, key)
    if not isinstance(value, tuple | list) or not all(isinstance(v, int) for v in value):
        raise ParseError(f"{key} {value!r} is not a list of integers", line=line.number, op=line.name)
    return tuple(value)


def _number(line: Line, key: str, default: float) -> float:
    value = line.attrs.get(key, default)
    if not isinstance(value, int | float):
        raise ParseError(f"{key} {value!r} is not a number", line=line.number, op=line.name)
    return float(value)


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
                r.dynamic[id(group[-1])] = (line, True)
                continue
            shape, dtype = _parse_type(line, t)
            known = inferred.pop(0) if inferred else None
            if DYNAMIC in shape and known is not None and len(known) == len(shape):
                shape = tuple(k if d == DYNAMIC else d for d, k in zip(shape, known, strict=True))
            value = Value(TensorType(tuple(0 if d == DYNAMIC else d for d in shape), dtype))
            if DYNAMIC in shape:  # e.g. batch_norm's unused saved statistics
                r.dynamic[id(value)] = (line, False)
            group.append(value)
        outs.extend(group)
        results.append(group if text.strip().startswith("vec[") else group[0])
    r.program.ops.append(Op(OPAQUE, tuple(ins), attrs, tuple(outs)))
    return results


def _folded(line: Line, attrs: dict, constants: list[np.ndarray]) -> list[np.ndarray] | None:
    """The results of an opaque op with a meaning whose operands are all known small constants (shape
    arithmetic: ``slice``, ``stack``, ``full_with_tensor`` of a shape), computed as the reader reads
    (they become constants of the program), or None."""
    fn = OPAQUE_LOWERINGS.get(line.name)
    if fn is None or any(c.size > _MAX_KEPT_CONSTANT for c in constants):
        return None
    try:
        outs = fn(*constants, **meaning_attrs(attrs))
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


def _inferred_shapes(
    line: Line, ins: list[Value], attrs: dict, constants: Mapping[int, np.ndarray]
) -> list[tuple[int, ...]]:
    """The result shapes of an opaque op with a registered JAX meaning, where the dump declares dynamic
    (-1) dims: found by tracing that meaning on the inputs' shapes (``jax.eval_shape``), the operands
    whose contents are known (split sections, axes) given as they are."""
    if not any("-1" in t for t in line.out_types):
        return []
    fn = OPAQUE_LOWERINGS.get(line.name)
    if fn is None:
        return []
    traced = [i for i in range(len(ins)) if i not in constants]
    specs = [
        jax.ShapeDtypeStruct(ins[i].type.shape, jax.dtypes.canonicalize_dtype(ins[i].type.dtype))
        for i in traced
    ]
    kwargs = meaning_attrs(attrs)

    def on_shapes(*xs: jax.Array) -> object:
        args = dict(constants) | dict(zip(traced, xs, strict=True))
        return fn(*(args[i] for i in range(len(ins))), **kwargs)

    try:
        outs = jax.eval_shape(on_shapes, *specs)
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
# Each Paddle op's translation (by its ``pd.`` spelling), claimed once (``handles``).
HANDLERS: dict[str, Handler] = {}


def handles(*names: str) -> Callable[[Handler], Handler]:
    """Claim the Paddle ops ``names`` for the handler decorated: it translates their lines."""

    def claim(handler: Handler) -> Handler:
        for name in names:
            if name in HANDLERS:
                raise ValueError(
                    f"{name} is claimed twice: by {HANDLERS[name].__name__} and {handler.__name__}"
                )
            HANDLERS[name] = handler
        return handler

    return claim


def claim_spellings() -> None:
    """The Paddle spellings of canonical ops (``OpDef.paddle``) read as those ops: each must be
    claimed by no handler (a spelling and a handler for one op would shadow one another)."""
    for name in _SPELLED:
        handles(name)(_spelled)


def meaning(name: str, fn: Lowering) -> None:
    """Paddle op ``name``'s JAX meaning, where it loads as an opaque op (or its handler leaves it
    one): given once (``eqsat.lowering.register_opaque`` lets a user replace it)."""
    if name in OPAQUE_LOWERINGS:
        raise ValueError(f"the meaning of {name} is given twice")
    register_opaque(name, fn)


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


class UntranslatedError(ParseError):
    """An op eqsat neither translates nor has a meaning for left a result whose shape Paddle did not
    resolve, and another op reads it: the op is named (binding the inputs' shapes cannot help)."""


def _unreadable(name: str, made: Line, absent: bool, line: Line) -> ParseError:
    """The error of ``line`` reading ``name``, which ``made`` left unreadable (``absent``: a result it
    does not compute): blamed on ``made`` where it is an op eqsat has no meaning for."""
    if absent:
        why = f"{name}, a result of line {made.number} ({made.name}), is not computed at inference"
        return ParseError(f"{why}: nothing may read it", line=line.number, op=line.name)
    if made.name not in OPAQUE_LOWERINGS:
        return UntranslatedError(
            f"eqsat does not translate this op and has no meaning for it, so the shape of its result "
            f"{name} stays dynamic (-1) as Paddle left it, and line {line.number} ({line.name}) reads it "
            "(eqsat.lowering.register_opaque gives an op its meaning)",
            line=made.number,
            op=made.name,
        )
    why = f"{name}, the result of line {made.number} ({made.name}), has a dynamic shape (-1)"
    return ParseError(
        f"{why} that Paddle did not resolve and its meaning could not infer", line=line.number, op=line.name
    )


def _canonical(name: str) -> str:
    """Paddle 3 prints ``pd_op.matmul`` where older dumps print ``pd.matmul``: one spelling here."""
    return "pd." + name[len("pd_op.") :] if name.startswith("pd_op.") else name


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
            if isinstance(value, Value) and _canonical(line.name) not in _DECLARATIONS:
                produced.append((res, value))
    return produced


def _optional(tensors: tuple[Any, ...], operands: str | None, first: int, count: int) -> list[Any]:
    """The operands ``first`` .. ``first + count - 1`` of an opaque op, by the layout it records
    (``operands``: ``t`` a tensor, ``n`` absent: None, ``l<n>`` a list of n; no layout: all tensors):
    ``tensors`` are the ones present after ``first``'s predecessors. Operands past the layout are None."""
    kinds = operands.split(",")[first : first + count] if operands else ["t"] * min(count, len(tensors))
    present = iter(tensors)
    groups: list[Any] = []
    for kind in kinds:
        if kind == "n":
            groups.append(None)
        elif kind.startswith("l"):
            groups.append([next(present) for _ in range(int(kind[1:]))])
        else:
            groups.append(next(present))
    return groups + [None] * (count - len(groups))


def _known_numbers(op: str, what: str, values: Any) -> list[float]:
    """The numbers in an operand that sizes a result: known when the program is read (shape arithmetic
    on the bound inputs), not computed from tensor values."""
    parts = values if isinstance(values, list) else [values]
    if any(isinstance(v, jax.core.Tracer) for v in parts):
        raise UnsupportedError(f"{op}: its {what} is computed from tensor values, not from shapes")
    return [float(v) for part in parts for v in np.asarray(part).ravel()]
