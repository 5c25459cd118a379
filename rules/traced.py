"""Rules written as two functions: each side is traced into a program and turned into an egglog
pattern over the functions' parameters.

Tracing happens at an example (one type per parameter); tracing again with other sizes, one more axis
and other dtypes finds what the sides depend on (``Freedom``). A traced rule matches tensors of the
example's dtypes, or of any dtype where the sides do not depend on it; of any shape where the tensors
share one shape and the sides do not depend on it (elementwise rules); otherwise of the example's
ranks with any sizes, except that axes of size 1 stay 1 and axes of equal size stay equal (so give
examples whose sizes differ, to get the most general rule). Attributes that depend on sizes (a
reshape's or an expand's target shape) are computed from the matched shapes; where one is not a size
(a product of sizes), the rule keeps the example's exact shapes.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

import numpy as np

from eqsat.egglog_text import literal
from eqsat.errors import EqsatError, UnsupportedError
from eqsat.frontend.builder import Builder
from eqsat.frontend.jax import from_jax
from eqsat.ir import Program, TensorType, Value
from eqsat.ops import OPS, VARIADIC, needs_opaque

from .base import Rule, Variant
from .terms import Expr, Fact, TList, constructor, dtype_of, equal, get, length, shape_of, vec

Dim = tuple[str, int]  # (parameter, axis)
type Attr = int | float | str | Dim | tuple[Attr, ...]  # an attribute that may depend on the sizes
TypeLike = Any  # a TensorType or anything with .shape and .dtype (arrays, jax.ShapeDtypeStruct)


@dataclass(frozen=True)
class Built:
    """A side written with the builder: ``fn(b, *inputs)`` returns a value of the Builder ``b``, for
    canonical ops JAX has no primitive for (``b.fma(x, y, z)``, ``b.linear(...)``)."""

    fn: Callable[..., Value]


Side = Callable[..., Any] | Built


def as_type(t: TypeLike) -> TensorType:
    if isinstance(t, TensorType):
        return t
    return TensorType(tuple(int(d) for d in t.shape), np.dtype(t.dtype).name)


def parameters(side: Side, count: int) -> list[str]:
    """The names of a side's tensor parameters (``arg0``.. where the signature does not say)."""
    fn = side.fn if isinstance(side, Built) else side
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    params = params[1:] if isinstance(side, Built) else params
    named = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)][:count]
    clash = any(n in _RESERVED or n.endswith("_shape") or n.startswith("attr") for n in named)
    return named if len(named) == count and not clash else [f"arg{i}" for i in range(count)]


# Names a pattern variable may not take: the analyses' functions, and the variables guards add.
_RESERVED = frozenset({"shape", "dtype"})


def trace_side(side: Side, types: Sequence[TensorType]) -> Program:
    """The program of one side at ``types``."""
    if isinstance(side, Built):
        b = Builder()
        out = side.fn(b, *(b.input(f"arg{i}", t.shape, t.dtype) for i, t in enumerate(types)))
        return b.build(out)
    import jax

    return from_jax(side, *(jax.ShapeDtypeStruct(t.shape, t.dtype) for t in types))


@dataclass
class _Term:
    """A side as a pattern skeleton: the text with ``@k`` holes and the attribute values of the holes."""

    text: str
    attrs: list[Any]


def _term(program: Program, names: Sequence[str], where: str) -> _Term:
    if len(program.outputs) != 1:
        raise UnsupportedError(f"{where}: a rule's side returns one array, not {len(program.outputs)}")
    if program.params:
        raise UnsupportedError(
            f"{where}: it reads a constant array ({program.params[0].name}); pass it as an argument"
        )
    exprs = {id(v): name for v, name in zip(program.inputs, names, strict=True)}
    attrs: list[Any] = []
    for op in program.live_ops():
        if needs_opaque(op.name, op.attrs, (v.type.rank for v in (*op.inputs, *op.outputs))):
            raise UnsupportedError(f"{where}: op {op.name} cannot appear in a rule (only canonical ops can)")
        spec = OPS[op.name]
        ins = [exprs[id(v)] for v in op.inputs]
        operands = [TList(*ins)] if spec.arity == VARIADIC else ins
        holes: dict[str, str] = {}
        for a in spec.attrs:
            holes[a.name] = f"@{len(attrs)}"
            attrs.append(op.attrs[a.name])
        exprs[id(op.output)] = constructor(op.name)(*operands, **holes)
    return _Term(exprs[id(program.outputs[0])], attrs)


