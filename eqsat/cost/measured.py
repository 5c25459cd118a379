"""The ``Measured`` cost model: times ops on this device as they are asked about, into the kernel table
(``KernelTimes``, the one ``Roofline()`` reads), and interpolates for shapes it has not timed.

A timing is ``KernelTimes.time``'s: the op compiled alone, the fastest of a few samples on random
inputs. Shapes not timed (over the budget, or too big to time quickly) get the roofline estimate
scaled by the median ratio measured/roofline of the same op's timings — the roofline's shape
dependence, calibrated by measurement.
"""

from __future__ import annotations

import copy
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eqsat.config import config
from eqsat.ir import TensorType
from eqsat.ops import OPAQUE

from .kernels import Call, KernelTimes
from .models import CostModel, Roofline, phases, this_device


class Measured(CostModel):
    """Seconds measured on this device, on any backend: every op that runs a kernel is timed alone the
    first time it is asked about (``op_cost``, during extraction), into the table at ``path`` (default:
    ``KernelTimes``' table of this device). ``budget``: how many new ops one model instance may time;
    ops whose roofline estimate exceeds ``max_estimate_s`` are interpolated, never run. Nothing is
    timed before extraction (``timed_ops`` is empty)."""

    name = "measured"

    def __init__(
        self,
        path: str | Path | None = None,
        *,
        repeats: int = 5,
        budget: int = 200,
        max_estimate_s: float = 0.2,
    ) -> None:
        self.timings = KernelTimes(path, repeats)
        self.budget, self.max_estimate_s = budget, max_estimate_s
        self.roofline = Roofline(this_device())  # the roofline alone
        self.measured_now = 0

    def under_options_in_force(self) -> CostModel | None:
        """The same model over the table of the options in force (its own budget); None where its
        table was given (``KernelTimes.for_options_in_force``)."""
        timings = self.timings.for_options_in_force()
        if timings is None:
            return None
        model = copy.copy(self)
        model.timings, model.measured_now = timings, 0
        return model

    def fingerprint(self) -> str | None:
        """The timings known when asked (a table that grows misses once more, then hits)."""
        return f"{self.roofline.fingerprint()} {self.timings.fingerprint()}"

    def op_cost(
        self, op: str, attrs: dict[str, Any], inputs: Sequence[TensorType], output: TensorType
    ) -> float:
        return self.call_cost(Call(op, attrs, tuple(inputs), output))

    def call_cost(self, call: Call) -> float:
        """The timing of ``call`` (its weights known at compile time where ``call.constant`` says so,
        as the roofline times them), timed now if new, within the budget."""
        op, attrs, inputs, output = call.op, call.attrs, call.inputs, call.output
        if op == OPAQUE or not phases(op, attrs, inputs, output):
            return self.roofline.op_cost(op, attrs, inputs, output)  # opaque or free (a view)
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
        timed = self.timings.of(op)
        ratios = [s / self.roofline.op_cost(c.op, c.attrs, c.inputs, c.output) for c, s in timed]
        return statistics.median(ratios) if ratios else 1.0
