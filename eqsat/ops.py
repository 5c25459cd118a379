"""The op registry: every canonical op defined once — attributes, shape/dtype rule, cost features.

The egglog constructor of an op (``transpose`` -> ``(Transpose Tensor IVec)``) is derived from its entry
here, and its JAX lowering is one function in ``eqsat.lowering`` registered under the same name.
Frontends map framework spellings (``pd.matmul``, jax's ``dot_general``) onto these ops.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence, Set
from dataclasses import dataclass, field
from math import prod
from typing import Literal, NamedTuple

import numpy as np

from eqsat.devices import FUSED_CPU_ATTENTION
from eqsat.errors import ShapeError
from eqsat.ir import DTYPES, TensorType, Value
from eqsat.shapes import (
    CONV_AXES,
    LAYOUTS,
    Attention,
    Broadcast,
    Concat,
    Conv2d,
    Conv2dBias,
    FromAttr,
    Matmul,
    Permute,
    Pool2d,
    Reduce,
    SameAs,
    ShapeRule,
    SplitPart,
    broadcast,
    broadcasts_to,
)
from eqsat.text import AttrValue

OPAQUE = "opaque"
VARIADIC = -1
AttrKind = Literal["int", "ints", "float", "str"]
EGG_SORT: dict[str, str] = {"int": "i64", "ints": "IVec", "float": "f64", "str": "String"}
FlopsFn = Callable[[Sequence[TensorType], TensorType, dict], float]


class Kernel(NamedTuple):
    """One kernel an op runs as: its arithmetic, its memory traffic, and whether it is a step of a
    sequential device loop."""

    flops: float
    bytes: float
    loop_step: bool = False


PhasesFn = Callable[[Sequence[TensorType], TensorType, dict], list[Kernel]]
FLASH_BLOCK_Q = 256  # queries per block of the flash lowering's online softmax
FLASH_BLOCK_K = 512  # keys per step of its online softmax
FLASH_EXACT_BLOCK_Q = 512  # queries per block when a block's scores fit FLASH_SCORES_BUDGET
# bytes of f32 scores one query block may hold and still take an exact one-pass softmax: this CPU's
# L3 where XLA fuses the block into one kernel, half of it where the block's scores make several passes
FLASH_SCORES_BUDGET = (32 if FUSED_CPU_ATTENTION else 16) * 2**20


def flash_blocks(rows: int, queries: int, keys: int) -> tuple[int, int, int, int]:
    """(query block, key block, query blocks, key blocks) of the flash lowering for ``rows`` (batch ×
    heads) of these lengths: all keys in one block when that block's scores fit the budget, else
    blocks streamed by the online softmax."""
    bq = max(1, min(FLASH_EXACT_BLOCK_Q, queries))
    if 4 * rows * bq * keys <= FLASH_SCORES_BUDGET:
        return bq, max(1, keys), -(-queries // bq), 1
    bq, bk = max(1, min(FLASH_BLOCK_Q, queries)), max(1, min(FLASH_BLOCK_K, keys))
    return bq, bk, -(-queries // bq), -(-keys // bk)


# The default of a ``dtype`` attribute that means "the dtype of the first operand".
LIKE_INPUT = "like-input"
# The default of a dtype attribute that means "the first operand's dtype, at least float32" (where
# half-precision work accumulates).
ACCUMULATE = "accumulate"
FLOAT_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64"})


def accumulation_dtype(dtype: str) -> str:
    """float32 for half precision, else ``dtype`` itself."""
    return "float32" if dtype in ("float16", "bfloat16") else dtype


DtypeCheck = Callable[[Sequence[TensorType], dict], str | None]


@dataclass(frozen=True)
class Attr:
    name: str
    kind: AttrKind
    default: AttrValue | None = None
    choices: tuple[str | int, ...] = ()


def _elementwise_flops(ins: Sequence[TensorType], out: TensorType, attrs: dict) -> float:
    return float(out.size)


def _no_flops(ins: Sequence[TensorType], out: TensorType, attrs: dict) -> float:
    return 0.0


def _matmul_flops(ins: Sequence[TensorType], out: TensorType, attrs: dict) -> float:
    x = ins[0].shape
    k = x[-2] if attrs.get("transpose_x", 0) else x[-1]
    return 2.0 * out.size * k


def _io_bytes(ins: Sequence[TensorType], out: TensorType, attrs: dict) -> float:
    return float(sum(t.nbytes for t in ins) + out.nbytes)


def _attention_flops(ins: Sequence[TensorType], out: TensorType, attrs: dict) -> float:
    q, k, v = ins[0].shape, ins[1].shape, ins[2].shape
    scores = prod(q[:-1]) * k[-2]
    return 2.0 * scores * q[-1] + 2.0 * scores * v[-1] + 5.0 * scores


def _attention_phases(ins: Sequence[TensorType], out: TensorType, attrs: dict) -> list[Kernel]:
    """Naive attention is three kernels: q kᵀ writes the f32 scores, softmax reads and writes them,
    the product with v reads them back."""
    q, k, v = (t.shape for t in ins[:3])
    scores = prod(q[:-1]) * k[-2]
    s_bytes = 4.0 * scores
    return [
        Kernel(2.0 * scores * q[-1], ins[0].nbytes + ins[1].nbytes + s_bytes),
        Kernel(5.0 * scores, 2 * s_bytes + sum(t.nbytes for t in ins[3:] if t.size > 1)),  # scalars fold
        Kernel(2.0 * scores * v[-1], s_bytes + ins[2].nbytes + out.nbytes),
    ]


def _flash_phases(ins: Sequence[TensorType], out: TensorType, attrs: dict) -> list[Kernel]:
    """One fused step per (query block, key block) it visits — under a causal mask, only the key
    blocks at or before the query block's last row: its share of the work, the key/value block it
    reads, and the f32 accumulator and (max, sum) stats it reads and writes."""
    q, k, v = ins[0].shape, ins[1].shape, ins[2].shape
    rows = prod(q[:-2])
    bq, bk, nq, nk = flash_blocks(rows, q[-2], k[-2])
    steps = sum(flash_key_blocks(i, bq, bk, nk, bool(attrs.get("causal"))) for i in range(nq))
    state = 4.0 * rows * bq * (v[-1] + 2)
    io = sum(t.nbytes for t in ins) + out.nbytes
    flops = _attention_flops(ins, out, attrs) / max(nq * nk, 1)
    return [Kernel(flops, io / nk + 2 * state, True)] * steps


def flash_key_blocks(i: int, bq: int, bk: int, nk: int, causal: bool) -> int:
    """How many key blocks query block ``i`` visits: all, or under a causal mask those holding a key
    at or before its last query (the later ones are masked out entirely)."""
    return min(nk, -(-(i + 1) * bq // bk)) if causal and nk > 1 else nk


def _reduce_flops(ins: Sequence[TensorType], out: TensorType, attrs: dict) -> float:
    return float(ins[0].size)


def _softmax_flops(ins: Sequence[TensorType], out: TensorType, attrs: dict) -> float:
    return 5.0 * ins[0].size


@dataclass(frozen=True)
class Reshape(FromAttr):
    def infer(self, shapes: Sequence[tuple[int, ...]], attrs: dict) -> tuple[int, ...]:
        target = tuple(attrs[self.attr])
        if prod(target) != prod(shapes[0]):
            raise ShapeError(f"cannot reshape {shapes[0]} ({prod(shapes[0])} elements) to {target}")
        return target


@dataclass(frozen=True)
class Expand(FromAttr):
    def infer(self, shapes: Sequence[tuple[int, ...]], attrs: dict) -> tuple[int, ...]:
        target = tuple(attrs[self.attr])
        if not broadcasts_to(shapes[0], target):
            raise ShapeError(f"cannot expand {shapes[0]} to {target}: not a broadcast")
        return target


@dataclass(frozen=True)
class Linear(Matmul):
    """``x @ w + b`` (``w`` transposed if ``transpose_y``), ``b`` of the output's last dim."""

    def infer(self, shapes: Sequence[tuple[int, ...]], attrs: dict) -> tuple[int, ...]:
        out = super().infer(shapes[:2], attrs)
        if tuple(shapes[2]) != out[-1:]:
            raise ShapeError(f"linear bias {shapes[2]} must be ({out[-1]},)")
        return out


