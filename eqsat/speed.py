"""Measured choice between programs: each compiled and timed on this device, on the same random inputs.

``optimize(..., measure=True)`` uses it where a cost model's predicted gain is within the model's
measured error (``CostModel.error``): the faster program, as timed, is kept. A differentiated
``eqsat.jit`` function times training steps (``training_steps``, see ``eqsat.gradient``).
``eqsat.calibrate`` times its kernels with ``per_call``.
"""

from __future__ import annotations

import functools
import math
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from eqsat.ir import Program, Value
from eqsat.numerics import random_array
from eqsat.types import FLOAT_DTYPES

SAMPLE_S = 2e-3  # a sample is as many calls as take about this long


def per_call(
    thunks: Sequence[Callable[[], Any]],
    samples: int = 7,
    statistic: Callable[[list[float]], float] = min,
    sample_s: float = SAMPLE_S,
) -> list[float]:
    """Seconds per call of each thunk: ``statistic`` of ``samples`` interleaved samples, after a
    warm-up call each; a sample is as many calls as take about ``sample_s``."""
    calls = []
    for thunk in thunks:
        jax.block_until_ready(thunk())
        t = time.perf_counter()
        jax.block_until_ready(thunk())
        calls.append(max(1, min(1000, math.ceil(sample_s / max(time.perf_counter() - t, 1e-9)))))
    times: list[list[float]] = [[] for _ in thunks]
    for _ in range(samples):
        for i, thunk in enumerate(thunks):
            t = time.perf_counter()
            for _ in range(calls[i]):
                out = thunk()
            jax.block_until_ready(out)
            times[i].append((time.perf_counter() - t) / calls[i])
    return [statistic(t) for t in times]


def arguments(program: Program) -> list[Value]:
    """What the lowered ``program`` takes: its inputs, then its unbound parameters."""
    return [*program.inputs, *(p for p in program.params if p.name not in program.param_values)]


def seconds(programs: Sequence[Program], samples: int = 7) -> list[float]:
    """Seconds per call of each program (programs of one signature: the first's arguments), compiled,
    on the same random inputs: the fastest of interleaved samples."""
    from eqsat.lowering import lower

    args = _random_arguments(arguments(programs[0]))
    compiled = [jax.jit(lower(p)).lower(*args).compile() for p in programs]
    return per_call([functools.partial(run, *args) for run in compiled], samples)


def training_steps(fns: Sequence[Callable[..., Any]], values: Sequence[Value]) -> tuple[list[Any], list[Any]]:
    """Each function of ``values`` (returning a tuple of arrays) as a compiled training step, the
    function then the gradient of its float outputs' sum (in float32) with respect to its float
    arguments; and random arguments for them."""
    wrt = tuple(i for i, v in enumerate(values) if v.type.dtype in FLOAT_DTYPES)

    def step(fn: Callable[..., Any]) -> Callable[..., Any]:
        def loss(*args: Any) -> Any:
            outs = [o for o in fn(*args) if jax.numpy.issubdtype(o.dtype, jax.numpy.floating)]
            return sum(jax.numpy.sum(o.astype(jax.numpy.float32)) for o in outs)

        return jax.value_and_grad(loss, argnums=wrt)

    args = _random_arguments(values)
    return [jax.jit(step(fn)).lower(*args).compile() for fn in fns], args


def _random_arguments(values: Sequence[Value]) -> list[Any]:
    rng = np.random.default_rng(0)
    return [random_array(v.type, rng) for v in values]


def median_seconds(fn: Callable[..., Any], *args: Any, samples: int = 5) -> float:
    """Median seconds per call of jitted ``fn(*args)``."""
    run = jax.jit(fn)
    return per_call([lambda: run(*args)], samples, statistics.median, 5e-3)[0]
