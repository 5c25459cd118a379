"""Optimizer overhead: how trace + optimize time and memory grow with depth, and what eqsat.jit's first
call costs over jax.jit's.

Each measurement runs in a fresh process (module imports excluded, the one-time rule installation
included, as a user's first call pays it):

- BERT-base (width 768, 12 heads, S = 128) with 1, 12, 24 and 48 layers: trace and optimize seconds,
  the optimizer's peak RSS growth, e-graph size, and the optimized op counts per layer (identical
  layers must be optimized identically);
- a 2-layer flax linen encoder (width 256, 4 heads, S = 128): seconds of the first call (trace,
  optimize, compile, run) of jax.jit and of eqsat.jit, median of fresh processes; eqsat.jit twice:
  wrapping the function just before the call (``eqsat``), and decorating it before the model is
  initialized, as a module-level ``@eqsat.jit`` is (``eqsat-decorated-early``: the rules install in
  the background meanwhile).

    python -m bench.optimizer_scaling     # -> bench/optimizer_scaling.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import jax

from bench.child import child_json
from bench.common import write
from bench.memory import status_kib

DEPTHS = (1, 12, 24, 48)
FIRST_CALL_RUNS = 5


def _optimize_bert(layers: int) -> dict[str, Any]:
    import eqsat
    from bench import models

    fn, args = models.make_bert(layers, 128)
    t = time.perf_counter()
    program = eqsat.from_jax(fn, *args)
    trace_s = time.perf_counter() - t
    Path("/proc/self/clear_refs").write_text("5")  # reset the peak-RSS mark (Linux)
    before = status_kib("VmRSS")
    t = time.perf_counter()
    result = eqsat.optimize(program)
    optimize_s = time.perf_counter() - t
    last = result.report.saturation.iterations[-1]
    return {
        "layers": layers,
        "ops": len(program.ops),
        "trace_s": trace_s,
        "optimize_s": optimize_s,
        "optimize_peak_rss_growth_bytes": (status_kib("VmHWM") - before) * 1024,
        "process_peak_rss_bytes": status_kib("VmHWM") * 1024,
        "egraph_nodes": last.nodes,
        "ops_after": result.program.op_counts(),
        "note": result.report.note,
    }


def _first_call(variant: str) -> dict[str, Any]:
    import jax.numpy as jnp
    import numpy as np

    import eqsat
    from bench.library_models import linen_transformer

    model = linen_transformer(2, 256, 4, causal=False)

    def forward(params: Any, x: jax.Array) -> jax.Array:
        return model.apply(params, x)

    early = eqsat.jit(forward) if variant == "eqsat-decorated-early" else None
    x = jnp.asarray(np.random.default_rng(0).normal(size=(1, 128, 256)), jnp.float32)
    params = model.init(jax.random.key(0), x)
    jax.block_until_ready(params)
    fn = early or (eqsat.jit if variant == "eqsat" else jax.jit)(forward)
    t = time.perf_counter()
    jax.block_until_ready(fn(params, x))
    seconds = time.perf_counter() - t
    if variant == "jax":
        return {"first_call_s": seconds}
    (result,) = fn.results.values()
    return {"first_call_s": seconds, "optimizer_phases_s": result.report.timings}


def _fresh(*args: str) -> dict[str, Any]:
    return child_json(["bench.optimizer_scaling", "--child", *args])


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| BERT layers | ops | trace | optimize | optimizer peak RSS growth | e-nodes "
        "| optimized ops per layer |",
        "|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        per_layer = {k: v / r["layers"] for k, v in sorted(r["ops_after"].items())}
        ops = ", ".join(f"{k} {v:g}" for k, v in per_layer.items())
        lines.append(
            f"| {r['layers']} | {r['ops']} | {r['trace_s']:.2f} s | {r['optimize_s']:.2f} s | "
            f"{r['optimize_peak_rss_growth_bytes'] / 2**20:.0f} MiB | {r['egraph_nodes']} | {ops} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    if opts.child:
        kind, arg = opts.child
        print(json.dumps(_optimize_bert(int(arg)) if kind == "bert" else _first_call(arg)))
        return
    rows = []
    for layers in DEPTHS:
        rows.append(_fresh("bert", str(layers)))
        r = rows[-1]
        print(
            f"BERT x{layers}: trace {r['trace_s']:.2f} s, optimize {r['optimize_s']:.2f} s, "
            f"optimizer RSS +{r['optimize_peak_rss_growth_bytes'] / 2**20:.0f} MiB",
            file=sys.stderr,
        )
    first: dict[str, list[float]] = {"eqsat": [], "eqsat-decorated-early": [], "jax": []}
    phases: dict[str, list[dict[str, float]]] = {"eqsat": [], "eqsat-decorated-early": []}
    for _ in range(FIRST_CALL_RUNS):  # interleaved fresh processes
        for variant in first:
            out = _fresh("first", variant)
            first[variant].append(out["first_call_s"])
            if variant in phases:
                phases[variant].append(out["optimizer_phases_s"])
    medians = {k: statistics.median(v) for k, v in first.items()}
    phase_medians = {v: {p: statistics.median(r[p] for r in rs) for p in rs[0]} for v, rs in phases.items()}
    print(f"first call of a 2-layer encoder: {medians}; optimizer phases {phase_medians}", file=sys.stderr)
    results = {"bert": rows, "encoder_first_call_s": first, "encoder_first_call_median_s": medians}
    path = write("optimizer_scaling", results | {"encoder_optimizer_phases_median_s": phase_medians})
    print(markdown(rows))
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
