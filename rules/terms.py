"""Typed constructors and guards for rule patterns, derived from the op definitions (``eqsat.ops``): with
``eqsat.egglog_text``, which it builds on, the one layer that writes egglog text (a test holds the others
to it).

Constructors take operands by position and attributes by keyword, rendered to egglog's s-expressions
in the order the op declares its attributes — ``Matmul("x", "w", transpose_y=1, dtype="d")`` is
``(Matmul x w 0 1 d)``, a ``Term``. An operand or an attribute given as a string is a pattern variable or
a term (``"x"``, ``Exp("x")``), except that a string attribute one of the op's literal choices or a dtype
name is a literal (``layout="NCHW"`` renders ``"NCHW"``); ints, floats and tuples of ints are literals.
An omitted attribute is its default, so a pattern that omits it matches the default only: pass a
variable to match any value.

Attribute arithmetic is ``Expr`` values: the analyses (``shape_of``, ``dtype_of``), a shape's parts
(``length``, ``dim``, ``get``...) and arithmetic with Python's operators (``length(p) - 1`` is
``(- (vec-length p) 1)``). Guards are ``Fact``s, which mypy tells from ``Term``s: the comparisons
(``equal``, ``less``, ``at_most``...) and the relations (``float_dtype``...). ``var(name)`` is a pattern
variable as a Python object (``Var``), for arithmetic on it and to key the rule's example.
"""

from __future__ import annotations

from collections.abc import Callable

from eqsat.egglog_text import Fact as Fact
from eqsat.egglog_text import Term as Term
from eqsat.egglog_text import app, literal, render, tlist
from eqsat.egglog_text import rewrite_command as rewrite_command
from eqsat.egglog_text import rule_command as rule_command
from eqsat.egglog_text import set_to as set_to
from eqsat.egglog_text import union as union
from eqsat.egglog_text import vec as vec
from eqsat.ops import ACCUMULATE, LIKE_INPUT, OPS, VARIADIC, Attr, OpDef
from eqsat.ops.base import LIKE_ATTRIBUTE
from eqsat.ranges import HI, LO, TINY
from eqsat.types import DTYPES


class Expr:
    """A value a guard or an attribute computes (an integer, an f64, a shape), as egglog text;
    ``+ - * / % &`` (either side a Python number or a variable's name) build egglog's arithmetic."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"Expr({self.text!r})"

    def __add__(self, other: Operand) -> Expr:
        return call("+", self, other)

    def __radd__(self, other: Operand) -> Expr:
        return call("+", other, self)

    def __sub__(self, other: Operand) -> Expr:
        return call("-", self, other)

    def __rsub__(self, other: Operand) -> Expr:
        return call("-", other, self)

    def __mul__(self, other: Operand) -> Expr:
        return call("*", self, other)

    def __rmul__(self, other: Operand) -> Expr:
        return call("*", other, self)

    def __truediv__(self, other: Operand) -> Expr:
        return call("/", self, other)

    def __rtruediv__(self, other: Operand) -> Expr:
        return call("/", other, self)

    def __mod__(self, other: Operand) -> Expr:
        return call("%", self, other)

    def __and__(self, other: Operand) -> Expr:
        return call("&", self, other)


Tensor = Term | str  # a tensor: a term the constructors build, or a pattern variable by name
Operand = Tensor | Expr | int | float
Value = Operand | tuple[int, ...] | tuple[float, ...]


def _text(v: Value) -> str:
    """``v`` as egglog text: an expression or a variable as it is, a dtype name or a number a literal."""
    return literal(v) if isinstance(v, str) and v in DTYPES else render(v)


def call(head: str, *args: Value) -> Expr:
    """egglog's primitive ``head`` applied to ``args``."""
    return Expr(app(head, *map(_text, args)))


class Var(Expr):
    """A pattern variable: the one object that names it in a rule's patterns and binds it in the rule's
    example (``{SCALE: 0.5}``), so that renaming it renames both. It equals and hashes as its name."""

    __slots__ = ()

    @property
    def name(self) -> str:
        return self.text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str | Var) and str(other) == self.text

    def __hash__(self) -> int:
        return hash(self.text)


def var(name: str) -> Var:
    """The pattern variable ``name``: ``var("g") % 2``."""
    return Var(name)


def _attribute(op: OpDef, attr: Attr, value: Value | None) -> str:
    if value is None:
        derived = isinstance(attr.default, str) and attr.default.startswith(LIKE_ATTRIBUTE)
        if attr.default is None or attr.default in (LIKE_INPUT, ACCUMULATE) or derived:
            raise TypeError(f"{op.ctor} needs {attr.name}=")
        value = attr.default
    if isinstance(value, Expr):
        return value.text
    if isinstance(value, str):
        is_literal = value in attr.choices or (attr.name.endswith("dtype") and value in DTYPES)
        return literal(value) if is_literal else value
    return literal(value)


def constructor(name: str) -> Callable[..., Term]:
    """The pattern constructor of canonical op ``name``."""
    op = OPS[name]

    def make(*operands: Tensor | Var, **attrs: Value) -> Term:
        if op.arity != VARIADIC and len(operands) != op.arity:
            raise TypeError(f"{op.ctor} takes {op.arity} operands, got {len(operands)}")
        unknown = set(attrs) - {a.name for a in op.attrs}
        if unknown:
            raise TypeError(f"{op.ctor} has no attribute {sorted(unknown)[0]!r}")
        parts = [*map(str, operands), *(_attribute(op, a, attrs.get(a.name)) for a in op.attrs)]
        return Term(app(op.ctor, *parts))

    make.__name__ = make.__qualname__ = op.ctor
    make.__doc__ = op.doc
    return make


