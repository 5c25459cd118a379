"""The ``Measured`` cost model: times ops on the current JAX backend, caches the timings on disk,
and interpolates for shapes it has not timed.

A timing is the median of a few runs of the op alone, jitted, on random inputs. Shapes not timed (over
the measurement budget, or too big to time quickly) get the roofline estimate scaled by the median
ratio measured/roofline of the same op — the roofline's shape dependence, calibrated by measurement.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from eqsat.config import write_atomically
from eqsat.devices import device_file
from eqsat.ir import Program, TensorType
from eqsat.ops import OPAQUE

from .models import CostModel, Roofline, phases


def default_cache() -> Path:
    """A file in ``eqsat.config.cache_dir`` per backend and device kind."""
    return device_file("measured")


class Measured(CostModel):
    """Seconds measured on this backend. ``budget``: how many new ops one model instance may time;
    ops whose roofline estimate exceeds ``max_estimate_s`` are interpolated, never run."""

    name = "measured"

    def __init__(
        self,
        cache: str | Path | None = None,
        *,
        repeats: int = 5,
        budget: int = 200,
        max_estimate_s: float = 0.2,
    ) -> None:
        self.path = Path(cache) if cache else default_cache()
        self.repeats, self.budget, self.max_estimate_s = repeats, budget, max_estimate_s
        self.roofline = Roofline()
        self.table: dict[str, float] = json.loads(self.path.read_text()) if self.path.exists() else {}
        self.measured_now = 0

    def fingerprint(self) -> str | None:
        """The timings known when asked (a table that grows misses once more, then hits)."""
        return json.dumps([self.roofline.fingerprint(), sorted(self.table.items())])

    @staticmethod
    def key(op: str, attrs: dict[str, Any], inputs: Sequence[TensorType], output: TensorType) -> str:
        return json.dumps([op, sorted(attrs.items()), [str(t) for t in inputs], str(output)])

    def op_cost(
        self, op: str, attrs: dict[str, Any], inputs: Sequence[TensorType], output: TensorType
    ) -> float:
        if op == OPAQUE or not phases(op, attrs, inputs, output):
            return self.roofline.op_cost(op, attrs, inputs, output)  # opaque or free (a view)
        key = self.key(op, attrs, inputs, output)
        if key not in self.table:
            estimate = self.roofline.op_cost(op, attrs, inputs, output)
            if self.measured_now >= self.budget or estimate > self.max_estimate_s:
                return estimate * self._calibration(op)
            self.table[key] = self._time(op, attrs, inputs)
            self.measured_now += 1
            self._save()
        return self.table[key]

    def _time(self, op: str, attrs: dict[str, Any], inputs: Sequence[TensorType]) -> float:
        from eqsat.lowering import lower
        from eqsat.numerics import random_array

        program = Program()
        values = [program.add_input(f"x{i}", t) for i, t in enumerate(inputs)]
        program.add_output(program.add_op(op, values, **attrs))
        rng = np.random.default_rng(0)
        args = [random_array(t, rng) for t in inputs]
        # compiled ahead of time: called inside a trace (eqsat.jit's), it still runs now
        fn = jax.jit(lower(program)).lower(*args).compile()
        jax.block_until_ready(fn(*args))
        times = []
        for _ in range(self.repeats):
            t0 = time.perf_counter()
            jax.block_until_ready(fn(*args))
            times.append(time.perf_counter() - t0)
        return statistics.median(times)

    def _calibration(self, op: str) -> float:
        """Median measured/roofline ratio over the timings of ``op`` so far (1 if none)."""
        ratios = []
        for key, seconds in self.table.items():
            name, attrs, ins, out = json.loads(key)
            if name == op:
                types = [_parse_type(t) for t in ins]
                ratios.append(seconds / self.roofline.op_cost(name, dict(attrs), types, _parse_type(out)))
        return statistics.median(ratios) if ratios else 1.0

    def _save(self) -> None:
        write_atomically(self.path, json.dumps(self.table, indent=0))


def _parse_type(text: str) -> TensorType:
    from eqsat.text import parse_tensor_type

    return TensorType(*parse_tensor_type(text, 0))
