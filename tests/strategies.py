"""Hypothesis strategies for fuzzing the whole optimizer.

``programs(family)``: random well-typed Programs built op by op, over one dtype family (float32, half
precision, float64, integers signed and unsigned), with size-0 and size-1 dims, scalar constants
including ±0.0, -inf masks and fully masked softmax rows, integer division and remainder, matmuls
accumulating in a wider type, shared subterms and several outputs. ``deep_program(n)``: a chain of
``n`` ops. ``jax_functions(family)``: random JAX functions as users write them (Python scalars are
weakly typed, ``//``, ``%``, ``x.sum(dtype=...)``, ``preferred_element_type``, ``jnp.where`` masks,
``jax.nn.softmax``, casts around a softmax, attention with large scores and masks, layer, RMS and
batch norms and 1-D convs over closed-over constants of extreme magnitudes, products sharing an input,
matmul chains that special values reach) with arguments of every kind of data, to run through
``eqsat.jit`` and ``jax.jit`` side by side, and to differentiate.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import strategies as st
from jax import lax

from eqsat import Builder, Program, Value
from eqsat.ir import Op, TensorType
from eqsat.numerics import INPUT_KINDS, random_array
from eqsat.ops import FLOAT_DTYPES, OPAQUE, OPS, OpDef
from eqsat.ops.scan import COMBINES

Draw = Callable[[st.SearchStrategy[Any]], Any]
FAMILIES: dict[str, tuple[str, ...]] = {
    "float32": ("float32",),
    "half": ("float16", "bfloat16"),
    "float64": ("float64",),  # under jax.enable_x64
    "int": ("int8", "int16", "int32", "uint8", "uint16", "uint32"),
    "int64": ("int64", "uint64"),  # under jax.enable_x64
}
X64_FAMILIES = frozenset({"float64", "int64"})


def _is_float(v: Value) -> bool:
    return v.type.dtype in FLOAT_DTYPES


def _same_type(pool: list[Value], x: Value) -> list[Value]:
    return [v for v in pool if v.type == x.type]


def _constant(draw: Draw, dtype: str) -> float:
    if dtype in FLOAT_DTYPES:
        return draw(st.sampled_from([0.0, -0.0, 1.0, -1.0, 0.5, 3.0, -np.inf]) | st.floats(-4, 4, width=16))
    low = 0 if dtype.startswith("uint") else -7
    return float(draw(st.integers(low, 7)))


def _binary(name: str) -> Callable[..., Value | None]:
    def make(draw: Draw, b: Builder, x: Value, pool: list[Value]) -> Value | None:
        if x.type.dtype == "bool":
            return None
        scalar = b.full(shape=(), value=_constant(draw, x.type.dtype), dtype=x.type.dtype)
        y = draw(st.sampled_from([*_same_type(pool, x), scalar]))
        return b.op(name, *draw(st.permutations([x, y])))

    return make


def _unary(name: str, floats_only: bool) -> Callable[..., Value | None]:
    def make(draw: Draw, b: Builder, x: Value, pool: list[Value]) -> Value | None:
        if (floats_only and not _is_float(x)) or x.type.dtype == "bool":
            return None
        return b.op(name, x)

    return make


def _transpose(draw: Draw, b: Builder, x: Value, pool: list[Value]) -> Value:
    return b.transpose(x, perm=tuple(draw(st.permutations(range(x.type.rank)))))


def _reshape(draw: Draw, b: Builder, x: Value, pool: list[Value]) -> Value:
    shape = draw(st.sampled_from([(x.type.size,), x.type.shape[::-1], (1, *x.type.shape)]))
    return b.reshape(x, shape=shape)


def _expand(draw: Draw, b: Builder, x: Value, pool: list[Value]) -> Value:
    return b.expand(x, shape=(draw(st.integers(0, 3)), *x.type.shape))


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


def _reduce(name: str) -> Callable[..., Value | None]:
    def make(draw: Draw, b: Builder, x: Value, pool: list[Value]) -> Value | None:
        if x.type.dtype == "bool":
            return None
        return b.op(name, x, axis=draw(st.integers(0, x.type.rank - 1)), keepdim=draw(st.integers(0, 1)))

    return make


def _scan(draw: Draw, b: Builder, x: Value, pool: list[Value]) -> Value | None:
    if x.type.dtype == "bool":
        return None
    flags = {k: draw(st.integers(0, 1)) for k in ("reverse", "exclusive")}
    combine = draw(st.sampled_from(COMBINES))
    return b.scan(x, axis=draw(st.integers(0, x.type.rank - 1)), combine=combine, **flags)


def _top_k(draw: Draw, b: Builder, x: Value, pool: list[Value]) -> Value | None:
    if x.type.dtype == "bool":
        return None
    axis = draw(st.integers(0, x.type.rank - 1))
    return b.op("top_k", x, axis=axis, k=draw(st.integers(0, x.type.shape[axis])))


def _take_along(draw: Draw, b: Builder, x: Value, pool: list[Value]) -> Value | None:
    """The elements of x at the positions of the k largest of another value of its shape (or its own)."""
    axis = draw(st.integers(0, x.type.rank - 1))
    ranked = draw(
        st.sampled_from([v for v in pool if v.type.shape == x.type.shape and v.type.dtype != "bool"] or [x])
    )
    if ranked.type.dtype == "bool":
        return None
    positions = b.op("top_k", ranked, axis=axis, k=draw(st.integers(0, x.type.shape[axis])))
    return b.op("take_along", x, positions, axis=axis)


def _position(name: str) -> Callable[..., Value | None]:
    def make(draw: Draw, b: Builder, x: Value, pool: list[Value]) -> Value | None:
        axes = [i for i, d in enumerate(x.type.shape) if d > 0]
        if x.type.dtype == "bool" or not axes:
            return None
        return b.op(name, x, axis=draw(st.sampled_from(axes)), keepdim=draw(st.integers(0, 1)))

    return make


def _along_axis(name: str) -> Callable[..., Value | None]:
    """An op of one axis that takes any number but bools (sort, argsort, reverse)."""

    def make(draw: Draw, b: Builder, x: Value, pool: list[Value]) -> Value | None:
        if x.type.dtype == "bool" and name != "reverse":
            return None
        order = {"descending": draw(st.integers(0, 1))} if name == "argsort" else {}
        return b.op(name, x, axis=draw(st.integers(0, x.type.rank - 1)), **order)

    return make


def _diag(draw: Draw, b: Builder, x: Value, pool: list[Value]) -> Value | None:
    return b.op("diag", x) if x.type.rank <= 2 else None


def _diagonal(draw: Draw, b: Builder, x: Value, pool: list[Value]) -> Value | None:
    return b.op("diagonal", x) if x.type.rank >= 2 else None


def _softmax(draw: Draw, b: Builder, x: Value, pool: list[Value]) -> Value | None:
    return b.softmax(x, axis=draw(st.integers(0, x.type.rank - 1))) if _is_float(x) else None


def _masked_softmax(draw: Draw, b: Builder, x: Value, pool: list[Value]) -> Value | None:
    """softmax(where(mask, x, -inf)) over the last axis: rows where the mask is all false are NaN."""
    if not _is_float(x):
        return None
    mask = b.input(f"m{len(b.program.inputs)}", x.type.shape, "bool")
    fill = b.expand(b.full(shape=(), value=-np.inf, dtype=x.type.dtype), shape=x.type.shape)
    return b.softmax(b.select(mask, x, fill), axis=x.type.rank - 1)


def _matmul(draw: Draw, b: Builder, x: Value, pool: list[Value]) -> Value | None:
    """x @ w with a constant weight; int8/int16 and half precision accumulate in a wider type."""
    if x.type.rank < 2 or x.type.dtype == "bool":
        return None
    k, n = x.type.shape[-1], draw(st.integers(0, 4))
    transpose_y = draw(st.integers(0, 1))
    shape = (n, k) if transpose_y else (k, n)
    rng = np.random.default_rng(len(b.program.params))
    data = random_array(TensorType(shape, x.type.dtype), rng)
    w = b.param(f"w{len(b.program.params)}", shape, x.type.dtype, data=data)
    wider = {"int8": "int32", "int16": "int32", "float16": "float32", "bfloat16": "float32"}
    dtype = draw(st.sampled_from([x.type.dtype, wider.get(x.type.dtype, x.type.dtype)]))
    return b.matmul(x, w, transpose_y=transpose_y, dtype=dtype)


def _scale(draw: Draw, b: Builder, x: Value, pool: list[Value]) -> Value | None:
    if not _is_float(x):
        return None
    return b.scale(x, scale=draw(st.floats(-2, 2, width=16)), bias=draw(st.floats(-1, 1, width=16)))


def _cast(draw: Draw, b: Builder, x: Value, pool: list[Value]) -> Value | None:
    if x.type.dtype == "bool":
        return None
    targets = {"float32": "float16", "float16": "float32", "bfloat16": "float32", "float64": "float32"}
    return b.cast(x, dtype=targets.get(x.type.dtype, "float32"))


def _select(draw: Draw, b: Builder, x: Value, pool: list[Value]) -> Value:
    cond = b.is_finite(x) if _is_float(x) else b.input(f"c{len(b.program.inputs)}", x.type.shape, "bool")
    return b.select(cond, x, draw(st.sampled_from(_same_type(pool, x))))


def _opaque(draw: Draw, b: Builder, x: Value, pool: list[Value]) -> Value:
    out = Value(x.type)
    b.program.ops.append(Op(OPAQUE, (x,), {"op": "negative"}, (out,), lambda v: (jnp.negative(v),)))
    return out


def _accepts(op: OpDef, dtype: str) -> bool:
    return op.check is None or op.check([TensorType((1,), dtype)], {}) is None


# Every elementwise op of one operand and no attribute that keeps its operand's dtype, derived from OPS
# (a new one is in the random programs without a line here), floats only where it refuses integers.
_UNARY = {
    name: _unary(name, floats_only=not _accepts(op, "int32"))
    for name, op in OPS.items()
    if op.arity == 1 and op.elementwise and not op.attrs and op.dtype == 0 and _accepts(op, "float32")
}

MAKERS: dict[str, Callable[..., Value | None]] = {
    **{name: _binary(name) for name in ("add", "sub", "mul", "div", "rem", "maximum", "minimum")},
    **_UNARY,
    "transpose": _transpose,
    "reshape": _reshape,
    "expand": _expand,
    "concat": _concat,
    "split": _split,
    "reduce_max": _reduce("reduce_max"),
    "reduce_sum": _reduce("reduce_sum"),
    "scan": _scan,
    "top_k": _top_k,
    "take_along": _take_along,
    "diag": _diag,
    "diagonal": _diagonal,
    **{name: _along_axis(name) for name in ("sort", "argsort", "reverse")},
    **{name: _position(name) for name in ("argmax", "argmin")},
    "softmax": _softmax,
    "masked_softmax": _masked_softmax,
    "matmul": _matmul,
    "scale": _scale,
    "cast": _cast,
    "select": _select,
    OPAQUE: _opaque,
}
# Transposes and matmuls more likely: they are what most rules act on.
KINDS = sorted(MAKERS) + ["transpose"] * 3 + ["matmul"] * 2

_DIM = st.sampled_from([0, 1, 1, 2, 3, 4])  # size-0 and size-1 dims included


@st.composite
def programs(draw: Draw, family: str = "float32", max_ops: int = 10) -> Program:
    """A random well-typed Program over 1-3 inputs of rank 1-3 of one dtype of ``family``."""
    dtype = draw(st.sampled_from(FAMILIES[family]))
    b = Builder()
    pool = []
    for i in range(draw(st.integers(1, 3))):
        shape = tuple(draw(st.lists(_DIM, min_size=1, max_size=3)))
        pool.append(b.input(f"x{i}", shape, dtype))
    n_inputs = len(pool)
    for _ in range(draw(st.integers(1, max_ops))):
        x = draw(st.sampled_from([v for v in pool if v.type.rank >= 1]))
        value = MAKERS[draw(st.sampled_from(KINDS))](draw, b, x, pool)
        if value is not None:
            pool.append(value)
    candidates = pool[n_inputs:] or pool
    outputs = draw(st.lists(st.sampled_from(candidates), min_size=1, max_size=3, unique_by=id))
    return b.build(*outputs)


def deep_program(n: int, seed: int = 0) -> Program:
    """A chain of ``n`` elementwise ops (tanh, relu, scale, add of an earlier value) over one input."""
    rng = np.random.default_rng(seed)
    b = Builder()
    x = y = b.input("x", (4, 8))
    for i in range(n):
        kind = int(rng.integers(4))
        y = (b.tanh(y), b.relu(y), b.scale(y, scale=0.5, bias=0.0), b.add(y, x))[kind]
        if i % 100 == 0:
            x = y
    return b.build(y)


# ---- JAX functions as users write them --------------------------------------------------------------

Step = Callable[[list[Any]], Any]


def _partner(env: list[Any]) -> Any:
    """A second operand for the last value: the first array if their shapes broadcast, else itself."""
    try:
        np.broadcast_shapes(env[-1].shape, env[0].shape)
        return env[0]
    except ValueError:
        return env[-1]


def _attention(x: Any, scale: float, softmax_dtype: Any) -> Any:
    """softmax(x xᵀ·scale) x over the last two axes, the softmax in x's dtype or in ``softmax_dtype``
    (its probabilities cast back), as attention is written in half precision."""
    if x.ndim < 2:
        return x
    scores = (x @ jnp.swapaxes(x, -1, -2)) * scale
    if softmax_dtype is None:
        return jax.nn.softmax(scores, axis=-1) @ x
    return jax.nn.softmax(scores.astype(softmax_dtype), axis=-1).astype(x.dtype) @ x


def _constants(
    draw: Draw,
    shape: tuple[int, ...],
    dtype: str,
    kinds: tuple[str, ...] = ("normal", "wide", "offset", "edge"),
) -> Any:
    """A closed-over constant of ``shape``: moderate, of extreme magnitude, large with a small spread
    (a batch norm's mean), or with zeros (a variance of 0)."""
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    kind = draw(st.sampled_from(kinds))
    return np.asarray(random_array(TensorType(shape, dtype), rng, kind))


def _layer_norm(x: Any, mean: Any, var: Any, gamma: Any, beta: Any) -> Any:
    centered = x - jnp.mean(x, axis=-1, keepdims=True)
    return centered * lax.rsqrt(jnp.mean(centered * centered, axis=-1, keepdims=True) + 1e-5) * gamma + beta


def _rms_norm(x: Any, mean: Any, var: Any, gamma: Any, beta: Any) -> Any:
    return x * lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * gamma


def _batch_norm(x: Any, mean: Any, var: Any, gamma: Any, beta: Any) -> Any:
    return (x - mean) * lax.rsqrt(jnp.abs(var) + 1e-5) * gamma + beta


def _affine_folded(x: Any, mean: Any, var: Any, gamma: Any, beta: Any) -> Any:
    return (x - mean) / jnp.sqrt(jnp.abs(var)) * gamma + beta


# normalizations as libraries write them, their statistics and affine part closed-over constants
_NORMS = (_layer_norm, _rms_norm, _batch_norm, _affine_folded)


def _masked_attention(x: Any, causal: bool, fill: float) -> Any:
    """softmax(where(mask, x xᵀ / sqrt(d), fill)) x, the mask causal or from x's signs."""
    if x.ndim < 2:
        return x
    scores = (x @ jnp.swapaxes(x, -1, -2)) / np.sqrt(x.shape[-1])
    n = x.shape[-2]
    mask = jnp.tril(jnp.ones((n, n), bool)) if causal else (x @ jnp.swapaxes(x, -1, -2)) > 0
    return jax.nn.softmax(jnp.where(mask, scores, fill), axis=-1) @ x


def _merged(x: Any, w1: Any, w2: Any) -> Any:
    """Two products of one input by constant weights (Q/K/V merging), added."""
    if x.ndim < 2 or x.shape[-1] != w1.shape[0]:
        return x
    return x @ w1 + x @ w2


def _conv(x: Any, w: Any) -> Any:
    """A 1-D convolution over the last axis of a rank-3 value (N, C, W), its C kernels closed over."""
    if x.ndim != 3 or x.shape[-1] < 3 or x.shape[-2] != w.shape[1]:
        return x
    return lax.conv_general_dilated(
        x, w.astype(x.dtype), (1,), "SAME", dimension_numbers=("NCH", "OIH", "NCH")
    )


def _float_steps(draw: Draw, dtype: str, shape: tuple[int, ...]) -> _Named:
    c = draw(st.sampled_from([2.0, 0.5, 3.0, -1.5, 0.0, -0.0, 1e-3]))
    axis = draw(st.integers(-1, 0))
    last = shape[-1]
    vectors = [_constants(draw, (last,), dtype) for _ in range(4)]
    # weights a product regroups with run-time data: magnitudes far apart would make the program
    # ill-conditioned (two products of 1e37 cancelling), where any two roundings differ beyond tolerance
    square = [_constants(draw, (last, last), dtype, ("normal", "offset", "edge")) for _ in range(2)]
    kernel = _constants(
        draw, (shape[-2] if len(shape) == 3 else 1, shape[-2] if len(shape) == 3 else 1, 3), dtype
    )
    causal, fill = draw(st.booleans()), draw(st.sampled_from([-jnp.inf, -1e9, -30.0]))
    norms: dict[str, Step] = {
        f.__name__[1:]: (lambda e, f=f: f(e[-1], *vectors) if e[-1].shape[-1:] == (last,) else e[-1])
        for f in _NORMS
    }
    steps: dict[str, Step] = {
        **norms,
        "masked_attention": lambda e: _masked_attention(e[-1], causal, fill),
        "merged_products": lambda e: _merged(e[-1], *square),
        "conv1d": lambda e: _conv(e[-1], kernel),
        "add_scalar": lambda e: e[-1] + c,
        "mul_scalar": lambda e: e[-1] * c,
        "div_scalar": lambda e: e[-1] / (c or 2.0),
        "sub": lambda e: e[-1] - _partner(e),
        "mul": lambda e: e[-1] * _partner(e),
        "max": lambda e: jnp.maximum(e[-1], _partner(e)),
        "exp": lambda e: jnp.exp(e[-1]),
        "tanh": lambda e: jnp.tanh(e[-1]),
        "relu": lambda e: jax.nn.relu(e[-1]),
        "softmax": lambda e: jax.nn.softmax(e[-1], axis=axis),
        "mask": lambda e: jnp.where(e[-1] > 0, e[-1], -jnp.inf),
        "sum": lambda e: jnp.sum(e[-1], axis=axis, keepdims=True),
        "cumsum": lambda e: jnp.cumsum(e[-1], axis=axis),
        "top_k_values": lambda e: lax.top_k(e[-1], min(2, e[-1].shape[-1]))[0] if e[-1].ndim else e[-1],
        "argmax_held": lambda e: _argmax_held(e[-1]),
        "diag_product": lambda e: e[-1] @ jnp.diag(vectors[0]) if e[-1].shape[-1:] == (last,) else e[-1],
        "cummax_reversed": lambda e: lax.cummax(e[-1], axis=axis % max(e[-1].ndim, 1), reverse=True),
        "max_reduce": lambda e: jnp.max(e[-1], axis=axis, keepdims=True, initial=-jnp.inf),
        "logsumexp": lambda e: jax.nn.logsumexp(e[-1], axis=axis, keepdims=True),
        "transpose": lambda e: e[-1].T,
        "gram": lambda e: (
            jnp.matmul(e[-1], jnp.swapaxes(e[-1], -1, -2), preferred_element_type=jnp.float32)
            if e[-1].ndim >= 2
            else e[-1]
        ),
        "matmul_chain": lambda e: (e[-1] @ jnp.swapaxes(e[-1], -1, -2)) @ e[-1] if e[-1].ndim >= 2 else e[-1],
        "astype": lambda e: e[-1].astype(jnp.float32).astype(dtype),
        "spread": lambda e: e[-1] * 30.0,  # large scores: a half-precision ulp of 8 near 1e3
        "softmax_f32": lambda e: jax.nn.softmax(e[-1].astype(jnp.float32), axis=axis).astype(dtype),
        "attention": lambda e: _attention(e[-1], c, softmax_dtype=None),
        "attention_f32_softmax": lambda e: _attention(e[-1], c, softmax_dtype=jnp.float32),
    }
    name = draw(st.sampled_from(sorted(steps)))
    return _Named(f"{name}(c={c}, axis={axis})", steps[name])


def _argmax_held(x: Any) -> Any:
    """The largest probability of a softmax, read at its argmax (which a rule takes from x itself)."""
    if not x.ndim or not x.shape[-1]:
        return x
    p = jax.nn.softmax(x, axis=-1)
    return jnp.take_along_axis(p, jnp.argmax(p, axis=-1, keepdims=True), axis=-1)


def _int_steps(draw: Draw, dtype: str, shape: tuple[int, ...]) -> _Named:
    c = draw(st.integers(1, 7))
    big = draw(st.sampled_from([2**53 + 1, 6364136223846793005])) if "64" in dtype else c
    axis = draw(st.integers(-1, 0))
    steps: dict[str, Step] = {
        "add_scalar": lambda e: e[-1] + c,
        "mul_scalar": lambda e: e[-1] * c,
        "lax_div": lambda e: lax.div(e[-1], jnp.asarray(c, e[-1].dtype)),
        "floordiv": lambda e: e[-1] // c,
        "mod": lambda e: e[-1] % c,
        "rem": lambda e: lax.rem(e[-1], jnp.asarray(c, e[-1].dtype)),
        "sub": lambda e: e[-1] - _partner(e),
        "max": lambda e: jnp.maximum(e[-1], _partner(e)),
        "sum_same_dtype": lambda e: e[-1].sum(axis=axis, dtype=e[-1].dtype, keepdims=True),
        "cumsum_same_dtype": lambda e: jnp.cumsum(e[-1], axis=axis, dtype=e[-1].dtype),
        "max_reduce": lambda e: jnp.max(e[-1], axis=axis, keepdims=True, initial=jnp.iinfo(e[-1].dtype).min),
        "dot_wide": lambda e: (
            lax.dot(e[-1], jnp.swapaxes(e[-1], -1, -2), preferred_element_type=jnp.int32)
            if e[-1].ndim == 2 and e[-1].dtype in (jnp.int8, jnp.int16)
            else e[-1]
        ),
        "big_literal": lambda e: e[-1] * big + 1,
        "transpose": lambda e: e[-1].T,
    }
    name = draw(st.sampled_from(sorted(steps)))
    return _Named(f"{name}(c={c}, axis={axis})", steps[name])


class _Named:
    """A step of a generated function that prints as its name (so a failing case reads)."""

    def __init__(self, name: str, step: Step) -> None:
        self.name, self.step = name, step

    def __call__(self, env: list[Any]) -> Any:
        return self.step(env)

    def __repr__(self) -> str:
        return self.name


class _Function:
    """x * s, then each step on the values so far; the last ``n_outputs`` values are the outputs."""

    def __init__(self, steps: list[_Named], n_outputs: int) -> None:
        self.steps, self.n_outputs = steps, n_outputs

    def __call__(self, *args: Any) -> tuple[Any, ...]:
        *arrays, s = args
        env = [arrays[0] * s, *arrays[1:]]  # the scalar is weak: it keeps the arrays' dtype
        for step in self.steps:
            env.append(step(env))
        return tuple(env[-self.n_outputs :])

    def __repr__(self) -> str:
        return f"jax_function(steps={self.steps}, outputs={self.n_outputs})"


@st.composite
def jax_functions(draw: Draw, family: str = "float32") -> tuple[Callable[..., Any], list[Any]]:
    """A random JAX function of 1-2 arrays (and a weakly typed Python scalar) and its arguments."""
    dtype = draw(st.sampled_from(FAMILIES[family]))
    is_float = dtype in FLOAT_DTYPES
    shape = tuple(draw(st.lists(_DIM, min_size=1, max_size=3)))
    make = _float_steps if is_float else _int_steps
    steps = [make(draw, dtype, shape) for _ in range(draw(st.integers(1, 6)))]
    n_outputs = draw(st.integers(1, 2))

    fn = _Function(steps, n_outputs)

    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    kind = draw(st.sampled_from([*INPUT_KINDS, *(("wide", "offset", "edge") if is_float else ())]))
    arrays = [random_array(TensorType(shape, dtype), rng, kind) for _ in range(draw(st.integers(1, 2)))]
    scalar = draw(st.sampled_from([1.0, 2.0, -1.0] if is_float else [1, 3, -1]))
    if dtype.startswith("uint") and scalar < 0:
        scalar = 1
    return fn, [*arrays, scalar]
