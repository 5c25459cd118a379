"""Paddle's math: ``scale``, ``matmul``, ``softmax``, reductions, dropout at inference, activations
(canonical ops where they are piecewise linear or products), and elementwise functions that stay
opaque with their JAX meanings."""

from __future__ import annotations

from dataclasses import replace
from itertools import combinations
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from eqsat.errors import ParseError
from eqsat.ir import TensorType, Value
from eqsat.ops import FLOAT_DTYPES
from eqsat.ops.elementwise import available
from eqsat.text import (
    NULL_VALUE,
    Line,
)

from .reader import (
    Handler,
    Results,
    _arity,
    _canonical,
    _flag,
    _number,
    _opaque,
    _parse_type,
    _Reader,
    handles,
    meaning,
)


def _integer_scale(r: _Reader, line: Line, x: Value, scale: float, bias: float, after: bool) -> Results:
    """``scale`` of an integer tensor by integral constants (a loop counter's ``i + 1``): a product and a
    sum in its dtype; other constants stay opaque."""
    if scale != int(scale) or bias != int(bias):
        return _opaque(r, line)

    def times(v: Value) -> Value:
        return v if scale == 1 else r.add(line, "mul", [v, r.scalar(line, scale, x.type.dtype)])

    def plus(v: Value) -> Value:
        return v if bias == 0 else r.add(line, "add", [v, r.scalar(line, bias, x.type.dtype)])

    return [plus(times(x)) if after else times(plus(x))]


@handles("pd.softmax")
def _softmax(r: _Reader, line: Line) -> list[Value]:
    _arity(line, 1)
    return [r.add(line, "softmax", [r.tensor(line, line.operands[0])], axis=line.attrs.get("axis", -1))]


@handles("pd.matmul", "pd.bmm")
def _matmul(r: _Reader, line: Line) -> list[Value]:
    """``matmul`` (``bmm``: batched, without flags). As numpy's, a 1-D x is a row and a 1-D y a
    column, whose dim the result drops (their transpose flags mean nothing)."""
    _arity(line, 2)
    x, y = (r.tensor(line, o) for o in line.operands)
    flags = {k: int(_flag(line, k, False)) for k in ("transpose_x", "transpose_y")}
    row, column = len(x.type.shape) == 1, len(y.type.shape) == 1
    if row:
        x, flags["transpose_x"] = r.add(line, "reshape", [x], shape=(1, *x.type.shape)), 0
    if column:
        y, flags["transpose_y"] = r.add(line, "reshape", [y], shape=(*y.type.shape, 1)), 0
    out = r.add(line, "matmul", [x, y], **flags)
    if not (row or column):
        return [out]
    shape = out.type.shape
    dropped = {len(shape) - 2} if row else set()
    dropped |= {len(shape) - 1} if column else set()
    return [r.add(line, "reshape", [out], shape=tuple(d for i, d in enumerate(shape) if i not in dropped))]


@handles("pd.scale")
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


@handles("pd.gelu")
def _gelu(r: _Reader, line: Line) -> Results:
    """``approximate:true`` is the tanh form, eqsat's ``gelu``; else the exact (erf) form, ``gelu_erf``."""
    _arity(line, 1)
    op = "gelu" if _flag(line, "approximate", False) else "gelu_erf"
    return [r.add(line, op, [r.tensor(line, line.operands[0])])]


# Paddle's dropout modes at inference: ``upscale_in_train`` leaves x as it is (training scaled by
# 1/(1-p)); ``downgrade_in_infer`` (``downscale_in_infer`` in paddle.nn) multiplies it by 1 - p.
_DROPOUT_MODES = {"upscale_in_train": False, "downgrade_in_infer": True, "downscale_in_infer": True}


@handles("pd.dropout")
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
    r.dynamic[id(mask)] = (line, True)
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


for _reduced in ("sum", "mean", "max"):
    handles(f"pd.{_reduced}")(_reduction(_reduced))


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


def _one_axis(r: _Reader, line: Line, x: Value, axes: tuple[Any, ...]) -> tuple[Value, int]:
    """x and the one integer axis ``axes`` holds; with the ``flatten`` flag, x flattened and axis 0."""
    if len(axes) != 1 or not isinstance(axes[0], int):
        raise ParseError(f"needs one integer axis, got {list(axes)}", line=line.number, op=line.name)
    if _flag(line, "flatten", False):
        return r.add(line, "reshape", [x], shape=(x.type.size,)), 0
    if not -x.type.rank <= axes[0] < max(x.type.rank, 1):
        raise ParseError(
            f"axis {axes[0]} out of range for rank {x.type.rank}", line=line.number, op=line.name
        )
    return x, axes[0]