def _renamed(types: Sequence[TensorType]) -> tuple[list[TensorType], dict[int, int]]:
    """The types with every size other than 0 and 1 replaced by a new size, equal sizes alike."""
    sizes = sorted({d for t in types for d in t.shape if d > 1})
    top = max(sizes, default=1) + 1
    new = {d: top + i for i, d in enumerate(sizes)}
    return [TensorType(tuple(new.get(d, d) for d in t.shape), t.dtype) for t in types], new


EXACT, FREE, ANY_RANK = "exact", "free", "any-rank"


@dataclass(frozen=True)
class Freedom:
    """What a traced variant matches besides its example: ``sizes`` ``exact`` (the example's shapes),
    ``free`` (the example's ranks, size-1 axes and equal sizes) or ``any-rank`` (tensors all of one
    shape, any rank: the sides do not depend on shapes); ``any_dtype``: the sides do not depend on the
    dtype (tensors of one dtype in the example keep one dtype; ``when`` may narrow it)."""

    sizes: str
    any_dtype: bool


@dataclass(frozen=True)
class TracedVariant:
    """One lhs spelling at one example: the variant and how to bind its attribute variables."""

    variant: Variant
    lhs: Side
    rhs: Side
    names: tuple[str, ...]
    types: tuple[TensorType, ...]
    attr_vars: tuple[tuple[str, Attr], ...]  # lhs variable -> attribute in terms of dims
    freedom: Freedom
    used: tuple[str, ...]  # the parameters the lhs reads


def _is_dim(attr: Any) -> TypeGuard[Dim]:
    return isinstance(attr, tuple) and len(attr) == 2 and isinstance(attr[0], str)


def _generalize(a: Any, b: Any, dims: dict[int, Dim], new: dict[int, int]) -> Attr | None:
    """Attribute ``a`` (traced at the example) and ``b`` (at the renamed sizes) as an expression over
    the example's dims; None if it is not one."""
    if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b):
        items = [_generalize(x, y, dims, new) for x, y in zip(a, b, strict=True)]
        kept = [i for i in items if isinstance(i, int) or _is_dim(i)]
        return tuple(kept) if len(kept) == len(items) else None
    if a == b and type(a) is type(b):
        return a
    if isinstance(a, int) and a in dims and new.get(a) == b:
        return dims[a]
    return None


def _render(attr: Attr, shapes: dict[str, str]) -> str:
    if _is_dim(attr):
        return str(get(shapes[attr[0]], attr[1]))
    if isinstance(attr, tuple):
        return vec(_render(x, shapes) for x in attr)
    return literal(attr)


def evaluate(attr: Attr, shapes: dict[str, tuple[int, ...]]) -> Any:
    """An attribute's value for the given shapes of the parameters."""
    if _is_dim(attr):
        return shapes[attr[0]][attr[1]]
    if isinstance(attr, tuple):
        return tuple(evaluate(x, shapes) for x in attr)
    return attr


def _guards(
    used: Sequence[str], types: Sequence[TensorType], shapes: dict[str, str], t: Freedom
) -> list[Fact]:
    facts = [equal(shapes[n], shape_of(n)) for n in used]
    first_of: dict[str, str] = {}
    for n, ty in zip(used, types, strict=True):
        if not t.any_dtype or ty.dtype == "bool":
            facts.append(equal(dtype_of(n), literal(ty.dtype)))
        elif ty.dtype in first_of:
            facts.append(equal(dtype_of(n), dtype_of(first_of[ty.dtype])))
        else:
            first_of[ty.dtype] = n
    if t.sizes == EXACT:
        return facts + [equal(shapes[n], vec(ty.shape)) for n, ty in zip(used, types, strict=True)]
    if t.sizes == ANY_RANK:
        return facts + [equal(shapes[n], shapes[used[0]]) for n in used[1:]]
    facts += [equal(length(shapes[n]), len(ty.shape)) for n, ty in zip(used, types, strict=True)]
    first: dict[int, Expr] = {}
    for n, ty in zip(used, types, strict=True):
        for axis, d in enumerate(ty.shape):
            here = get(shapes[n], axis)
            if d <= 1:
                facts.append(equal(here, d))
            elif d in first:
                facts.append(equal(here, first[d]))
            else:
                first[d] = here
    return facts


