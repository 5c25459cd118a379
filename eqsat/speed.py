"""Measured choice between programs: each compiled and timed on this device, on the same random inputs.

``optimize(..., measure=True)`` uses it where a cost model's predicted gain is within the model's
measured error (``CostModel.error``): the faster program, as timed, is kept. ``eqsat.calibrate``
times its kernels with ``per_call``.
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

from eqsat.ir import Program
from eqsat.numerics import random_array

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


def seconds(programs: Sequence[Program], samples: int = 7) -> list[float]:
    """Seconds per call of each program (programs of one signature: the first's inputs and unbound
    parameters), compiled, on the same random inputs: the fastest of interleaved samples."""
    from eqsat.lowering import lower

    first = programs[0]
    free = [p for p in first.params if p.name not in first.param_values]
    rng = np.random.default_rng(0)
    args = [random_array(v.type, rng) for v in [*first.inputs, *free]]
    compiled = [jax.jit(lower(p)).lower(*args).compile() for p in programs]
    return per_call([functools.partial(run, *args) for run in compiled], samples)


def median_seconds(fn: Callable[..., Any], *args: Any, samples: int = 5) -> float:
    """Median seconds per call of jitted ``fn(*args)``."""
    run = jax.jit(fn)
    return per_call([lambda: run(*args)], samples, statistics.median, 5e-3)[0]
