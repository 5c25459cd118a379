"""eqsat against Paddle Inference on whole Paddle networks saved as users save them
(bench/paddle_nets.py): each file loaded by eqsat with no help and optimized (its ``fn``, jitted), the
same file unoptimized (``eqsat.lowering.lower`` under ``jax.jit``: the plain-JAX baseline), and Paddle
Inference's CPU predictor with oneDNN off and on, on as many threads as XLA uses (every core); all four
timed interleaved in one process (median), each sample followed by an untimed pause (Paddle's OpenMP
threads spin for 200 ms after a run, and slowed an XLA call that came right after by up to 2x).
Each row also sums the optimized program's ops timed one by one (``Measured``), by kind, and what its
NCHW convolutions would take as NHWC.

    python -m bench.paddle_inference              # batch 8 -> bench/paddle_inference.json
    python -m bench.paddle_inference --quick      # three networks, fewer repeats
    python -m bench.paddle_inference --only resnet18_224 mobilenet_v2_224
    python -m bench.paddle_inference --onednn     # the 224x224 networks with XLA:CPU's convs and products
                                                  # in oneDNN -> bench/paddle_inference_onednn.json

eqsat optimizes each network until an optimization times no new kernel: the first times those of
its alternatives this device has not timed, within ``Limits.kernel_seconds`` and its time limit
(``first_optimize_s``), later ones, as later processes would, time the rest (``kernels_timed``: how
many each timed); the last program is timed.

``--onednn`` runs the benchmark again in a child process under ``eqsat.xla_flags.ONEDNN_CPU``: XLA:CPU
then runs convolutions and products as oneDNN calls, the library Paddle Inference's fast predictor
uses, for eqsat's program and the plain-JAX baseline alike; eqsat times its kernels under those flags.
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
from bench.common import OUT, interleaved, merged_rows, rerun_under, settled, write
from bench.paddle_nets import DEPLOYED, NETWORKS, inputs, loaded, predictor, save
from eqsat import xla_flags
from eqsat.cost import Measured
from eqsat.ir import OPAQUE, Program, TensorType
from eqsat.lowering import lower

BATCH = 8
PAUSE_S = 0.3  # after each sample: longer than Intel's OpenMP spins after a parallel region (200 ms)
QUICK = ("resnet18", "transformer_encoder", "lstm")
NCHW_TO_NHWC, OIHW_TO_HWIO = (0, 2, 3, 1), (2, 3, 1, 0)


def kernels(program: Program, cache: Path) -> dict[str, float]:
    """Seconds of the program's ops, each run alone (``Measured``), summed by op kind; and, as
    ``conv2d as NHWC``, what its NCHW convolutions take in the NHWC layout (would a layout rewrite
    help?). Opaque ops are not timed."""
    model = Measured(cache, budget=100_000, max_estimate_s=60.0)
    out: dict[str, float] = {}
    for op in program.live_ops():
        if op.name == OPAQUE:
            continue
        ins, result = [v.type for v in op.inputs], op.outputs[0].type
        out[op.name] = out.get(op.name, 0.0) + model.op_cost(op.name, op.attrs, ins, result)
        if op.name.startswith("conv2d") and op.attrs["layout"] == "NCHW":
            nhwc = [_permuted(ins[0], NCHW_TO_NHWC), _permuted(ins[1], OIHW_TO_HWIO), *ins[2:]]
            seconds = model.op_cost(
                op.name, {**op.attrs, "layout": "NHWC"}, nhwc, _permuted(result, NCHW_TO_NHWC)
            )
            out["conv2d as NHWC"] = out.get("conv2d as NHWC", 0.0) + seconds
    return out


def _permuted(t: TensorType, perm: tuple[int, ...]) -> TensorType:
    return TensorType(tuple(t.shape[p] for p in perm), t.dtype)


def measure(name: str, root: Path, repeats: int) -> dict[str, Any]:
    path = save(name, root)
    xs, program = inputs(name, BATCH), loaded(name, path, BATCH)
    first, result, timed = settled(lambda: eqsat.optimize(program, cache=False))
    optimized, plain = result.fn, jax.jit(lower(program))
    threads = os.cpu_count() or 1
    paddle_cpu, paddle_onednn = (predictor(path, onednn, threads) for onednn in (False, True))
    want = paddle_cpu(xs)
    error = max(
        float(np.max(np.abs(np.asarray(g) - w)) / (np.max(np.abs(w)) or 1.0))
        for g, w in zip(optimized(*xs), want, strict=True)
    )
    # all four interleaved, each sample followed by a pause: Paddle's OpenMP threads keep spinning after
    # a run (200 ms) and slowed the XLA call that followed them by up to 2x
    sides = {
        "eqsat": lambda: optimized(*xs),
        "jax": lambda: plain(*xs),
        "paddle": lambda: paddle_cpu(xs),
        "paddle_onednn": lambda: paddle_onednn(xs),
    }
    times = interleaved(sides, repeats, pause_s=PAUSE_S)
    ops = result.program.op_counts()
    return {
        "network": name,
        "batch": BATCH,
        "first_optimize_s": sum(first.report.timings.values()),
        "kernels_timed": timed,  # by each optimization until none was left to time
        "optimize_s": sum(result.report.timings.values()),
        **{f"{k}_s": v for k, v in times.items()},
        "speedup_vs_jax": times["jax"] / times["eqsat"],
        "speedup_vs_paddle": times["paddle"] / times["eqsat"],
        "speedup_vs_paddle_onednn": times["paddle_onednn"] / times["eqsat"],
        "max_rel_error_vs_paddle": error,
        "ops_before": len(program.live_ops()),
        "ops_after": len(result.program.live_ops()),
        "opaque_after": sum(n for op, n in ops.items() if op not in eqsat.ops.OPS),
        "kernel_seconds": kernels(result.program, root / "measured.json"),
        "compiler_options": dict(result.report.compiler_options),  # eqsat's choice; jax.jit's are XLA's own
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="three networks, 5 repeats")
    parser.add_argument("--only", nargs="*", choices=[*NETWORKS, *DEPLOYED], help="these networks only")
    parser.add_argument(
        "--keep-host-memory",
        action="store_true",
        help="keep the memory XLA's calls free for the next call (eqsat.keep_host_memory), as Paddle does",
    )
    parser.add_argument(
        "--onednn",
        action="store_true",
        help="XLA:CPU's convolutions and products in oneDNN (eqsat.xla_flags.ONEDNN_CPU), in a child "
        "process; by default the 224x224 networks -> paddle_inference_onednn.json",
    )
    args = parser.parse_args(argv)
    if args.onednn:
        rerun_under(xla_flags.ONEDNN_CPU, "bench.paddle_inference", argv)
    host_memory = "kept" if args.keep_host_memory and eqsat.keep_host_memory() else "returned"
    everything = (*DEPLOYED,) if args.onednn else (*NETWORKS, *DEPLOYED)
    names = args.only or (QUICK if args.quick else everything)
    rows = []
    with tempfile.TemporaryDirectory() as root:
        for name in names:
            row = measure(name, Path(root), 5 if args.quick else 20) | {"host_memory": host_memory}
            rows.append(row)
            print(
                f"{name:22s} eqsat {row['eqsat_s'] * 1e3:8.2f} ms | jax x{row['speedup_vs_jax']:.2f} | "
                f"paddle x{row['speedup_vs_paddle']:.2f} | onednn x{row['speedup_vs_paddle_onednn']:.2f}",
                file=sys.stderr,
            )
    out = "paddle_inference_onednn" if args.onednn else "paddle_inference"
    if args.only:  # the other networks' rows of the last full run stay
        rows = merged_rows(OUT / f"{out}.json", rows, "network")
    print(write(out, {"rows": rows}))


if __name__ == "__main__":
    main()
