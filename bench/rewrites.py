"""The rewrites that make programs faster, measured against plain jax.jit in the same process.

Cases: the matmul chain ((A@B)@C)@x with 2048² matrices; attention (B=1, H=8, D=64) for S in
512..8192 (and 32768 under eqsat alone: naive scores would need 32 GiB); the Q/K/V projections of a
BERT-base layer; the distributivity case x@W + y@W. For each: speed-up (median of interleaved runs),
peak memory (attention: peak RSS growth of one call in a fresh process), the ops eqsat chose, and the
numeric difference. Attention rows also give the GFLOP/s each side reached, next to this machine's
matmul peak (a 2048³ float32 matmul under jax.jit): the ceiling any exact attention kernel works under.

    python -m bench.rewrites [--quick] [--name NAME]   # writes bench/NAME.json, default rewrites.json
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import eqsat
from bench.common import interleaved, matmul_gflops, max_abs_diff, write
from bench.memory import peak_rss_growth

RNG = np.random.default_rng(0)


def _normal(*shape: int, scale: float = 1.0) -> jax.Array:
    return jnp.asarray(RNG.normal(size=shape) * scale, jnp.float32)


def case(
    name: str, fn: Callable[..., Any], args: tuple, repeats: int, baseline: bool = True
) -> dict[str, Any]:
    fast = eqsat.jit(fn)
    out = fast(*args)
    result = next(iter(fast.results.values()))
    row: dict[str, Any] = {
        "case": name,
        "ops": result.program.op_counts(),
        "rules_fired": result.report.rules_fired,
        "optimize_s": sum(result.report.timings.values()),
    }
    if baseline:
        plain = jax.jit(fn)
        times = interleaved({"eqsat": lambda: fast(*args), "jax": lambda: plain(*args)}, repeats)
        row |= {
            "eqsat_s": times["eqsat"],
            "jax_s": times["jax"],
            "speedup": times["jax"] / times["eqsat"],
            "max_abs_diff": max_abs_diff(out, plain(*args)),
        }
    else:
        row["eqsat_s"] = interleaved({"eqsat": lambda: fast(*args)}, max(1, repeats // 5))["eqsat"]
    print({k: v for k, v in row.items() if k != "rules_fired"}, flush=True)
    return row


def matmul_peak(n: int, repeats: int) -> dict[str, Any]:
    """GFLOP/s of an n³ float32 matmul under jax.jit (best run): the machine's practical peak."""
    gflops = matmul_gflops(n, "float32", repeats)
    row = {"case": "matmul_peak", "jax_s": 2 * n**3 / gflops / 1e9, "jax_gflops": gflops}
    print(row, flush=True)
    return row


def chain(a: jax.Array, b: jax.Array, c: jax.Array, x: jax.Array) -> jax.Array:
    return ((a @ b) @ c) @ x


def attention(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / np.sqrt(q.shape[-1])
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(scores, axis=-1), v)


def qkv(x: jax.Array, w: tuple, b: tuple) -> tuple:
    return tuple(x @ wi + bi for wi, bi in zip(w, b, strict=True))


def distribute(x: jax.Array, y: jax.Array, w: jax.Array) -> jax.Array:
    return x @ w + y @ w


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smaller sizes and fewer repeats (smoke test)")
    parser.add_argument("--name", default="rewrites", help="write bench/NAME.json (default: rewrites)")
    args = parser.parse_args()
    n, repeats = (512, 3) if args.quick else (2048, 10)
    rows = [case("chain", chain, (*(_normal(n, n, scale=n**-0.5) for _ in range(3)), _normal(n)), repeats)]
    rows.append(matmul_peak(n, repeats))
    lengths = (256, 512) if args.quick else (512, 1024, 2048, 4096, 8192)
    for s in lengths:
        q, k, v = (_normal(1, 8, s, 64) for _ in range(3))
        row = case(f"attention_S{s}", attention, (q, k, v), max(5, 2 * repeats // (s // 1024 or 1)))
        flops = 4 * q.shape[1] * s * s * q.shape[-1]  # q kᵀ and (softmax) v, 2 flops per multiply-add
        row |= {f"{v}_gflops": flops / row[f"{v}_s"] / 1e9 for v in ("eqsat", "jax")}
        row |= {f"{v}_peak_rss_bytes": peak_rss_growth("attention", s, v) for v in ("eqsat", "jax")}
        row["memory_ratio"] = row["jax_peak_rss_bytes"] / max(row["eqsat_peak_rss_bytes"], 1)
        print(
            f"  peak RSS growth: eqsat {row['eqsat_peak_rss_bytes'] / 2**20:.0f} MB, "
            f"jax {row['jax_peak_rss_bytes'] / 2**20:.0f} MB",
            flush=True,
        )
        rows.append(row)
    if not args.quick:
        q, k, v = (_normal(1, 8, 32768, 64) for _ in range(3))
        row = case("attention_S32768", attention, (q, k, v), 5, baseline=False)
        row["eqsat_peak_rss_bytes"] = peak_rss_growth("attention", 32768, "eqsat")
        rows.append(row)
    d = 256 if args.quick else 768
    w = tuple(_normal(d, d, scale=d**-0.5) for _ in range(3))
    b = tuple(_normal(d) for _ in range(3))
    rows.append(case("qkv", qkv, (_normal(1, 128, d), w, b), repeats * 3))
    m = 512 if args.quick else 2048
    rows.append(case("distributivity", distribute, (_normal(m, m), _normal(m, m), _normal(m, m)), repeats))
    print(f"wrote {write(args.name, {'cases': rows})}")


if __name__ == "__main__":
    main()
