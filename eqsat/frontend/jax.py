"""JAX functions -> ``Program``, by tracing with ``jax.make_jaxpr``.

Primitives map onto canonical ops (``dot_general`` of any batch/contracting dims becomes transposes,
reshapes and a ``matmul``; ``broadcast_in_dim`` a reshape and an ``expand``; multi-axis reductions a
chain of one-axis ones). Nested ``jit``/``pjit``/``closed_call``, ``custom_jvp_call``/``custom_vjp_call``
and ``jax.checkpoint`` regions are inlined, except ``custom_jvp_call`` of ``jax.nn.relu``, which
becomes ``relu``. Every other primitive
becomes an ``opaque`` op that re-binds the primitive with its params when lowered, so any traceable
function still runs. Closed-over arrays become parameters with values; pytrees in and out are kept.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from math import prod
from typing import Any

import jax
import numpy as np
from jax.extend import core as jcore

from eqsat.errors import ShapeError, UnsupportedError
from eqsat.ir import DTYPES, Op, Program, TensorType, Value
from eqsat.ops import FLOAT_DTYPES, OPAQUE, OPS

# JAX primitives that are one canonical op of the same operands, from the ops' definitions.
_SPELLED = {prim: op.name for op in OPS.values() for prim in op.jax}
# correctly rounded in IEEE arithmetic, so numpy computes them as XLA does (but on subnormals, which
# XLA may flush to zero, the sign of a NaN, and max/min of ±0): folded without compiling a kernel
_FOLDED_BY_NUMPY: dict[str, Callable[..., np.ndarray]] = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": np.divide,
    "sqrt": np.sqrt,
    "neg": np.negative,
    "max": np.maximum,
    "min": np.minimum,
}
_FOLDABLE = {*_FOLDED_BY_NUMPY, "convert_element_type"}
_IDENTITY = {"copy", "copy_p"}
_INLINE = {
    "jit",
    "pjit",
    "closed_call",
    "core_call",
    "remat",
    "remat2",
    "checkpoint",
    "custom_vjp_call",
    "custom_vjp_call_jaxpr",
    "custom_jvp_call",
}
_RECOGNIZED_CUSTOM_JVP = {"relu": "relu"}
_REMAT = {"remat", "remat2", "checkpoint"}
"""``jax.checkpoint`` (flax's ``remat``): the forward is the body's, inlined; what it changes is how
the function is differentiated (what is kept for the backward pass, what is recomputed), so the
gradient is the function's as written, as for derivatives a function defines (``own_derivatives``)."""


@dataclass
class Traced:
    """A traced function: its Program and the pytree structures of its inputs and outputs.

    ``closed_over``: values of an enclosing trace (``eqsat.jit`` inside ``jax.jit``) the function
    closes over; they are the program's parameters without values, in order, and must be passed
    after the inputs when the lowered program runs. ``own_derivatives``: the functions with a
    derivative of their own (``jax.custom_jvp``, ``jax.custom_vjp``, and ``jax.checkpoint`` regions,
    which say what the backward pass recomputes) that the program inlines, whose derivative the
    program therefore does not have.
    """

    program: Program
    in_tree: Any
    out_tree: Any
    closed_over: list[Any] = field(default_factory=list)
    own_derivatives: list[str] = field(default_factory=list)


def _type(aval: Any, where: str) -> TensorType:
    if jax.dtypes.issubdtype(aval.dtype, jax.dtypes.extended):
        return TensorType(tuple(int(d) for d in aval.shape), str(aval.dtype))  # a PRNG key: passes through
    dtype = np.dtype(aval.dtype).name
    if dtype not in DTYPES:
        raise UnsupportedError(f"{where}: dtype {dtype} is not supported (supported: {', '.join(DTYPES)})")
    return TensorType(tuple(int(d) for d in aval.shape), dtype)


def _exact_float(value: np.ndarray) -> float | None:
    """The scalar as a Python float if that float holds it exactly (sign of zero and NaN included)."""
    as_float = float(value)
    same = np.asarray(as_float).astype(value.dtype).tobytes() == value.tobytes()
    return as_float if same else None


def _subnormal(value: np.ndarray) -> bool:
    """A nonzero floating-point scalar below the dtype's smallest normal magnitude."""
    if not np.issubdtype(value.dtype, np.floating) and value.dtype.name not in FLOAT_DTYPES:
        return False
    magnitude = abs(float(value))
    return 0.0 < magnitude < float(jax.numpy.finfo(value.dtype).tiny)


class _Tracer:
    def __init__(self, program: Program) -> None:
        self.p = program
        self.closed_over: list[Any] = []
        self.own_derivatives: list[str] = []
        self.fulls: dict[int, float] = {}  # the value of each full op's result

    def op(self, name: str, *inputs: Value, **attrs: Any) -> Value:
        out = self.p.add_op(name, list(inputs), **attrs)
        if name == "full":
            self.fulls[id(out)] = float(attrs["value"])
        return out

    def literal(self, lit: Any) -> Value:
        """A scalar literal a float holds exactly is a ``full``; others (int64 beyond 2**53) are
        constants with their exact value."""
        t = _type(lit.aval, "literal")
        value = np.asarray(lit.val, dtype=t.dtype)
        exact = _exact_float(value) if value.ndim == 0 else None
        if exact is not None:
            return self.op("full", shape=t.shape, value=exact, dtype=t.dtype)
        return self.p.add_param(f"lit{len(self.p.params)}", t, value)

    def run(self, closed_jaxpr: Any, args: Sequence[Value]) -> list[Value]:
        """Trace a (closed) jaxpr on ``args``; its constants become parameters."""
        jaxpr = getattr(closed_jaxpr, "jaxpr", closed_jaxpr)
        consts = [self.const(c) for c in getattr(closed_jaxpr, "consts", [])]
        if len(jaxpr.constvars) != len(consts):
            raise UnsupportedError("a jaxpr with unbound constants")
        env: dict[Any, Value] = dict(zip(jaxpr.constvars, consts, strict=True))
        env.update(zip(jaxpr.invars, args, strict=True))

        def read(v: Any) -> Value:
            return self.literal(v) if isinstance(v, jcore.Literal) else env[v]

        for eqn in jaxpr.eqns:
            ins = [read(v) for v in eqn.invars]
            try:
                outs = self.eqn(eqn, ins)
            except ShapeError:
                outs = self.opaque(eqn, ins)
            env.update(zip(eqn.outvars, outs, strict=True))
        return [read(v) for v in jaxpr.outvars]

    def eqn(self, eqn: Any, ins: list[Value]) -> list[Value]:
        name, params = eqn.primitive.name, eqn.params
        folded = self.fold(eqn, ins)
        if folded is not None:
            return [folded]
        if name in _SPELLED:
            return [self.op(_SPELLED[name], *ins)]
        if name in _IDENTITY:
            return ins
        custom = _custom_name(params) if name == "custom_jvp_call" else None
        if custom in _RECOGNIZED_CUSTOM_JVP:
            return [self.op(_RECOGNIZED_CUSTOM_JVP[custom], *ins)]
        if name in _INLINE:
            inner = params.get("jaxpr", params.get("call_jaxpr", params.get("fun_jaxpr")))
            if inner is not None:
                if name.startswith("custom_") or name in _REMAT:
                    self.own_derivatives.append(custom or ("jax.checkpoint" if name in _REMAT else name))
                return self.run(inner, ins)
        handler = _HANDLERS.get(name)
        return handler(self, ins, **params) if handler else self.opaque(eqn, ins)

    def fold(self, eqn: Any, ins: list[Value]) -> Value | None:
        """A correctly rounded primitive of scalar constants (``jnp.sqrt(d)``, a cast of a literal) is
        computed now, as XLA would, and becomes a ``full``."""
        if eqn.primitive.name not in _FOLDABLE or not ins or any(id(v) not in self.fulls for v in ins):
            return None
        out = eqn.outvars[0].aval
        if out.shape or np.dtype(out.dtype).name not in FLOAT_DTYPES:
            return None
        if eqn.params.get("accuracy") is not None:  # an approximation XLA may choose
            return None
        args = [np.asarray(self.fulls[id(v)], v.type.dtype) for v in ins]
        if eqn.primitive.name in ("max", "min") and args[0] == args[1]:  # ±0: which one is XLA's choice
            return None
        with np.errstate(all="ignore"):
            if eqn.primitive.name == "convert_element_type":
                value = args[0].astype(eqn.params["new_dtype"])
            else:
                value = np.asarray(_FOLDED_BY_NUMPY[eqn.primitive.name](*args))
        if value.dtype != np.dtype(out.dtype) or any(_subnormal(a) for a in (*args, value)):
            return None
        if np.isnan(value):  # which NaN (its sign) is the hardware's: XLA's may differ from numpy's
            return None
        exact = _exact_float(value)
        return None if exact is None else self.op("full", shape=(), value=exact, dtype=value.dtype.name)

    def const(self, value: Any) -> Value:
        """A constant of the jaxpr: a scalar a float holds exactly is a ``full`` (as a literal is:
        ``jnp.array(-1e30)`` as a mask's fill, a scale); others are parameters with their value, or,
        for a value of an enclosing trace or a typed PRNG key (which numpy cannot hold), a parameter
        without value that the caller passes (``Traced.closed_over``)."""
        name = f"const{len(self.p.params)}"
        key = jax.dtypes.issubdtype(getattr(value, "dtype", None), jax.dtypes.prng_key)
        if isinstance(value, jax.core.Tracer) or key:
            self.closed_over.append(value)
            return self.p.add_param(name, _type(value.aval, "closed-over value"))
        arr = np.asarray(value)
        t = _type(arr, "closed-over constant")
        exact = _exact_float(arr) if arr.ndim == 0 else None
        if exact is not None:
            return self.op("full", shape=(), value=exact, dtype=t.dtype)
        return self.p.add_param(name, t, arr)

    def opaque(self, eqn: Any, ins: list[Value]) -> list[Value]:
        prim, params = eqn.primitive, dict(eqn.params)
        outs = tuple(Value(_type(v.aval, f"primitive {prim.name}")) for v in eqn.outvars)
        payload = partial(_bind, prim, params)
        printable = {k: _printable(v) for k, v in params.items()}
        attrs = {"op": prim.name, **{k: v for k, v in printable.items() if v is not None}}
        self.p.ops.append(Op(OPAQUE, tuple(ins), attrs, outs, payload))
        return list(outs)


def _custom_name(params: dict[str, Any]) -> str | None:
    """The name of the jitted function a custom_jvp_call wraps (``relu`` for ``jax.nn.relu``)."""
    inner = getattr(params.get("call_jaxpr"), "jaxpr", None)
    if inner is None or len(inner.eqns) != 1 or inner.eqns[0].primitive.name not in ("jit", "pjit"):
        return None
    return inner.eqns[0].params.get("name")


def _bind(prim: Any, params: dict[str, Any], *args: Any) -> tuple[Any, ...]:
    out = prim.bind(*args, **params)
    return tuple(out) if prim.multiple_results else (out,)


def _printable(value: Any) -> Any:
    if isinstance(value, bool | np.bool_):
        return int(value)
    if isinstance(value, int | float | str):
        return value
    if isinstance(value, tuple) and all(isinstance(v, int) for v in value):
        return value
    return None


# ---- primitive handlers: (tracer, inputs, **params) -> outputs -------------------------------------


def _transpose(t: _Tracer, ins: list[Value], *, permutation: tuple[int, ...], **_: Any) -> list[Value]:
    return [t.op("transpose", ins[0], perm=tuple(permutation))]


def _reshape(
    t: _Tracer, ins: list[Value], *, new_sizes: tuple[int, ...], dimensions: Any = None, **_: Any
) -> list[Value]:
    if dimensions is not None:
        raise ShapeError("reshape with dimensions")
    return [t.op("reshape", ins[0], shape=tuple(new_sizes))]


def _squeeze(t: _Tracer, ins: list[Value], *, dimensions: tuple[int, ...], **_: Any) -> list[Value]:
    shape = tuple(d for i, d in enumerate(ins[0].type.shape) if i not in dimensions)
    return [t.op("reshape", ins[0], shape=shape)]


def _expand_dims(t: _Tracer, x: Value, shape: tuple[int, ...], dims: Sequence[int]) -> Value:
    """Reshape ``x`` to rank len(shape) (its dims at ``dims``, 1 elsewhere), then expand to ``shape``."""
    padded = [1] * len(shape)
    for d, size in zip(dims, x.type.shape, strict=True):
        padded[d] = size
    if tuple(padded) != x.type.shape:
        x = t.op("reshape", x, shape=tuple(padded))
    return x if x.type.shape == tuple(shape) else t.op("expand", x, shape=tuple(shape))


def _broadcast_in_dim(
    t: _Tracer, ins: list[Value], *, shape: tuple[int, ...], broadcast_dimensions: tuple[int, ...], **_: Any
) -> list[Value]:
    if list(broadcast_dimensions) != sorted(broadcast_dimensions):
        raise ShapeError("broadcast_in_dim with unsorted dims")
    return [_expand_dims(t, ins[0], tuple(shape), broadcast_dimensions)]


def _reduce(name: str) -> Callable[..., list[Value]]:
    def handler(t: _Tracer, ins: list[Value], *, axes: tuple[int, ...], **_: Any) -> list[Value]:
        x = ins[0]
        for axis in sorted(axes, reverse=True):
            x = t.op(name, x, axis=axis, keepdim=0)
        return [x]

    return handler


def _scan(combine: str) -> Callable[..., list[Value]]:
    """``cumsum``, ``cumprod``, ``cummax``, ``cummin``: a ``scan`` (``jnp.cumsum`` promotes small
    integers and bools before its primitive: the convert is an op of its own)."""

    def handler(t: _Tracer, ins: list[Value], *, axis: int, reverse: bool, **_: Any) -> list[Value]:
        return [t.op("scan", ins[0], axis=axis, combine=combine, reverse=int(reverse))]

    return handler


def _top_k(t: _Tracer, ins: list[Value], *, k: int, axis: int = -1, **_: Any) -> list[Value]:
    """``lax.top_k``: the values at the positions of the k largest, and those positions."""
    positions = t.op("top_k", ins[0], axis=axis, k=k)
    return [t.op("take_along", ins[0], positions, axis=axis), positions]


def _arg(name: str) -> Callable[..., list[Value]]:
    """``argmax`` / ``argmin`` of one axis, positions of ``index_dtype``."""

    def handler(
        t: _Tracer, ins: list[Value], *, axes: tuple[int, ...], index_dtype: Any, **_: Any
    ) -> list[Value]:
        (axis,) = axes
        return [t.op(name, ins[0], axis=axis, dtype=np.dtype(index_dtype).name)]

    return handler


def _pad(t: _Tracer, ins: list[Value], *, padding_config: Any, **_: Any) -> list[Value]:
    """A pad of nothing (``jnp.diag`` pads so) is its operand; other pads stay opaque."""
    if any(map(any, padding_config)):
        raise ShapeError("a pad of something")
    return ins[:1]


def _rev(t: _Tracer, ins: list[Value], *, dimensions: tuple[int, ...], **_: Any) -> list[Value]:
    x = ins[0]
    for axis in dimensions:
        x = t.op("reverse", x, axis=axis)
    return [x]


def _producer(t: _Tracer, v: Value) -> Op | None:
    """The op that made ``v`` (None for an input or parameter)."""
    return next((op for op in reversed(t.p.ops) if v in op.outputs), None)


def _made(t: _Tracer, v: Value, name: str, axis: int) -> Op | None:
    """The ``name`` op along ``axis`` that made ``v`` (None if another op did)."""
    made = _producer(t, v)
    if made is None or made.name != name:
        return None
    return made if made.attrs["dimension" if name == "iota" else "axis"] == axis else None


def _reversed_input(t: _Tracer, v: Value, axis: int) -> Value | None:
    """What ``v`` is the reversal along ``axis`` of (None if it is none)."""
    made = _made(t, v, "reverse", axis)
    return made.inputs[0] if made is not None else None


def _sort(t: _Tracer, ins: list[Value], *, dimension: int, num_keys: int, **_: Any) -> list[Value]:
    """``jnp.sort``: a ``sort``; ``jnp.argsort`` (x sorted with an iota along): its positions an
    ``argsort``, x sorted ``take_along`` of them (one sort for both); descending (x and the iota
    reversed first): the descending ``argsort``, reversed. Other sorts stay opaque."""
    x = ins[0]
    if num_keys != 1 or x.type.dtype == "bool":
        raise ShapeError("a sort of several keys or of bools")
    if len(ins) == 1:
        return [t.op("sort", x, axis=dimension)]
    if len(ins) != 2:
        raise ShapeError("a sort carrying several values")
    backwards, counts = _reversed_input(t, x, dimension), _reversed_input(t, ins[1], dimension)
    if backwards is not None and counts is not None and _made(t, counts, "iota", dimension):
        # jnp.argsort(descending=True): x and its positions reversed, sorted, the positions reversed back
        x = backwards
        positions = t.op("reverse", t.op("argsort", x, axis=dimension, descending=1), axis=dimension)
    elif _made(t, ins[1], "iota", dimension):
        positions = t.op("argsort", x, axis=dimension)
    else:
        raise ShapeError("a sort carrying values other than positions")
    if ins[1].type.dtype != "int32":
        positions = t.op("cast", positions, dtype=ins[1].type.dtype)
    return [t.op("take_along", x, positions, axis=dimension), positions]


def _cond(
    t: _Tracer, ins: list[Value], *, branches: Any, branches_platforms: Any = None, **_: Any
) -> list[Value]:
    """A cond on the platform whose other branches are for Pallas' Mosaic kernels (``jnp.diagonal``
    writes one): its default branch, the one that runs outside a kernel. Other conds stay opaque."""
    made = _producer(t, ins[0])
    on_platform = made is not None and made.name == OPAQUE and made.attrs["op"] == "platform_index"
    if not on_platform or not branches_platforms or None not in branches_platforms:
        raise ShapeError("a cond on a value")
    if any(p is not None and set(p) - {"mosaic"} for p in branches_platforms):
        raise ShapeError("a cond on a platform a program may run on")
    return t.run(branches[branches_platforms.index(None)], ins[1:])


_LARGEST_EVALUATED = 1 << 16  # elements: a constant computed while tracing stays small


def _constant(t: _Tracer, v: Value) -> np.ndarray | None:
    """The value of ``v`` where constants alone make it (iotas, fulls, parameters with values: the
    indices ``jnp.diagonal`` gathers at), else None."""
    if v.name in t.p.param_values:
        return t.p.param_values[v.name]
    made = _producer(t, v)
    lower = OPS[made.name].lower if made is not None and made.name != OPAQUE else None
    if made is None or lower is None or v.type.size > _LARGEST_EVALUATED:
        return None
    args = [_constant(t, x) for x in made.inputs]
    if any(a is None for a in args):
        return None
    with jax.ensure_compile_time_eval():  # computed now, even inside an enclosing trace
        return np.asarray(lower(*args, **made.attrs))


def _gather(
    t: _Tracer, ins: list[Value], *, dimension_numbers: Any, slice_sizes: tuple[int, ...], **_: Any
) -> list[Value]:
    """A gather of a matrix's elements (i, i), i = 0, 1, ... (``jnp.diagonal``'s): its ``diagonal``.
    Other gathers stay opaque."""
    x, at = ins
    n = min(x.type.shape) if x.type.rank == 2 else -1
    numbers = dimension_numbers
    points = (
        tuple(slice_sizes) == (1, 1)
        and tuple(numbers.collapsed_slice_dims) == tuple(numbers.start_index_map) == (0, 1)
        and not numbers.offset_dims
        and not numbers.operand_batching_dims
    )
    where = _constant(t, at) if points and at.type.shape == (n, 2) else None
    if where is None or not (where == np.arange(n)[:, None]).all():
        raise ShapeError("a gather other than a matrix's diagonal")
    return [t.op("diagonal", x)]


def _div(t: _Tracer, ins: list[Value], **_: Any) -> list[Value]:
    """x / c for a power of two c is x * (1/c) exactly (both round the same real number once)."""
    x, c = ins
    value = t.fulls.get(id(c))
    if value is not None and c.type.dtype in FLOAT_DTYPES and math.isfinite(value) and value != 0:
        inverse = np.asarray(1.0 / value, c.type.dtype)
        normal = np.isfinite(inverse) and abs(inverse) >= jax.numpy.finfo(c.type.dtype).tiny  # no FTZ risk
        if math.frexp(value)[0] in (0.5, -0.5) and normal:
            return [
                t.op("mul", x, t.op("full", shape=c.type.shape, value=float(inverse), dtype=c.type.dtype))
            ]
    return [t.op("div", x, c)]


def _convert(t: _Tracer, ins: list[Value], *, new_dtype: Any, **_: Any) -> list[Value]:
    dtype = np.dtype(new_dtype).name
    if dtype not in DTYPES:
        raise UnsupportedError(f"convert_element_type to {dtype} is not supported")
    return [ins[0] if ins[0].type.dtype == dtype else t.op("cast", ins[0], dtype=dtype)]


def _concatenate(t: _Tracer, ins: list[Value], *, dimension: int, **_: Any) -> list[Value]:
    return [t.op("concat", *ins, axis=dimension)]


def _slice(
    t: _Tracer,
    ins: list[Value],
    *,
    start_indices: tuple[int, ...],
    limit_indices: tuple[int, ...],
    strides: Any = None,
    **_: Any,
) -> list[Value]:
    if strides is not None and any(s != 1 for s in strides):
        raise ShapeError("strided slice")
    x = ins[0]
    for axis, (lo, hi) in enumerate(zip(start_indices, limit_indices, strict=True)):
        x = _window(t, x, axis, lo, hi)
    return [x]


def _window(t: _Tracer, x: Value, axis: int, lo: int, hi: int) -> Value:
    """``x[lo:hi]`` along ``axis``: the middle piece of a split (``x`` itself where that is all)."""
    size = x.type.shape[axis]
    if (lo, hi) == (0, size):
        return x
    sizes = tuple(s for s in (lo, hi - lo, size - hi) if s) if hi > lo else ()
    if not sizes:
        raise ShapeError("empty slice")
    return t.op("split", x, axis=axis, sizes=sizes, index=1 if lo else 0)


def _select_n(t: _Tracer, ins: list[Value], **_: Any) -> list[Value]:
    if len(ins) != 3 or ins[0].type.dtype != "bool":
        raise ShapeError("select_n with more than two cases or an integer predicate")
    pred, on_false, on_true = ins
    return [t.op("select", pred, on_true, on_false)]


def _integer_pow(t: _Tracer, ins: list[Value], *, y: int, **_: Any) -> list[Value]:
    """x**y for 1 <= |y| <= 4 as muls in the order XLA computes it (repeated squaring), then 1 / that
    for y < 0, so the result rounds the same."""
    if not 1 <= abs(y) <= 4:
        raise ShapeError("integer_pow outside 1..4")
    base, acc, n = ins[0], None, abs(y)
    while n:
        if n & 1:
            acc = base if acc is None else t.op("mul", acc, base)
        n >>= 1
        if n:
            base = t.op("mul", base, base)
    assert acc is not None
    if y < 0:
        one = t.op("full", shape=(), value=1.0, dtype=acc.type.dtype)
        acc = t.op("div", one, acc)
    return [acc]


def _pow(t: _Tracer, ins: list[Value], **_: Any) -> list[Value]:
    """x ** y: a constant integer y of 1..4 (Keras' ``ops.power(x, 2)``) as ``integer_pow``, which
    rounds (XLA simplifies a power by a small integer to products) and differentiates as it does;
    otherwise ``pow``, an integer exponent cast to x's dtype as XLA converts it."""
    x, y = ins
    value = t.fulls.get(id(y))
    if y.type.dtype not in FLOAT_DTYPES:
        if value is not None and value == int(value) and 1 <= abs(int(value)) <= 4:
            return _integer_pow(t, [x], y=int(value))
        y = t.op("cast", y, dtype=x.type.dtype)
    return [t.op("pow", x, y)]


def _tile(t: _Tracer, ins: list[Value], *, reps: Sequence[int], **_: Any) -> list[Value]:
    """``jnp.tile``: each axis of size s repeated r times is a broadcast to (r, s) and a reshape to
    r·s, all axes at once (a copy: exact)."""
    x = ins[0]
    shape = x.type.shape
    if len(reps) != len(shape):
        raise ShapeError("tile with reps of another rank than its operand")
    interleaved = tuple(d for s in shape for d in (1, s))
    spread = tuple(d for r, s in zip(reps, shape, strict=True) for d in (r, s))
    y = t.op("expand", t.op("reshape", x, shape=interleaved), shape=spread)
    return [t.op("reshape", y, shape=tuple(r * s for r, s in zip(reps, shape, strict=True)))]


def _unstack(t: _Tracer, ins: list[Value], *, axis: int, **_: Any) -> list[Value]:
    """``jnp.unstack``: the slices along ``axis``, each without it."""
    x = ins[0]
    rest = x.type.shape[:axis] + x.type.shape[axis + 1 :]
    return [t.op("reshape", _window(t, x, axis, i, i + 1), shape=rest) for i in range(x.type.shape[axis])]


def _stack(t: _Tracer, ins: list[Value], *, axis: int, **_: Any) -> list[Value]:
    """``jnp.stack``: each operand with a unit ``axis``, concatenated along it."""
    spread = [t.op("reshape", v, shape=_unit_axis(v.type.shape, axis)) for v in ins]
    return [spread[0] if len(spread) == 1 else t.op("concat", *spread, axis=axis)]


def _xor(t: _Tracer, ins: list[Value], **_: Any) -> list[Value]:
    """Logical xor of bools is ``ne``; a bitwise xor of integers stays opaque."""
    if any(v.type.dtype != "bool" for v in ins):
        raise ShapeError("xor of integers")
    return [t.op("ne", *ins)]


def _square(t: _Tracer, ins: list[Value], **_: Any) -> list[Value]:
    return [t.op("mul", ins[0], ins[0])]


def _iota(
    t: _Tracer, ins: list[Value], *, dtype: Any, shape: tuple[int, ...], dimension: int, **_: Any
) -> list[Value]:
    return [t.op("iota", shape=tuple(shape), dimension=dimension, dtype=np.dtype(dtype).name)]


def _split(t: _Tracer, ins: list[Value], *, sizes: tuple[int, ...], axis: int, **_: Any) -> list[Value]:
    return [t.op("split", ins[0], axis=axis, sizes=tuple(sizes), index=i) for i in range(len(sizes))]


def _arrange(t: _Tracer, v: Value, order: list[int], shape: tuple[int, ...]) -> Value:
    """``v`` with its dims in ``order``, reshaped to ``shape``."""
    if order != list(range(len(order))):
        v = t.op("transpose", v, perm=tuple(order))
    return v if v.type.shape == shape else t.op("reshape", v, shape=shape)


Dims = tuple[list[int], list[int], list[int]]


def _broadcast_operand(
    t: _Tracer, v: Value, order: list[int], nb: int, ones: int, matrix: tuple[int, int]
) -> Value:
    """``v`` as (batch, 1 x ``ones``, *matrix), its dims taken in ``order``: the 1s are inserted
    before the transpose, so the transpose stays outermost (a matmul rule folds it into a flag)."""
    shape = v.type.shape
    widened = t.op("reshape", v, shape=(*shape, *(1 for _ in range(ones)))) if ones else v
    rank = len(shape)
    widened_order = [*order[:nb], *range(rank, rank + ones), *order[nb:]]
    batch = tuple(shape[i] for i in order[:nb])
    return _arrange(t, widened, widened_order, (*batch, *(1 for _ in range(ones)), *matrix))


def _grouped(t: _Tracer, x: Value, y: Value, lhs: Dims, rhs: Dims, dtype: str) -> Value:
    """A batched product with several free dims on one side (grouped-query attention's
    'BTKGH,BSKH->BKGTS'): that side's longest free dim is its rows (or columns), its other free dims
    batch dims the other side broadcasts over — not merged into the rows, so each row stays a query.
    Returns the product in dot_general's order (batch, lhs free, rhs free)."""
    (lb, lf, lc), (rb, rf, rc) = lhs, rhs
    xs, ys = x.type.shape, y.type.shape
    batch, k = [xs[i] for i in lb], prod(xs[i] for i in lc)
    if len(lf) > 1:
        rows = max(lf, key=lambda i: (xs[i], i))
        extra = [i for i in lf if i != rows]
        a = _arrange(t, x, [*lb, *extra, rows, *lc], (*batch, *(xs[i] for i in extra), xs[rows], k))
        b = _broadcast_operand(t, y, [*rb, *rc, *rf], len(rb), len(extra), (k, prod(ys[i] for i in rf)))
        placed = [*extra, rows]
        perm = (*range(len(lb)), *(len(lb) + placed.index(i) for i in lf), len(lb) + len(lf))
    else:
        cols = max(rf, key=lambda i: (ys[i], i))
        extra = [i for i in rf if i != cols]
        a = _broadcast_operand(t, x, [*lb, *lf, *lc], len(lb), len(extra), (prod(xs[i] for i in lf), k))
        b = _arrange(t, y, [*rb, *extra, *rc, cols], (*batch, *(ys[i] for i in extra), k, ys[cols]))
        placed = [*extra, cols]
        nb, ne = len(lb), len(extra)
        perm = (*range(nb), nb + ne, *(nb + placed.index(i) if i != cols else nb + ne + 1 for i in rf))
    out = t.op("matmul", a, b, dtype=dtype)
    return out if perm == tuple(range(len(perm))) else t.op("transpose", out, perm=perm)


def _dot_general(
    t: _Tracer, ins: list[Value], *, dimension_numbers: Any, preferred_element_type: Any = None, **_: Any
) -> list[Value]:
    """Canonicalize to matmul: lhs -> (batch, M, K), rhs -> (batch, K, N), then reshape the result."""
    (lc, rc), (lb, rb) = dimension_numbers
    x, y = ins
    dtype = x.type.dtype if preferred_element_type is None else np.dtype(preferred_element_type).name
    if not lc:  # nothing contracted: a broadcast product (a per-head mask: einsum("...hqk,h->...hqk"))
        return [_outer(t, x, y, (lb, rb), dtype)]
    if x.type.dtype != y.type.dtype:
        raise ShapeError("dot_general of mixed dtypes")
    if not lb and tuple(lc) == (x.type.rank - 1,) and x.type.rank >= 2 and y.type.rank == 2:
        # x @ w: the weight broadcasts over rows
        return [t.op("matmul", x, y, transpose_y=int(rc[0] == 1), dtype=dtype)]
    if not lb and tuple(rc) == (y.type.rank - 1,) and y.type.rank >= 3 and x.type.rank == 2:
        # w @ x over x's last dim (a vmapped ``W @ x``): x @ wᵀ, its output dim moved to the front
        out = t.op("matmul", y, x, transpose_y=int(lc[0] == 1), dtype=dtype)
        return [t.op("transpose", out, perm=(out.type.rank - 1, *range(out.type.rank - 1)))]
    xs, ys = x.type.shape, y.type.shape
    lf = [i for i in range(len(xs)) if i not in lc and i not in lb]
    rf = [i for i in range(len(ys)) if i not in rc and i not in rb]
    batch = [xs[i] for i in lb]
    m, n, k = prod(xs[i] for i in lf), prod(ys[i] for i in rf), prod(xs[i] for i in lc)

    final = (*batch, *(xs[i] for i in lf), *(ys[i] for i in rf))
    if lb and (len(lf) > 1 or len(rf) > 1):
        out = _grouped(t, x, y, (lb, lf, lc), (rb, rf, rc), dtype)
    else:
        out = t.op(
            "matmul",
            _arrange(t, x, [*lb, *lf, *lc], (*batch, m, k)),
            _arrange(t, y, [*rb, *rc, *rf], (*batch, k, n)),
            dtype=dtype,
        )
    if out.type.shape != final:
        out = t.op("reshape", out, shape=final)
    return [out]


def _outer(t: _Tracer, x: Value, y: Value, batch: tuple[Sequence[int], Sequence[int]], dtype: str) -> Value:
    """A dot_general that contracts nothing, (batch, x's free dims, y's free dims): each operand
    transposed to (batch, free) and reshaped with 1s where the other's free dims go, cast to the
    result's dtype (as XLA converts them) and multiplied: each element is one product."""
    lb, rb = batch
    lf = [i for i in range(x.type.rank) if i not in lb]
    rf = [i for i in range(y.type.rank) if i not in rb]
    xs, ys = x.type.shape, y.type.shape
    x_shape = (*(xs[i] for i in lb), *(xs[i] for i in lf), *(1 for _ in rf))
    y_shape = (*(ys[i] for i in rb), *(1 for _ in lf), *(ys[i] for i in rf))
    operands = [_arrange(t, x, [*lb, *lf], x_shape), _arrange(t, y, [*rb, *rf], y_shape)]
    return t.op("mul", *(v if v.type.dtype == dtype else t.op("cast", v, dtype=dtype) for v in operands))


_LAYOUT_OF_DATA = {(0, 1, 2, 3): "NCHW", (0, 3, 1, 2): "NHWC", (0, 1, 2): "NCHW", (0, 2, 1): "NHWC"}


def _conv(
    t: _Tracer,
    ins: list[Value],
    *,
    window_strides: Sequence[int],
    padding: Sequence[tuple[int, int]],
    lhs_dilation: Sequence[int],
    rhs_dilation: Sequence[int],
    dimension_numbers: Any,
    feature_group_count: int,
    batch_group_count: int,
    preferred_element_type: Any = None,
    **_: Any,
) -> list[Value]:
    """A 2-D convolution in NCHW or NHWC: its kernel transposed to the layout's (OIHW, HWIO) if it is in
    another. A 1-D one (NCW, NWC: Whisper's front end) is the 2-D one over a unit height, its data and
    kernel reshaped to it and its result back. Transposed convolutions (lhs dilation) and batch groups
    stay opaque."""
    x, w = ins
    lhs, rhs, out = (tuple(getattr(dimension_numbers, f)) for f in ("lhs_spec", "rhs_spec", "out_spec"))
    layout = _LAYOUT_OF_DATA.get(lhs)
    if layout is None or out != lhs or set(lhs_dilation) != {1} or batch_group_count != 1:
        raise ShapeError("conv_general_dilated that is not a plain 1-D or 2-D NCHW/NHWC convolution")
    if preferred_element_type is not None and np.dtype(preferred_element_type).name != x.type.dtype:
        raise ShapeError("conv_general_dilated with a wider result type")
    flat = len(lhs) == 3
    o, i, *taps = rhs
    perm = (o, i, *taps) if layout == "NCHW" else (*taps, i, o)
    if perm != tuple(range(len(rhs))):
        w = t.op("transpose", w, perm=perm)
    pads = [tuple(int(p) for p in pair) for pair in padding]
    strides, dilations = tuple(window_strides), tuple(rhs_dilation)
    if flat:  # a unit height before the width, in the data and the kernel
        height = 2 if layout == "NCHW" else 1
        x = t.op("reshape", x, shape=_unit_axis(x.type.shape, height))
        w = t.op("reshape", w, shape=_unit_axis(w.type.shape, 2 if layout == "NCHW" else 0))
        pads, strides, dilations = [(0, 0), *pads], (1, *strides), (1, *dilations)
    y = t.op(
        "conv2d",
        x,
        w,
        strides=strides,
        padding=tuple(p for pair in pads for p in pair),
        dilations=dilations,
        groups=feature_group_count,
        layout=layout,
    )
    if flat:
        shape = y.type.shape
        y = t.op("reshape", y, shape=shape[:height] + shape[height + 1 :])
    return [y]


def _unit_axis(shape: tuple[int, ...], axis: int) -> tuple[int, ...]:
    return (*shape[:axis], 1, *shape[axis:])


def _pool(kind: str) -> Callable[..., list[Value]]:
    def handler(
        t: _Tracer,
        ins: list[Value],
        *,
        window_dimensions: Sequence[int],
        window_strides: Sequence[int],
        padding: Sequence[tuple[int, int]],
        base_dilation: Sequence[int],
        window_dilation: Sequence[int],
        **_: Any,
    ) -> list[Value]:
        """A 2-D pooling window over the spatial dims of NCHW or NHWC data (no dilation)."""
        window, strides, pads = tuple(window_dimensions), tuple(window_strides), [tuple(p) for p in padding]
        if len(window) != 4 or set(base_dilation) | set(window_dilation) != {1}:
            raise ShapeError("reduce_window that is not a 2-D pooling")
        for layout, spatial in (("NCHW", (2, 3)), ("NHWC", (1, 2))):
            other = [a for a in range(4) if a not in spatial]
            if all(window[a] == 1 and strides[a] == 1 and pads[a] == (0, 0) for a in other):
                return [
                    t.op(
                        "pool2d",
                        ins[0],
                        kind=kind,
                        window=tuple(window[a] for a in spatial),
                        strides=tuple(strides[a] for a in spatial),
                        padding=tuple(int(p) for a in spatial for p in pads[a]),
                        layout=layout,
                    )
                ]
        raise ShapeError("reduce_window over batch or channel dims")

    return handler


_HANDLERS: dict[str, Callable[..., list[Value]]] = {
    "conv_general_dilated": _conv,
    "reduce_window_max": _pool("max"),
    "reduce_window_sum": _pool("sum"),
    "transpose": _transpose,
    "reshape": _reshape,
    "squeeze": _squeeze,
    "broadcast_in_dim": _broadcast_in_dim,
    "reduce_max": _reduce("reduce_max"),
    "reduce_sum": _reduce("reduce_sum"),
    **{
        f"cum{name}": _scan(combine)
        for name, combine in (("sum", "add"), ("prod", "mul"), ("max", "max"), ("min", "min"))
    },
    "top_k": _top_k,
    "rev": _rev,
    "pad": _pad,
    "sort": _sort,
    "cond": _cond,
    "gather": _gather,
    "argmax": _arg("argmax"),
    "argmin": _arg("argmin"),
    "convert_element_type": _convert,
    "concatenate": _concatenate,
    "slice": _slice,
    "select_n": _select_n,
    "integer_pow": _integer_pow,
    "pow": _pow,
    "tile": _tile,
    "unstack": _unstack,
    "stack": _stack,
    "xor": _xor,
    "square": _square,
    "div": _div,
    "iota": _iota,
    "split": _split,
    "dot_general": _dot_general,
}


@dataclass
class Jaxpr:
    """A function traced once by JAX: its closed jaxpr and the pytree structures of its arguments and
    results. ``run(*leaves)`` evaluates it (the function as written, without calling it again)."""

    closed: Any
    in_tree: Any
    out_tree: Any

    def run(self, *leaves: Any) -> list[Any]:
        return list(jcore.jaxpr_as_fun(self.closed)(*leaves))


def jaxpr_of(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Jaxpr:
    """Trace ``fn(*args, **kwargs)`` (arrays or pytrees of arrays) once. An error of ``fn``'s own (a
    shape mismatch, a Python branch on a traced value) is raised as it is, as jax.jit raises it."""
    leaves, in_tree = jax.tree_util.tree_flatten((args, kwargs))
    for i, leaf in enumerate(leaves):
        is_array = hasattr(leaf, "shape") and hasattr(leaf, "dtype")
        if not is_array and not isinstance(leaf, int | float | bool):
            raise UnsupportedError(
                f"argument leaf {i} is a {type(leaf).__name__}, not an array; "
                "mark such arguments static (static_argnums)"
            )

    def flat_fn(*flat: Any) -> Any:
        a, kw = jax.tree_util.tree_unflatten(in_tree, flat)
        return fn(*a, **kw)

    closed, out_shape = jax.make_jaxpr(flat_fn, return_shape=True)(*leaves)
    return Jaxpr(closed, in_tree, jax.tree_util.tree_structure(out_shape))


def to_program(traced: Jaxpr) -> Traced:
    """The Program of a traced function; ``UnsupportedError`` where eqsat cannot represent one of
    its values (a complex dtype)."""
    closed = traced.closed
    program = Program()
    inputs = [
        program.add_input(f"arg{i}", _type(v.aval, f"argument leaf {i}"))
        for i, v in enumerate(closed.jaxpr.invars)
    ]
    tracer = _Tracer(program)
    outs = tracer.run(closed, inputs)
    for i, v in enumerate(outs):
        program.add_output(v, f"out{i}")
    return Traced(program, traced.in_tree, traced.out_tree, tracer.closed_over, tracer.own_derivatives)


def trace(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Traced:
    """Trace ``fn(*args, **kwargs)`` (arrays or pytrees of arrays) into a Program."""
    return to_program(jaxpr_of(fn, *args, **kwargs))


def from_jax(fn: Callable[..., Any], *example_args: Any, **example_kwargs: Any) -> Program:
    """The Program of ``fn`` traced at the shapes and dtypes of the example arguments."""
    return trace(fn, *example_args, **example_kwargs).program