def _other_dtypes(types: Sequence[TensorType]) -> list[TensorType]:
    swap = {"float32": "float16", "float16": "float32", "bfloat16": "float32", "float64": "float32"}
    return [TensorType(t.shape, swap.get(t.dtype, "int16" if t.dtype != "int16" else "int32")) for t in types]


def _one_more_axis(types: Sequence[TensorType]) -> list[TensorType]:
    top = max((d for t in types for d in t.shape), default=1) + 1
    return [TensorType((top, *t.shape), t.dtype) for t in types]


def traced_variant(
    lhs: Side, rhs: Side, names: Sequence[str], types: Sequence[TensorType], when: Sequence[Fact], where: str
) -> TracedVariant:
    """Trace ``lhs`` and ``rhs`` at ``types``, and again with other sizes, one more axis and other
    dtypes to find what the rule depends on; the variant they make."""

    def trace(at: Sequence[TensorType]) -> list[_Term]:
        return [
            _term(trace_side(side, at), names, f"{where} {label}")
            for label, side in (("lhs", lhs), ("rhs", rhs))
        ]

    def retrace(at: Sequence[TensorType]) -> list[_Term] | None:
        try:
            return trace(at)
        except EqsatError:
            return None

    def same_at(at: Sequence[TensorType]) -> bool:
        return retrace(at) == terms

    terms = trace(types)
    used = _variables(terms[0].text, names)
    missing = [n for n in _variables(terms[1].text, names) if n not in used]
    if missing:
        raise UnsupportedError(f"{where}: the rhs reads {', '.join(missing)}, which the lhs does not")
    used_types = [types[names.index(n)] for n in used]
    renamed, new = _renamed(types)
    dims: dict[int, Dim] = {}  # each size: the first axis of that size
    for n, ty in zip(used, used_types, strict=True):
        for axis, d in enumerate(ty.shape):
            dims.setdefault(d, (n, axis))
    others = retrace(renamed) or [_Term("", [])] * 2
    generalized = [
        [_generalize(a, b, dims, new) for a, b in zip(one.attrs, two.attrs, strict=True)]
        if one.text == two.text and len(one.attrs) == len(two.attrs)
        else [None]
        for one, two in zip(terms, others, strict=True)
    ]
    sizes = FREE if all(x is not None for g in generalized for x in g) else EXACT
    depends = any(_depends(x) for g in generalized for x in g if x is not None)
    one_shape = len({ty.shape for ty in used_types}) == 1
    if sizes == FREE and not depends and one_shape and same_at(_one_more_axis(types)):
        sizes = ANY_RANK
    freedom = Freedom(sizes, same_at(_other_dtypes(types)))
    shapes = {n: f"{n}_shape" for n in names}
    attr_vars: list[tuple[str, Attr]] = []
    texts = []
    for k, (term, gen) in enumerate(zip(terms, generalized, strict=True)):
        rendered = []
        for value in gen if sizes != EXACT else term.attrs:
            assert value is not None  # every attribute generalizes where the sizes are free
            if k == 0 and _depends(value):
                attr_vars.append((f"attr{len(attr_vars)}", value))
                rendered.append(attr_vars[-1][0])
            else:
                rendered.append(_render(value, shapes))
        texts.append(_fill(term.text, rendered))
    facts = _guards(used, used_types, shapes, freedom)
    facts += [equal(v, _render(a, shapes)) for v, a in attr_vars]
    variant = Variant(texts[0], texts[1], (*facts, *when))
    return TracedVariant(
        variant, lhs, rhs, tuple(names), tuple(types), tuple(attr_vars), freedom, tuple(used)
    )