@dataclass(frozen=True)
class Fma(SameAs):
    """``x * y + z``: the product broadcasts to exactly z's shape."""

    index: int = 2

    def infer(self, shapes: Sequence[tuple[int, ...]], attrs: dict) -> tuple[int, ...]:
        if broadcast(shapes[0], shapes[1]) != shapes[2]:
            raise ShapeError(f"fma: x*y of shapes {shapes[0]}, {shapes[1]} must have z's shape {shapes[2]}")
        return shapes[2]


@dataclass(frozen=True)
class Select(SameAs):
    """``select(cond, x, y)``: x and y of one shape; cond of that shape or a scalar."""

    index: int = 1

    def infer(self, shapes: Sequence[tuple[int, ...]], attrs: dict) -> tuple[int, ...]:
        cond, x, y = shapes
        if x != y or cond not in ((), x):
            raise ShapeError(f"select needs equal shapes (cond may be a scalar), got {cond}, {x}, {y}")
        return x


@dataclass(frozen=True)
class OpDef:
    """One canonical op. ``dtype``: index of the input whose dtype the result has, or an attribute name."""

    name: str
    arity: int
    doc: str
    attrs: tuple[Attr, ...] = ()
    shape: ShapeRule = field(default_factory=SameAs)
    dtype: int | str = 0
    flops: FlopsFn = _elementwise_flops
    bytes: FlopsFn = _io_bytes
    phases: PhasesFn | None = None
    view: bool = False
    elementwise: bool = False
    same_dtype: tuple[int, ...] = ()
    axis_attr: str | None = None
    check: DtypeCheck | None = None

    @property
    def ctor(self) -> str:
        """The egglog constructor name: ``reduce_max`` -> ``ReduceMax``."""
        return "".join(part.capitalize() for part in self.name.split("_"))

    def cost_phases(
        self, ins: Sequence[TensorType], out: TensorType, attrs: dict
    ) -> list[tuple[float, float]]:
        """(flops, bytes moved) per kernel this op runs as; view ops run as none."""
        if self.view:
            return []
        if self.phases is not None:
            return self.phases(ins, out, attrs)
        return [Kernel(self.flops(ins, out, attrs), self.bytes(ins, out, attrs))]

    def normalize(self, inputs: Sequence[Value], attrs: dict[str, AttrValue]) -> dict[str, AttrValue]:
        """Check arity and attributes, fill defaults, coerce kinds and make axes non-negative."""
        if self.arity != VARIADIC and len(inputs) != self.arity:
            raise ShapeError(f"{self.name} takes {self.arity} operands, got {len(inputs)}")
        if self.arity == VARIADIC and not inputs:
            raise ShapeError(f"{self.name} needs at least one operand")
        known = {a.name for a in self.attrs}
        extra = set(attrs) - known
        if extra:
            raise ShapeError(f"{self.name} has no attribute {sorted(extra)[0]!r} (has: {sorted(known)})")
        out: dict[str, AttrValue] = {}
        for a in self.attrs:
            value = attrs.get(a.name, a.default)
            if value is None:
                raise ShapeError(f"{self.name} needs attribute {a.name!r}")
            if value == LIKE_INPUT:
                value = inputs[0].type.dtype
            elif value == ACCUMULATE:
                value = accumulation_dtype(inputs[0].type.dtype)
            out[a.name] = _coerce(self.name, a, value)
        if self.axis_attr:
            rank = inputs[0].type.rank
            axis = int(out[self.axis_attr])  # type: ignore[arg-type]
            if not -rank <= axis < rank:
                raise ShapeError(f"{self.name}: axis {axis} out of range for rank {rank}")
            out[self.axis_attr] = axis % rank
        return out

    def infer(self, types: Sequence[TensorType], attrs: dict) -> TensorType:
        """The output type; raises :class:`ShapeError` with the reason if the operands do not fit."""
        same = (0, 1) if self.elementwise and len(types) == 2 else self.same_dtype
        if len({types[i].dtype for i in same}) > 1:
            raise ShapeError(f"{self.name} of different dtypes {', '.join(types[i].dtype for i in same)}")
        problem = self.check(types, attrs) if self.check else None
        if problem:
            raise ShapeError(f"{self.name}: {problem}")
        shape = self.shape.infer([t.shape for t in types], attrs)
        if isinstance(self.dtype, int):
            dtype = types[self.dtype].dtype
        else:
            dtype = self.dtype if self.dtype in DTYPES else str(attrs[self.dtype])
        return TensorType(tuple(int(d) for d in shape), dtype)