@handles("pd.cumsum", "pd.cumprod")
def _scan(r: _Reader, line: Line) -> list[Value]:
    """``paddle.cumsum(x, axis)`` (no axis: over x flattened) and ``paddle.cumprod(x, dim)``, each
    inclusive or exclusive, forward or reversed: a ``scan``."""
    cumsum = line.name.endswith("cumsum")
    _arity(line, 2 if cumsum else 1)
    x = r.tensor(line, line.operands[0])
    axes = r.int_array(line, line.operands[1]) if cumsum else (line.attrs.get("dim"),)
    x, axis = _one_axis(r, line, x, axes)
    flags = {k: int(_flag(line, k, False)) for k in ("reverse", "exclusive")}
    return [r.add(line, "scan", [x], axis=axis, combine="add" if cumsum else "mul", **flags)]


@handles("pd.argmax", "pd.argmin")
def _position(r: _Reader, line: Line) -> list[Value]:
    """``paddle.argmax(x, axis, keepdim, dtype)`` (no axis: over x flattened, kept as x's rank of 1s)
    and ``argmin``: the op of that name."""
    _arity(line, 2)
    x = r.tensor(line, line.operands[0])
    flat, axis = _one_axis(r, line, x, r.int_array(line, line.operands[1]))
    keep = _flag(line, "keepdims", False)
    name, dtype = line.name.rsplit(".", 1)[-1], str(line.attrs.get("dtype", "int64"))
    out = r.add(line, name, [flat], axis=axis, keepdim=int(keep and flat is x), dtype=dtype)
    return [r.add(line, "reshape", [out], shape=(1,) * x.type.rank) if keep and flat is not x else out]


@handles("pd.topk")
def _top_k(r: _Reader, line: Line) -> Results:
    """``paddle.topk(x, k, axis, largest=True)``: the values at ``top_k``'s positions, and the positions
    (int64); the k smallest stay opaque, with Paddle's meaning."""
    _arity(line, 2)
    if not _flag(line, "largest", True):
        return _opaque(r, replace(line, name="pd_op.topk"))
    x = r.tensor(line, line.operands[0])
    (k,) = r.int_array(line, line.operands[1])
    attrs = {"axis": line.attrs.get("axis", -1), "k": k}
    positions = r.add(line, "top_k", [x], **attrs)
    values = r.add(line, "take_along", [x, positions], axis=attrs["axis"])
    return [values, r.add(line, "cast", [positions], dtype="int64")]


def _smallest(x: jax.Array, k: Any, *, axis: int = -1, **_: Any) -> tuple[jax.Array, jax.Array]:
    """``paddle.topk(..., largest=False)``: the k smallest, smallest first, and their positions."""
    order = jnp.argsort(x, axis=axis, stable=True)
    picked = lax.slice_in_dim(order, 0, int(np.asarray(k).ravel()[0]), axis=axis % x.ndim)
    return jnp.take_along_axis(x, picked, axis=axis), picked.astype(available("int64"))


meaning("pd_op.topk", _smallest)


@handles("pd.square", "pd.pow")
def _square(r: _Reader, line: Line) -> Results:
    """``pd.square`` and ``pd.pow {y:2}`` are x * x; another constant power of a float x is ``pow`` of
    the exponent in x's dtype (as Paddle computes it: T5's GELU writes ``pow(x, 3.0)``); of an integer
    x it stays opaque, with Paddle's meaning."""
    _arity(line, 1)
    x = r.tensor(line, line.operands[0])
    y = line.attrs.get("y")
    if _canonical(line.name) == "pd.square" or y == 2:
        return [r.add(line, "mul", [x, x])]
    if x.type.dtype not in FLOAT_DTYPES or not isinstance(y, int | float):
        return _opaque(r, replace(line, name="pd_op.pow"))
    return [r.add(line, "pow", [x, r.scalar(line, float(y), x.type.dtype)])]


@handles("pd.silu", "pd.swish")
def _silu(r: _Reader, line: Line) -> list[Value]:
    _arity(line, 1)
    x = r.tensor(line, line.operands[0])
    return [r.add(line, "mul", [x, r.add(line, "sigmoid", [x])])]


def _clip(r: _Reader, line: Line, x: Value, low: float, high: float) -> Value:
    """``min(max(x, low), high)`` with scalar constants of x's dtype."""
    bound = [r.scalar(line, v, x.type.dtype) for v in (low, high)]
    return r.add(line, "minimum", [r.add(line, "maximum", [x, bound[0]]), bound[1]])


@handles("pd.leaky_relu")
def _leaky_relu(r: _Reader, line: Line) -> Results:
    """``where(x >= 0, x, negative_slope * x)`` in canonical ops (rules see through it); integers stay
    opaque."""
    _arity(line, 1)
    x = r.tensor(line, line.operands[0])
    if x.type.dtype not in FLOAT_DTYPES:
        return _opaque(r, line)
    zero = r.scalar(line, 0.0, x.type.dtype)
    scaled = r.add(line, "scale", [x], scale=_number(line, "negative_slope", 0.01))
    return [r.add(line, "select", [r.add(line, "ge", [x, zero]), x, scaled])]


