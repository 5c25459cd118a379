"""``eqsat.rule``: a rewrite rule written as two functions, checked numerically before it is used.

    fma = eqsat.rule(
        "my-fma", "x*y + z in one pass",
        lhs=lambda x, y, z: x * y + z,
        rhs=eqsat.Built(lambda b, x, y, z: b.fma(x, y, z)),
        example=[jax.ShapeDtypeStruct((3, 4), "float32")] * 3,
    )
    eqsat.optimize(program, rules=["default", fma])

What the traced rule matches is described in ``eqsat.rules.traced``. The check compares both sides on
random data at the example and at random sizes (a differing rule is refused with the inputs that show
it), then lets egglog apply the rule itself with ``check_rule``, so the patterns, guards and computed
attributes are checked as optimization uses them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from eqsat.errors import EqsatError, MiscompileError, UnsoundRuleError
from eqsat.ir import TensorType
from eqsat.numerics import compare, loosest, random_array
from eqsat.rules import ALL_RULES, Rule
from eqsat.rules.traced import Side, TracedVariant, TypeLike, bindings, resize, trace_side, traced_rule
from eqsat.verify import check_rule


def rule(
    name: str,
    reason: str,
    *,
    lhs: Side | Sequence[Side],
    rhs: Side,
    example: Sequence[TypeLike] | None = None,
    examples: Sequence[Sequence[TypeLike]] | None = None,
    when: str | Sequence[str] = (),
    exact: bool = False,
    seeds: int = 3,
) -> Rule:
    """The rule ``lhs -> rhs``, traced at ``example`` (one type per parameter: a ``TensorType``, an
    array or a ``jax.ShapeDtypeStruct``) or at each of ``examples`` (one variant each, e.g. one per
    rank). ``lhs`` may be several spellings of the same computation. Sides are JAX functions, or
    ``eqsat.Built`` builder functions for canonical ops JAX has no primitive for.

    ``when``: extra egglog guard facts over the parameters, e.g. ``"(wide-float (dtype x))"``.
    ``exact``: both sides agree bit for bit in IEEE arithmetic (then also on ±0, ±inf and NaN inputs);
    inexact rules must only keep finite results finite and close.

    Raises ``eqsat.UnsoundRuleError`` with a counterexample if the sides differ, and
    ``eqsat.UnsupportedError`` if a side cannot be a pattern (a constant array, an opaque op).
    """
    if name in {r.name for r in ALL_RULES}:
        raise EqsatError(f"rule name {name!r} is taken by a built-in rule; choose another")
    if (example is None) == (examples is None):
        raise EqsatError(f"rule {name}: give example= (one type per parameter) or examples= (several)")
    made, traced = traced_rule(
        name,
        reason,
        lhs=lhs,
        rhs=rhs,
        examples=[example] if example is not None else list(examples or ()),
        when=when,
        exact=exact,
    )
    rng = np.random.default_rng(0)
    for t in traced:
        sized = [t.types, *(tuple(resize(t, np.random.default_rng(s))) for s in range(seeds))]
        for types in dict.fromkeys(sized):
            _check_at(made, t, list(types), rng, must_fire=True)
        for dtype in OTHER_DTYPES if t.freedom.any_dtype else ():
            _check_at(made, t, _with_dtype(t.types, dtype), rng, must_fire=False)
    return made


# Dtypes a dtype-free rule is also checked at (where its guard lets it apply).
OTHER_DTYPES = ("float16", "bfloat16", "int32")


def _with_dtype(types: Sequence[TensorType], dtype: str) -> list[TensorType]:
    return [TensorType(t.shape, dtype) if t.dtype != "bool" else t for t in types]


def _check_at(
    made: Rule, t: TracedVariant, types: list[TensorType], rng: np.random.Generator, must_fire: bool
) -> None:
    """Check the variant at ``types``: both sides run directly (a concrete counterexample if they
    differ, in values, shape or dtype), then as egglog applies it (``check_rule``). Where it need not
    fire (another dtype, which its guard may exclude), the sides are compared only where it does."""
    one = replace(made, variants=(t.variant,), example=lambda _rng: bindings(t, types))
    if must_fire:
        _compare_sides(made, t, types, rng)
        check_rule(one)
        return
    try:
        fired = check_rule(one, dtype=types[0].dtype).fired
    except MiscompileError:
        _compare_sides(made, t, types, rng)
        raise
    if fired:
        _compare_sides(made, t, types, rng)


def _compare_sides(made: Rule, t: TracedVariant, types: list[Any], rng: np.random.Generator) -> None:
    """Run both sides at ``types`` on random data; raise with the inputs where they differ."""
    from eqsat.lowering import lower

    programs = [trace_side(side, types) for side in (t.lhs, t.rhs)]
    lhs, rhs = (lower(p) for p in programs)
    dtype = loosest(programs[0].outputs[0].type.dtype, *(ty.dtype for ty in types))
    for kind in ("normal", "special") if made.exact else ("normal",):
        args = [random_array(ty, rng, kind) for ty in types]
        want, got = lhs(*args)[0], rhs(*args)[0]
        problem = compare(want, got, dtype, strict=made.exact)
        if problem is not None:
            inputs = dict(zip(t.names, (np.asarray(a) for a in args), strict=True))
            shown = "\n".join(f"  {n} = {_short(a)}" for n, a in inputs.items())
            raise UnsoundRuleError(
                f"rule {made.name} is refused: its sides differ on {kind} inputs ({problem})\n{shown}\n"
                f"  lhs -> {_short(want)}\n  rhs -> {_short(got)}",
                inputs,
                np.asarray(want),
                np.asarray(got),
            )


def _short(a: Any) -> str:
    return np.array2string(np.asarray(a), threshold=12, edgeitems=2, precision=4).replace("\n", " ")