def _coerce(op: str, attr: Attr, value: AttrValue) -> AttrValue:
    bad = ShapeError(f"{op}: attribute {attr.name} must be {attr.kind}, got {value!r}")
    match attr.kind:
        case "int":
            if isinstance(value, bool | int | np.integer):
                if attr.choices and int(value) not in attr.choices:
                    raise ShapeError(f"{op}: {attr.name} must be one of {attr.choices}, got {value!r}")
                return int(value)
        case "float":
            if isinstance(value, bool | int) and float(value) != value:
                raise ShapeError(f"{op}: {attr.name} {value} is not exactly a float (use a constant tensor)")
            if isinstance(value, int | float):
                return float(value)
        case "ints":
            if isinstance(value, tuple | list) and all(isinstance(v, int | np.integer) for v in value):
                return tuple(int(v) for v in value)
        case "str":
            if isinstance(value, str):
                if attr.name.endswith("dtype") and value not in DTYPES:
                    raise ShapeError(f"{op}: unsupported dtype {value!r}")
                if attr.choices and value not in attr.choices:
                    raise ShapeError(
                        f"{op}: {attr.name} must be one of {', '.join(attr.choices)}, got {value!r}"
                    )
                return value
    raise bad


def _floats(types: Sequence[TensorType], attrs: dict) -> str | None:
    return None if types[0].dtype in FLOAT_DTYPES else f"needs a floating-point operand, got {types[0].dtype}"


