"""Program -> pure JAX function: each canonical op runs as the lowering its definition holds
(``eqsat.ops``); an opaque op as its JAX primitive or the meaning registered for its name
(``eqsat.ops.opaque``; Paddle's beside their translations, in ``eqsat.frontend.paddle``)."""

from __future__ import annotations

import functools
import inspect
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from eqsat.control_flow import Cond, Loop
from eqsat.errors import UnsupportedError
from eqsat.ir import Op, Program, Value
from eqsat.ops import OPS, Lowering
from eqsat.ops.linear import matmul_of_transposed
from eqsat.ops.opaque import OPAQUE_LOWERINGS, RESULT_TYPES, meaning_attrs, register_opaque
from eqsat.types import FLOAT_DTYPES, OPAQUE

from .control_flow import run_cond, run_loop

__all__ = [
    "LOWERINGS",
    "OPAQUE_LOWERINGS",
    "check_runnable",
    "lower",
    "opaque_lowering",
    "reference",
    "register_opaque",
]

LOWERINGS: dict[str, Lowering] = {name: op.lower for name, op in OPS.items() if op.lower is not None}


def opaque_lowering(name: str) -> Lowering | None:
    """The registered JAX meaning of opaque op ``name`` (Paddle's included), or None."""
    return OPAQUE_LOWERINGS.get(name)


def _meaning(op: Op) -> Lowering:
    """What opaque ``op`` runs as: its payload (a JAX primitive, or control flow: ``.control_flow``) or
    its registered meaning, bound to its attributes; ``UnsupportedError`` naming it if it has neither."""
    if isinstance(op.payload, Cond):
        return functools.partial(run_cond, op.payload, lower)
    if isinstance(op.payload, Loop):
        return functools.partial(run_loop, op.payload, lower)
    if op.payload is not None:
        return op.payload
    name = str(op.attrs.get("op", ""))
    fn = opaque_lowering(name)
    if fn is None:
        raise UnsupportedError(
            f"opaque op {name!r} has no JAX implementation; register one with "
            f"eqsat.lowering.register_opaque({name!r}, fn)"
        )
    attrs = meaning_attrs(op.attrs)
    if RESULT_TYPES in inspect.signature(fn).parameters:
        attrs[RESULT_TYPES] = tuple(v.type for v in op.outputs)
    return functools.partial(fn, **attrs)


def _run_opaque(op: Op, args: list[Any]) -> tuple[Any, ...]:
    outs = _meaning(op)(*args)
    return tuple(outs) if isinstance(outs, tuple | list) else (outs,)


def check_runnable(program: Program) -> None:
    """Raise ``UnsupportedError`` naming the first op of ``program`` that has no JAX meaning."""
    for op in program.live_ops():
        if op.name == OPAQUE:
            _meaning(op)


def _run(op: Op, args: list[Any]) -> tuple[Any, ...]:
    return _run_opaque(op, args) if op.name == OPAQUE else (LOWERINGS[op.name](*args, **op.attrs),)


def _known(x: Any) -> bool:
    """``x`` is known at trace time (a bound parameter, a numpy constant), not traced."""
    return isinstance(x, np.ndarray | np.generic)


def _signature(op: Op) -> tuple[Any, ...]:
    return (op.name, tuple(op.attrs.items()), tuple(v.type for v in op.inputs))


def _run_repeats_staged(ops: list[Op]) -> Callable[[Op, list[Any]], tuple[Any, ...]]:
    """``_run``, except that a composite op (``OpDef.composite``) whose signature (name, attributes,
    operand types) occurs more than once is traced once and its jaxpr reused (a nested jit, inlined
    when lowered to MLIR): a model's layers trace each fused op once. Scalar operands known at trace
    time (an all-true mask, a zero bias) are part of the signature and reach the lowering as they are,
    which may specialize on them; larger known operands (bound weights) leave each op to its lowering.
    Simple ops are traced each time: staging them costs more than it saves (measured on BERT, an
    encoder, a ResNet)."""
    counts = Counter(_signature(op) for op in ops if op.name in OPS and OPS[op.name].composite)
    repeated = {s for s, n in counts.items() if n > 1}

    def run(op: Op, args: list[Any]) -> tuple[Any, ...]:
        if op.name == OPAQUE or any(_known(a) and np.size(a) > 1 for a in args):
            return _run(op, args)
        signature = _signature(op)
        if signature not in repeated:
            return _run(op, args)
        scalars = tuple((i, a.dtype, np.shape(a), a.tobytes()) for i, a in enumerate(args) if _known(a))
        try:
            staged = _staged(op.name, signature[1], scalars)
        except TypeError:  # an attribute that cannot be hashed
            return _run(op, args)
        return (staged(*(a for a in args if not _known(a))),)

    return run


@dataclass(frozen=True)
class _Transposed:
    """A transpose that only products read, not made: each folds ``perm`` into its dimension numbers."""

    source: Any
    perm: tuple[int, ...]


