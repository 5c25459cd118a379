"""Fusion: matmul + bias -> linear, linear + activation epilogue, mul + add -> fma, and merging
matmuls that share their input (Q/K/V projections) into one matmul over concatenated weights.

Each fused form is only an alternative in the e-graph: the cost model decides whether it pays (a merged
QKV matmul saves launches on a GPU, but pays the weight concat and is slower on a CPU).
"""

from __future__ import annotations

from typing import Any

from eqsat.egglog_text import CONSTANT_WEIGHT
from eqsat.ir import Program, TensorType
from eqsat.shapes import MAX_RANK
from eqsat.stacking import stacked_products

from .algebra import TY
from .base import MultiVariant, Proposal, Rule, Variant
from .terms import (
    SCALAR,
    Add,
    Concat,
    Erfc,
    Fact,
    Fma,
    Full,
    Gelu,
    GeluErf,
    Linear,
    Matmul,
    Mul,
    Neg,
    Relu,
    Scale,
    Split,
    Tanh,
    TList,
    Var,
    constant_weight,
    differ,
    equal,
    get,
    greater,
    length,
    less,
    rank,
    shape_of,
    union,
    vec,
)

F32 = "float32"
_LINEAR = {"transpose_y": TY, "act": "none", "dtype": "d"}


def _bias_variants(r: int) -> tuple[Variant, ...]:
    mm = Matmul("x", "w", transpose_y=TY, dtype="d")
    when = (
        equal("s", shape_of(mm)),
        equal(length("s"), r),
        equal(shape_of("b"), vec([get("s", r - 1)])),
    )
    linear = Linear("x", "w", "b", **_LINEAR)
    return Variant(Add(mm, "b"), linear, when), Variant(Add("b", mm), linear, when)


def _linear_example(rng: Any) -> dict[str | Var, Any]:
    r = int(rng.integers(2, 5))
    batch = tuple(int(d) for d in rng.integers(1, 3, r - 2))
    m, k, n = (int(d) for d in rng.integers(1, 6, 3))
    ty = int(rng.integers(0, 2))
    return {
        "x": TensorType((*batch, m, k), F32),
        "w": TensorType((n, k) if ty else (k, n), F32),
        "b": TensorType((n,), F32),
        TY: ty,
        "d": F32,
    }


def _merge(kind: str, n: int, r: int) -> MultiVariant:
    """n matmuls (or linears) reading the same x -> one over concatenated weights, split back."""
    idx = range(1, n + 1)
    term = {
        i: Matmul("x", f"w{i}", dtype="d")
        if kind == "matmul"
        else Linear("x", f"w{i}", f"b{i}", act="act", dtype="d")
        for i in idx
    }
    facts = [equal(f"m{i}", term[i]) for i in idx]
    facts += [differ(f"w{i}", f"w{j}") for i in idx for j in idx if i < j]
    facts += [equal(f"sw{i}", shape_of(f"w{i}")) for i in idx] + [equal(length(f"sw{i}"), 2) for i in idx]
    facts += [constant_weight(f"w{i}") for i in idx]
    facts.append(equal(rank("m1"), r))

    weights = Concat(TList(*(f"w{i}" for i in idx)), axis=1)
    merged = (
        Matmul("x", weights, dtype="d")
        if kind == "matmul"
        else Linear("x", weights, Concat(TList(*(f"b{i}" for i in idx)), axis=0), act="act", dtype="d")
    )
    sizes = vec(get(f"sw{i}", 1) for i in idx)
    actions = tuple(union(f"m{i}", Split(merged, axis=r - 1, sizes=sizes, index=i - 1)) for i in idx)
    return MultiVariant(tuple(facts), actions, tuple(term[i] for i in idx))


def _stacked_example(rng: Any) -> dict[str, Any]:
    """Two to four left operands of random row counts (rank 2 or 3) and one weight."""
    n, k, m = (int(d) for d in rng.integers(2, 5, 3))
    rank = int(rng.integers(2, 4))
    lead = tuple(int(d) for d in rng.integers(1, 4, rank - 1))
    lefts = {f"x{i}": TensorType((int(rng.integers(1, 4)), *lead[1:], k), F32) for i in range(n)}
    return {**lefts, "w": TensorType((k, m), F32)}


def _stacked_program(bindings: dict[str, Any]) -> Program:
    """Each left operand times the weight, and one product that depends on another's result (not
    stacked with it)."""
    program = Program()
    w = program.add_input("w", bindings["w"])
    lefts = [program.add_input(n, t) for n, t in bindings.items() if n != "w"]
    products = [program.add_op("matmul", [x, w]) for x in lefts]
    if bindings["w"].shape[0] == bindings["w"].shape[1]:
        products.append(program.add_op("matmul", [products[0], w]))
    for p in products:
        program.add_output(p)
    return program