def _numeric(types: Sequence[TensorType], attrs: dict) -> str | None:
    bad = [t.dtype for t in types if t.dtype == "bool" or t.dtype not in DTYPES]
    return f"arithmetic on {bad[0]}" if bad else None


def _fill_fits(types: Sequence[TensorType], attrs: dict) -> str | None:
    """An integer or bool full holds an integer value."""
    value, dtype = attrs["value"], attrs["dtype"]
    if dtype in FLOAT_DTYPES or (math.isfinite(value) and value == int(value)):
        return None
    return f"value {value} does not fit dtype {dtype}"


def _one_dtype(types: Sequence[TensorType], attrs: dict) -> str | None:
    return None if len({t.dtype for t in types}) == 1 else "operands of different dtypes"


def _bool_condition(types: Sequence[TensorType], attrs: dict) -> str | None:
    return None if types[0].dtype == "bool" else "needs a bool condition"


def _bias_in_result_dtype(types: Sequence[TensorType], attrs: dict) -> str | None:
    if types[2].dtype != attrs["dtype"]:
        return f"bias of dtype {types[2].dtype}, result of dtype {attrs['dtype']}"
    return None


def _conv_flops(ins: Sequence[TensorType], out: TensorType, attrs: dict) -> float:
    """Two flops per multiply-add: each output element sums (input channels / groups) x KH x KW."""
    return 2.0 * out.size * prod(ins[1].shape) / max(ins[1].shape[CONV_AXES[attrs["layout"]].kernel_out], 1)


POOL_KINDS = ("max", "sum", "avg", "avg_exclusive")


def _pool_flops(ins: Sequence[TensorType], out: TensorType, attrs: dict) -> float:
    return float(out.size * prod(attrs["window"]))


def _per_channel(types: Sequence[TensorType], attrs: dict) -> str | None:
    problem = _floats(types, attrs)
    channels = types[0].shape[attrs["axis"]]
    bad = [t.shape for t in types[1:] if t.shape != (channels,)]
    return problem or (f"per-channel operands must be ({channels},), got {bad[0]}" if bad else None)


def _unary(name: str, doc: str, floats_only: bool = True) -> OpDef:
    return OpDef(name, 1, doc, elementwise=True, check=_floats if floats_only else _numeric)


def _binary(name: str, doc: str, arithmetic: bool = True, floats_only: bool = False) -> OpDef:
    check = _floats if floats_only else _numeric if arithmetic else None
    return OpDef(name, 2, doc, shape=Broadcast(), elementwise=True, check=check)


def _compare(name: str, doc: str) -> OpDef:
    return OpDef(name, 2, doc, shape=Broadcast(), dtype="bool", elementwise=True)


