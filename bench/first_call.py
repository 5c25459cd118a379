"""The first call, in fresh processes: what eqsat.jit costs over jax.jit when a process starts cold, and
when a second process finds the caches of the first (eqsat's cache of optimized programs, and JAX's
persistent compilation cache, both in temporary directories made for each pair of processes).

Models: a 2-layer flax linen encoder (width 256, 4 heads, S = 128; weights passed as arguments), a
12-layer BERT-base (S = 128; weights as arguments), and a ResNet-18-style flax model (CIFAR-sized
input, batch norm on running statistics, weights closed over as constants, as ``lambda x:
model.apply(variables, x)`` has them). Each process times the first call as a user makes it
(``first_call_s``: trace, compile, run; for eqsat.jit by default the function runs as written while
it is optimized in the background) and, for eqsat.jit, the seconds from that call until the optimized
program has run (``optimized_s``: the background optimization, then a call that traces and compiles
it); the phases inside eqsat's optimizer come from its report. eqsat.jit twice: as users get it
(``eqsat``), and waiting for the optimization on the first call (``eqsat-wait``,
``EQSAT_BACKGROUND=0``). Variants and models interleaved, ``--repeats`` pairs of processes each (5 by
default).

    python -m bench.first_call             # -> bench/first_call.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from bench.common import write

MODELS = ("encoder", "bert12", "resnet")
VARIANTS = ("jax", "eqsat", "eqsat-wait")


def _encoder() -> tuple[Callable[..., Any], tuple[Any, ...]]:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from bench.library_models import linen_transformer

    model = linen_transformer(2, 256, 4, causal=False)
    x = jnp.asarray(np.random.default_rng(0).normal(size=(1, 128, 256)), jnp.float32)
    params = model.init(jax.random.key(0), x)
    return model.apply, (params, x)


def _bert12() -> tuple[Callable[..., Any], tuple[Any, ...]]:
    from bench import models

    return models.make_bert(12, 128)


def _resnet() -> tuple[Callable[..., Any], tuple[Any, ...]]:
    import flax.linen as nn
    import jax
    import jax.numpy as jnp

    class Block(nn.Module):
        features: int
        stride: int

        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            def conv_bn(y: jax.Array, kernel: int, stride: int) -> jax.Array:
                y = nn.Conv(self.features, (kernel, kernel), (stride, stride), use_bias=False)(y)
                return nn.BatchNorm(use_running_average=True)(y)

            y = nn.relu(conv_bn(x, 3, self.stride))
            y = conv_bn(y, 3, 1)
            shortcut = x if x.shape == y.shape else conv_bn(x, 1, self.stride)
            return nn.relu(y + shortcut)

    class ResNet18(nn.Module):
        @nn.compact
        def __call__(self, x: jax.Array) -> jax.Array:
            x = nn.relu(nn.BatchNorm(use_running_average=True)(nn.Conv(64, (3, 3), use_bias=False)(x)))
            for i, features in enumerate((64, 128, 256, 512)):
                x = Block(features, 1)(Block(features, 1 if i == 0 else 2)(x))
            return nn.Dense(10)(jnp.mean(x, axis=(1, 2)))

    model = ResNet18()
    keys = jax.random.split(jax.random.key(0), 3)
    x = jax.random.normal(keys[0], (8, 32, 32, 3))
    variables = model.init(keys[1], x)
    stats = jax.tree_util.tree_map(
        lambda v: jax.random.uniform(keys[2], v.shape) + 0.5, variables["batch_stats"]
    )
    variables = {**variables, "batch_stats": stats}
    return (lambda x: model.apply(variables, x)), (x,)


BUILD: dict[str, Callable[[], tuple[Callable[..., Any], tuple[Any, ...]]]] = {
    "encoder": _encoder,
    "bert12": _bert12,
    "resnet": _resnet,
}


def _child(model: str, variant: str) -> dict[str, Any]:
    """One process's first call (the caches are set by the environment)."""
    t = time.perf_counter()
    import jax

    import eqsat

    import_s = time.perf_counter() - t
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    eqsat.config.update("background", variant != "eqsat-wait")
    fn, args = BUILD[model]()
    jax.block_until_ready(args)
    jitted = jax.jit(fn) if variant == "jax" else eqsat.jit(fn)
    t0 = time.perf_counter()
    jax.block_until_ready(jitted(*args))
    t1 = time.perf_counter()
    out: dict[str, Any] = {"import_s": import_s, "first_call_s": t1 - t0}
    if variant != "jax":
        jitted.wait()
        jax.block_until_ready(jitted(*args))  # the optimized program, traced and compiled if new
        out["optimized_s"] = time.perf_counter() - t0
        (result,) = jitted.results.values()
        out["optimizer_s"] = result.report.timings
        out["cache"] = result.report.cache
    return out


