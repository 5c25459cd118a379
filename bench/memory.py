"""Peak memory of one call: how far the process's resident set rises above where it was, measured in a
fresh subprocess (``bench.memory_probe``, which builds the case) with the kernel's peak-RSS mark reset
just before the call (Linux).

XLA:CPU's buffer assignment (``compiled.memory_analysis()``) does not count every runtime temporary, so
memory claims are measured here instead. This module imports none of the benchmarks that call it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.child import child_json


def probe(case: str, size: int, variant: str) -> dict[str, Any]:
    """What ``bench.memory_probe`` measures of ``variant`` running ``case`` once, in a fresh process."""
    return child_json(["bench.memory_probe", case, str(size), variant])


def peak_rss_growth(case: str, size: int, variant: str) -> int:
    """Bytes the peak RSS grows by while ``variant`` (eqsat or jax) runs ``case`` once (already compiled)."""
    return int(probe(case, size, variant)["peak_rss_growth"])


def status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")
