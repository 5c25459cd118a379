"""Every op has one complete home (``eqsat.ops``): its definition holds each facet the rest of eqsat
derives from it, and every framework spelling maps to exactly one place."""

from __future__ import annotations

import functools
import inspect
import re
from collections import Counter

import jax
import numpy as np
import pytest

import eqsat
from eqsat import lowering
from eqsat.egraph import schema
from eqsat.frontend import jax as jax_frontend
from eqsat.frontend import pir
from eqsat.frontend.paddle import reader
from eqsat.lowering import LOWERINGS
from eqsat.numerics import random_array
from eqsat.ops import OPS, OpDef
from eqsat.shapes import ShapeRule


@pytest.mark.parametrize("op", OPS.values(), ids=list(OPS))
def test_every_op_is_complete(op: OpDef):
    assert op.doc, "a one-line meaning"
    assert isinstance(op.shape, ShapeRule) and op.shape.egglog  # the analysis comes from the same rule
    assert f"({op.ctor} " in schema() and f'"shape-{op.name}-0"' in schema()
    assert callable(op.flops) and callable(op.bytes)
    assert callable(op.lower) and LOWERINGS[op.name] is op.lower
    keywords = inspect.signature(op.lower).parameters.values()
    if op.attrs and not any(p.kind is p.VAR_KEYWORD for p in keywords):
        taken = {p.name for p in keywords if p.kind is p.KEYWORD_ONLY}
        assert taken == {a.name for a in op.attrs}, "the lowering takes exactly the op's attributes"


def test_every_spelling_maps_to_one_place():
    jax_spellings = Counter(p for op in OPS.values() for p in op.jax)
    paddle_spellings = Counter(p for op in OPS.values() for p in op.paddle)
    assert [p for p, n in (jax_spellings + paddle_spellings).items() if n > 1] == []
    assert not set(jax_spellings) & set(jax_frontend._HANDLERS), "a primitive with a handler and a spelling"
    handled = {name for name, handler in pir.HANDLERS.items() if handler is not reader._spelled}
    assert not set(paddle_spellings) & handled, "a Paddle op with a handler and a spelling"
    assert set(paddle_spellings) <= set(pir.HANDLERS)


def test_a_paddle_op_claimed_twice_is_an_error_where_the_tables_are_built(monkeypatch):
    """A second handler for a Paddle op, a canonical op's spelling that a handler claims, or a second
    meaning: each stops the import that builds the tables, instead of one silently shadowing the other."""
    monkeypatch.setattr(reader, "HANDLERS", dict(pir.HANDLERS))
    with pytest.raises(ValueError, match=r"pd\.matmul is claimed twice"):
        reader.handles("pd.matmul")(lambda r, line: [])
    spelled = next(name for op in OPS.values() for name in op.paddle)
    monkeypatch.setattr(reader, "HANDLERS", {spelled: lambda r, line: []})
    with pytest.raises(ValueError, match=re.escape(f"{spelled} is claimed twice")):
        reader.claim_spellings()
    with pytest.raises(ValueError, match=r"the meaning of pd_op\.conv2d is given twice"):
        reader.meaning("pd_op.conv2d", lambda x, w, **attrs: x)


_PIR_DTYPES = {"bool": "b", "int32": "i32", "float32": "f32"}


def _pir_type(t: eqsat.TensorType) -> str:
    return f"pd.tensor<{'x'.join(map(str, t.shape))}x{_PIR_DTYPES[t.dtype]}>"


@pytest.mark.parametrize(
    "spelling,op", [(p, op) for op in OPS.values() for p in op.paddle], ids=lambda x: getattr(x, "name", x)
)
def test_a_paddle_spelling_loads_as_its_op(spelling: str, op: OpDef):
    """``pd_op.sin`` and the like are the canonical op, not opaque (each is also checked against Paddle
    itself in test_paddle_conformance)."""
    floats = op.check is None or op.check([eqsat.TensorType((1,), "float32")] * op.arity, {}) is None
    arg = eqsat.TensorType((2, 3), "float32" if floats else "int32")
    out = _pir_type(op.infer([arg] * op.arity, {}))
    lines = [
        f' (%{i}) = "pd_op.data" () {{name:x{i},dtype:{arg.dtype}}} : () -> {_pir_type(arg)}'
        for i in range(op.arity)
    ]
    operands, types = ", ".join(f"%{i}" for i in range(op.arity)), ", ".join([_pir_type(arg)] * op.arity)
    name = spelling.replace("pd.", "pd_op.")
    lines.append(f' (%9) = "{name}" ({operands}) {{}} : ({types}) -> {out}')
    lines.append(f' () = "pd_op.fetch" (%9) {{name:out}} : ({out}) -> {out}')
    program = eqsat.parse_pir("{\n" + "\n".join(lines) + "\n}")
    assert [o.name for o in program.live_ops()] == [op.name]


