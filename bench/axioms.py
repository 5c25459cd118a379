"""The benchmark programs optimized with the default rules and with every rule (the axioms that are
off by default included): optimizer time, where saturation stopped, e-graph size and the cost found.

    python -m bench.axioms    # -> bench/axioms.json, a markdown table on stdout
"""

from __future__ import annotations

import time
from typing import Any

import eqsat
from bench.common import write
from bench.suite import programs

RULE_SETS: dict[str, list[str] | None] = {"default": None, "all": ["all"]}


def measure(name: str, program: eqsat.Program) -> list[dict[str, Any]]:
    rows = []
    for label, rules in RULE_SETS.items():
        t = time.perf_counter()
        result = eqsat.optimize(program, rules=rules)
        seconds = time.perf_counter() - t
        last = result.report.saturation.iterations[-1] if result.report.saturation.iterations else None
        rows.append(
            {
                "program": name,
                "rules": label,
                "optimize_s": seconds,
                "stop_reason": str(result.report.stop_reason),
                "e_nodes": last.nodes if last else 0,
                "cost_ratio": result.report.cost_after / result.report.cost_before,
            }
        )
    return rows


def _program(made: Any) -> eqsat.Program:
    if isinstance(made, eqsat.Program):
        return made
    fn, args = made
    return eqsat.from_jax(fn, *args)


def main() -> None:
    rows = [row for name, make in programs(quick=False).items() for row in measure(name, _program(make()))]
    write("axioms", {"rows": rows})
    print("| program | rules | optimize | stopped | e-nodes | cost after / before |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['program']} | {r['rules']} | {r['optimize_s']:.2f} s | {r['stop_reason']} "
            f"| {r['e_nodes']} | {r['cost_ratio']:.3f} |"
        )


if __name__ == "__main__":
    main()
