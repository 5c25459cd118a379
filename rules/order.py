"""Positions of the largest elements (``top_k``, ``argmax``, ``argmin``) of a function that keeps their
order: those of its argument. A program that reads only where a softmax peaks (greedy decoding, a
classifier's label, mixture-of-experts routing) needs no softmax; one that reads its top-k values too
(a top-k sampler) needs the softmax at those k positions only.

Each function here is nondecreasing along the axis, and strictly increasing in real arithmetic; in
floating point it may round two different elements to one value (exp of nearly equal scores, a
softmax's underflow), and there the program's positions break the tie by the lower position while the
argument's tell them apart. The rewritten positions hold the same values of what the program ranked,
so the rules are inexact, and ``eqsat.verify`` checks exactly that. (Like every inexact rule's, the
equivalences chain: positions of x + y and of x - y are one class, whose ties each may break otherwise.)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from eqsat.ir import TensorType

from .base import Rule, Variant, rand_shape
from .terms import (
    Add,
    Argmax,
    Argmin,
    Argsort,
    Div,
    Exp,
    Fact,
    Neg,
    ReduceMax,
    ReduceSum,
    Reverse,
    Scale,
    Softmax,
    Sort,
    Split,
    Sub,
    TakeAlong,
    Tensor,
    Term,
    TopK,
    dim,
    dtype_of,
    equal,
    float_dtype,
    get,
    greater,
    length,
    rank,
    shape_of,
    var,
)

AXIS, K, KEEP, DTYPE = var("a"), var("k"), var("kd"), var("d")


# The ops whose positions the rules see through: positions of the largest (and of the smallest)
_LARGEST: tuple[Callable[[Tensor], Term], ...] = (
    lambda x: TopK(x, axis=AXIS, k=K),
    lambda x: Argmax(x, axis=AXIS, keepdim=KEEP, dtype=DTYPE),
    lambda x: Argmin(x, axis=AXIS, keepdim=KEEP, dtype=DTYPE),
)


def _through(f: Tensor, *when: Fact) -> tuple[Variant, ...]:
    """``positions(f) -> positions(x)`` for every positions op, where f keeps x's order along the axis."""
    return tuple(Variant(pick(f), pick("x"), when) for pick in _LARGEST)


# y is one value along the axis: a scalar, or of x's rank with size 1 there
_ONE_PER_ROW = ((equal(rank("y"), 0),), (equal(rank("y"), rank("x")), equal(dim("y", AXIS), 1)))


def _shifted(combine: Callable[[Tensor, Tensor], Term]) -> tuple[Variant, ...]:
    """x plus or minus y, where y is one value along the axis and x is not broadcast."""
    f = combine("x", "y")
    kept = (equal(shape_of(f), shape_of("x")), float_dtype(dtype_of("x")))
    return tuple(v for row in _ONE_PER_ROW for v in _through(f, *row, *kept))


def _example(rng: Any, shift: bool = False, scalar: bool = False, positions: bool = False) -> dict[Any, Any]:
    """x, an axis, a k within it; for a shift, y of size 1 along the axis (or a scalar); positions p,
    k along the axis (any integers: ``take_along`` clips them into it)."""
    shape = rand_shape(rng, int(rng.integers(1, 4)), low=2, high=7)
    axis = int(rng.integers(len(shape)))
    out: dict[Any, Any] = {
        "x": TensorType(shape, "float32"),
        AXIS: axis,
        K: int(rng.integers(1, shape[axis] + 1)),
        KEEP: int(rng.integers(2)),
        DTYPE: "int32",
        "c": float(rng.uniform(0.1, 4.0)),
        "b": float(rng.normal()),
    }
    if positions:
        out["p"] = TensorType((*shape[:axis], out[K], *shape[axis + 1 :]), "int32")
    if shift:
        out["y"] = TensorType(() if scalar else (*shape[:axis], 1, *shape[axis + 1 :]), "float32")
    return out


def _softmax_at(positions: Tensor) -> Variant:
    """Elements of a softmax: the scores there, shifted by the max and divided by the sum."""
    peak = ReduceMax("x", axis=AXIS, keepdim=1)
    total = ReduceSum(Exp(Sub("x", peak)), axis=AXIS, keepdim=1)
    picked = TakeAlong(Softmax("x", axis=AXIS, shifted=1), positions, axis=AXIS)
    return Variant(picked, Div(Exp(Sub(TakeAlong("x", positions, axis=AXIS), peak)), total))


