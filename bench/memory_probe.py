"""The subprocess behind ``bench.memory.peak_rss_growth``: builds one case, compiles it ahead of time,
then measures the peak RSS growth of its first (and only) execution:

    python -m bench.memory_probe attention 4096 eqsat     # prints the peak RSS growth in bytes
    python -m bench.memory_probe flax-nnx-mha 2048 jax    # a library model (bench/library_models.py)
    python -m bench.memory_probe attention-float32-b1-s4096-train 0 eqsat   # bench/long_context.py
    python -m bench.memory_probe attention-float32-b1-s512-train 0 eqsat:input   # gradient="input"
    python -m bench.memory_probe attention-float32-b1-s8192-forward 0 eqsat-cold  # the first call
                                          # from an empty cache, optimizing included, and its seconds
    python -m bench.memory_probe attention-float32-b1-s8192-forward 0 eqsat-cached:DIR  # the first
                                          # call where DIR holds the optimized program
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax

from bench import models
from bench.memory import status_kib


def _case(name: str) -> Callable[[int], models.Case]:
    """A case by name: ``attention``, or a library model of bench/library_models.py at batch 1."""
    if name == "attention":
        return models.make_attention
    from bench.real_models import make

    return lambda size: make(name, size)


def _run(case: str, size: int, variant: str) -> dict[str, Any]:
    """Compile ahead of time, then measure the first (and only) execution."""
    import eqsat
    from eqsat.lowering import lower

    if case.startswith(("attention-", "decoder-")):  # bench/long_context.py's cases, size in the name
        from bench.long_context import build

        variant, _, detail = variant.partition(":")  # eqsat:<gradient mode>, eqsat-cached:<cache dir>
        if variant in ("eqsat-cold", "eqsat-cached"):
            return _first_call(case, detail or None)
        fns, call_args = build(case, detail or "measure")
        compiled = fns[variant].lower(*call_args).compile()
        return _peak(compiled, call_args)
    fn, args = _case(case)(size)
    leaves = jax.tree_util.tree_leaves(args)
    if variant == "eqsat":
        program = eqsat.optimize(eqsat.from_jax(fn, *args)).program
        compiled, call_args = jax.jit(lower(program)).lower(*leaves).compile(), leaves
    else:
        compiled, call_args = jax.jit(fn).lower(*args).compile(), args
    return _peak(compiled, call_args)


def _first_call(case: str, cache_dir: str | None) -> dict[str, Any]:
    """eqsat.jit's first call of a long_context case as a user's first run makes it: the call waiting
    for its optimization where it does not run the function as written meanwhile (the default). From
    an empty program cache and kernel table, or from ``cache_dir`` where an earlier process left the
    optimized program (tracing, reading, compiling and running it). Its peak RSS growth and seconds,
    and the cache directory it used."""
    import tempfile
    import time

    import eqsat
    from bench.long_context import build

    cache_dir = cache_dir or tempfile.mkdtemp(prefix="eqsat-cold-")
    eqsat.config.update("cache_dir", cache_dir)
    fns, call_args = build(case)
    Path("/proc/self/clear_refs").write_text("5")
    before, start = status_kib("VmRSS"), time.perf_counter()
    jax.block_until_ready(fns["eqsat"](*call_args))
    seconds = time.perf_counter() - start
    return {
        "peak_rss_growth": (status_kib("VmHWM") - before) * 1024,
        "seconds": seconds,
        "cache_dir": cache_dir,
    }


def _peak(compiled: Any, call_args: Any) -> dict[str, Any]:
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak-RSS high-water mark (Linux)
    before = status_kib("VmRSS")
    jax.block_until_ready(compiled(*call_args))
    return {"peak_rss_growth": (status_kib("VmHWM") - before) * 1024}


if __name__ == "__main__":
    print(json.dumps(_run(sys.argv[1], int(sys.argv[2]), sys.argv[3])))