def _products_read_transposes(
    ops: list[Op], outputs: list[Value], run: Callable[[Op, list[Any]], tuple[Any, ...]]
) -> Callable[[Op, list[Any]], tuple[Any, ...]]:
    """``run``, except that a transpose of a traced value whose every reader is a ``matmul`` (and that is
    no output) is not made: the products read its operand in place, the permutation in their dimension
    numbers (``matmul_of_transposed``), as ``jnp.einsum`` writes a product of permuted operands. Same
    result; XLA:CPU runs a half-precision product of explicit transposes in float32, twice as slow."""
    readers: dict[int, list[Op]] = defaultdict(list)
    for op in ops:
        for v in op.inputs:
            readers[id(v)].append(op)
    outs = {id(v) for v in outputs}
    folded = {
        id(op)
        for op in ops
        if op.name == "transpose"
        and id(op.outputs[0]) not in outs
        and readers[id(op.outputs[0])]
        and all(r.name == "matmul" for r in readers[id(op.outputs[0])])
    }

    def folding(op: Op, args: list[Any]) -> tuple[Any, ...]:
        if id(op) in folded and not _known(args[0]):
            attrs: dict[str, Any] = op.attrs
            return (_Transposed(args[0], attrs["perm"]),)
        if not any(isinstance(a, _Transposed) for a in args):
            return run(op, args)
        x, y = args
        flags: dict[str, Any] = op.attrs
        out = matmul_of_transposed(
            x.source if isinstance(x, _Transposed) else x,
            y.source if isinstance(y, _Transposed) else y,
            perm_x=x.perm if isinstance(x, _Transposed) else None,
            perm_y=y.perm if isinstance(y, _Transposed) else None,
            **flags,
        )
        if out is not None:
            return (out,)
        made = [jax.numpy.transpose(a.source, a.perm) if isinstance(a, _Transposed) else a for a in args]
        return run(op, made)

    return folding


@functools.lru_cache(maxsize=4096)
def _staged(
    name: str,
    attrs: tuple[tuple[str, Any], ...],
    scalars: tuple[tuple[int, np.dtype, tuple[int, ...], bytes], ...] = (),
) -> Callable[..., Any]:
    """The lowering of op ``name``, jitted, over its traced operands; ``scalars``: its operands known
    at trace time, by position (dtype, shape and bytes of each)."""
    lowering = functools.partial(LOWERINGS[name], **dict(attrs))
    known = {i: np.frombuffer(data, dtype).reshape(shape) for i, dtype, shape, data in scalars}

    def with_known(*traced: Any) -> Any:
        rest = iter(traced)
        return lowering(*(known[i] if i in known else next(rest) for i in range(len(traced) + len(known))))

    return jax.jit(with_known, inline=True)


def _run_wide(op: Op, args: list[Any]) -> tuple[Any, ...]:
    """``op`` computed in float64 from its operands, its result rounded once to its declared dtype
    (opaque ops run as they are; a fused op's intermediate dtypes, ``scores_dtype``, stay as written)."""
    if op.name == OPAQUE:
        return _run(op, args)
    wide = [
        a.astype(np.float64) if np.dtype(a.dtype).name in FLOAT_DTYPES else a for a in map(np.asarray, args)
    ]
    attrs = {k: "float64" if k == "dtype" and v in FLOAT_DTYPES else v for k, v in op.attrs.items()}
    out = np.asarray(LOWERINGS[op.name](*wide, **attrs))
    with np.errstate(over="ignore"):  # beyond the dtype's range rounds to inf, as the program would
        return (out.astype(jax.numpy.dtype(op.outputs[0].type.dtype)),)


def reference(program: Program) -> Callable[..., tuple[np.ndarray, ...]]:
    """The program as it reads: like ``lower``, but op by op, each op computed in float64 and its
    result rounded to its declared dtype — the roundings the program writes and no others (no excess
    precision, no contraction into fused multiply-adds, sums accumulated in float64). The oracle that
    ``eqsat.verify`` and the fuzzers measure jax.jit and eqsat against; runs under ``jax_enable_x64``."""
    return _lowered(program, _run_wide, x64=True)


def lower(program: Program) -> Callable[..., tuple[jax.Array, ...]]:
    """A pure function ``fn(*inputs) -> tuple(outputs)``; parameters are bound from ``param_values``.

    Parameters without a value become trailing arguments, in ``program.params`` order.
    """
    ops = program.live_ops()
    return _lowered(program, _products_read_transposes(ops, program.outputs, _run_repeats_staged(ops)))


def _lowered(
    program: Program, run: Callable[[Op, list[Any]], tuple[Any, ...]], x64: bool = False
) -> Callable[..., tuple[Any, ...]]:
    ops = program.live_ops()
    bound = {
        id(p): np.asarray(program.param_values[p.name])
        for p in program.params
        if p.name in program.param_values
    }
    free = [p for p in program.params if id(p) not in bound]

    def fn(*args: Any) -> tuple[Any, ...]:
        expected = len(program.inputs) + len(free)
        if len(args) != expected:
            raise TypeError(f"expected {expected} arguments (inputs then unbound params), got {len(args)}")
        env: dict[int, Any] = dict(bound)
        env.update({id(v): a for v, a in zip([*program.inputs, *free], args, strict=True)})
        for op in ops:
            outs = run(op, [env[id(v)] for v in op.inputs])
            env.update({id(v): o for v, o in zip(op.outputs, outs, strict=True)})
        return tuple(env[id(v)] for v in program.outputs)

    if not x64:
        return fn

    def wide(*args: Any) -> tuple[Any, ...]:
        with jax.enable_x64(True):
            return fn(*args)

    return wide