def _depends(attr: Attr) -> bool:
    return _is_dim(attr) or (isinstance(attr, tuple) and any(_depends(x) for x in attr))


def _fill(text: str, values: Sequence[str]) -> str:
    parts = text.split(" ")
    return " ".join(_fill_token(p, values) for p in parts)


def _fill_token(token: str, values: Sequence[str]) -> str:
    stripped = token.rstrip(")")
    if stripped.startswith("@"):
        return values[int(stripped[1:])] + token[len(stripped) :]
    return token


def _variables(text: str, names: Sequence[str]) -> list[str]:
    tokens = set(text.replace("(", " ").replace(")", " ").split())
    return [n for n in names if n in tokens]


def traced_rule(
    name: str,
    reason: str,
    *,
    lhs: Side | Sequence[Side],
    rhs: Side,
    examples: Sequence[Sequence[TypeLike]],
    when: str | Sequence[str] = (),
    exact: bool = False,
    default: bool = True,
    both_ways: bool = False,
) -> tuple[Rule, list[TracedVariant]]:
    """The rule ``lhs -> rhs`` (and ``rhs -> lhs`` too with ``both_ways``): one variant per lhs
    spelling, direction and example. Returns the rule and its traced variants (what a check needs to
    instantiate it at other sizes)."""
    spellings = list(lhs) if isinstance(lhs, Sequence) else [lhs]
    facts = tuple(map(Fact, (when,) if isinstance(when, str) else when))
    traced = []
    for i, example in enumerate(examples):
        types = [as_type(t) for t in example]
        names = parameters(spellings[0], len(types))
        for j, side in enumerate(spellings):
            where = (
                f"rule {name} (lhs {j}, example {i})" if len(spellings) > 1 else f"rule {name} (example {i})"
            )
            traced.append(traced_variant(side, rhs, names, types, facts, where))
        if both_ways:
            traced.append(
                traced_variant(rhs, spellings[0], names, types, facts, f"rule {name} (rhs, example {i})")
            )
    variants = tuple(t.variant for t in traced)
    return Rule(name, reason, variants, _examples(traced), exact=exact, default=default), traced


def _examples(traced: Sequence[TracedVariant]) -> Callable[[Any], dict[str, Any]]:
    """Bindings for ``check_rule``: one traced variant's example, its sizes drawn at random when free."""

    def example(rng: Any) -> dict[str, Any]:
        t = traced[int(rng.integers(len(traced)))]
        return bindings(t, resize(t, rng))

    return example


def resize(t: TracedVariant, rng: Any) -> list[TensorType]:
    """The variant's example types with sizes drawn at random as far as the variant is free: each size
    other than 0 and 1 (equal sizes alike), or for ``any-rank`` a whole random shape of rank 0 to 3."""
    if t.freedom.sizes == EXACT:
        return list(t.types)
    if t.freedom.sizes == ANY_RANK:
        shape = tuple(int(d) for d in rng.integers(1, 6, int(rng.integers(0, 4))))
        return [
            TensorType(shape, ty.dtype) if n in t.used else ty for n, ty in zip(t.names, t.types, strict=True)
        ]
    sizes = sorted({d for ty in t.types for d in ty.shape if d > 1})
    drawn = rng.choice(range(2, 2 + max(6, 2 * len(sizes))), len(sizes), replace=False)
    new = {d: int(s) for d, s in zip(sizes, drawn, strict=True)}
    return [TensorType(tuple(new.get(d, d) for d in ty.shape), ty.dtype) for ty in t.types]


def bindings(t: TracedVariant, types: Sequence[TensorType]) -> dict[str, Any]:
    """Pattern variable bindings of ``t`` at ``types``: the tensors and the computed attributes."""
    shapes = {n: ty.shape for n, ty in zip(t.names, types, strict=True)}
    return {**dict(zip(t.names, types, strict=True)), **{v: evaluate(a, shapes) for v, a in t.attr_vars}}
