"""Long sequences and training: causal attention and a 2-layer flax decoder, eqsat.jit against
jax.jit, forward and training step.

Causal attention is written as libraries write it (``einsum`` in BSHD layout, a ``jnp.where`` mask
from ``arange``, ``jax.nn.softmax``), 8 heads of 64. A training step is ``jax.value_and_grad`` of a
loss through the function: ``jax.jit(value_and_grad(eqsat.jit(loss)))`` against
``jax.jit(value_and_grad(loss))``, and a second jax.jit of the same (``noise``: the row's jax.jit
against itself). Times are medians of interleaved calls in one process; peak memory
is the growth of peak RSS during one call in a fresh process (``bench.memory``), measured first: a
side that runs out of memory there is recorded as such and not timed. Each row also gives the rate
both sides reach, in GFLOP/s of the program as written (XLA's flop count of jax.jit's program), next
to this machine's matmul peak in the case's dtype, measured in the same run.

    python -m bench.long_context            # all rows -> bench/long_context.json
    python -m bench.long_context --quick    # S = 512 and 1024, batch 1, float32
    python -m bench.long_context --long     # S = 4096 to 32768, batch 1 -> bench/long_context_to_32k.json

``--long`` rows also give each side's memory as XLA's buffer assignment counts it (arguments, results,
temporaries) beside the measured peak, and eqsat.jit's first call from an empty program cache and
kernel table (a fresh process: optimizing, compiling and running, its seconds and peak RSS growth). A
side whose buffer assignment needs more than ``FITS`` of this machine's memory is not run (jax.jit's
S x S scores at S = 32768), and the row says how much it needs. A second fresh process then makes the
first call again from the program cache the first left (tracing, reading, compiling and running), and
the rows give jax.jit's peak RSS over each first call's beside the ratio of the compiled programs'.

    python -m bench.long_context --long --first-calls   # the first calls only, other figures kept

Each ``--long`` row is measured in a fresh process of its own.
"""

from __future__ import annotations

import argparse
import functools
import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import eqsat
from bench.child import child_json
from bench.common import OUT, interleaved, matmul_gflops, max_abs_diff, merged_rows, write
from bench.library_models import linen_transformer
from bench.memory import probe
from eqsat.speed import compiled_bytes, machine_bytes, released

LENGTHS = (512, 1024, 2048, 4096, 8192)
BATCHES = (1, 4)
DTYPES = ("float32", "bfloat16")
HEADS, HEAD_DIM = 8, 64
LONG_LENGTHS = (4096, 8192, 16384, 32768)
LONG_REPEATS = 5  # samples per side: medians of 3 moved by up to 20% between runs of a row
WARM_ROUNDS = 2  # untimed calls of each side before a --long row's samples
FITS = 0.75  # a side whose XLA buffer assignment needs more of this machine's memory is not run
DECODER_LENGTHS = (1024, 4096)
DECODER_WIDTH, DECODER_HEADS = 256, 4
REPEATS = 5

Variants = dict[str, Callable[..., Any]]


def attention(causal: bool) -> Callable[..., jax.Array]:
    """Self-attention as libraries write it, causal or not: (B, S, H, D) in and out."""

    def attend(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
        s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(q.shape[-1]).astype(q.dtype)
        if causal:
            i = jnp.arange(q.shape[1])
            s = jnp.where(i[:, None] >= i[None, :], s, -jnp.inf)
        return jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(s, axis=-1), v)

    return attend


causal_attention = attention(causal=True)


