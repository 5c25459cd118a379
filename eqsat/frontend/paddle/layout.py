"""Paddle's layout ops: reshapes (``reshape``, ``squeeze``, ``unsqueeze``, ``flatten`` by their
meaning on the input's shape), ``expand``, ``transpose``, ``cast``, ``concat``, splits, ``roll``,
``triu``/``tril``, ``pad3d``, ``assign``, ``diag``/``diag_embed``."""

from __future__ import annotations

from math import prod
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from eqsat.errors import ParseError, ShapeError
from eqsat.ir import Value
from eqsat.text import (
    DYNAMIC,
    NULL_VALUE,
    Line,
)

from .reader import (
    Results,
    _arity,
    _attr,
    _canonical,
    _ints,
    _opaque,
    _parse_type,
    _Reader,
    _types,
    handles,
    meaning,
)


@handles("pd.reshape")
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


@handles("pd.expand")
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


@handles("pd.expand_as")
def _expand_as(r: _Reader, line: Line) -> list[Value]:
    """``pd.expand_as(x, y)``: x broadcast to y's shape (as bound; without y, ``target_shape``)."""
    x = r.tensor(line, line.operands[0])
    if len(line.operands) > 1 and line.operands[1] != NULL_VALUE:
        shape = r.tensor(line, line.operands[1]).type.shape
    else:
        shape = _ints(line, "target_shape")
    return [r.add(line, "expand", [x], shape=shape)]


@handles("pd.transpose")
def _transpose(r: _Reader, line: Line) -> list[Value]:
    _arity(line, 1)
    return [r.add(line, "transpose", [r.tensor(line, line.operands[0])], perm=_attr(line, "perm"))]


@handles("pd.cast")
def _cast(r: _Reader, line: Line) -> list[Value]:
    _arity(line, 1)
    return [r.add(line, "cast", [r.tensor(line, line.operands[0])], dtype=_attr(line, "dtype"))]


@handles("pd.concat")
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


@handles("pd.squeeze", "pd.unsqueeze", "pd.flatten")
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


@handles("pd.split_with_num")
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


def _split(x: jax.Array, sections: Any, axis: Any, **_: Any) -> tuple[jax.Array, ...]:
    """``pd_op.split``: sizes along an axis (one size may be -1: the rest)."""
    sizes = [int(s) for s in np.asarray(sections).ravel()]
    axis = int(np.asarray(axis).ravel()[0]) % x.ndim
    if -1 in sizes:
        sizes[sizes.index(-1)] = x.shape[axis] - (sum(sizes) + 1)
    return tuple(jnp.split(x, np.cumsum(sizes)[:-1].tolist(), axis=axis))


meaning("pd_op.split", _split)


def _roll(x: jax.Array, shifts: Any, *, axis: Any = (), **_: Any) -> jax.Array:
    """Paddle's roll: ``shifts`` along ``axis`` (each its own), or over the flattened tensor where
    ``axis`` is empty."""
    steps = tuple(int(s) for s in np.ravel(np.asarray(shifts)))
    axes = tuple(int(a) for a in np.ravel(np.asarray(axis, dtype=np.int64)))
    if not axes:
        return jnp.roll(x.reshape(-1), steps[0]).reshape(x.shape)
    return jnp.roll(x, steps, axes)


meaning("pd_op.roll", _roll)
meaning("pd_op.triu", lambda x, *, diagonal=0, **_: jnp.triu(x, diagonal))
meaning("pd_op.tril", lambda x, *, diagonal=0, **_: jnp.tril(x, diagonal))


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}


def _pad3d(
    x: jax.Array, paddings: Any, *, mode: str, pad_value: float, data_format: str, **_: Any
) -> jax.Array:
    """``pad3d``: paddings (left, right, top, bottom, front, back) of the W, H and D axes."""
    p = [int(v) for v in np.asarray(paddings).ravel()]
    spatial = [(p[4], p[5]), (p[2], p[3]), (p[0], p[1])]
    widths = [(0, 0), (0, 0), *spatial] if data_format == "NCDHW" else [(0, 0), *spatial, (0, 0)]
    extra = {"constant_values": pad_value} if mode == "constant" else {}
    return jnp.pad(x, widths, mode=_PAD_MODES[mode], **extra)


meaning("pd_op.pad3d", _pad3d)


@handles("pd.assign")
def _assign(r: _Reader, line: Line) -> list[Value]:
    """``paddle.assign(x)``: a copy, which is x."""
    _arity(line, 1)
    return [r.tensor(line, line.operands[0])]


@handles("pd.diag", "pd.diag_embed")
def _diag(r: _Reader, line: Line) -> Results:
    """``paddle.diag(v)`` of a vector and ``paddle.diag_embed(x)`` onto the last two axes, on the main
    diagonal with zeros beside it: ``diag``; ``paddle.diag`` of a matrix: its main ``diagonal``. Others
    (an offset, a padding value, other axes) keep Paddle's meaning."""
    _arity(line, 1)
    x = r.tensor(line, line.operands[0])
    rank = x.type.rank + 1
    if line.name.endswith("diag") and x.type.rank == 2 and line.attrs.get("offset", 0) == 0:
        return [r.add(line, "diagonal", [x])]
    if line.name.endswith("diag_embed"):
        axes = (int(line.attrs.get("dim1", -2)) % rank, int(line.attrs.get("dim2", -1)) % rank)  # type: ignore[arg-type]
        plain = axes == (rank - 2, rank - 1)
    else:
        plain = x.type.rank == 1 and line.attrs.get("padding_value", 0.0) == 0.0
    if plain and line.attrs.get("offset", 0) == 0:
        return [r.add(line, "diag", [x])]
    return _opaque(r, line)


def _diag_meaning(x: jax.Array, *, offset: int = 0, padding_value: float = 0.0, **_: Any) -> jax.Array:
    """``paddle.diag``: a matrix's diagonal ``offset``, or a vector on it with ``padding_value`` beside."""
    if x.ndim == 2:
        return jnp.diagonal(x, offset)
    out = jnp.diag(x, k=offset)
    return jnp.where(jnp.eye(out.shape[0], k=offset, dtype=bool), out, jnp.asarray(padding_value, x.dtype))


def _diag_embed_meaning(
    x: jax.Array, *, offset: int = 0, dim1: int = -2, dim2: int = -1, **_: Any
) -> jax.Array:
    """``paddle.diag_embed``: each vector along x's last axis on diagonal ``offset`` of the matrices
    along ``dim1`` and ``dim2`` of the result."""
    out = jnp.vectorize(lambda v: jnp.diag(v, k=offset), signature="(n)->(m,m)")(x)
    return jnp.moveaxis(out, (-2, -1), (dim1, dim2))


meaning("pd_op.diag", _diag_meaning)
meaning("pd_op.diag_embed", _diag_embed_meaning)
