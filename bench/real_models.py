"""Library models (flax nnx and linen, equinox, jax.nn.dot_product_attention) at long sequences:
eqsat.jit against jax.jit, time (interleaved, same process) and peak memory (a fresh process each).

    python -m bench.real_models            # S = 512, 2048, 8192 -> bench/real_models.json
    python -m bench.real_models --quick    # S = 512 only
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import jax

import eqsat
from bench.common import interleaved, max_abs_diff, write
from bench.library_models import CASES
from bench.memory import peak_rss_growth

LENGTHS = (512, 2048, 8192)
DIM, HEADS = 128, 2  # head dim 64


def make(name: str, seq: int) -> tuple[Any, tuple[Any, ...]]:
    """The case at batch 1, this sequence length and the bench's width."""
    dim = DIM // HEADS if name.startswith("jax-dpa") else DIM  # dot_product_attention takes head dims
    return CASES[name](1, seq, dim=dim, heads=HEADS)


def measure(name: str, seq: int, repeats: int) -> dict[str, Any]:
    fn, args = make(name, seq)
    optimized, plain = eqsat.jit(fn), jax.jit(fn)
    diff = max_abs_diff(optimized(*args), plain(*args))
    (result,) = optimized.results.values()
    times = interleaved({"eqsat": lambda: optimized(*args), "jax": lambda: plain(*args)}, repeats)
    memory = {v: peak_rss_growth(name, seq, v) for v in ("eqsat", "jax")}
    return {
        "model": name,
        "seq": seq,
        "ops": result.program.op_counts(),
        "eqsat_s": times["eqsat"],
        "jax_s": times["jax"],
        "speedup": times["jax"] / times["eqsat"],
        "eqsat_peak_rss_bytes": memory["eqsat"],
        "jax_peak_rss_bytes": memory["jax"],
        "max_abs_diff": diff,
        "optimize_s": sum(result.report.timings.values()),
    }


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| model | S | eqsat.jit | jax.jit | speedup | peak RSS eqsat | peak RSS jax | attention op |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        attention = next((op for op in ("flash_attention", "attention") if op in r["ops"]), "—")
        lines.append(
            f"| {r['model']} | {r['seq']} | {r['eqsat_s'] * 1e3:.1f} ms | {r['jax_s'] * 1e3:.1f} ms | "
            f"{r['speedup']:.2f}x | {r['eqsat_peak_rss_bytes'] / 2**20:.0f} MiB | "
            f"{r['jax_peak_rss_bytes'] / 2**20:.0f} MiB | {attention} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="S = 512 only")
    parser.add_argument("--models", nargs="*", default=sorted(CASES), help="which library models")
    opts = parser.parse_args(argv)
    rows = []
    for seq in LENGTHS[:1] if opts.quick else LENGTHS:
        for name in opts.models:
            rows.append(measure(name, seq, repeats=3 if seq >= 8192 else 7))
            print(markdown(rows[-1:]).splitlines()[-1], file=sys.stderr)
    path = write("real_models", {"dim": DIM, "heads": HEADS, "batch": 1, "rows": rows})
    print(markdown(rows))
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
