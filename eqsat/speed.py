"""Measured choice between programs: each compiled and timed on this device, on the same random inputs.

``optimize(..., measure=True)`` uses it where a cost model's predicted gain is within the model's
measured error (``CostModel.error``): the faster program, as timed, is kept.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence

import jax
import numpy as np

from eqsat.ir import Program
from eqsat.numerics import random_array

SAMPLE_S = 2e-3  # a sample is as many calls as take about this long


def seconds(programs: Sequence[Program], repeats: int = 7) -> list[float]:
    """Seconds per call of each program (programs of one signature: the first's inputs and unbound
    parameters), the fastest of ``repeats`` interleaved samples after a warm-up call each."""
    from eqsat.lowering import lower

    first = programs[0]
    free = [p for p in first.params if p.name not in first.param_values]
    rng = np.random.default_rng(0)
    args = [random_array(v.type, rng) for v in [*first.inputs, *free]]
    compiled = [jax.jit(lower(p)).lower(*args).compile() for p in programs]
    calls = []
    for run in compiled:
        jax.block_until_ready(run(*args))
        t = time.perf_counter()
        jax.block_until_ready(run(*args))
        calls.append(max(1, min(1000, math.ceil(SAMPLE_S / max(time.perf_counter() - t, 1e-9)))))
    best = [math.inf] * len(programs)
    for _ in range(repeats):
        for i, run in enumerate(compiled):
            t = time.perf_counter()
            for _ in range(calls[i]):
                out = run(*args)
            jax.block_until_ready(out)
            best[i] = min(best[i], (time.perf_counter() - t) / calls[i])
    return best
