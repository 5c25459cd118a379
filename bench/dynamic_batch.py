"""A network saved with a dynamic batch, called at new batch sizes: what the first call of each costs
and how fast what it runs is. Paddle's networks of bench/paddle_nets.py, saved as users save them
(batch None), loaded and optimized once; the template size (2) optimized, then each new size carried
(``OptimizeResult.specialized``: the template's choices found in the size's own e-graph) against
that size optimized itself (program cache off, kernel timings kept from the start of each network:
as on a new machine); the three programs
(as written, carried, optimized itself) run under jax.jit, interleaved, median.

    python -m bench.dynamic_batch            # -> bench/dynamic_batch.json
"""

from __future__ import annotations

import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import jax

import eqsat
from bench.common import interleaved, run_cases
from bench.paddle_nets import inputs, save
from eqsat.config import config
from eqsat.lowering import lower
from eqsat.options import CARRIED

NETWORKS = ("resnet18", "mobilenet_v3_small", "transformer_encoder")
BATCHES = (4, 8)


def _timed(make: Any) -> tuple[Any, float]:
    t = time.perf_counter()
    out = make()
    return out, time.perf_counter() - t


def measure(name: str, repeats: int) -> dict[str, Any]:
    kept = config.enable_cache, config.cache_dir
    with tempfile.TemporaryDirectory() as root:
        config.enable_cache, config.cache_dir = False, Path(root) / "cache"  # as on a new machine
        try:
            result = eqsat.optimize(eqsat.load(save(name, Path(root))))
            _, template_s = _timed(lambda: result.specialized(*inputs(name, 2)))
            batches = [_batch(result, inputs(name, batch), repeats) for batch in BATCHES]
        finally:
            config.enable_cache, config.cache_dir = kept
    return {"model": name, "template_s": template_s, "batches": batches}


def _batch(result: Any, xs: list[Any], repeats: int) -> dict[str, Any]:
    """The first call at the size of ``xs`` carried and optimized itself; each program's speed."""
    carried, carried_s = _timed(lambda: result.specialized(*xs))
    original = carried.original
    own, own_s = _timed(lambda: eqsat.optimize(original))
    programs = {"jax": original, "carried": carried.program, "own": own.program}
    fns = {k: jax.jit(lower(p)) for k, p in programs.items()}
    calls = {k: partial(f, *xs) for k, f in fns.items()} | {"jax_again": partial(fns["jax"], *xs)}
    times = interleaved(calls, repeats)
    return {
        "batch": int(xs[0].shape[0]),
        "carried": carried.report.extractor == CARRIED,
        "first_call_carried_s": carried_s,
        "first_call_optimized_s": own_s,
        "kernels_timed_optimized": own.report.kernels_timed,
        "ops": {k: len(p.live_ops()) for k, p in programs.items()},
        "speedup_carried": times["jax"] / times["carried"],
        "speedup_optimized": times["jax"] / times["own"],
        "noise": times["jax"] / times["jax_again"],
    }


def _line(row: dict[str, Any]) -> str:
    parts = [
        f"b{b['batch']}: {b['first_call_carried_s']:.1f} s carried ({b['speedup_carried']:.2f}x) vs "
        f"{b['first_call_optimized_s']:.1f} s optimized ({b['speedup_optimized']:.2f}x)"
        for b in row["batches"]
    ]
    return f"{row['model']}: template {row['template_s']:.1f} s; " + "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    return run_cases("dynamic_batch", __doc__, NETWORKS, measure, _line, argv)


if __name__ == "__main__":
    raise SystemExit(main(argv=None))