def _first(x: Tensor) -> Term:
    """The first k along the axis (a split into k and the rest)."""
    return Split(x, axis=AXIS, sizes="s", index=0)


def _sorted_first_k() -> tuple[Variant, ...]:
    """The first k of a descending sort, as numpy habits write it: values, and positions (of -x: for
    floats, whose negation does not wrap; ``jnp.argsort(descending=True)``'s)."""
    top = TopK("x", axis=AXIS, k=get("s", 0))
    when = (equal(length("s"), 2),)
    return (
        Variant(_first(Reverse(Sort("x", axis=AXIS), axis=AXIS)), TakeAlong("x", top, axis=AXIS), when),
        Variant(_first(Argsort(Neg("x"), axis=AXIS, descending=0)), top, (*when, float_dtype(dtype_of("x")))),
        Variant(_first(Reverse(Argsort("x", axis=AXIS, descending=0), axis=AXIS)), top, when),
        Variant(_first(Argsort("x", axis=AXIS, descending=1)), top, when),
    )


def _first_k_example(rng: Any) -> dict[Any, Any]:
    ex = _example(rng)
    n = ex["x"].shape[ex[AXIS]]
    k = int(rng.integers(1, n))
    return {"x": ex["x"], AXIS: ex[AXIS], "s": (k, n - k)}


_REASON = "{} keeps the order of its argument along the axis, so it peaks at the same positions"


def _axis_example(rng: Any) -> dict[Any, Any]:
    shape = rand_shape(rng, int(rng.integers(1, 4)))
    return {"x": TensorType(shape, "float32"), AXIS: int(rng.integers(len(shape)))}


RULES = [
    Rule(
        "reverse-twice",
        "a reversal reversed along the same axis is its operand (a descending argsort's positions, which "
        "jnp.argsort reverses once more)",
        (Variant(Reverse(Reverse("x", axis=AXIS), axis=AXIS), "x"),),
        _axis_example,
    ),
    Rule(
        "top-k-from-sort",
        "the first k of a sort reversed (of the argsort of -x, or reversed) are the top k: one pass, not "
        "a sort (inexact: a sort ties -0 with +0, and its reversal puts tied elements' last first)",
        _sorted_first_k(),
        _first_k_example,
        exact=False,
    ),
    Rule(
        "top-1",
        "the top 1 of x is its argmax (its position) and its max (its value): one reduction, no TopK "
        "(off by default: TopK ranks -NaN below every number, argmax and max every NaN above, and an "
        "invalid op's NaN on x86 is -NaN: the top 1 of cos([0.5, -inf]) is 0.88, its max NaN)",
        (
            Variant(TopK("x", axis=AXIS, k=1), Argmax("x", axis=AXIS, keepdim=1, dtype="int32")),
            Variant(
                TakeAlong("x", TopK("x", axis=AXIS, k=1), axis=AXIS), ReduceMax("x", axis=AXIS, keepdim=1)
            ),
        ),
        _example,
        exact=False,
        default=False,
    ),
    Rule(
        "softmax-at-positions",
        "a softmax's elements at some positions (its top k) are those scores normalized by the whole "
        "axis' max and sum: the normalized axis is never written",
        (_softmax_at("p"),),
        lambda rng: _example(rng, positions=True),
    ),
    Rule(
        "positions-through-softmax",
        _REASON.format("a softmax shifted by its max (an unshifted one's overflow makes NaNs)"),
        _through(Softmax("x", axis=AXIS, shifted=1)),
        _example,
        exact=False,
    ),
    Rule("positions-through-exp", _REASON.format("exp"), _through(Exp("x")), _example, exact=False),
    Rule(
        "positions-through-positive-scale",
        _REASON.format("a positive scale plus a constant"),
        _through(Scale("x", scale="c", bias="b"), greater("c", 0.0), float_dtype(dtype_of("x"))),
        _example,
        exact=False,
    ),
    Rule(
        "positions-through-shift",
        _REASON.format("adding one value per row"),
        (*_shifted(Add), *_shifted(lambda x, y: Add(y, x))),
        lambda rng, scalar=False: _example(rng, shift=True, scalar=scalar),
        exact=False,
        cases=({"scalar": False}, {"scalar": True}),
    ),
    Rule(
        "positions-through-subtraction",
        _REASON.format("subtracting one value per row (a log-softmax's normalizer)"),
        _shifted(Sub),
        lambda rng, scalar=False: _example(rng, shift=True, scalar=scalar),
        exact=False,
        cases=({"scalar": False}, {"scalar": True}),
    ),
]
