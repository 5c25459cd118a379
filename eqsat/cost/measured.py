"""The ``Measured`` cost model: times ops on the current JAX backend, caches the timings on disk,
and interpolates for shapes it has not timed.

A timing is the median of a few runs of the op alone, jitted, on random inputs. Shapes not timed (over
the measurement budget, or too big to time quickly) get the roofline estimate scaled by the median
ratio measured/roofline of the same op — the roofline's shape dependence, calibrated by measurement.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eqsat.config import config
from eqsat.devices import device_file
from eqsat.ir import TensorType
from eqsat.ops import OPAQUE

from .kernels import Call, KernelTimes
from .models import CostModel, Roofline, phases, this_device


def default_cache() -> Path:
    """A file in ``eqsat.config.cache_dir`` per backend and device kind."""
    return device_file("measured", versioned=True)


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
        self.timings = KernelTimes(cache or default_cache(), repeats)
        self.budget, self.max_estimate_s = budget, max_estimate_s
        self.roofline = Roofline(this_device())  # the roofline alone
        self.measured_now = 0

    def fingerprint(self) -> str | None:
        """The timings known when asked (a table that grows misses once more, then hits)."""
        return f"{self.roofline.fingerprint()} {self.timings.fingerprint()}"

    def op_cost(
        self, op: str, attrs: dict[str, Any], inputs: Sequence[TensorType], output: TensorType
    ) -> float:
        if op == OPAQUE or not phases(op, attrs, inputs, output):
            return self.roofline.op_cost(op, attrs, inputs, output)  # opaque or free (a view)
        call = Call(op, attrs, tuple(inputs), output)
        seconds = self.timings.get(call)
        if seconds is None:
            estimate = self.roofline.op_cost(op, attrs, inputs, output)
            if self.measured_now >= self.budget or estimate > self.max_estimate_s or config.reproducible:
                return estimate * self._calibration(op)
            self.measured_now += self.timings.time([call], float("inf"))
            seconds = self.timings.get(call)
            assert seconds is not None
        return seconds

    def _calibration(self, op: str) -> float:
        """Median measured/roofline ratio over the timings of ``op`` so far (1 if none)."""
        ratios = []
        for key, seconds in self.timings.table.items():
            name, attrs, ins, out = json.loads(key)
            if name == op:
                types = [_parse_type(t) for t in ins]
                ratios.append(seconds / self.roofline.op_cost(name, dict(attrs), types, _parse_type(out)))
        return statistics.median(ratios) if ratios else 1.0


def _parse_type(text: str) -> TensorType:
    from eqsat.text import parse_tensor_type

    return TensorType(*parse_tensor_type(text, 0))
