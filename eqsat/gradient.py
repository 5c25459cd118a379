"""Which program a differentiated ``eqsat.jit`` function differentiates.

eqsat chooses a program by what it costs to run forward; its backward pass is the one JAX derives, and
a program that runs faster forward can train slower (on XLA:CPU, a half-precision product whose
transposed operand has its batch dims leading leaves the fast kernels in the backward pass).
``differentiable`` gives the optimized program a JVP rule, called only where the function is
differentiated (``jax.grad``, ``jax.vjp``, ``jax.jvp``), that differentiates what the mode names:

- ``measure`` (the default): whichever of the function as written and the optimized program runs a
  training step (the function, then the gradient of its float outputs' sum) faster on this device,
  both timed once per signature and device at its first differentiation, the function as written
  kept unless the optimized program is faster by a margin noise does not cross (``report.note``
  gives the times; the verdict is recorded and reused by later runs, ``eqsat.speed.Verdicts``);
- ``optimized``: the optimized program, as JAX would without the rule;
- ``input``: the function as written.

A function that defines derivatives of its own (``jax.custom_jvp``, ``jax.custom_vjp``: a
straight-through estimator, a clipped gradient), which the programs inline, is differentiated as
written whatever the mode.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax

from eqsat.api import OptimizeResult
from eqsat.ir import Program
from eqsat.lowering import lower
from eqsat.speed import (
    Verdict,
    arguments,
    compiled_bytes,
    judged,
    one_call,
    sampled,
    too_large,
    training_steps,
)
from eqsat.types import FLOAT_DTYPES
from eqsat.xla_flags import compiling_with

GRADIENT_MODES = ("measure", "optimized", "input")
QUICK_S = 0.1  # training steps quicker than this are timed in interleaved samples
CLOSE = 1.5  # slower ones whose first runs are further apart than this are not run again

Flat = Callable[..., tuple[Any, ...]]


def differentiable(result: OptimizeResult, mode: str, written: Flat, own: Sequence[str] = ()) -> Flat:
    """``result``'s program lowered, whose derivative is that of the program ``mode`` names: the
    optimized one, or ``written`` (the function as written, of the same arguments), or the faster.
    ``own``: the derivatives of its own that ``written`` defines and the programs inlined; then
    ``written`` is differentiated whatever the mode. Where the optimized program is the input,
    ``written`` itself."""
    if mode not in GRADIENT_MODES:
        raise ValueError(f"unknown gradient mode {mode!r} ({', '.join(GRADIENT_MODES)})")
    if own:
        mode = "input"
        why = f"differentiated as written: it defines derivatives of its own ({', '.join(own)})"
        result.report.note = "; ".join(filter(None, [result.report.note, why]))
    if result.program is result.original:
        # nothing cheaper was found: ``written`` runs, forward and backward (as jax.jit would run the
        # function: eqsat's lowering of the same program may compile otherwise)
        return written
    run = lower(result.program)
    if mode == "optimized":
        return run
    chosen: list[Flat] = []
    values = arguments(result.original)
    used = _used(result.original) | _used(result.program)
    # only the arguments a program reads enter the rule, so that jax.jit still prunes the others
    kept = [
        i
        for i, (v, w) in enumerate(zip(values, arguments(result.program), strict=True))
        if {id(v), id(w)} & used
    ]
    unread = {
        i: jax.ShapeDtypeStruct(v.type.shape, v.type.dtype) for i, v in enumerate(values) if i not in kept
    }

    def full(args: tuple[Any, ...]) -> list[Any]:
        given = dict(zip(kept, args, strict=True))
        return [
            given[i] if i in given else jax.numpy.zeros(unread[i].shape, unread[i].dtype)
            for i in range(len(values))
        ]

    @jax.custom_jvp
    def fn(*args: Any) -> tuple[Any, ...]:
        return run(*full(args))

    @fn.defjvp
    def differentiated(primals: tuple[Any, ...], tangents: tuple[Any, ...]) -> tuple[Any, Any]:
        if not chosen:
            chosen.append(written if mode == "input" else _faster(result, run, written))
        return jax.jvp(lambda *a: chosen[0](*full(a)), primals, tangents)

    return lambda *args: fn(*(args[i] for i in kept))


def _used(program: Program) -> set[int]:
    """The ids of the values ``program``'s outputs depend on directly or through its ops."""
    return {id(v) for op in program.live_ops() for v in op.inputs} | {id(v) for v in program.outputs}


def _faster(result: OptimizeResult, optimized: Flat, written: Flat) -> Flat:
    """Whichever of ``optimized`` and ``written`` runs a training step faster on this device: the
    optimized program only where it was measured faster by a margin noise does not cross (the verdict
    recorded per device and reused, ``eqsat.speed.Verdicts``), or where the step as written needs far
    more memory (untimed)."""
    original = result.original
    values = arguments(original)
    if not any(v.type.dtype in FLOAT_DTYPES for v in values) or not any(
        v.type.dtype in FLOAT_DTYPES for v in original.outputs
    ):
        return optimized  # no float input or output: nothing a training step would differentiate
    t = time.perf_counter()
    in_force = result.options.compiler_options if result.options else ()
    try:  # a step that cannot be built or run here leaves JAX's derivative, as without eqsat's rule
        with compiling_with(in_force):  # timed, and its verdict kept, under the program's compiler options
            outcome = judged(
                "gradient",
                [str(original), str(result.program)],
                lambda: _timed(*training_steps([written, optimized], values)),
            )
    except Exception as e:
        why = f"no training step could be timed ({type(e).__name__}: {e})"
        why, kept = f"{why}: the optimized program is differentiated", True
    else:
        if outcome is None:
            why = "no training step timing recorded (reproducible): the optimized program is differentiated"
            kept = True
        elif isinstance(outcome, Verdict):
            why, kept = _said(outcome), outcome.replaced
        else:
            why, kept = outcome, True
    report = result.report
    report.timings["measure_gradient"] = time.perf_counter() - t
    report.note = "; ".join(filter(None, [report.note, why]))
    return optimized if kept else written


def _said(verdict: Verdict) -> str:
    chosen = "optimized program" if verdict.replaced else "function as written"
    return f"a training step {verdict}: the {chosen} is differentiated"


def _timed(steps: list[Any], args: list[Any]) -> Verdict | str:
    """The verdict of timing both steps, or why the second (optimized) one is taken untimed: a step as
    written that needs far more memory than the optimized one (``eqsat.speed.too_large``) is not run
    (it could exhaust memory, and moving its tensors dominates its time). Others are run
    once each (a warm-up): steps quicker than ``QUICK_S`` are then timed in interleaved samples,
    slower ones further apart than ``CLOSE`` are judged by that run, and the rest by it and one more."""
    need = [compiled_bytes(s) for s in steps]
    why = too_large(
        max(need), need[1], f"a training step as written ({need[0] / 2**20:.0f} MiB) or optimized"
    )
    if why:
        return f"{why}: the optimized program is differentiated untimed"
    thunks = [functools.partial(s, *args) for s in steps]
    once = [one_call(thunk) for thunk in thunks]
    if max(once) < QUICK_S:
        before, after = sampled(thunks, samples=5)
    elif max(once) > CLOSE * min(once):
        before, after = [once[0]], [once[1]]
    else:
        before, after = ([t, one_call(thunk)] for t, thunk in zip(once, thunks, strict=True))
    return Verdict.of(before, after)