def _logical(name: str, arity: int, doc: str) -> OpDef:
    shape = Broadcast() if arity == 2 else SameAs()
    return OpDef(name, arity, doc, shape=shape, elementwise=True, check=_bits)


def _bits(types: Sequence[TensorType], attrs: dict) -> str | None:
    bad = [t.dtype for t in types if t.dtype != "bool" and "int" not in t.dtype]
    return f"needs bool or integer operands, got {bad[0]}" if bad else None


def _iota_dimension(types: Sequence[TensorType], attrs: dict) -> str | None:
    if not 0 <= attrs["dimension"] < len(attrs["shape"]):
        return f"dimension {attrs['dimension']} out of range for shape {attrs['shape']}"
    return None if attrs["dtype"] != "bool" else "needs a numeric dtype"


def _attention_operands(types: Sequence[TensorType], attrs: dict) -> str | None:
    if types[0].dtype not in FLOAT_DTYPES:
        return f"needs floating-point q, k, v, got {types[0].dtype}"
    narrow = [a for a in ("scores_dtype", "softmax_dtype") if attrs[a] not in FLOAT_DTYPES]
    if narrow:
        return f"{narrow[0]} must be a floating-point dtype, got {attrs[narrow[0]]}"
    if types[3].dtype not in (types[0].dtype, "float32", attrs["scores_dtype"]):
        return f"bias must be of q's dtype, float32 or the scores' dtype, got {types[3].dtype}"
    return None if types[4].dtype == "bool" else f"mask must be bool, got {types[4].dtype}"


ATTENTION_PRECISION = (Attr("scores_dtype", "str", ACCUMULATE), Attr("softmax_dtype", "str", ACCUMULATE))


def _attention(name: str, doc: str, phases: PhasesFn) -> OpDef:
    """The attention ops differ only in how they run (their kernels), not in what they compute."""
    return OpDef(
        name,
        5,
        doc,
        (
            Attr("scale", "float"),
            Attr("fill", "float", -math.inf),
            Attr("causal", "int", 0, (0, 1)),
            *ATTENTION_PRECISION,
        ),
        Attention(),
        flops=_attention_flops,
        phases=phases,
        same_dtype=(0, 1, 2),
        check=_attention_operands,
    )