def _merge_example(rng: Any) -> dict[str, Any]:
    m, k = (int(d) for d in rng.integers(1, 6, 2))
    ns = [int(d) for d in rng.integers(1, 6, 3)]
    weights = {f"w{i + 1}": TensorType((k, n), F32) for i, n in enumerate(ns)}
    biases = {f"b{i + 1}": TensorType((n,), F32) for i, n in enumerate(ns)}
    return {"x": TensorType((2, m, k), F32), **weights, **biases, "act": "relu", "d": F32}


def _near(c: str, value: float, tol: float = 1e-6) -> tuple[Fact, Fact]:
    return greater(c, value - tol), less(c, value + tol)


# x·0.5·(1 + tanh(√(2/π)·(x + 0.044715·x³))), as jax.nn.gelu writes it out (scalar products as scales).
# x³ as x * (x * x) is how jax traces x ** 3 (XLA's repeated squaring); (x * x) * x as written by hand.
_GELU_TANH = tuple(
    Mul(
        "x",
        Scale(
            Add(
                Full(shape=SCALAR, value=1.0, dtype="d"),
                Tanh(Scale(Add("x", Scale(cube, scale="c1")), scale="c2")),
            ),
            scale=0.5,
        ),
    )
    for cube in (Mul("x", Mul("x", "x")), Mul(Mul("x", "x"), "x"))
)

# 0.5·x·erfc(-x·√½), as jax.nn.gelu(approximate=False) writes it out (scalar products as scales).
_GELU_ERF = Mul(Scale("x", scale=0.5), Erfc(Scale(Neg("x"), scale="c")))

RULES = [
    Rule(
        "gelu-erf-form",
        "exact GELU written out as jax.nn.gelu traces it, 0.5·x·erfc(-x·√½), is the gelu_erf op (which "
        "rounds √½ to x's dtype as jax.nn.gelu does)",
        (Variant(_GELU_ERF, GeluErf("x"), _near("c", 0.7071067811865476, 1e-3)),),
        lambda rng: {"x": TensorType((3, 5), F32), "c": 0.7071067690849304},
        exact=False,
    ),
    Rule(
        "gelu-tanh-form",
        "the tanh approximation of GELU written out (as jax.nn.gelu traces) is the gelu op",
        tuple(
            Variant(form, Gelu("x"), (*_near("c1", 0.044715), *_near("c2", 0.7978845608)))
            for form in _GELU_TANH
        ),
        lambda rng: {
            "x": TensorType((3, 5), F32),
            "d": F32,
            "c1": 0.044714998453855515,
            "c2": 0.7978845834732056,
        },
        exact=False,
    ),
    Rule(
        "matmul-bias-to-linear",
        "a matmul followed by a bias add over its last dim is one linear kernel",
        tuple(v for r in range(2, MAX_RANK + 1) for v in _bias_variants(r)),
        _linear_example,
    ),
    Rule(
        "linear-activation-epilogue",
        "relu/gelu (either form) of a linear runs in its epilogue: no extra memory round trip",
        (
            Variant(
                Relu(Linear("x", "w", "b", **_LINEAR)), Linear("x", "w", "b", **{**_LINEAR, "act": "relu"})
            ),
            Variant(
                Gelu(Linear("x", "w", "b", **_LINEAR)), Linear("x", "w", "b", **{**_LINEAR, "act": "gelu"})
            ),
            Variant(
                GeluErf(Linear("x", "w", "b", **_LINEAR)),
                Linear("x", "w", "b", **{**_LINEAR, "act": "gelu_erf"}),
            ),
        ),
        _linear_example,
    ),
    Rule(
        "mul-add-to-fma",
        "x*y + z in one pass instead of two",
        (
            Variant(
                Add(Mul("x", "y"), "z"), Fma("x", "y", "z"), (equal(shape_of(Mul("x", "y")), shape_of("z")),)
            ),
            Variant(
                Add("z", Mul("x", "y")), Fma("x", "y", "z"), (equal(shape_of(Mul("x", "y")), shape_of("z")),)
            ),
        ),
        lambda rng: {k: TensorType((3, 4), F32) for k in "xyz"},
    ),
    Rule(
        "merge-shared-input-matmuls",
        "matmuls (or linears) of one input by 2 or 3 weights are one matmul by the concatenated weights",
        tuple(
            _merge(kind, n, r)
            for kind in ("matmul", "linear")
            for n in (2, 3)
            for r in range(2, MAX_RANK + 1)
        ),
        _merge_example,
        prelude=CONSTANT_WEIGHT,  # so merged matmuls never merge again
    ),
    Rule(
        "stack-products-sharing-a-weight",
        "independent matmuls of one weight are one matmul of their stacked left operands, each its rows: "
        "the weight read once (a recurrent cell's input projections over its time steps)",
        (),
        _stacked_example,
        exact=False,  # one product over more rows: XLA may block its sums otherwise
        proposal=Proposal(stacked_products, _stacked_program),
    ),
]
