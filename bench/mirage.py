"""The programs of a GPU superoptimizer's benchmark (Mirage: GQA, QK-norm GQA, RMSNorm + matmul, LoRA,
gated MLP, normalized-transformer block), written in JAX as its PyTorch baselines and kernel graphs
write them, at the shapes in its repository (batch 1 and 8), in float32 and bfloat16; weights are
arguments, as there. eqsat.jit (as is, and with ``measure=True``: unsure choices timed against the
input) against jax.jit, and jax.jit against itself (a second jax.jit of the function: the noise
floor), interleaved in one process, the fastest of the samples; with what eqsat chose: the ops after,
the rules that fired, the predicted cost before and after, and what ``measure=True`` decided.

    python -m bench.mirage            # -> bench/mirage.json
    python -m bench.mirage --quick    # batch 1, float32
"""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import eqsat
from bench.common import interleaved, max_abs_diff, write

EPS = 1e-6


def rms_norm(x: jax.Array, weight: jax.Array) -> jax.Array:
    """torch.nn.RMSNorm over the last axis."""
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + EPS) * weight


def gqa(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    """exp, row sum, divide, as the kernel graph writes its softmax (no max subtracted)."""
    e = jnp.exp(q @ k)
    return (e / jnp.sum(e, axis=-1, keepdims=True)) @ v


def qknorm_gqa(q: jax.Array, k: jax.Array, v: jax.Array, wq: jax.Array, wv: jax.Array) -> jax.Array:
    return jax.nn.softmax(rms_norm(q, wq) @ k, axis=3) @ rms_norm(v, wv)


def rmsnorm_matmul(x: jax.Array, weight: jax.Array, w: jax.Array) -> jax.Array:
    return rms_norm(x, weight) @ w


def lora(x: jax.Array, w: jax.Array, a: jax.Array, b: jax.Array) -> jax.Array:
    return x @ w + (x @ a) @ b


def gated_mlp(x: jax.Array, a: jax.Array, b: jax.Array) -> jax.Array:
    return jax.nn.silu(x @ a) * (x @ b)


def ntrans(x: jax.Array, h: jax.Array, alpha: jax.Array, weight: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The normalized transformer's update: both of the baseline's results."""
    return rms_norm(h, weight) + x, rms_norm(x + alpha * x, weight)


def shapes(name: str, batch: int) -> list[tuple[int, ...]]:
    return {
        "gqa": [(2 * batch, 256, 64), (2 * batch, 64, 4096), (2 * batch, 4096, 64)],
        "qknorm_gqa": [(batch, 2, 256, 64), (batch, 2, 64, 4096), (batch, 2, 4096, 64), (64,), (64,)],
        "rmsnorm": [(2 * batch, 4096), (4096,), (4096, 4096)],
        "lora": [(16, 256), (256, 4096), (256, 16), (16, 4096)],
        "gated_mlp": [(batch, 4096), (4096, 4096), (4096, 4096)],
        "ntrans": [(batch, 4096)] * 3 + [(4096,)],
    }[name]


PROGRAMS: dict[str, Callable[..., Any]] = {
    "gqa": gqa,
    "qknorm_gqa": qknorm_gqa,
    "rmsnorm": rmsnorm_matmul,
    "lora": lora,
    "gated_mlp": gated_mlp,
    "ntrans": ntrans,
}


def measure(name: str, batch: int, dtype: str, repeats: int) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    args = [jnp.asarray(rng.uniform(0, 1, size=s) / np.sqrt(s[-1]), dtype) for s in shapes(name, batch)]
    fn = PROGRAMS[name]
    variants = {
        "eqsat": eqsat.jit(fn),
        "eqsat_measured": eqsat.jit(fn, measure=True),
        "jax": jax.jit(fn),
        "jax_again": jax.jit(fn),
    }
    diff = max_abs_diff(variants["eqsat"](*args), variants["jax"](*args))
    (result,) = variants["eqsat"].results.values()
    variants["eqsat_measured"](*args)
    (guarded,) = variants["eqsat_measured"].results.values()
    times = interleaved({k: functools.partial(f, *args) for k, f in variants.items()}, repeats, min)
    report = result.report
    return {
        "program": name,
        "batch": batch,
        "dtype": dtype,
        "ops_before": result.original.op_counts(),
        "ops_after": result.program.op_counts(),
        "rules_fired": dict(report.rules_fired),
        "cost_before": report.cost_before,
        "cost_after": report.cost_after,
        "measured_note": guarded.report.note,
        **{f"{k}_s": t for k, t in times.items()},
        "speedup": times["jax"] / times["eqsat"],
        "speedup_measured": times["jax"] / times["eqsat_measured"],
        "noise": times["jax"] / times["jax_again"],
        "max_abs_diff": diff,
    }


def markdown(rows: list[dict[str, Any]]) -> str:
    """The README table: times, jax.jit against itself, and the ops eqsat's program is made of."""
    lines = [
        "| program | batch | dtype | jax.jit | eqsat.jit | speedup | `measure=True` | jax.jit again "
        "| eqsat's program |",
        "|---|---:|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        ops = ", ".join(f"{n} {op}" if n > 1 else op for op, n in r["ops_after"].items() if op != "reshape")
        lines.append(
            f"| {r['program']} | {r['batch']} | {r['dtype']} | {r['jax_s'] * 1e3:.3f} ms | "
            f"{r['eqsat_s'] * 1e3:.3f} ms | {r['speedup']:.2f}x | {r['speedup_measured']:.2f}x | "
            f"{r['noise']:.2f}x | {ops} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="batch 1, float32")
    args = parser.parse_args(argv)
    rows = []
    for name in PROGRAMS:
        for dtype in ("float32",) if args.quick else ("float32", "bfloat16"):
            for batch in (1,) if args.quick else (1, 8):
                row = measure(name, batch, dtype, args.repeats)
                print(
                    f"{name:11s} b{batch} {dtype:9s} {row['speedup']:5.2f}x  measured "
                    f"{row['speedup_measured']:5.2f}x  jax again {row['noise']:5.2f}x  "
                    f"eqsat {row['eqsat_s'] * 1e3:7.3f} ms  jax {row['jax_s'] * 1e3:7.3f} ms",
                    flush=True,
                )
                rows.append(row)
    print(markdown(rows))
    print(f"wrote {write('mirage', {'repeats': args.repeats, 'rows': rows})}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
