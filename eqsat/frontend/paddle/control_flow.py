"""``pd_op.if`` and ``pd_op.while``: each region read as a Program of the values it reads from
around it, the op run as ``lax.cond`` / ``lax.while_loop``."""

from __future__ import annotations

from eqsat.control_flow import Cond, Loop
from eqsat.errors import ParseError
from eqsat.ir import Op, Value
from eqsat.ops import OPAQUE
from eqsat.text import (
    Line,
)

from .reader import (
    _IGNORED_ATTRS,
    Results,
    _arity,
    _read,
    _Reader,
    _Scope,
    handles,
)


@handles("pd.if")
def _if(r: _Reader, line: Line) -> Results:
    """``pd_op.if (cond) -> types {then} else {other}``: an op that runs ``lax.cond`` over its two
    branches, each read as a Program of the values it reads from the program around it (its operands
    after the condition, the first branch's then the second's). Rules do not cross it; each branch is
    optimized on its own."""
    _arity(line, 1)
    if len(line.regions) != 2:
        raise ParseError(
            f"expected two regions (then, else), got {len(line.regions)}", line=line.number, op=line.name
        )
    cond = r.tensor(line, line.operands[0])
    if cond.type.size != 1 or cond.type.dtype != "bool":
        raise ParseError(f"the condition must be one bool, got {cond.type}", line=line.number, op=line.name)
    branches, captured = [], []
    for region in line.regions:
        inner = r.region()
        _read(inner, region)
        branches.append(inner.program)
        assert isinstance(inner.env, _Scope)
        captured += inner.env.captured
    types = [[v.type for v in b.outputs] for b in branches]
    if types[0] != types[1] or len(types[0]) != len(line.results):
        raise ParseError(f"the branches yield {types[0]} and {types[1]}", line=line.number, op=line.name)
    outs = tuple(Value(t) for t in types[0])
    attrs = {"op": line.name, **{k: v for k, v in line.attrs.items() if k not in _IGNORED_ATTRS}}
    r.program.ops.append(Op(OPAQUE, (cond, *captured), attrs, outs, payload=Cond((branches[0], branches[1]))))
    return list(outs)


@handles("pd.while")
def _while(r: _Reader, line: Line) -> Results:
    """``pd_op.while (cond, values...) { ^args ... yield (next cond, next values) }``: an op that runs
    ``lax.while_loop``; its body is read as a Program of the loop values (its block arguments) and of
    the values it reads from around it (the op's operands after the loop values)."""
    cond, *values = (r.tensor(line, o) for o in line.operands)
    (region,), (args,) = line.regions, line.region_args
    if len(args) != len(values) or len(line.results) != len(values):
        raise ParseError(
            f"{len(values)} loop values, {len(args)} block arguments, {len(line.results)} results",
            line=line.number,
            op=line.name,
        )
    inner = r.region()
    for name, value in zip(args, values, strict=True):
        inner.env[name] = inner.program.add_input(name, value.type)
    _read(inner, region)
    assert isinstance(inner.env, _Scope)
    yielded = [v.type for v in inner.program.outputs]
    if yielded != [cond.type, *(v.type for v in values)]:
        raise ParseError(
            f"the body yields {yielded}, not the condition and the loop values",
            line=line.number,
            op=line.name,
        )
    outs = tuple(Value(v.type) for v in values)
    attrs = {"op": line.name, **{k: v for k, v in line.attrs.items() if k not in _IGNORED_ATTRS}}
    payload = Loop(inner.program, len(values))
    r.program.ops.append(Op(OPAQUE, (cond, *values, *inner.env.captured), attrs, outs, payload=payload))
    return list(outs)


@handles("cf.yield")
def _yield(r: _Reader, line: Line) -> list[Value]:
    """``cf.yield``: a region's results."""
    for name in line.operands:
        r.program.add_output(r.tensor(line, name))
    return []
