"""Paddle's values: inputs, weights, constants, lists, outputs, and shape arithmetic (``shape64``,
``slice``, ``arange``) computed from the bound input shapes as the program is read."""

from __future__ import annotations

from math import prod
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from eqsat.errors import ParseError, ShapeError
from eqsat.ir import TensorType, Value
from eqsat.text import (
    DYNAMIC,
    DYNAMIC_DEFAULT,
    Line,
)

from .reader import (
    Results,
    _arity,
    _attr,
    _ints,
    _opaque,
    _parse_type,
    _Range,
    _Reader,
    _results,
    _single_type,
    handles,
    meaning,
)


@handles("pd.full")
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


@handles("pd.full_batch_size_like")
def _full_batch_size_like(r: _Reader, line: Line) -> list[Value]:
    """``pd.full_batch_size_like(x) {shape, value, input_dim_idx, output_dim_idx}`` (``1 / x`` in
    ``to_static`` code): a ``full`` of ``shape`` whose dim ``output_dim_idx`` is x's dim
    ``input_dim_idx`` (its batch)."""
    _arity(line, 1)
    x = r.tensor(line, line.operands[0])
    shape, value = list(_ints(line, "shape")), _attr(line, "value")
    source, target = line.attrs.get("input_dim_idx", 0), line.attrs.get("output_dim_idx", 0)
    if not isinstance(source, int) or not isinstance(target, int) or not isinstance(value, int | float):
        raise ParseError("needs integer dim indices and a numeric value", line=line.number, op=line.name)
    if not (-x.type.rank <= source < x.type.rank and -len(shape) <= target < len(shape)):
        raise ParseError(f"dims {source} of {x.type}, {target} of {shape}", line=line.number, op=line.name)
    shape[target] = x.type.shape[source]
    out = r.add(line, "full", [], shape=tuple(shape), value=float(value), dtype=_attr(line, "dtype"))
    r.remember(out, value)
    return [out]


@handles("pd.full_int_array")
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


@handles("builtin.combine")
def _combine(r: _Reader, line: Line) -> list[Value]:
    _results(line, 1)
    r.env[line.results[0]] = [r.tensor(line, o) for o in line.operands]
    return []


@handles("pd.data")
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


@handles("builtin.parameter", "pd.parameter")
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


@handles("builtin.constant")
def _constant(r: _Reader, line: Line) -> list[Value]:
    """``builtin.constant {value:"name"}``: a weight kept in the params file under that name."""
    _arity(line, 0)
    _results(line, 1)
    return [r.program.add_param(str(_attr(line, "value")), _single_type(line))]


@handles("builtin.split")
def _split_list(r: _Reader, line: Line) -> list[Value]:
    """``builtin.split``: the elements of a list value."""
    _arity(line, 1)
    values = r.env.get(line.operands[0])
    if not isinstance(values, list) or len(values) != len(line.results):
        raise ParseError(
            f"{line.operands[0]} must be a list of {len(line.results)} values", line=line.number, op=line.name
        )
    return values


@handles("pd.fetch")
def _fetch(r: _Reader, line: Line) -> list[Value]:
    _arity(line, 1)
    r.program.add_output(r.tensor(line, line.operands[0]), str(line.attrs.get("name", "")) or None)
    return []


@handles("pd.arange")
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
            r.ranges[id(value)] = _Range(line.operands[0], line.operands[1], int(step.item()))
    return results


def _arange_meaning(start: Any, end: Any, step: Any, *, dtype: str, **_: Any) -> jax.Array:
    """``pd_op.arange`` of constant start, end and step."""
    first, last, stride = (np.asarray(v).item() for v in (start, end, step))
    return jnp.arange(first, last, stride, dtype=dtype)


meaning("pd_op.arange", _arange_meaning)


def _scalar(r: _Reader, line: Line, value: Value, dtype: str) -> Value:
    """``value`` (one element) as a scalar of ``dtype``."""
    value = r.add(line, "reshape", [value], shape=())
    return value if value.type.dtype == dtype else r.add(line, "cast", [value], dtype=dtype)