_AXIS = Attr("axis", "int")
_FLAG_X = Attr("transpose_x", "int", 0, (0, 1))
_FLAG_Y = Attr("transpose_y", "int", 0, (0, 1))
_RESULT_DTYPE = Attr("dtype", "str", LIKE_INPUT)
_ACT = Attr("act", "str", "none", ("none", "relu", "gelu"))
_OPS = [
    OpDef(
        "full",
        0,
        "a tensor filled with one value",
        (Attr("shape", "ints"), Attr("value", "float"), Attr("dtype", "str")),
        FromAttr("shape"),
        "dtype",
        _no_flops,
        view=True,
        check=_fill_fits,
    ),
    OpDef(
        "matmul",
        2,
        "batched matrix product over the last two dims, with transpose flags; products are accumulated "
        "in and returned as dtype (int8 x int8 -> int32, f16 x f16 -> f32, as jax's preferred_element_type)",
        (_FLAG_X, _FLAG_Y, _RESULT_DTYPE),
        Matmul(),
        "dtype",
        _matmul_flops,
        same_dtype=(0, 1),
    ),
    _binary("add", "x + y (broadcasting)"),
    _binary("sub", "x - y (broadcasting)"),
    _binary("mul", "x * y (broadcasting)"),
    _binary("div", "x / y (broadcasting); integers: the quotient rounded toward zero (lax.div)"),
    _binary("rem", "x - y * div(x, y) (broadcasting): the remainder with the sign of x (lax.rem)"),
    _binary("maximum", "max(x, y) (broadcasting)", arithmetic=False),
    _binary("minimum", "min(x, y) (broadcasting)", arithmetic=False),
    _binary("pow", "x ** y (broadcasting; floating point)", floats_only=True),
    _compare("eq", "x == y (broadcasting), bool"),
    _compare("ne", "x != y (broadcasting), bool"),
    _compare("lt", "x < y (broadcasting), bool"),
    _compare("le", "x <= y (broadcasting), bool"),
    _compare("gt", "x > y (broadcasting), bool"),
    _compare("ge", "x >= y (broadcasting), bool"),
    _logical("logical_and", 2, "x & y (broadcasting): logical for bool, bitwise for integers"),
    _logical("logical_or", 2, "x | y (broadcasting): logical for bool, bitwise for integers"),
    _logical("logical_not", 1, "~x: logical for bool, bitwise for integers"),
    OpDef(
        "iota",
        0,
        "0, 1, 2, ... along dimension, broadcast over the other dims of shape",
        (Attr("shape", "ints"), Attr("dimension", "int"), Attr("dtype", "str")),
        FromAttr("shape"),
        "dtype",
        check=_iota_dimension,
    ),
    _unary("exp", "e**x"),
    _unary("log", "natural logarithm"),
    _unary("tanh", "hyperbolic tangent"),
    _unary("sigmoid", "1 / (1 + e**-x)"),
    _unary("relu", "max(x, 0)", floats_only=False),
    _unary("gelu", "GELU, tanh approximation"),
    _unary("neg", "-x", floats_only=False),
    _unary("sqrt", "square root"),
    _unary("rsqrt", "1 / sqrt(x)"),
    _unary("sin", "sine"),
    _unary("cos", "cosine"),
    OpDef(
        "is_finite",
        1,
        "true where x is neither infinite nor NaN",
        dtype="bool",
        flops=_elementwise_flops,
        elementwise=True,
        check=_floats,
    ),
    OpDef(
        "scale",
        1,
        "x * scale, then + bias unless bias is 0 (floating point only; scale and bias in x's dtype)",
        (Attr("scale", "float"), Attr("bias", "float", 0.0)),
        elementwise=True,
        check=_floats,
    ),
    OpDef(
        "cast",
        1,
        "convert to dtype",
        (Attr("dtype", "str"),),
        dtype="dtype",
        flops=_no_flops,
        elementwise=True,
    ),
    OpDef(
        "transpose",
        1,
        "permute dims: out.shape[i] = x.shape[perm[i]]",
        (Attr("perm", "ints"),),
        Permute(),
        flops=_no_flops,
    ),
    OpDef(
        "reshape",
        1,
        "same elements, new shape (concrete dims)",
        (Attr("shape", "ints"),),
        Reshape(),
        flops=_no_flops,
        view=True,
    ),
    OpDef("expand", 1, "broadcast to shape", (Attr("shape", "ints"),), Expand(), flops=_no_flops, view=True),
    OpDef(
        "concat",
        VARIADIC,
        "concatenate along axis",
        (_AXIS,),
        Concat(),
        flops=_no_flops,
        axis_attr="axis",
        check=_one_dtype,
    ),
    OpDef(
        "split",
        1,
        "part `index` of splitting along axis into sizes",
        (_AXIS, Attr("sizes", "ints"), Attr("index", "int")),
        SplitPart(),
        flops=_no_flops,
        view=True,
        axis_attr="axis",
    ),
    OpDef(
        "reduce_max",
        1,
        "max over one axis",
        (_AXIS, Attr("keepdim", "int", 0)),
        Reduce(),
        flops=_reduce_flops,
        axis_attr="axis",
    ),
    OpDef(
        "reduce_sum",
        1,
        "sum over one axis",
        (_AXIS, Attr("keepdim", "int", 0)),
        Reduce(),
        flops=_reduce_flops,
        axis_attr="axis",
    ),
    OpDef(
        "linear",
        3,
        "x @ w + b, then the epilogue act (none, relu, gelu): one kernel; the product and b in dtype",
        (_FLAG_Y, _ACT, _RESULT_DTYPE),
        Linear(),
        "dtype",
        flops=_matmul_flops,
        same_dtype=(0, 1),
        check=_bias_in_result_dtype,
    ),
    OpDef(
        "fma",
        3,
        "x * y + z in one pass",
        shape=Fma(),
        dtype=2,
        flops=lambda i, o, a: 2.0 * o.size,
        same_dtype=(0, 1, 2),
    ),
    _attention(
        "attention",
        "softmax(where(mask, q kᵀ·scale + bias, fill)) v (q, k, v, bias, mask); causal: the mask also "
        "keeps only keys j <= query i. Rounded where the program rounds: q kᵀ, its scaling, the bias "
        "and the fill in scores_dtype; the softmax in softmax_dtype; the probabilities in q's dtype, "
        "their product with v accumulated in float32 or wider and returned in q's dtype (both dtypes "
        "default to q's, at least float32); scores materialized",
        _attention_phases,
    ),
    _attention(
        "flash_attention",
        "attention streamed over key blocks with the online (stats-form) softmax: no S×S scores",
        _flash_phases,
    ),
    OpDef(
        "select",
        3,
        "where(cond, x, y): x where cond is true, else y",
        shape=Select(),
        dtype=1,
        same_dtype=(1, 2),
        check=_bool_condition,
    ),
    OpDef(
        "softmax",
        1,
        "exp(x - max) / sum(exp(x - max)) along axis",
        (_AXIS,),
        flops=_softmax_flops,
        axis_attr="axis",
        check=_floats,
    ),
]
_WINDOW = (
    Attr("strides", "ints", (1, 1)),
    Attr("padding", "ints", (0, 0, 0, 0)),  # (top, bottom, left, right)
)
_LAYOUT = Attr("layout", "str", "NCHW", LAYOUTS)
_CONV_ATTRS = (*_WINDOW, Attr("dilations", "ints", (1, 1)), Attr("groups", "int", 1), _LAYOUT)
_OPS += [
    OpDef(
        "conv2d",
        2,
        "2-D convolution (cross-correlation) of x by kernel w: NCHW data with an OIHW kernel, or NHWC "
        "with HWIO; strides, padding (top, bottom, left, right), dilations of the kernel, groups "
        "(groups = channels: depthwise)",
        _CONV_ATTRS,
        Conv2d(),
        flops=_conv_flops,
        same_dtype=(0, 1),
        check=_floats,
    ),
    OpDef(
        "conv2d_bias_act",
        3,
        "conv2d of x by w, + a bias b of the output channels, then the epilogue act (none, relu, gelu): "
        "one kernel (Paddle's fused_conv2d_add_act, cuDNN's conv-bias-activation)",
        (*_CONV_ATTRS, _ACT),
        Conv2dBias(),
        flops=_conv_flops,
        same_dtype=(0, 1, 2),
        check=_floats,
    ),
    OpDef(
        "pool2d",
        1,
        "2-D pooling over window: max, sum, avg (divided by the window's size, padding included) or "
        "avg_exclusive (by the count of elements inside the input); padding adds -inf for max, 0 else",
        (Attr("kind", "str", choices=POOL_KINDS), Attr("window", "ints"), *_WINDOW, _LAYOUT),
        Pool2d(),
        flops=_pool_flops,
        check=_floats,
    ),
    OpDef(
        "batch_norm",
        5,
        "inference batch norm: (x - mean) * rsqrt(var + epsilon) * scale + bias, the per-channel vectors "
        "(scale, bias, mean, var) along axis",
        (Attr("epsilon", "float"), _AXIS),
        flops=lambda i, o, a: 4.0 * o.size,
        same_dtype=(0, 1, 2, 3, 4),
        axis_attr="axis",
        check=_per_channel,
    ),
]
OPS: dict[str, OpDef] = {op.name: op for op in _OPS}
# Ops XLA's constant folding evaluates at compile time when all their inputs are constants: weights
# packed (concat), laid out, or rescaled (a batch norm folded into a conv's weights) cost nothing.
FOLDABLE = frozenset(
    {"concat", "reshape", "transpose", "expand"} | {n for n, op in OPS.items() if op.elementwise}
)


def folds(op: str, inputs: Set[Hashable], constants: Set[Hashable], fulls: Set[Hashable]) -> bool:
    """Whether XLA computes ``op`` at compile time: it is foldable and its inputs are constants or
    ``full``s, at least one a constant (XLA keeps an op of broadcast scalars alone a broadcast)."""
    return op in FOLDABLE and bool(inputs & constants) and inputs <= constants | fulls


def get_op(name: str) -> OpDef:
    """The definition of canonical op ``name``; ``KeyError`` with the known names otherwise."""
    try:
        return OPS[name]
    except KeyError:
        raise KeyError(f"unknown op {name!r} (known: {', '.join(OPS)}, {OPAQUE})") from None
