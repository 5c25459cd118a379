"""What an op is: ``OpDef`` (attributes, shape and dtype rule, cost features, JAX lowering, framework
spellings) and the helpers the op families share. The families (``elementwise``, ``layout``,
``linear``, ``reduce``, ``attention``, ``conv``) define the ops; ``eqsat.ops`` collects them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import numpy as np

from eqsat.errors import ShapeError
from eqsat.shapes import SameAs, ShapeRule
from eqsat.text import AttrValue
from eqsat.types import DTYPES, FLOAT_DTYPES, HALF_DTYPES, TensorType, accumulation_dtype

VARIADIC = -1
Fusion = Literal["free", "loop", "reduce", "kernel"]
"""How XLA fuses an op (``eqsat.cost.fusion``): ``free``, a view that moves no data; ``loop``, fused
into the loop of the op that reads it; ``reduce``, a reduction whose first pass takes in the loop ops
that feed it; ``kernel``, a kernel of its own (a dot, a conv, a fused attention)."""
AttrKind = Literal["int", "ints", "float", "str"]
EGG_SORT: dict[str, str] = {"int": "i64", "ints": "IVec", "float": "f64", "str": "String"}
FlopsFn = Callable[[Sequence[TensorType], TensorType, dict], float]
DtypeCheck = Callable[[Sequence[TensorType], dict], str | None]
Lowering = Callable[..., Any]  # ``fn(*operands, **attrs) -> array``: an op's meaning in JAX

# The default of a ``dtype`` attribute that means "the dtype of the first operand".
LIKE_INPUT = "like-input"
# The default of a dtype attribute that means "the first operand's dtype, at least float32" (where
# half-precision work accumulates).
ACCUMULATE = "accumulate"
LIKE_ATTRIBUTE = "like:"  # + an earlier attribute's name: the default that means "that attribute's value"


def like(attribute: str) -> str:
    """The default of an attribute that means "the value of ``attribute``" (listed before it)."""
    return LIKE_ATTRIBUTE + attribute


class Kernel(NamedTuple):
    """One kernel an op runs as: its arithmetic, its memory traffic, whether it is a step of a
    sequential device loop, what kind of arithmetic it is where a device's peak depends on it
    (``dot:bfloat16``, ``conv:NHWC:float32``; see ``contraction_kind``), else empty, and for a
    product the bytes of the result it writes (part of ``bytes``; a profile may price them apart)."""

    flops: float
    bytes: float
    loop_step: bool = False
    kind: str = ""
    written: float = 0.0


def contraction_kind(op: str, dtype: str, layout: str = "") -> str:
    """The kind of a dot (``op`` "dot") or conv kernel over operands of ``dtype``: a device profile
    may give its peak (``Device.peaks``)."""
    return ":".join(part for part in (op, layout, dtype) if part)


def product_kind(operands: str, result: str) -> str:
    """The kind of a dot over ``operands`` returning ``result``: ``dot:<operands>``, or
    ``dot:widened:<operands>`` for half-precision operands accumulated in a wider result (XLA:CPU
    computes that product in float32, at float32's rate, where a half-precision result is not)."""
    widened = operands in HALF_DTYPES and result not in HALF_DTYPES
    return contraction_kind("dot", operands, "widened" if widened else "")


PhasesFn = Callable[[Sequence[TensorType], TensorType, dict], list[Kernel]]
DeviceKernelFn = Callable[[Sequence[TensorType], TensorType, dict, str], str | None]
"""``fn(inputs, output, attrs, platform)``: the kernel of its own a backend runs the call on, or None."""


@dataclass(frozen=True)
class Attr:
    name: str
    kind: AttrKind
    default: AttrValue | None = None
    choices: tuple[str | int, ...] = ()


def elementwise_flops(ins: Sequence[TensorType], out: TensorType, attrs: dict) -> float:
    return float(out.size)


def no_flops(ins: Sequence[TensorType], out: TensorType, attrs: dict) -> float:
    return 0.0


def io_bytes(ins: Sequence[TensorType], out: TensorType, attrs: dict) -> float:
    return float(sum(t.nbytes for t in ins) + out.nbytes)


class Spelling(NamedTuple):
    """Library code that means an op no JAX primitive spells: ``fn``, JAX as ``source`` writes it,
    traced at ``args``, reaches the op through the default rules (``tests/test_recognition.py``)."""

    source: str
    fn: Callable[..., Any]
    args: tuple[TensorType, ...]


def spelled(source: str, *args: tuple[tuple[int, ...], str]) -> Callable[[Callable[..., Any]], Spelling]:
    """Decorator: the function is ``source``'s spelling of an op, traced at ``args`` (shape, dtype)."""

    def wrap(fn: Callable[..., Any]) -> Spelling:
        return Spelling(source, fn, tuple(TensorType(shape, dtype) for shape, dtype in args))

    return wrap


@dataclass(frozen=True)
class OpDef:
    """One canonical op, in one place.

    ``dtype``: index of the input whose dtype the result has, or an attribute name, or a dtype.
    ``lower``: its JAX lowering, ``fn(*operands, **attrs)``. ``jax`` and ``paddle``: the JAX primitives
    and Paddle ops (``pd.exp``; Paddle 3 prints ``pd_op.exp``) that mean exactly this op of the same
    operands, with no attributes to translate; spellings that need translating have a handler in
    their frontend instead. An op that no primitive spells (a fused op, an activation) lists
    ``spellings``: the libraries' code that means it, which the rules recognize. ``device_kernel``:
    which kernel of its own a backend (``cpu``, ``gpu``, ``tpu``) runs a call on, None where the
    lowering's own formulation runs (a cost model prices the call as that kernel only where it runs).
    """

    name: str
    arity: int
    doc: str
    attrs: tuple[Attr, ...] = ()
    shape: ShapeRule = field(default_factory=SameAs)
    dtype: int | str = 0
    flops: FlopsFn = elementwise_flops
    bytes: FlopsFn = io_bytes
    phases: PhasesFn | None = None
    device_kernel: DeviceKernelFn | None = field(default=None, compare=False)
    view: bool = False
    elementwise: bool = False
    same_dtype: tuple[int, ...] = ()
    axis_attr: str | None = None
    contraction: str = ""  # "dot" or "conv": its kernel's peak depends on the operands' dtype
    timed: bool = False  # XLA runs it at rates no roofline predicts: the default cost model times it
    fusion: Fusion | None = None
    expensive: bool = False  # XLA does not compute it again in each fusion that reads it
    positions: bool = False  # its result are positions along ``axis`` of its first operand (argmax)
    check: DtypeCheck | None = None
    lower: Lowering | None = field(default=None, compare=False)
    jax: tuple[str, ...] = ()
    paddle: tuple[str, ...] = ()
    spellings: tuple[Spelling, ...] = field(default=(), compare=False)

    @property
    def fusion_kind(self) -> Fusion:
        """``fusion`` where given, else ``free`` for a view, ``loop`` for an elementwise op, else
        ``kernel``."""
        if self.fusion is not None:
            return self.fusion
        return "free" if self.view else "loop" if self.elementwise else "kernel"

    @property
    def composite(self) -> bool:
        """Its lowering emits several primitives: a fused op (a normalization, a softmax, attention, a
        product with its bias or epilogue)."""
        return self.phases is not None or (bool(self.contraction) and self.arity > 2)

    @property
    def ctor(self) -> str:
        """The egglog constructor name: ``reduce_max`` -> ``ReduceMax``."""
        return "".join(part.capitalize() for part in self.name.split("_"))

    def cost_phases(self, ins: Sequence[TensorType], out: TensorType, attrs: dict) -> list[Kernel]:
        """(flops, bytes moved) per kernel this op runs as; view ops run as none."""
        if self.view:
            return []
        if self.phases is not None:
            return self.phases(ins, out, attrs)
        if not self.contraction:
            return [Kernel(self.flops(ins, out, attrs), self.bytes(ins, out, attrs))]
        if self.contraction == "dot":
            kind = product_kind(ins[0].dtype, out.dtype)
        else:
            kind = contraction_kind(self.contraction, ins[0].dtype, str(attrs.get("layout", "")))
        flops, nbytes = self.flops(ins, out, attrs), self.bytes(ins, out, attrs)
        return [Kernel(flops, nbytes, kind=kind, written=float(out.nbytes))]

    def normalize(self, types: Sequence[TensorType], attrs: dict[str, AttrValue]) -> dict[str, AttrValue]:
        """Check arity and attributes (given the operands' types), fill defaults, coerce kinds and make
        axes non-negative."""
        if self.arity != VARIADIC and len(types) != self.arity:
            raise ShapeError(f"{self.name} takes {self.arity} operands, got {len(types)}")
        if self.arity == VARIADIC and not types:
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
                value = types[0].dtype
            elif value == ACCUMULATE:
                value = accumulation_dtype(types[0].dtype)
            elif isinstance(value, str) and value.startswith(LIKE_ATTRIBUTE):
                value = out[value.removeprefix(LIKE_ATTRIBUTE)]
            out[a.name] = _coerce(self.name, a, value)
        if self.axis_attr:
            rank = types[0].rank
            axis = int(out[self.axis_attr])  # type: ignore[arg-type]
            if not -rank <= axis < rank:
                raise ShapeError(f"{self.name}: axis {axis} out of range for rank {rank}")
            out[self.axis_attr] = axis % rank
        return out

    def infer(self, types: Sequence[TensorType], attrs: dict) -> TensorType:
        """The output type; raises ``ShapeError`` with the reason if the operands do not fit."""
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
                        f"{op}: {attr.name} must be one of {', '.join(map(str, attr.choices))}, got {value!r}"
                    )
                return value
    raise bad


