"""Typed constructors for rule patterns, derived from the op definitions (``eqsat.ops``): operands by
position, attributes by keyword, rendered to egglog's s-expressions in the order the op declares its
attributes — ``Matmul("x", "w", transpose_y=1, dtype="d")`` is ``(Matmul x w 0 1 d)``.

An operand or an attribute given as a string is a pattern variable or a term (``"x"``, ``"(shape x)"``,
``Exp("x")``), except that a string attribute one of the op's literal choices or a dtype name is a
literal (``layout="NCHW"`` renders ``"NCHW"``); ints, floats and tuples of ints are literals. An omitted
attribute is its default, so a pattern that omits it matches the default only: pass a variable to
match any value. Guards are named helpers below (``has_shape``, ``has_dtype``...).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from eqsat.egglog_text import literal, tlist
from eqsat.ops import ACCUMULATE, LIKE_INPUT, OPS, VARIADIC, Attr, OpDef
from eqsat.ops.base import LIKE_ATTRIBUTE
from eqsat.types import DTYPES

Term = str  # egglog text
Value = Term | int | float | tuple[int, ...] | tuple[float, ...]


def _attribute(op: OpDef, attr: Attr, value: Value | None) -> str:
    if value is None:
        derived = isinstance(attr.default, str) and attr.default.startswith(LIKE_ATTRIBUTE)
        if attr.default is None or attr.default in (LIKE_INPUT, ACCUMULATE) or derived:
            raise TypeError(f"{op.ctor} needs {attr.name}=")
        value = attr.default
    if isinstance(value, str):
        is_literal = value in attr.choices or (attr.name.endswith("dtype") and value in DTYPES)
        return literal(value) if is_literal else value
    return literal(value)


def constructor(name: str) -> Callable[..., Term]:
    """The pattern constructor of canonical op ``name``."""
    op = OPS[name]

    def make(*operands: Term, **attrs: Value) -> Term:
        if op.arity != VARIADIC and len(operands) != op.arity:
            raise TypeError(f"{op.ctor} takes {op.arity} operands, got {len(operands)}")
        unknown = set(attrs) - {a.name for a in op.attrs}
        if unknown:
            raise TypeError(f"{op.ctor} has no attribute {sorted(unknown)[0]!r}")
        parts = [*operands, *(_attribute(op, a, attrs.get(a.name)) for a in op.attrs)]
        return f"({' '.join([op.ctor, *parts])})"

    make.__name__ = make.__qualname__ = op.ctor
    make.__doc__ = op.doc
    return make


def TList(*items: Term) -> Term:
    """The operand list of a variadic op (``Concat``)."""
    return tlist(list(items))


def pair(a: Term, b: Term, axis: Term | int) -> Term:
    """The concatenation of ``a`` and ``b`` along ``axis``."""
    return Concat(TList(a, b), axis=axis)


def vec(items: Iterable[Term | int]) -> Term:
    """An egglog vector of ints (``IVec``)."""
    texts = [str(i) for i in items]
    return f"(vec-of {' '.join(texts)})" if texts else "(vec-empty)"


# Guards: facts over the analyses that a rule's left side must satisfy, e.g. ``equal(dtype_of("x"), "d")``.
def shape_of(x: Term) -> Term:
    """The shape the analysis gives ``x`` (an ``IVec``)."""
    return f"(shape {x})"


def dtype_of(x: Term) -> Term:
    """The dtype the analysis gives ``x`` (a ``String``)."""
    return f"(dtype {x})"


def equal(a: Value, b: Value) -> Term:
    """``a`` and ``b`` are equal (e-classes, attribute values or computed values); a dtype name is a
    literal."""
    return f"(= {_operand(a)} {_operand(b)})"


def differ(a: Value, b: Value) -> Term:
    """``a`` and ``b`` are different (e-classes or values)."""
    return f"(!= {_operand(a)} {_operand(b)})"


def at_most(a: Value, b: Value) -> Term:
    """``a`` is no greater than ``b`` (integers)."""
    return f"(<= {_operand(a)} {_operand(b)})"


def not_nan(c: Term) -> Term:
    """The f64 ``c`` is a number (egglog orders NaN above every float, IEEE compares it false)."""
    return f"(< {c} NaN)"


def _relation(name: str, doc: str) -> Callable[[Term], Term]:
    def holds(x: Term) -> Term:
        return f"({name} {x})"

    holds.__name__ = holds.__qualname__ = name.replace("-", "_")
    holds.__doc__ = doc
    return holds


# Relations over dtypes (the analysis module fills them for every dtype) and over tensors (installed
# with the rules that need them: ``eqsat.egglog_text.CONSTANT_WEIGHT``, ``CONSTANT_VALUE``,
# ``PARAMETER_VALUE``).
float_dtype = _relation("float-dtype", "The dtype ``d`` is a floating-point dtype.")
wide_float = _relation("wide-float", "The dtype ``d`` is float32 or float64.")
half_float = _relation("half-float", "The dtype ``d`` is float16 or bfloat16.")
int_dtype = _relation("int-dtype", "The dtype ``d`` is an integer dtype.")
reassociable = _relation(
    "reassociable", "Sums and products of dtype ``d`` may be regrouped (wide floats, ints)."
)
constant_weight = _relation("constant-weight", "``w`` is a leaf (a parameter, an input) or a constant fill.")
constant_value = _relation("constant-value", "``t`` is computed from leaves only.")
parameter_value = _relation(
    "parameter-value", "``t`` is computed from leaves only, at least one a parameter (not fills alone)."
)


def _operand(v: Value) -> str:
    return literal(v) if (isinstance(v, str) and v in DTYPES) or not isinstance(v, str) else v


Full = constructor("full")
Matmul = constructor("matmul")
Add, Sub, Mul, Div = (constructor(n) for n in ("add", "sub", "mul", "div"))
Rem, Maximum, Minimum, Pow = (constructor(n) for n in ("rem", "maximum", "minimum", "pow"))
Eq, Ne, Lt, Le, Gt, Ge = (constructor(n) for n in ("eq", "ne", "lt", "le", "gt", "ge"))
LogicalAnd, LogicalOr, LogicalNot = (constructor(n) for n in ("logical_and", "logical_or", "logical_not"))
Iota = constructor("iota")
Exp, Log, Tanh, Sigmoid = (constructor(n) for n in ("exp", "log", "tanh", "sigmoid"))
Relu, Gelu, Neg, Sqrt, Rsqrt = (constructor(n) for n in ("relu", "gelu", "neg", "sqrt", "rsqrt"))
GeluErf, Erfc = constructor("gelu_erf"), constructor("erfc")
Sin, Cos, IsFinite, Abs = (constructor(n) for n in ("sin", "cos", "is_finite", "abs"))
StopGradient = constructor("stop_gradient")
Scale, Cast = constructor("scale"), constructor("cast")
Transpose, Reshape, Expand = (constructor(n) for n in ("transpose", "reshape", "expand"))
Concat, Split = constructor("concat"), constructor("split")
ReduceMax, ReduceSum = constructor("reduce_max"), constructor("reduce_sum")
Linear, Fma = constructor("linear"), constructor("fma")
Attention, FlashAttention = constructor("attention"), constructor("flash_attention")
Select, Softmax = constructor("select"), constructor("softmax")
Scores, MaskedSoftmax = constructor("scores"), constructor("masked_softmax")
ReduceMean, RmsNorm, LayerNorm = (constructor(n) for n in ("reduce_mean", "rms_norm", "layer_norm"))
Conv2d, Conv2dBiasAct = constructor("conv2d"), constructor("conv2d_bias_act")
Pool2d, BatchNorm = constructor("pool2d"), constructor("batch_norm")