def _fresh(model: str, variant: str, env: dict[str, str]) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-m", "bench.first_call", "--child", model, variant],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
    )
    if proc.returncode:
        raise RuntimeError(f"{model}/{variant} child failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _pair(model: str, variant: str) -> dict[str, dict[str, Any]]:
    """A cold process, then a second one with the caches the first left."""
    with tempfile.TemporaryDirectory() as jax_cache, tempfile.TemporaryDirectory() as eqsat_cache:
        env = {
            "JAX_COMPILATION_CACHE_DIR": jax_cache,
            "EQSAT_CACHE_DIR": eqsat_cache,
            "EQSAT_ENABLE_CACHE": "1",
        }
        return {"cold": _fresh(model, variant, env), "second": _fresh(model, variant, env)}


def summarize(runs: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    """Medians per model, variant and start (cold or second), and eqsat's first call over jax.jit's."""
    out: dict[str, Any] = {}
    for model, variants in runs.items():
        row: dict[str, Any] = {}
        for start in ("cold", "second"):
            for variant, pairs in variants.items():
                samples = [p[start] for p in pairs]
                keys = ("first_call_s", "import_s") + (("optimized_s",) if variant != "jax" else ())
                row[f"{variant}_{start}"] = {k: statistics.median(s[k] for s in samples) for k in keys}
                if variant != "jax":
                    row[f"{variant}_{start}"]["cache"] = sorted({s["cache"] for s in samples})
                    phases = samples[0]["optimizer_s"]
                    row[f"{variant}_{start}"]["optimizer_s"] = {
                        k: statistics.median(s["optimizer_s"].get(k, 0.0) for s in samples) for k in phases
                    }
            for variant in VARIANTS[1:]:
                row[f"{variant}_{start}_ratio"] = (
                    row[f"{variant}_{start}"]["first_call_s"] / row[f"jax_{start}"]["first_call_s"]
                )
        out[model] = row
    return out


def markdown(summary: dict[str, Any]) -> str:
    lines = [
        "| model | start | jax.jit | eqsat.jit | ratio | optimized after | eqsat.jit waiting | ratio |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for model, row in summary.items():
        for start in ("cold", "second"):
            e, wait, j = row[f"eqsat_{start}"], row[f"eqsat-wait_{start}"], row[f"jax_{start}"]
            lines.append(
                f"| {model} | {start} | {j['first_call_s']:.2f} s | {e['first_call_s']:.2f} s | "
                f"{row[f'eqsat_{start}_ratio']:.2f}x | {e['optimized_s']:.2f} s | "
                f"{wait['first_call_s']:.2f} s | {row[f'eqsat-wait_{start}_ratio']:.2f}x |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, default=5, help="pairs of processes per model and variant")
    parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {', '.join(MODELS)}")
    opts = parser.parse_args(argv)
    if opts.child:
        print(json.dumps(_child(*opts.child)))
        return
    models = opts.models.split(",")
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {m: {v: [] for v in VARIANTS} for m in models}
    for i in range(opts.repeats):
        for model in models:
            for variant in VARIANTS:
                runs[model][variant].append(_pair(model, variant))
                pair = runs[model][variant][-1]
                print(
                    f"[{i + 1}/{opts.repeats}] {model} {variant}: cold {pair['cold']['first_call_s']:.2f} s, "
                    f"second {pair['second']['first_call_s']:.2f} s",
                    file=sys.stderr,
                )
    summary = summarize(runs)
    path = write("first_call", {"summary": summary, "runs": runs})
    print(markdown(summary))
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