def TList(*items: Tensor) -> Term:
    """The operand list of a variadic op (``Concat``)."""
    return tlist(items)


def pair(a: Tensor, b: Tensor, axis: Operand) -> Term:
    """The concatenation of ``a`` and ``b`` along ``axis``."""
    return constructor("concat")(TList(a, b), axis=axis)


SCALAR = vec(())  # the shape of a scalar


# A shape's parts and egglog's arithmetic on them.
def shape_of(x: Tensor) -> Expr:
    """The shape the analysis gives ``x`` (an ``IVec``)."""
    return call("shape", x)


def dtype_of(x: Tensor) -> Expr:
    """The dtype the analysis gives ``x`` (a ``String``)."""
    return call("dtype", x)


def length(v: Operand) -> Expr:
    """The length of the vector ``v`` (a shape's rank, a permutation's)."""
    return call("vec-length", v)


def get(v: Operand, i: Operand) -> Expr:
    """Item ``i`` of the vector ``v``."""
    return call("vec-get", v, i)


def set_item(v: Operand, i: Operand, x: Operand) -> Expr:
    """The vector ``v`` with item ``i`` replaced by ``x``."""
    return call("vec-set", v, i, x)


def append(a: Operand, b: Operand) -> Expr:
    """The vector ``a`` followed by ``b``."""
    return call("vec-append", a, b)


def remove(v: Operand, i: Operand) -> Expr:
    """The vector ``v`` without item ``i``."""
    return call("vec-remove", v, i)


def rank(x: Tensor) -> Expr:
    """The rank of tensor ``x``."""
    return length(shape_of(x))


def dim(x: Tensor, axis: Operand) -> Expr:
    """The size of tensor ``x`` along ``axis``."""
    return get(shape_of(x), axis)


def last_axis(x: Tensor) -> Expr:
    """The index of tensor ``x``'s last axis."""
    return rank(x) - 1


def _fold(head: str, xs: tuple[Operand, ...]) -> Expr:
    out = xs[0]
    for x in xs[1:]:
        out = call(head, out, x)
    return out if isinstance(out, Expr) else Expr(_text(out))


def smallest(*xs: Operand) -> Expr:
    """The least of ``xs``."""
    return _fold("min", xs)


def largest(*xs: Operand) -> Expr:
    """The greatest of ``xs``."""
    return _fold("max", xs)


def magnitude(x: Operand) -> Expr:
    """``|x|``."""
    return call("abs", x)


def root(x: Operand) -> Expr:
    """The square root of the f64 ``x``."""
    return call("sqrt", x)


def as_f64(n: Operand) -> Expr:
    """The integer ``n`` as an f64."""
    return call("to-f64", n)


def _fact(head: str, *args: Value) -> Fact:
    return Fact(call(head, *args).text)


# Guards: facts over the analyses that a rule's left side must satisfy, e.g. ``equal(dtype_of("x"), "d")``.
def equal(a: Value, b: Value) -> Fact:
    """``a`` and ``b`` are equal (e-classes, attribute values or computed values); a dtype name is a
    literal."""
    return _fact("=", a, b)


def differ(a: Value, b: Value) -> Fact:
    """``a`` and ``b`` are different (e-classes or values)."""
    return _fact("!=", a, b)


def less(a: Operand, b: Operand) -> Fact:
    """``a < b``."""
    return _fact("<", a, b)


def greater(a: Operand, b: Operand) -> Fact:
    """``a > b``."""
    return _fact(">", a, b)


def at_most(a: Operand, b: Operand) -> Fact:
    """``a <= b``."""
    return _fact("<=", a, b)


def at_least(a: Operand, b: Operand) -> Fact:
    """``a >= b``."""
    return _fact(">=", a, b)


def not_nan(c: Operand) -> Fact:
    """The f64 ``c`` is a number (egglog orders NaN above every float, IEEE compares it false)."""
    return less(c, float("nan"))


def _relation(name: str, doc: str) -> Callable[[Operand], Fact]:
    def holds(x: Operand) -> Fact:
        return _fact(name, x)

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


# The range analysis' bounds (``eqsat.ranges``), which a rule's actions set (``eqsat.egglog_text.set_to``).
def range_lo(t: Tensor) -> Expr:
    """The least value the range analysis allows ``t``."""
    return call(LO, t)


def range_hi(t: Tensor) -> Expr:
    """The greatest value the range analysis allows ``t``."""
    return call(HI, t)


def range_tiny(t: Tensor) -> Expr:
    """The least nonzero magnitude the range analysis allows ``t``."""
    return call(TINY, t)


# Each op's constructor by its egglog name (``Matmul``, ``ReduceMax``): derived from ``OPS`` on first use,
# so a new op has one without a line here (``from .terms import Matmul``).
_BY_CTOR = {op.ctor: name for name, op in OPS.items()}


def __getattr__(name: str) -> Callable[..., Term]:
    if name not in _BY_CTOR:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    made = globals()[name] = constructor(_BY_CTOR[name])
    return made
