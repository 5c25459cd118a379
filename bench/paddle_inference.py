"""eqsat against Paddle Inference on whole Paddle networks saved as users save them
(bench/paddle_nets.py): each file loaded by eqsat with no help and optimized (its ``fn``, jitted), the
same file unoptimized (``eqsat.lowering.lower`` under ``jax.jit``: the plain-JAX baseline), and Paddle
Inference's CPU predictor with oneDNN off and on, on as many threads as XLA uses (every core); all four
timed interleaved in one process (median).

    python -m bench.paddle_inference              # batch 8 -> bench/paddle_inference.json
    python -m bench.paddle_inference --quick      # three networks, fewer repeats
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import jax
import numpy as np

import eqsat
from bench.common import interleaved, write
from bench.paddle_nets import NETWORKS, inputs, predictor, save
from eqsat.lowering import lower

BATCH = 8
QUICK = ("resnet18", "transformer_encoder", "lstm")


def measure(name: str, root: Path, repeats: int) -> dict[str, Any]:
    path = save(name, root)
    program = eqsat.load(path)
    xs = inputs(name, BATCH)
    result = eqsat.optimize(program)
    optimized = result.fn
    plain = jax.jit(lower(program.specialize({n: x.shape for n, x in zip(program.dynamic, xs, strict=True)})))
    threads = os.cpu_count() or 1
    paddle_cpu, paddle_onednn = (predictor(path, onednn, threads) for onednn in (False, True))
    want = paddle_cpu(xs)
    error = max(
        float(np.max(np.abs(np.asarray(g) - w)) / (np.max(np.abs(w)) or 1.0))
        for g, w in zip(optimized(*xs), want, strict=True)
    )
    times = interleaved(
        {
            "eqsat": lambda: optimized(*xs),
            "jax": lambda: plain(*xs),
            "paddle": lambda: paddle_cpu(xs),
            "paddle_onednn": lambda: paddle_onednn(xs),
        },
        repeats,
    )
    ops = result.program.op_counts()
    return {
        "network": name,
        "batch": BATCH,
        **{f"{k}_s": v for k, v in times.items()},
        "speedup_vs_jax": times["jax"] / times["eqsat"],
        "speedup_vs_paddle": times["paddle"] / times["eqsat"],
        "speedup_vs_paddle_onednn": times["paddle_onednn"] / times["eqsat"],
        "max_rel_error_vs_paddle": error,
        "ops_before": len(program.live_ops()),
        "ops_after": len(result.program.live_ops()),
        "opaque_after": sum(n for op, n in ops.items() if op not in eqsat.ops.OPS),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="three networks, 5 repeats")
    args = parser.parse_args(argv)
    names = QUICK if args.quick else tuple(NETWORKS)
    rows = []
    with tempfile.TemporaryDirectory() as root:
        for name in names:
            row = measure(name, Path(root), 5 if args.quick else 20)
            rows.append(row)
            print(
                f"{name:22s} eqsat {row['eqsat_s'] * 1e3:8.2f} ms | jax x{row['speedup_vs_jax']:.2f} | "
                f"paddle x{row['speedup_vs_paddle']:.2f} | onednn x{row['speedup_vs_paddle_onednn']:.2f}",
                file=sys.stderr,
            )
    print(write("paddle_inference", {"rows": rows}))


if __name__ == "__main__":
    main()
