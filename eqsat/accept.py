"""Whether an optimized program replaces the input: cheaper by the cost model beyond its resolution
(``MIN_GAIN``), and, where the model cannot be trusted to tell, measured faster on this device."""

from __future__ import annotations

import math
from dataclasses import replace

from eqsat.cost import CostModel
from eqsat.ir import Program
from eqsat.ops import OPS
from eqsat.report import Outcome
from eqsat.saturate import Limits
from eqsat.speed import Verdict, compared

# A predicted gain below this fraction is below any cost model's resolution: the input is kept (the
# roofline priced Mirage's bfloat16 GQA with a shifted softmax 0.0008% below its own exp / sum, and
# it ran 0.87-0.93x)
MIN_GAIN = 1e-3


def cheaper(after: float, before: float) -> bool:
    """Whether cost ``after`` is below ``before`` by at least ``MIN_GAIN`` of it (costs of any sign)."""
    return after < before - MIN_GAIN * abs(before)


def rests_on_timings(outcome: Outcome, model: CostModel, limits: Limits) -> bool:
    """Whether the extracted program runs a formulation of a timed kernel (``CostModel.timed_ops``: a
    conv's algorithm or layout) that the input does not: the kernels were timed alone, and alone they
    can mislead about the program they compose (ResNet-18 at 224x224, batch 1: each conv chosen ran
    faster alone, the program 0.85x)."""
    if not model.timed_ops or limits.kernel_seconds <= 0 or outcome.program is outcome.original:
        return False

    def formulations(program: Program) -> set[str]:
        return {
            f"{op.name} {sorted(op.attrs.items())} {[str(v.type) for v in op.inputs]}"
            for op in program.live_ops()
            if op.name in model.timed_ops and OPS[op.name].fusion_kind != "loop"  # a transpose fuses
        }

    return not formulations(outcome.program) <= formulations(outcome.original)


def worth_measuring(outcome: Outcome, model: CostModel, always: bool) -> bool:
    """Whether the optimized program is to be measured against the input on this device: where the
    predicted gain is within ``model.error``, or ``always``."""
    report = outcome.report
    uncertain = report.cost_before * math.exp(-model.error) < report.cost_after < report.cost_before
    return outcome.program is not outcome.original and (uncertain or always)


def faster_as_measured(outcome: Outcome) -> Outcome:
    """``outcome``, or its input where the optimized program was not measured faster on this device by
    a margin noise does not cross (``eqsat.speed.compared``, recorded and reused). With
    ``eqsat.config.reproducible`` and no verdict recorded, the cost model's choice stands."""
    report = outcome.report
    verdict = compared(outcome.original, outcome.program)
    if not isinstance(verdict, Verdict):
        why = verdict or "no timing recorded (reproducible)"
        note = "; ".join(filter(None, [report.note, f"{why}: the cost model's choice is kept"]))
        return replace(outcome, report=replace(report, note=note))
    predicted = f"predicted {report.cost_before / report.cost_after:.2f}x"
    kept = "the optimized program is kept" if verdict.replaced else "the input is returned"
    note = "; ".join(filter(None, [report.note, f"{predicted}, {verdict}: {kept}"]))
    if verdict.replaced:
        return replace(outcome, report=replace(report, note=note))
    report = replace(report, note=note, cost_after=report.cost_before)
    return replace(outcome, program=outcome.original, report=report)