def _range_length(r: _Reader, line: Line, span: _Range, dtype: str) -> Value:
    """max(ceil((end - start) / step), 0), a scalar of ``dtype``."""

    start, end = (_scalar(r, line, r.tensor(line, name), dtype) for name in (span.start, span.end))
    distance = r.add(line, "sub", [end, start] if span.step > 0 else [start, end])
    stride = abs(span.step)
    if stride != 1:  # rounded up; a negative distance rounds toward zero, then is clamped
        distance = r.add(
            line,
            "div",
            [
                r.add(line, "add", [distance, r.scalar(line, stride - 1, dtype)]),
                r.scalar(line, stride, dtype),
            ],
        )
    return r.add(line, "maximum", [distance, r.scalar(line, 0, dtype)])


@handles("pd.shape", "pd.shape64")
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


@handles("pd.slice")
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
    zero = r.scalar(line, 0, dtype)
    wrapped = r.add(line, "add", [i, _range_length(r, line, span, dtype)])
    i = r.add(line, "select", [r.add(line, "lt", [i, zero]), wrapped, i])
    step = r.scalar(line, span.step, dtype)
    start = _scalar(r, line, r.tensor(line, span.start), dtype)
    return [r.add(line, "add", [start, r.add(line, "mul", [i, step])])]


def _slice_meaning(
    x: jax.Array,
    starts: Any,
    ends: Any,
    *,
    axes: tuple[int, ...],
    decrease_axis: tuple[int, ...] = (),
    **_: Any,
) -> jax.Array:
    """``pd_op.slice``: starts and ends (constants) along axes; ``decrease_axis`` dims dropped."""
    index = [slice(None)] * x.ndim
    for axis, start, end in zip(axes, np.asarray(starts).ravel(), np.asarray(ends).ravel(), strict=True):
        index[axis] = slice(int(start), int(end))
    out = x[tuple(index)]
    return jnp.squeeze(out, axis=tuple(decrease_axis)) if decrease_axis else out


meaning("pd_op.slice", _slice_meaning)


def _strided_slice_meaning(
    x: jax.Array, starts: Any, ends: Any, strides: Any, *, axes: tuple[int, ...], **_: Any
) -> jax.Array:
    """``pd_op.strided_slice`` (``x[:, 0::2]``: Swin's patch merging, rotary embeddings' even and odd
    features): ``start:end:stride`` along each of ``axes``, as Python slices them (a negative stride
    walks back; bounds past either end are clipped)."""
    index = [slice(None)] * x.ndim
    bounds = (np.asarray(b).ravel() for b in (starts, ends, strides))
    for axis, start, end, stride in zip(axes, *bounds, strict=True):
        index[axis] = slice(int(start), int(end), int(stride))
    return x[tuple(index)]


meaning("pd_op.strided_slice", _strided_slice_meaning)


@handles("pd.assign_value_")
def _assign_value(r: _Reader, line: Line) -> list[Value]:
    """``pd.assign_value_(x) {shape, values}`` (``paddle.to_tensor`` in ``to_static`` code): a constant
    of the listed values, in the declared dtype."""
    values, shape = line.attrs.get("values"), line.attrs.get("shape")
    if not isinstance(values, tuple | list) or not isinstance(shape, tuple | list):
        raise ParseError("needs its values and shape as attributes", line=line.number, op=line.name)
    data = np.asarray(values)
    if data.size != prod(shape):
        raise ParseError(f"{data.size} values for the shape {list(shape)}", line=line.number, op=line.name)
    return [r.constant(line, line.results[0], data.reshape([int(d) for d in shape]))]


meaning("pd_op.full_like", lambda x, value, *, dtype, **_: jnp.full_like(x, np.asarray(value).item(), dtype))
meaning(
    "pd_op.full_with_tensor",
    lambda value, shape, *, dtype, **_: jnp.full(
        tuple(int(d) for d in np.asarray(shape)), value.reshape(()), dtype
    ),
)
meaning("pd_op.meshgrid", lambda *xs, **_: tuple(jnp.meshgrid(*xs, indexing="ij")))
meaning("pd_op.stack", lambda *xs, axis, **_: jnp.stack(xs, axis=axis))
