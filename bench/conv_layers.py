"""The 3x3 stride-1 layers of ResNet-18/34 at 224 input (56x56x64 to 7x7x512), batch 1 and 8, NHWC and
NCHW, float32: every formulation eqsat has of each (XLA's conv, im2col, a product per tap, Winograd's
F(2x2, 3x3) and F(4x4, 3x3)), each run alone with its kernel constant (as XLA compiles a deployed
model's), interleaved in one process, median; with the direct conv's rate against this machine's
matmul peak (what bounds it) and each formulation's largest error against float64.

    python -m bench.conv_layers            # -> bench/conv_layers.json
"""

from __future__ import annotations

import argparse
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bench.common import interleaved, matmul_gflops, write
from eqsat.ops import OPS
from eqsat.ops.conv import ALGORITHMS, WINOGRAD

LAYERS = ((56, 64), (28, 128), (14, 256), (7, 512))
WINDOW = {"strides": (1, 1), "padding": (1, 1, 1, 1), "dilations": (1, 1), "groups": 1}


def measure(size: int, channels: int, batch: int, layout: str, repeats: int) -> dict[str, Any]:
    rng = np.random.default_rng(0)
    nchw = layout == "NCHW"
    x = rng.normal(size=(batch, channels, size, size) if nchw else (batch, size, size, channels))
    w = rng.normal(size=(channels, channels, 3, 3) if nchw else (3, 3, channels, channels))
    w *= np.sqrt(2 / (9 * channels))  # He's initialization: outputs of the inputs' scale
    conv = OPS["conv2d"].lower
    with jax.enable_x64(True):
        exact = np.asarray(conv(x, w, **WINDOW, layout=layout))
    x32, w32 = jnp.asarray(x, jnp.float32), jnp.asarray(w, jnp.float32)
    fns = {
        a: jax.jit(lambda x, a=a: conv(x, w32, **WINDOW, layout=layout, algorithm=a))
        for a in (*ALGORITHMS, *WINOGRAD)
    }
    errors = {a: float(np.max(np.abs(np.asarray(f(x32), np.float64) - exact))) for a, f in fns.items()}
    seconds = interleaved({a: lambda f=f: f(x32) for a, f in fns.items()}, repeats)
    best = min(seconds, key=seconds.__getitem__)
    flops = 2.0 * batch * size * size * channels * channels * 9
    return {
        "layer": f"{size}x{size}x{channels}",
        "batch": batch,
        "layout": layout,
        "seconds": seconds,
        "best": best,
        "best_vs_direct": seconds["direct"] / seconds[best],
        "direct_gflops": flops / seconds["direct"] / 1e9,
        "max_abs_error": errors,
        "output_scale": float(np.max(np.abs(exact))),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args(argv)
    peak = matmul_gflops()
    rows = []
    for size, channels in LAYERS:
        for batch in (1, 8):
            for layout in ("NHWC", "NCHW"):
                row = measure(size, channels, batch, layout, args.repeats)
                rows.append(row)
                times = " ".join(f"{a} {s * 1e3:.2f}" for a, s in row["seconds"].items())
                print(
                    f"{row['layer']:10s} b{batch} {layout}: {times} ms; best {row['best']} "
                    f"{row['best_vs_direct']:.2f}x direct; direct {row['direct_gflops']:.0f} GFLOP/s",
                    flush=True,
                )
    print(
        f"wrote {write('conv_layers', {'matmul_peak_gflops': peak, 'repeats': args.repeats, 'rows': rows})}"
    )


if __name__ == "__main__":
    main()