def floats(types: Sequence[TensorType], attrs: dict) -> str | None:
    """Dtype check: the first operand is floating point."""
    return None if types[0].dtype in FLOAT_DTYPES else f"needs a floating-point operand, got {types[0].dtype}"


def numeric(types: Sequence[TensorType], attrs: dict) -> str | None:
    """Dtype check: no operand is bool."""
    bad = [t.dtype for t in types if t.dtype == "bool" or t.dtype not in DTYPES]
    return f"arithmetic on {bad[0]}" if bad else None


def one_dtype(types: Sequence[TensorType], attrs: dict) -> str | None:
    """Dtype check: all operands share one dtype."""
    return None if len({t.dtype for t in types}) == 1 else "operands of different dtypes"


AXIS = Attr("axis", "int")
# A softmax as its program wrote it: shifted by its max (exp(x - max), as every library's softmax is),
# or not (exp(x) / sum(exp(x)), which overflows to inf / inf = NaN where x exceeds exp's range, and
# the op keeps that: a rule may not turn the program's NaN into another program's number)
SHIFTED = Attr("shifted", "int", 1, (0, 1))
RESULT_DTYPE = Attr("dtype", "str", LIKE_INPUT)
ACT = Attr("act", "str", "none", ("none", "relu", "gelu", "gelu_erf"))
