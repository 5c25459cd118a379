"""Hypothesis strategies: random well-typed programs mixing every canonical op, shared subterms and
several outputs. Used by the fuzz test (``make fuzz`` runs it with many more examples)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
import numpy as np
from hypothesis import strategies as st

from eqsat import Builder, Program, Value
from eqsat.ir import Op
from eqsat.ops import OPAQUE, OPS

Draw = Callable[[st.SearchStrategy[Any]], Any]


def _same_type(pool: list[Value], x: Value) -> list[Value]:
    return [v for v in pool if v.type == x.type]


def _unary(name: str) -> Callable[..., Value]:
    return lambda draw, b, x, pool: b.op(name, x)


def _binary(name: str) -> Callable[..., Value]:
    def make(draw: Draw, b: Builder, x: Value, pool: list[Value]) -> Value:
        scalar = b.full(shape=(), value=draw(st.floats(-2, 2, width=16)), dtype=x.type.dtype)
        y = draw(st.sampled_from([*_same_type(pool, x), scalar]))
        return b.op(name, *draw(st.permutations([x, y])))

    return make


def _transpose(draw: Draw, b: Builder, x: Value, pool: list[Value]) -> Value:
    return b.transpose(x, perm=tuple(draw(st.permutations(range(x.type.rank)))))


def _reshape(draw: Draw, b: Builder, x: Value, pool: list[Value]) -> Value:
    shape = draw(st.sampled_from([(x.type.size,), x.type.shape[::-1], (1, *x.type.shape)]))
    return b.reshape(x, shape=shape)


def _expand(draw: Draw, b: Builder, x: Value, pool: list[Value]) -> Value:
    return b.expand(x, shape=(draw(st.integers(1, 3)), *x.type.shape))


def _concat(draw: Draw, b: Builder, x: Value, pool: list[Value]) -> Value:
    others = draw(st.lists(st.sampled_from(_same_type(pool, x)), min_size=1, max_size=2))
    return b.concat(x, *others, axis=draw(st.integers(0, x.type.rank - 1)))


def _split(draw: Draw, b: Builder, x: Value, pool: list[Value]) -> Value | None:
    axes = [i for i, d in enumerate(x.type.shape) if d >= 2]
    if not axes:
        return None
    axis = draw(st.sampled_from(axes))
    first = draw(st.integers(1, x.type.shape[axis] - 1))
    return b.split(x, axis=axis, sizes=(first, x.type.shape[axis] - first), index=draw(st.integers(0, 1)))


def _reduce(name: str) -> Callable[..., Value]:
    def make(draw: Draw, b: Builder, x: Value, pool: list[Value]) -> Value:
        return b.op(name, x, axis=draw(st.integers(0, x.type.rank - 1)), keepdim=draw(st.integers(0, 1)))

    return make


def _softmax(draw: Draw, b: Builder, x: Value, pool: list[Value]) -> Value:
    return b.softmax(x, axis=draw(st.integers(0, x.type.rank - 1)))


def _matmul(draw: Draw, b: Builder, x: Value, pool: list[Value]) -> Value | None:
    if x.type.rank < 2:
        return None
    k, n = x.type.shape[-1], draw(st.integers(1, 4))
    transpose_y = draw(st.integers(0, 1))
    shape = (n, k) if transpose_y else (k, n)
    data = np.random.default_rng(len(b.program.params)).normal(size=shape)
    w = b.param(f"w{len(b.program.params)}", shape, x.type.dtype, data=data)
    return b.matmul(x, w, transpose_y=transpose_y)


def _scale(draw: Draw, b: Builder, x: Value, pool: list[Value]) -> Value:
    return b.scale(x, scale=draw(st.floats(-2, 2, width=16)), bias=draw(st.floats(-1, 1, width=16)))


def _cast(draw: Draw, b: Builder, x: Value, pool: list[Value]) -> Value:
    return b.cast(x, dtype="float16" if x.type.dtype == "float32" else "float32")


def _select(draw: Draw, b: Builder, x: Value, pool: list[Value]) -> Value:
    cond = b.input(f"c{len(b.program.inputs)}", x.type.shape, "bool")
    return b.select(cond, x, draw(st.sampled_from(_same_type(pool, x))))


def _opaque(draw: Draw, b: Builder, x: Value, pool: list[Value]) -> Value:
    out = Value(x.type)
    b.program.ops.append(Op(OPAQUE, (x,), {"op": "tanh_plus_one"}, (out,), lambda v: jnp.tanh(v) + 1))
    return out


MAKERS: dict[str, Callable[..., Value | None]] = {
    **{
        name: _unary(name)
        for name, spec in OPS.items()
        if spec.elementwise and spec.arity == 1 and not spec.attrs
    },
    **{name: _binary(name) for name, spec in OPS.items() if spec.elementwise and spec.arity == 2},
    "transpose": _transpose,
    "reshape": _reshape,
    "expand": _expand,
    "concat": _concat,
    "split": _split,
    "reduce_max": _reduce("reduce_max"),
    "reduce_sum": _reduce("reduce_sum"),
    "softmax": _softmax,
    "matmul": _matmul,
    "scale": _scale,
    "cast": _cast,
    "select": _select,
    OPAQUE: _opaque,
}
# Transposes twice as likely: they are what most rules act on.
KINDS = sorted(MAKERS) + ["transpose"] * 4


@st.composite
def programs(draw: Draw, max_ops: int = 10) -> Program:
    """A random well-typed Program over 1-3 float inputs of rank 1-3."""
    b = Builder()
    pool = []
    for i in range(draw(st.integers(1, 3))):
        shape = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
        pool.append(b.input(f"x{i}", shape))
    n_inputs = len(pool)
    for _ in range(draw(st.integers(1, max_ops))):
        x = draw(st.sampled_from([v for v in pool if v.type.rank >= 1]))
        value = MAKERS[draw(st.sampled_from(KINDS))](draw, b, x, pool)
        if value is not None:
            pool.append(value)
    candidates = pool[n_inputs:] or pool
    outputs = draw(st.lists(st.sampled_from(candidates), min_size=1, max_size=3, unique_by=id))
    return b.build(*outputs)