@handles("pd.clip")
def _clip_line(r: _Reader, line: Line) -> Results:
    """``pd.clip(x, min, max)`` with constant bounds: ``min(max(x, min), max)``; others stay opaque."""
    _arity(line, 3)
    x, low, high = (r.tensor(line, o) for o in line.operands)
    bounds = [r.consts.get(id(v)) for v in (low, high)]
    if any(b is None or b.size != 1 for b in bounds):
        return _opaque(r, line)
    return [_clip(r, line, x, *(float(b.ravel()[0]) for b in bounds if b is not None))]


@handles("pd.relu6", "pd.hardtanh", "pd.hardsigmoid", "pd.hardswish")
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
    six = r.scalar(line, 6.0, x.type.dtype)
    return [r.add(line, "div", [r.add(line, "mul", [x, gate]), six])]


def _pow(x: jax.Array, *, y: float, **_: Any) -> jax.Array:
    return jnp.power(x, jnp.asarray(y, x.dtype))


meaning("pd_op.pow", _pow)


def _swiglu(x: jax.Array, *rest: jax.Array, operands: str = "t,t", **_: Any) -> jax.Array:
    """``pd_op.swiglu``: silu(x) * y, or with y absent, of x's two halves along the last dim."""
    y = rest[0] if rest else None
    if y is None:
        x, y = jnp.split(x, 2, axis=-1)
    return jax.nn.silu(x) * y


_ELEMENTWISE = {
    "greater_than": jnp.greater,
    "greater_equal": jnp.greater_equal,
    "less_than": jnp.less,
    "less_equal": jnp.less_equal,
    "equal": jnp.equal,
    "not_equal": jnp.not_equal,
    "logical_and": jnp.logical_and,
    "logical_or": jnp.logical_or,
    "logical_not": jnp.logical_not,
    "where": jnp.where,
    "erf": jax.scipy.special.erf,
    "floor": jnp.floor,
    "ceil": jnp.ceil,
    "sign": jnp.sign,
    "sin": jnp.sin,
    "cos": jnp.cos,
    "tan": jnp.tan,
    "log1p": jnp.log1p,
    "expm1": jnp.expm1,
    "reciprocal": jnp.reciprocal,
    "isnan": jnp.isnan,
    "isinf": jnp.isinf,
    "isfinite": jnp.isfinite,
    "elementwise_pow": jnp.power,
    "floor_divide": jnp.floor_divide,  # Paddle floors, as Python does
    "remainder": jnp.remainder,  # the sign of the divisor, as Python's %
}


for _name, _fn in _ELEMENTWISE.items():
    meaning(f"pd_op.{_name}", lambda *xs, _fn=_fn, **_: _fn(*xs))


meaning("pd_op.swiglu", _swiglu)


def _axis(axis: Any) -> int:
    return int(np.asarray(axis).ravel()[0])


meaning("pd_op.leaky_relu", lambda x, *, negative_slope, **_: jax.nn.leaky_relu(x, negative_slope))
meaning("pd_op.clip", lambda x, lo, hi, **_: jnp.clip(x, lo, hi))


def _softplus(x: jax.Array, *, beta: float = 1.0, threshold: float = 20.0, **_: Any) -> jax.Array:
    """``log(1 + exp(beta x)) / beta``, and x itself where ``beta x`` exceeds ``threshold``."""
    scaled = x * beta
    return jnp.where(scaled > threshold, x, jnp.logaddexp(scaled, 0.0) / beta)


def _mish(x: jax.Array, **attrs: Any) -> jax.Array:
    """``x tanh(softplus(x))``, softplus linear past ``lambda``."""
    return x * jnp.tanh(_softplus(x, threshold=attrs.get("lambda", 20.0)))


def _prelu(x: jax.Array, alpha: jax.Array, *, mode: str, data_format: str = "NCHW", **_: Any) -> jax.Array:
    """max(x, 0) + alpha min(x, 0): one alpha (``all``), one per channel, or one per element."""
    if mode == "channel":
        axis = 1 if data_format.startswith("NC") else x.ndim - 1
        alpha = alpha.reshape([-1 if i == axis else 1 for i in range(x.ndim)])
    elif mode == "element":
        alpha = alpha.reshape(x.shape[1:])
    return jnp.where(x > 0, x, alpha * x)


meaning("pd_op.elu", lambda x, *, alpha=1.0, **_: jax.nn.elu(x, alpha))
meaning("pd_op.softplus", _softplus)
meaning("pd_op.mish", _mish)
meaning("pd_op.prelu", _prelu)
