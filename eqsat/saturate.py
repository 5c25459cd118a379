"""The runner: rules into egglog, one iteration at a time, within node, iteration and time limits.

egglog's run API has no node limit or timeout, so the runner steps one iteration at a time and checks
the e-graph size and the clock between iterations. Each iteration re-runs the shape/dtype analyses to
a fixpoint, so guards see every new node's type. Rules run under egglog's back-off scheduler: a rule
matching more than ``match_limit`` times in an iteration is banned for a few iterations (its matches
dropped), which bounds how much one iteration can grow the e-graph before the limits are checked.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from egglog import bindings

from eqsat.egraph import ANALYSIS, REWRITES
from eqsat.rules import Rule

# Analysis rules are named shape-*/dtype-* or unnamed (their key is their text); rewrite rules are named.
_ANALYSIS_RULES = ("shape-", "dtype-", "(")
_SIZE = re.compile(r"\((\S+) (\d+)\)")
_TENSOR_TABLES_EXCLUDED = frozenset({"shape", "dtype", "concat-shape", "wants-concat-shape", "TNil", "TCons"})


@dataclass(frozen=True)
class Limits:
    """Bounds on saturation (and on the ILP extractor's search). The best program found when a bound
    is hit is still returned."""

    max_iterations: int = 30
    max_nodes: int = 20_000
    timeout_s: float = 10.0
    match_limit: int = 2_000
    ban_length: int = 5
    ilp_timeout_s: float = 1.0


@dataclass
class Iteration:
    """What one iteration did: e-graph size after it, matches per rule, seconds."""

    index: int
    nodes: int
    classes: int
    matches: dict[str, int]
    seconds: float


@dataclass
class SaturationReport:
    iterations: list[Iteration] = field(default_factory=list)
    stop_reason: str = ""
    seconds: float = 0.0

    @property
    def saturated(self) -> bool:
        return self.stop_reason == "saturated"

    def rules_fired(self) -> dict[str, int]:
        """Total matches per rule (variants of one rule added up), rules that matched only."""
        total: dict[str, int] = {}
        for it in self.iterations:
            for name, n in it.matches.items():
                if n:
                    base = name.split("#", 1)[0]
                    total[base] = total.get(base, 0) + n
        return total


def sizes(egraph: bindings.EGraph) -> tuple[int, int]:
    """(tensor e-nodes, tensor e-classes): constructor rows, and rows of the shape analysis."""
    (out,) = egraph.parse_and_run_program("(print-size)")
    table = {name: int(n) for name, n in _SIZE.findall(str(out))}
    nodes = sum(n for name, n in table.items() if name not in _TENSOR_TABLES_EXCLUDED)
    return nodes, table.get("shape", 0)


def install(egraph: bindings.EGraph, rules: Iterable[Rule]) -> None:
    """Add rules to the e-graph's rewrite ruleset."""
    rules = list(rules)
    preludes = dict.fromkeys(line for r in rules for line in r.prelude)
    text = "\n".join([*preludes, *(line for r in rules for line in r.egglog(REWRITES))])
    if text:
        egraph.parse_and_run_program(text)


def saturate(
    egraph: bindings.EGraph,
    limits: Limits | None = None,
    progress: Callable[[Iteration], None] | None = None,
) -> SaturationReport:
    """Run the installed rules until saturation or a limit; report each iteration."""
    limits = limits or Limits()
    report = SaturationReport()
    start = time.perf_counter()
    backoff = f"(back-off :match-limit {limits.match_limit} :ban-length {limits.ban_length})"
    egraph.parse_and_run_program(f"(let-scheduler backoff {backoff})\n(run-schedule (saturate {ANALYSIS}))")
    for index in range(limits.max_iterations):
        t0 = time.perf_counter()
        out = egraph.parse_and_run_program(
            f"(run-schedule (run-with backoff {REWRITES}) (saturate {ANALYSIS}))"
        )
        run = out[0].report
        nodes, classes = sizes(egraph)
        matches = {k: v for k, v in run.num_matches_per_rule.items() if not k.startswith(_ANALYSIS_RULES)}
        it = Iteration(index, nodes, classes, matches, time.perf_counter() - t0)
        report.iterations.append(it)
        if progress:
            progress(it)
        if not run.updated and run.can_stop:
            report.stop_reason = "saturated"
        elif nodes > limits.max_nodes:
            report.stop_reason = f"node limit ({nodes} > {limits.max_nodes} e-nodes)"
        elif time.perf_counter() - start > limits.timeout_s:
            report.stop_reason = f"time limit ({limits.timeout_s:g} s)"
        if report.stop_reason:
            break
    else:
        report.stop_reason = f"iteration limit ({limits.max_iterations})"
    report.seconds = time.perf_counter() - start
    return report