def _attention_loss(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    return jnp.mean(jnp.square(causal_attention(q, k, v).astype(jnp.float32)))


def _normal(shape: tuple[int, ...], dtype: Any, seed: int) -> jax.Array:
    return jnp.asarray(np.random.default_rng(seed).normal(size=shape), dtype)


def _problem(case: str) -> tuple[Callable[..., Any], Callable[..., Any], tuple[Any, ...], tuple[int, ...]]:
    """A case's forward function, its loss, their arguments and the loss's differentiated ones."""
    kind, *fields, _ = case.split("-")
    seq = int(fields[-1].removeprefix("s"))
    if kind == "attention":
        dtype, batch = jnp.dtype(fields[0]), int(fields[1].removeprefix("b"))
        args = tuple(_normal((batch, seq, HEADS, HEAD_DIM), dtype, seed) for seed in range(3))
        return causal_attention, _attention_loss, args, (0, 1, 2)
    model = linen_transformer(2, DECODER_WIDTH, DECODER_HEADS)
    x = _normal((1, seq, DECODER_WIDTH), jnp.float32, 0)

    def forward(params: Any, x: jax.Array) -> jax.Array:
        return model.apply(params, x)

    def loss(params: Any, x: jax.Array) -> jax.Array:
        return jnp.mean(jnp.square(forward(params, x)))

    return forward, loss, (model.init(jax.random.key(0), x[:, :8]), x), (0,)


def build(case: str, gradient: str = "measure") -> tuple[Variants, tuple[Any, ...]]:
    """The eqsat and jax callables of a case and its arguments. Cases are named
    ``attention-<dtype>-b<batch>-s<seq>-<forward|train>`` or ``decoder-s<seq>-<forward|train>``;
    ``gradient`` is eqsat.jit's for training steps."""
    forward, loss, args, argnums = _problem(case)
    if case.endswith("-forward"):
        return {"eqsat": eqsat.jit(forward), "jax": jax.jit(forward), "jax_again": jax.jit(forward)}, args
    return {
        "eqsat": jax.jit(jax.value_and_grad(eqsat.jit(loss, gradient=gradient), argnums=argnums)),
        "jax": jax.jit(jax.value_and_grad(loss, argnums=argnums)),
        "jax_again": jax.jit(jax.value_and_grad(loss, argnums=argnums)),
    }, args


def differentiated(case: str) -> tuple[str, str]:
    """What eqsat.jit differentiates in a training case (``input`` or ``optimized``), as its first
    differentiation decides it in this process (timing both training steps), and its note."""
    _, loss, args, argnums = _problem(case)
    jitted = eqsat.jit(loss)
    jax.jit(jax.value_and_grad(jitted, argnums=argnums)).lower(*args)
    (result,) = jitted.results.values()
    note = result.report.note
    return ("input" if "function as written is differentiated" in note else "optimized"), note


def _probed(case: str, variant: str) -> dict[str, Any] | None:
    """``bench.memory_probe``'s measurement of one call in a fresh process, or None when that process
    runs out of memory (killed by the kernel, or XLA's or Python's allocation failed); any other
    failure is raised."""
    try:
        return probe(case, 0, variant)
    except subprocess.CalledProcessError as e:
        if e.returncode < 0 or any(m in (e.stderr or "") for m in ("RESOURCE_EXHAUSTED", "MemoryError")):
            return None
        raise RuntimeError(f"{case} ({variant}) failed:\n{e.stderr}") from e


@functools.cache
def _matmul_peak(dtype: str) -> float:
    return matmul_gflops(2048, dtype)


def _dtype(case: str) -> str:
    return case.split("-")[1] if case.startswith("attention-") else "float32"


def _memory(case: str, variant: str) -> int | None:
    """Peak RSS growth of one call in a fresh process, or None where it ran out of memory."""
    probed = _probed(case, variant)
    return None if probed is None else int(probed["peak_rss_growth"])


def measure(case: str, repeats: int = REPEATS, long: bool = False) -> dict[str, Any]:
    """A row. A training case's eqsat.jit differentiates what its first differentiation chose here
    (timing in that process would leave its memory pooled, and the measured call would not grow).
    ``long``: with XLA's buffer assignment of each side, a side it does not fit not run, and
    eqsat.jit's first call from an empty cache."""
    row: dict[str, Any] = {"case": case, "repeats": repeats}
    if long:
        row |= first_calls(case)
    gradient, note = differentiated(case) if case.endswith("-train") else ("measure", "")
    fns, args = build(case, gradient)
    sides = ("eqsat", "jax")
    fits = dict.fromkeys(sides, True)
    if long:
        for v in sides:
            row[f"{v}_xla_bytes"] = need = compiled_bytes(fns[v].lower(*args).compile())
            fits[v] = need <= FITS * machine_bytes()
    memory = {v: _memory(case, f"{v}:{gradient}" if v == "eqsat" else v) if fits[v] else None for v in sides}
    memory["jax_again"] = memory["jax"]  # the same program: a second jax.jit, this row's noise
    runs = {v: (lambda fn=fn: fn(*args)) for v, fn in fns.items() if memory[v] is not None}
    if long:
        _warm(runs)
    times = interleaved(runs, repeats) if runs else {}
    row["gflop"] = gflop = fns["jax"].lower(*args).compile().cost_analysis()["flops"] / 1e9
    if note:
        row["differentiated"], row["gradient_note"] = gradient, note
    row["matmul_peak_gflops"] = _matmul_peak(_dtype(case))
    for v in ("eqsat", "jax"):
        row[f"{v}_s"] = times.get(v)
        row[f"{v}_peak_rss_bytes"] = memory[v]
        row[f"{v}_gflops"] = gflop / times[v] if v in times else None
    row["jax_again_s"] = times.get("jax_again")
    if len(times) == 3:
        row["speedup"] = times["jax"] / times["eqsat"]
        row["noise"] = times["jax"] / times["jax_again"]
        row["max_abs_diff"] = max_abs_diff(runs["eqsat"](), runs["jax"]())
    if memory["eqsat"] and memory["jax"]:
        row["memory_ratio"] = memory["jax"] / memory["eqsat"]
    return row


def _warm(runs: dict[str, Callable[[], Any]]) -> None:
    """``WARM_ROUNDS`` untimed calls of every side, each followed by ``released``: a fresh process's
    first calls at these sizes run slower (the float32 forward at S = 8192, interleaved with jax.jit:
    1.0-1.3 s over its first five calls, 0.51-0.53 s after)."""
    for _ in range(WARM_ROUNDS):
        for run in runs.values():
            jax.block_until_ready(run())
            released()


def first_calls(case: str) -> dict[str, Any]:
    """eqsat.jit's first call of ``case`` in a fresh process, its seconds and peak RSS growth: from an
    empty cache (``eqsat_cold_``: optimizing included), then from the program cache that call left
    (``eqsat_cached_``: tracing, reading, compiling and running)."""
    cold = _probed(case, "eqsat-cold")
    cached = cold and _probed(case, f"eqsat-cached:{cold['cache_dir']}")
    return {
        f"eqsat_{kind}_{field}": probed and probed[key]
        for kind, probed in (("cold", cold), ("cached", cached))
        for field, key in (("s", "seconds"), ("peak_rss_bytes", "peak_rss_growth"))
    }


def _fresh_row(case: str) -> dict[str, Any]:
    """A ``--long`` row measured in a fresh process: a row's timings must not depend on the rows
    before it (in one process, the bfloat16 forward at S = 4096 took 246 ms after the float32 rows up
    to S = 32768, and 103 ms on its own)."""
    return child_json(["bench.long_context", "--long", "--row", case], quiet=False)


def cases(quick: bool) -> list[str]:
    if quick:
        return [f"attention-float32-b1-s{s}-{m}" for s in (512, 1024) for m in ("forward", "train")]
    rows = [
        f"attention-{d}-b{b}-s{s}-{m}"
        for d in DTYPES
        for b in BATCHES
        for s in LENGTHS
        for m in ("forward", "train")
    ]
    return rows + [f"decoder-s{s}-{m}" for s in DECODER_LENGTHS for m in ("forward", "train")]


def long_cases() -> list[str]:
    return [f"attention-{d}-b1-s{s}-{m}" for d in DTYPES for s in LONG_LENGTHS for m in ("forward", "train")]


def _cell(seconds: float | None, memory: int | None) -> str:
    if memory is None:
        return "out of memory"
    return f"{seconds * 1e3:.0f} ms, {memory / 2**20:.0f} MiB" if seconds is not None else "—"


def _rate(gflops: float | None) -> str:
    return "—" if gflops is None else f"{gflops:.0f}"


def _gib(n: float | None) -> str:
    return "—" if n is None else f"{n / 2**30:.2f} GiB"


def _ratios(row: dict[str, Any]) -> tuple[str, str]:
    """A row's speedup and memory ratio over jax.jit, or dashes where a side was not run."""
    speedup = f"{row['speedup']:.2f}x" if "speedup" in row else "—"
    return speedup, f"{row['memory_ratio']:.1f}x" if "memory_ratio" in row else "—"


def long_markdown(rows: list[dict[str, Any]]) -> str:
    """The ``--long`` rows: each side's time, peak RSS and XLA's buffer assignment, and the cold call."""
    lines = [
        "| case | eqsat.jit first call, empty cache (s, peak RSS) | first call, program cached "
        "| eqsat.jit (time, peak RSS, XLA) | jax.jit (time, peak RSS, XLA) | speedup | memory ratio "
        "| memory ratio, first calls |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        firsts = [_first(r, kind) for kind in ("cold", "cached")]
        sides = []
        for v in ("eqsat", "jax"):
            xla = _gib(r[f"{v}_xla_bytes"])
            fits = r[f"{v}_xla_bytes"] <= FITS * machine_bytes()
            ran = _cell(r[f"{v}_s"], r[f"{v}_peak_rss_bytes"]) if fits else "does not fit, not run"
            sides.append(f"{ran}, XLA {xla}")
        speedup, ratio = _ratios(r)
        lines.append(
            f"| {r['case']} | {' | '.join(firsts)} | {sides[0]} | {sides[1]} | {speedup} | {ratio} "
            f"| {_first_ratios(r)} |"
        )
    return "\n".join(lines)


def _first(row: dict[str, Any], kind: str) -> str:
    """A first call's cell (``kind``: cold or cached); a dash where the row predates its measure."""
    if f"eqsat_{kind}_s" not in row:
        return "—"
    seconds = row[f"eqsat_{kind}_s"]
    return (
        "out of memory"
        if seconds is None
        else f"{seconds:.1f} s, {_gib(row[f'eqsat_{kind}_peak_rss_bytes'])}"
    )


def _first_ratios(row: dict[str, Any]) -> str:
    """jax.jit's peak RSS over each first call's (empty cache / program cached), where both ran."""
    jax_peak = row.get("jax_peak_rss_bytes")
    firsts = [row.get(f"eqsat_{kind}_peak_rss_bytes") for kind in ("cold", "cached")]
    if not jax_peak or not all(firsts):
        return "—"
    return " / ".join(f"{jax_peak / first:.1f}x" for first in firsts)


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| case | eqsat.jit (time, peak RSS) | jax.jit (time, peak RSS) | speedup | memory ratio "
        "| GFLOP/s eqsat / jax / matmul peak | differentiated |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        speedup, ratio = _ratios(r)
        eq = _cell(r["eqsat_s"], r["eqsat_peak_rss_bytes"])
        jx = _cell(r["jax_s"], r["jax_peak_rss_bytes"])
        rates = " / ".join(_rate(r.get(k)) for k in ("eqsat_gflops", "jax_gflops", "matmul_peak_gflops"))
        chosen = {"input": "as written", "optimized": "optimized"}.get(r.get("differentiated", ""), "")
        lines.append(f"| {r['case']} | {eq} | {jx} | {speedup} | {ratio} | {rates} | {chosen} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="S = 512 and 1024, batch 1, float32")
    parser.add_argument(
        "--long", action="store_true", help="S = 4096 to 32768, batch 1: XLA's memory, the first call cold"
    )
    parser.add_argument(
        "--cases", nargs="*", help="re-measure these cases only (names as in the JSON), replacing their rows"
    )
    parser.add_argument("--row", help=argparse.SUPPRESS)  # one --long row, measured in this process
    parser.add_argument(
        "--first-calls",
        action="store_true",
        help="with --long: re-measure eqsat.jit's first calls only, in the rows of the last run's file",
    )
    opts = parser.parse_args(argv)
    if opts.row:
        print(json.dumps(measure(opts.row, LONG_REPEATS, long=True)))
        return
    name, table = ("long_context_to_32k", long_markdown) if opts.long else ("long_context", markdown)
    if opts.first_calls and not opts.long:
        parser.error("--first-calls re-measures the --long rows: give --long too")
    path = OUT / f"{name}.json"
    earlier = {r["case"]: r for r in json.loads(path.read_text())["rows"]} if opts.first_calls else {}
    rows = []
    for case in opts.cases or (long_cases() if opts.long else cases(opts.quick)):
        if opts.first_calls:
            rows.append(earlier[case] | first_calls(case))
        else:
            rows.append(_fresh_row(case) if opts.long else measure(case))
        print(table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    if opts.cases:  # re-measured cases replace their rows in the last full run's file
        rows = merged_rows(path, rows, "case")
    path = write(name, {"heads": HEADS, "head_dim": HEAD_DIM, "rows": rows})
    print(table(rows))
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