def _stacked_norms(layers: int, bound_scale: bool) -> eqsat.Program:
    """``layers`` layer norms of one signature, one after the other."""
    b = eqsat.Builder()
    y = b.input("x", (4, 8))
    scale = b.param("scale", (8,), data=np.full(8, 2.0) if bound_scale else None)
    bias = b.param("bias", (8,))
    for _ in range(layers):
        y = b.layer_norm(y, scale, bias, epsilon=1e-5)
    return b.build(y)


@pytest.mark.parametrize("bound_scale", [False, True])
def test_a_repeated_fused_op_is_traced_once_unless_an_operand_is_known(monkeypatch, bound_scale):
    """A model's layers trace each fused op once (a nested jit, inlined in MLIR); an operand known at
    trace time leaves each op to its lowering, which may specialize on it. The results are the same."""
    program = _stacked_norms(3, bound_scale)
    norm, traced = LOWERINGS["layer_norm"], []
    monkeypatch.setitem(LOWERINGS, "layer_norm", lambda *a, **k: traced.append(1) or norm(*a, **k))
    monkeypatch.setattr(lowering, "_staged", functools.lru_cache(lowering._staged.__wrapped__))
    rng = np.random.default_rng(0)
    args = [rng.normal(size=(4, 8)).astype(np.float32)] + [rng.normal(size=8).astype(np.float32)] * (
        1 if bound_scale else 2
    )
    jaxpr = jax.make_jaxpr(lowering.lower(program))(*args)
    assert len(traced) == (3 if bound_scale else 1)
    assert sum(e.primitive.name in ("jit", "pjit") for e in jaxpr.eqns) == (0 if bound_scale else 3)
    (got,) = jax.jit(lowering.lower(program))(*args)
    (want,) = lowering.reference(program)(*args)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_repeated_fused_op_with_known_scalar_operands_is_traced_once(monkeypatch):
    """Attention layers whose mask is an all-true constant (BERT's): the constant is part of the
    signature, so the layers trace attention once, and its lowering still sees the mask known (and
    drops it). A layer with another constant is traced apart."""
    b = eqsat.Builder()
    x = b.input("x", (2, 4, 8))
    bias = b.input("bias", (1, 1, 4))
    for keep in (True, True, True, False):
        x = b.attention(x, x, x, bias, b.full(shape=(), value=keep, dtype="bool"), scale=0.5, fill=-1e4)
    program = b.build(x)
    attention, traced = LOWERINGS["attention"], []
    monkeypatch.setitem(LOWERINGS, "attention", lambda *a, **k: traced.append(a[4]) or attention(*a, **k))
    monkeypatch.setattr(lowering, "_staged", functools.lru_cache(lowering._staged.__wrapped__))
    rng = np.random.default_rng(0)
    args = [rng.normal(size=(2, 4, 8)).astype(np.float32), rng.normal(size=(1, 1, 4)).astype(np.float32)]
    jax.make_jaxpr(lowering.lower(program))(*args)
    assert [bool(mask) for mask in traced] == [True, False]
    assert all(isinstance(mask, np.ndarray) for mask in traced)
    (got,) = jax.jit(lowering.lower(program))(*args)
    (want,) = lowering.reference(program)(*args)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _product_of_transposes(dtype: str, batch_y: int, also_added: bool) -> eqsat.Program:
    """``transpose(q) @ transpose(k)``, as einsum-written attention scores become (q, k: B, S, H, D)."""
    b = eqsat.Builder()
    q = b.input("q", (2, 5, 3, 4), dtype)
    k = b.input("k", (batch_y, 6, 3, 4), dtype)
    qt = b.transpose(q, perm=(0, 2, 1, 3))
    kt = b.transpose(k, perm=(0, 2, 3, 1))
    scores = b.matmul(qt, kt, dtype=dtype)
    return b.build(scores, b.add(qt, qt)) if also_added else b.build(scores)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8"])
@pytest.mark.parametrize(("batch_y", "also_added", "made"), [(2, False, 0), (1, False, 2), (2, True, 1)])
def test_a_product_reads_its_transposed_operands_in_place(dtype, batch_y, also_added, made):
    """A transpose only products read is folded into their dimension numbers (none made); one whose
    batch dims broadcast, or that another op reads, is made. The results are the program's."""
    program = _product_of_transposes("int32" if dtype == "int8" else dtype, batch_y, also_added)
    rng = np.random.default_rng(0)
    args = [random_array(v.type, rng) for v in program.inputs]
    jaxpr = jax.make_jaxpr(lowering.lower(program))(*args)
    written = [e for e in jaxpr.eqns if e.primitive.name == "transpose" and e.invars[0] in jaxpr.jaxpr.invars]
    assert len(written) == made
    got = jax.jit(lowering.lower(program))(*args)
    for g, want in zip(got, lowering.reference(program)(*args), strict=True):
        np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(want, np.float64), rtol=1e-2)
