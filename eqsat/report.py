"""What an optimization returns: its ``Report`` (saturation, costs, where the time went, what the
cache did) and its ``Outcome`` (the program chosen, beside the program it was chosen over)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from eqsat.egraph import Serialized
from eqsat.ir import Program
from eqsat.saturate import Iteration, SaturationReport, Stop, StopReason

_STORED = ("cost_model", "cost_before", "cost_after", "note", "extractor")  # a cached report's fields


@dataclass
class Report:
    """What optimization did: saturation per iteration, rules fired, costs and where the time went."""

    saturation: SaturationReport
    cost_model: str
    cost_before: float
    cost_after: float
    timings: dict[str, float] = field(default_factory=dict)
    note: str = ""
    extractor: str = ""
    cache: str = ""  # "hit", "stored", "off", or why the result is not cached
    kernels_timed: int = 0  # kernels timed on this device before extraction (eqsat.cost.kernels)
    kernels_left: int = 0  # kernels of alternatives left untimed for lack of time: a later run times them
    cut_short: str = ""  # which wall-clock safety net cut the optimization short ("": none): never cached
    # the compiler options eqsat chose for the program, measured faster under them
    # (eqsat.xla_flags.ALTERNATIVES; none: it runs under those the caller gave)
    compiler_options: tuple[tuple[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        """What a cache entry keeps of this report (the timings are the process's own)."""
        saturation = asdict(self.saturation)
        del saturation["commands"]  # how this process's e-graph was made: the entry keeps no e-graph
        chosen = {"compiler_options": [list(pair) for pair in self.compiler_options]}
        return {"saturation": saturation, **{k: getattr(self, k) for k in _STORED}, **chosen}

    @classmethod
    def from_json(cls, data: dict[str, Any], timings: dict[str, float]) -> Report:
        """The report of a cache hit: ``to_json``'s data, this process's ``timings``."""
        sat = data["saturation"]
        stop = sat["stop_reason"]
        saturation = SaturationReport(
            [Iteration(**it) for it in sat["iterations"]],
            StopReason(Stop(stop["stop"]), stop["detail"]) if stop else None,
            sat["seconds"],
            sat.get("proposed", {}),
        )
        chosen = tuple((str(name), value) for name, value in data.get("compiler_options", ()))
        stored = {k: data[k] for k in _STORED}
        return cls(saturation, **stored, timings=timings, cache="hit", compiler_options=chosen)

    @property
    def stop_reason(self) -> StopReason | None:
        return self.saturation.stop_reason

    @property
    def saturated(self) -> bool:
        return self.saturation.saturated

    @property
    def rules_fired(self) -> dict[str, int]:
        """The rules that matched, with their matches over all iterations (a match that adds nothing
        new counts: egglog reports matches, not the e-nodes each added)."""
        return self.saturation.rules_fired()

    def __repr__(self) -> str:
        """A summary (``str(report)`` has every line)."""
        return (
            f"Report(stopped: {self.stop_reason}, cost ({self.cost_model}) {self.cost_before:.6g} -> "
            f"{self.cost_after:.6g}, {len(self.rules_fired)} rules fired, cache: {self.cache or 'off'})"
        )

    def __str__(self) -> str:
        sat = self.saturation
        last = sat.iterations[-1] if sat.iterations else None
        lines = [
            f"saturation: {len(sat.iterations)} iterations, stopped: {sat.stop_reason}"
            + (f", {last.nodes} e-nodes in {last.classes} e-classes" if last else ""),
            f"cost ({self.cost_model}, {self.extractor} extraction): "
            f"{self.cost_before:.6g} -> {self.cost_after:.6g}",
            "rules fired: " + (", ".join(f"{k} x{v}" for k, v in sorted(self.rules_fired.items())) or "none"),
            "time: " + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in self.timings.items()),
        ]
        if self.cut_short:
            lines.append(f"cut short: {self.cut_short}")
        if self.compiler_options:
            lines.append("compiled under: " + ", ".join(f"{k}={v!r}" for k, v in self.compiler_options))
        if self.note:
            lines.append(f"note: {self.note}")
        if self.cache:
            lines.append(f"cache: {self.cache}")
        return "\n".join(lines)


@dataclass
class Outcome:
    """The ``program`` chosen over the ``original``, the ``report`` of choosing it, and the saturated
    e-graph it was extracted from (``egraph``; its ``outputs`` e-classes), where one was kept."""

    program: Program
    original: Program
    report: Report
    egraph: Serialized | None = None
    outputs: list[str] = field(default_factory=list)  # the e-classes of the e-graph's outputs
    # loads the program into a fresh e-graph, the rules installed, as saturation began (for ``made_by``)
    reload: Callable[[], Any] | None = field(default=None, repr=False, compare=False)
