"""Program -> pure JAX function. Each op's lowering is one function registered under the op's name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from eqsat.errors import UnsupportedError
from eqsat.ir import Op, Program
from eqsat.ops import OPAQUE

Lowering = Callable[..., Any]
LOWERINGS: dict[str, Lowering] = {}
OPAQUE_LOWERINGS: dict[str, Lowering] = {}


def register(name: str) -> Callable[[Lowering], Lowering]:
    """Register the JAX lowering of canonical op ``name``: ``fn(*inputs, **attrs) -> array``."""

    def deco(fn: Lowering) -> Lowering:
        LOWERINGS[name] = fn
        return fn

    return deco


def register_opaque(op_name: str, fn: Lowering) -> None:
    """Teach eqsat to run an op it does not optimize (e.g. ``pd.my_op``): ``fn(*inputs, **attrs)``.

    ``fn`` returns one array or a tuple of arrays (one per result).
    """
    OPAQUE_LOWERINGS[op_name] = fn


def opaque_lowering(name: str) -> Lowering | None:
    """The registered JAX meaning of opaque op ``name`` (Paddle's included), or None."""
    from . import paddle  # noqa: F401  (register Paddle's ops)

    return OPAQUE_LOWERINGS.get(name)


def _run_opaque(op: Op, args: list[Any]) -> tuple[Any, ...]:
    if op.payload is not None:
        outs = op.payload(*args)
    else:
        name = str(op.attrs.get("op", ""))
        fn = OPAQUE_LOWERINGS.get(name)
        if fn is None:
            raise UnsupportedError(
                f"opaque op {name!r} has no JAX implementation; register one with "
                f"eqsat.lowering.register_opaque({name!r}, fn)"
            )
        attrs = {k: v for k, v in op.attrs.items() if k != "op"}
        outs = fn(*args, **attrs)
    return tuple(outs) if isinstance(outs, tuple | list) else (outs,)


def lower(program: Program) -> Callable[..., tuple[jax.Array, ...]]:
    """A pure function ``fn(*inputs) -> tuple(outputs)``; parameters are bound from ``param_values``.

    Parameters without a value become trailing arguments, in ``program.params`` order.
    """
    from . import attention, jax_ops, paddle  # noqa: F401  (register the lowerings)

    ops = program.live_ops()
    bound = {
        id(p): np.asarray(program.param_values[p.name])
        for p in program.params
        if p.name in program.param_values
    }
    free = [p for p in program.params if id(p) not in bound]

    def fn(*args: Any) -> tuple[jax.Array, ...]:
        expected = len(program.inputs) + len(free)
        if len(args) != expected:
            raise TypeError(f"expected {expected} arguments (inputs then unbound params), got {len(args)}")
        env: dict[int, Any] = dict(bound)
        env.update({id(v): a for v, a in zip([*program.inputs, *free], args, strict=True)})
        for op in ops:
            ins = [env[id(v)] for v in op.inputs]
            outs = _run_opaque(op, ins) if op.name == OPAQUE else (LOWERINGS[op.name](*ins, **op.attrs),)
            env.update({id(v): o for v, o in zip(op.outputs, outs, strict=True)})
        return tuple(env[id(v)] for v in program.outputs)

    return fn
