"""The benchmark suite: eqsat against plain jax.jit on real programs, in one process.

For each program: the optimizer's time split (trace, each stage of ``eqsat.pipeline``, lower, compile), the
e-graph size, runtime of eqsat vs jax.jit (median of interleaved runs), peak memory (XLA's buffer
assignment), numeric agreement, and the extracted cost under greedy and ILP extraction.

    python -m bench.suite [--quick]
    # writes bench/results.json, bench/results.md, bench/speedup.png, bench/optimizer_time.png
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import jax
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

import eqsat
from bench import models
from bench.common import OUT, interleaved, max_abs_diff, peak_bytes, write
from eqsat.examples import PIR as EXAMPLES
from eqsat.lowering import lower
from eqsat.pipeline import STAGES


def _pir(name: str) -> models.Case:
    program = eqsat.load(EXAMPLES / f"{name}.pir")
    return (lambda: lower(program)()), ()


def programs(quick: bool) -> dict[str, Callable[[], models.Case | eqsat.Program]]:
    if quick:
        return {
            "drr_transpose": lambda: eqsat.load(EXAMPLES / "drr_transpose_before.pir"),
            "mlp": models.make_mlp,
            "bert_layer_s128": lambda: models.make_bert(1, 128, d=256, heads=4),
            "attention_s1024": lambda: models.make_attention(1024),
        }
    return {
        "drr_transpose": lambda: eqsat.load(EXAMPLES / "drr_transpose_before.pir"),
        "multihead_attention": lambda: eqsat.load(EXAMPLES / "multihead_attention_before.pir"),
        "mlp": models.make_mlp,
        "bert_layer_s128": lambda: models.make_bert(1, 128),
        "bert_layer_s512": lambda: models.make_bert(1, 512),
        "bert_12_s128": lambda: models.make_bert(12, 128),
        "bert_12_s512": lambda: models.make_bert(12, 512),
        "gpt2_block_s512": lambda: models.make_gpt2_block(512),
        "attention_s4096": lambda: models.make_attention(4096),
        "matmul_chain_2048": models.make_chain,
        "qkv_bert": models.make_qkv,
    }


def measure(name: str, make: Callable[[], Any], repeats: int) -> dict[str, Any]:
    made = make()
    timings: dict[str, float] = {}
    t = time.perf_counter()
    if isinstance(made, eqsat.Program):
        program, baseline_fn, args = made, lower(made), ()
    else:
        fn, args = made
        program = eqsat.from_jax(fn, *args)
        baseline_fn = fn
    timings["trace"] = time.perf_counter() - t
    result = eqsat.optimize(program)
    timings |= result.report.timings
    greedy = eqsat.optimize(program, extractor="greedy").report.cost_after
    exact = eqsat.optimize(program, extractor="ilp").report.cost_after
    leaves = jax.tree_util.tree_leaves(args)
    t = time.perf_counter()
    optimized = lower(result.program)
    timings["lower"] = time.perf_counter() - t
    t = time.perf_counter()
    compiled = jax.jit(optimized).lower(*leaves).compile()
    timings["compile"] = time.perf_counter() - t
    plain = jax.jit(baseline_fn)
    times = interleaved({"eqsat": lambda: compiled(*leaves), "jax": lambda: plain(*args)}, repeats)
    last = result.report.saturation.iterations[-1]
    row = {
        "program": name,
        "ops_before": program.op_counts(),
        "ops_after": result.program.op_counts(),
        "timings_s": timings,
        "egraph_nodes": last.nodes,
        "egraph_classes": last.classes,
        "stop_reason": str(result.report.stop_reason),
        "eqsat_s": times["eqsat"],
        "jax_s": times["jax"],
        "speedup": times["jax"] / times["eqsat"],
        "eqsat_peak_bytes": peak_bytes(optimized, leaves),
        "jax_peak_bytes": peak_bytes(baseline_fn, args),
        "max_abs_diff": max_abs_diff(compiled(*leaves), plain(*args)),
        "cost_model": result.report.cost_model,
        "cost_greedy": greedy,
        "cost_ilp": exact,
    }
    split = ", ".join(f"{k} {v:.2f}s" for k, v in timings.items())
    print(f"{name}: {row['speedup']:.2f}x, {last.nodes} e-nodes, {split}", flush=True)
    return row


def plot(rows: list[dict[str, Any]]) -> None:
    names = [r["program"] for r in rows]
    fig, ax = plt.subplots(figsize=(9, 4))
    ax.bar(names, [r["speedup"] for r in rows], color="tab:blue")
    ax.axhline(1.0, color="gray", linestyle="--", linewidth=1)
    ax.set_ylabel("speed-up over jax.jit (×)")
    ax.set_yscale("log")
    ax.tick_params(axis="x", rotation=45)
    fig.tight_layout()
    fig.savefig(OUT / "speedup.png", dpi=120)
    phases = ["trace", *(stage.name for stage in STAGES), "lower", "compile"]
    fig, ax = plt.subplots(figsize=(9, 4))
    bottom = [0.0] * len(rows)
    for phase in phases:
        values = [r["timings_s"].get(phase, 0.0) for r in rows]
        ax.bar(names, values, bottom=bottom, label=phase)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set_ylabel("optimizer time (s)")
    ax.legend(fontsize=8)
    ax.tick_params(axis="x", rotation=45)
    fig.tight_layout()
    fig.savefig(OUT / "optimizer_time.png", dpi=120)


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| program | speed-up vs jax.jit | eqsat ms | jax ms | XLA buffers MB eqsat / jax | e-nodes "
        "| optimize s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        t = r["timings_s"]
        opt = sum(t.get(stage.name, 0.0) for stage in STAGES)
        lines.append(
            f"| {r['program']} | {r['speedup']:.2f}× | {r['eqsat_s'] * 1e3:.2f} | {r['jax_s'] * 1e3:.2f} | "
            f"{r['eqsat_peak_bytes'] / 2**20:.1f} / {r['jax_peak_bytes'] / 2**20:.1f} | "
            f"{r['egraph_nodes']} | {opt:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small programs, few repeats (smoke test)")
    args = parser.parse_args()
    rows = [measure(name, make, 3 if args.quick else 10) for name, make in programs(args.quick).items()]
    plot(rows)
    table = markdown(rows)
    (OUT / "results.md").write_text(table + "\n")
    print(table)
    print(f"wrote {write('results', {'programs': rows})}")


if __name__ == "__main__":
    main()
