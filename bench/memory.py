"""Peak memory of one call, measured as the growth of the process's peak RSS in a fresh subprocess.

XLA:CPU's buffer assignment (``compiled.memory_analysis()``) does not count every runtime temporary, so
memory claims are measured here instead:

    python -m bench.memory attention 4096 eqsat     # prints the peak RSS growth in bytes
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import jax

from bench import models

CASES: dict[str, Callable[[int], models.Case]] = {
    "attention": models.make_attention,
    "bert": lambda seq: models.make_bert(1, seq),
}


def peak_rss_growth(case: str, size: int, variant: str) -> int:
    """Bytes the peak RSS grows by while ``variant`` (eqsat or jax) runs ``case`` once (already compiled)."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.memory", case, str(size), variant],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(json.loads(out.stdout.strip().splitlines()[-1])["peak_rss_growth"])


def _run(case: str, size: int, variant: str) -> dict[str, Any]:
    """Compile ahead of time, then measure the first (and only) execution."""
    import eqsat
    from eqsat.lowering import lower

    fn, args = CASES[case](size)
    leaves = jax.tree_util.tree_leaves(args)
    if variant == "eqsat":
        program = eqsat.optimize(eqsat.from_jax(fn, *args)).program
        compiled = jax.jit(lower(program)).lower(*leaves).compile()
        call = lambda: compiled(*leaves)  # noqa: E731
    else:
        compiled = jax.jit(fn).lower(*args).compile()
        call = lambda: compiled(*args)  # noqa: E731
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    jax.block_until_ready(call())
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"peak_rss_growth": (after - before) * 1024}


if __name__ == "__main__":
    print(json.dumps(_run(sys.argv[1], int(sys.argv[2]), sys.argv[3])))
