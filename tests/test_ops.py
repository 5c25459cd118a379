"""Every op has one complete home (``eqsat.ops``): its definition holds each facet the rest of eqsat
derives from it, and every framework spelling maps to exactly one place."""

from __future__ import annotations

import inspect
import re
from collections import Counter

import pytest

import eqsat
from eqsat.egraph import schema
from eqsat.frontend import jax as jax_frontend
from eqsat.frontend import pir
from eqsat.frontend.paddle import reader
from eqsat.lowering import LOWERINGS
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
