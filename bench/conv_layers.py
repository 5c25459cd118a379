"""Conv layers of common CNNs at 224 input, float32, NHWC and NCHW: every formulation eqsat has of each
(XLA's conv, im2col, a product per tap, and for stride-1 3x3 convs Winograd's F(2x2, 3x3) and
F(4x4, 3x3)), each run alone with its kernel constant (as XLA compiles a deployed model's),
interleaved in one process, median; with each formulation's largest error against float64, and what
bounds the layer on this machine: its arithmetic at the matmul peak, and its memory traffic (input,
weights and output once each) at the bandwidth of a streaming copy, both measured in the same run.

    python -m bench.conv_layers                          # ResNet's 3x3 layers -> bench/conv_layers.json
    python -m bench.conv_layers --network mobilenet_v2   # -> bench/conv_layers_mobilenet_v2.json
    python -m bench.conv_layers --splits                 # XLA's conv over slices of the batch or of
                                                         # the rows too -> bench/conv_layers_splits.json
    python -m bench.conv_layers --network pp_lcnet_224   # a Paddle network's every distinct conv, with
                                                         # oneDNN's time -> conv_layers_pp_lcnet_224.json
    python -m bench.conv_layers --onednn ...             # under eqsat.xla_flags.ONEDNN_CPU (XLA's conv
                                                         # is oneDNN's) -> conv_layers_..._onednn.json

ResNet's rows are its stride-1 3x3 layers (56x56x64 to 7x7x512) at batch 1 and 8; MobileNetV2's every
distinct layer (its 1x1 expansions and projections, its depthwise 3x3s) at batch 8. A network of
``bench.paddle_nets`` at 224 (``pp_lcnet_224``, ...): the convs of the program Paddle saved, as eqsat
loads it, at batch 8, and in NCHW (Paddle's layout) what Paddle Inference with oneDNN takes for the same
conv alone (``onednn``: one Paddle conv layer saved and run as a deployed model is, on every core,
timed after the XLA formulations: Paddle's OpenMP threads keep spinning after a run). The process keeps
the memory its calls free (``eqsat.keep_host_memory``), as a deployment would: otherwise glibc maps
every block above 32 MiB afresh and each call faults it in again.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import eqsat
from bench.common import interleaved, matmul_gflops, rerun_under, write
from eqsat import xla_flags
from eqsat.common_convs import NETWORKS, ConvLayer
from eqsat.ir import Program
from eqsat.ops import OPS
from eqsat.ops.conv import ALGORITHMS, CONV_AXES, WINOGRAD

SIZE = 224
BATCHES = {"resnet18": (1, 8), "mobilenet_v2": (8,)}
PADDLE_BATCH = 8
STREAM_BYTES = 256 * 2**20
SPLITS = (2, 4)  # slices of the batch or of the output's rows (--splits)


def layers(network: str) -> Counter[ConvLayer]:
    """The network's distinct layers at 224 (ResNet-18: its stride-1 3x3 ones; a Paddle network's: those
    of the program it saved), each with how many times the network runs it."""
    if network not in NETWORKS:  # one of bench.paddle_nets.DEPLOYED (that module loads Paddle)
        from bench.paddle_nets import loaded, save

        with tempfile.TemporaryDirectory() as root:
            return program_layers(loaded(network, save(network, Path(root)), 1))
    found = Counter(NETWORKS[network](SIZE))
    if network == "resnet18":
        return Counter({layer: n for layer, n in found.items() if (layer.kernel, layer.stride) == (3, 1)})
    return found


def program_layers(program: Program) -> Counter[ConvLayer]:
    """The distinct convs of ``program`` that a ``ConvLayer`` describes (square kernel and map, one
    stride, undilated, SAME padding), in order of first appearance, each with how many times it runs;
    any other is named on stderr."""
    found: Counter[ConvLayer] = Counter()
    for op in program.live_ops():
        if op.name not in ("conv2d", "conv2d_bias_act"):
            continue
        x, w = (v.type.shape for v in op.inputs[:2])
        axes = CONV_AXES[op.attrs["layout"]]
        kernel, size = (w[a] for a in axes.kernel_spatial), (x[a] for a in axes.spatial)
        (kh, kw), (h, wi), (sh, sw) = kernel, size, op.attrs["strides"]
        layer = ConvLayer(x[axes.channel], w[axes.kernel_out], kh, sh, h, op.attrs["groups"])
        window = {k: tuple(v) if isinstance(v, list | tuple) else v for k, v in op.attrs.items()}
        same = all(window[k] == v for k, v in layer.window(window["layout"]).items())
        if (kh, h, sh) != (kw, wi, sw) or not same:
            print(f"left out: conv of {x} by {w}, {window}", file=sys.stderr)
            continue
        found[layer] += 1
    return found


def onednn_seconds(layer: ConvLayer, x: np.ndarray, w: np.ndarray, repeats: int) -> tuple[float, np.ndarray]:
    """Paddle Inference with oneDNN, on every core, running the conv alone (NCHW data ``x``, OIHW
    kernel ``w``) as a deployed model: its seconds per call (median) and its output."""
    from bench.paddle_nets import paddle, predictor, save_layer

    conv = paddle.nn.Conv2D(
        layer.channels_in,
        layer.channels_out,
        layer.kernel,
        layer.stride,
        padding=(layer.kernel - 1) // 2,
        groups=layer.groups,
        bias_attr=False,
    )
    conv.weight.set_value(w.astype(np.float32))
    with tempfile.TemporaryDirectory() as root:
        run = predictor(save_layer(conv, (x.shape[1:],), Path(root) / "conv"), True, os.cpu_count() or 1)
    data = [x.astype(np.float32)]
    return interleaved({"onednn": lambda: run(data)}, repeats)["onednn"], run(data)[0]


def stream_gbps(repeats: int) -> float:
    """GB/s of a streaming copy (read and write ``STREAM_BYTES`` each): the rate memory traffic is
    bounded by."""
    x = jnp.ones(STREAM_BYTES // 4, jnp.float32)
    double = jax.jit(lambda x: x * 2.0)
    return 2 * STREAM_BYTES / interleaved({"copy": lambda: double(x)}, repeats, statistic=min)["copy"] / 1e9


def split(conv: Callable[..., Any], window: dict[str, Any], along: str, parts: int) -> Callable[..., Any]:
    """XLA's conv (``conv``: the op's lowering, ``window`` its attributes) over ``parts`` slices of the
    batch (``along="batch"``) or of the output's rows (``"rows"``: each band reads the input rows its
    window needs, padding included), concatenated: the batch-split and spatially tiled formulations,
    to time against the whole conv. The batch (or the output's rows) must divide into ``parts``."""
    nchw = window["layout"] == "NCHW"
    row_axis = 2 if nchw else 1
    (stride, _), (top, bottom, *_) = window["strides"], window["padding"]

    def run(x: jax.Array, w: jax.Array) -> jax.Array:
        if along == "batch":
            return jnp.concatenate([conv(b, w, **window) for b in jnp.split(x, parts)])
        rows_in = x.shape[row_axis] + top + bottom
        kernel = w.shape[2 if nchw else 0]
        step = ((rows_in - kernel) // stride + 1) // parts  # output rows per band
        pads = [(0, 0)] * x.ndim
        pads[row_axis] = (top, bottom)
        padded, unpadded = jnp.pad(x, pads), {**window, "padding": (0, 0, *window["padding"][2:])}
        bands = [
            lax.slice_in_dim(
                padded, i * step * stride, (i * step + step - 1) * stride + kernel, axis=row_axis
            )
            for i in range(parts)
        ]
        return jnp.concatenate([conv(b, w, **unpadded) for b in bands], axis=row_axis)

    return run


def measure(
    layer: ConvLayer,
    batch: int,
    layout: str,
    repeats: int,
    peak_gflops: float,
    gbps: float,
    splits: bool = False,
    onednn: bool = False,
) -> dict[str, Any]:
    """Every formulation of ``layer`` timed (and with ``onednn``, in NCHW, Paddle Inference with oneDNN
    after them), each one's largest error against float64, the layer's bounds."""
    rng = np.random.default_rng(0)
    ci, co, k, size, groups = layer.channels_in, layer.channels_out, layer.kernel, layer.size, layer.groups
    nchw = layout == "NCHW"
    x = rng.normal(size=(batch, ci, size, size) if nchw else (batch, size, size, ci))
    w = rng.normal(size=(co, ci // groups, k, k) if nchw else (k, k, ci // groups, co))
    w *= np.sqrt(2 / (k * k * ci / groups))  # He's initialization: outputs of the inputs' scale
    window = layer.window(layout)
    conv = OPS["conv2d"].lower
    with jax.enable_x64(True):
        exact = np.asarray(conv(x, w, **window))
    x32, w32 = jnp.asarray(x, jnp.float32), jnp.asarray(w, jnp.float32)
    winograd = (k, layer.stride, groups) == (3, 1, 1)
    fns = {
        a: jax.jit(lambda x, a=a: conv(x, w32, **window, algorithm=a))
        for a in (*ALGORITHMS, *(WINOGRAD if winograd else ()))
    }
    if splits:
        rows_out = exact.shape[2 if nchw else 1]
        fns |= {
            f"direct, {along} in {n}": jax.jit(functools.partial(split(conv, window, along, n), w=w32))
            for along, size in (("batch", batch), ("rows", rows_out))
            for n in SPLITS
            if size % n == 0 and size > n
        }
    errors = {a: float(np.max(np.abs(np.asarray(f(x32), np.float64) - exact))) for a, f in fns.items()}
    seconds = interleaved({a: lambda f=f: f(x32) for a, f in fns.items()}, repeats)
    best = min(seconds, key=seconds.__getitem__)
    onednn_columns = {}
    if onednn and nchw:
        onednn_columns["onednn_s"], out = onednn_seconds(layer, x, w, repeats)
        errors["onednn"] = float(np.max(np.abs(out.astype(np.float64) - exact)))
        onednn_columns["best_vs_onednn"] = onednn_columns["onednn_s"] / seconds[best]
    flops = 2.0 * batch * exact[0].size * (ci // groups) * k * k
    traffic = 4.0 * (x.size + w.size + exact.size)
    arithmetic_s, traffic_s = flops / peak_gflops / 1e9, traffic / gbps / 1e9
    return {
        "layer": layer.name,
        "batch": batch,
        "layout": layout,
        "seconds": seconds,
        "best": best,
        "best_vs_direct": seconds["direct"] / seconds[best],
        "direct_gflops": flops / seconds["direct"] / 1e9,
        "arithmetic_bound_s": arithmetic_s,
        "traffic_bound_s": traffic_s,
        "bound": "arithmetic" if arithmetic_s >= traffic_s else "memory traffic",
        "best_of_bound": max(arithmetic_s, traffic_s) / seconds[best],
        "max_abs_error": errors,
        "output_scale": float(np.max(np.abs(exact))),
        **onednn_columns,
    }


def totals(rows: list[dict[str, Any]]) -> dict[str, float]:
    """The network's convs, each layer's time times its count, summed: the fastest formulation in NCHW,
    in either layout (each layer's faster), XLA's conv in NCHW, and oneDNN's."""
    nchw = [r for r in rows if r["layout"] == "NCHW"]
    nhwc = {r["layer"]: r["seconds"][r["best"]] for r in rows if r["layout"] == "NHWC"}
    return {
        "best_nchw": sum(r["count"] * r["seconds"][r["best"]] for r in nchw),
        "best_either_layout": sum(r["count"] * min(r["seconds"][r["best"]], nhwc[r["layer"]]) for r in nchw),
        "direct_nchw": sum(r["count"] * r["seconds"]["direct"] for r in nchw),
        "onednn": sum(r["count"] * r["onednn_s"] for r in nchw),
    }


def main(argv: list[str] | None = None) -> None:
    from bench.paddle_nets import DEPLOYED  # loads Paddle: not at import, for the tests of this module

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--network", choices=[*sorted(BATCHES), *DEPLOYED], default="resnet18")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument(
        "--splits",
        action="store_true",
        help="also XLA's conv over 2 and 4 slices of the batch and of the output's rows -> *_splits.json",
    )
    parser.add_argument(
        "--onednn",
        action="store_true",
        help="XLA:CPU's convolutions and products in oneDNN (eqsat.xla_flags.ONEDNN_CPU), in a child process",
    )
    args = parser.parse_args(argv)
    if args.onednn:
        rerun_under(xla_flags.ONEDNN_CPU, "bench.conv_layers", argv)
    eqsat.keep_host_memory()
    peak, gbps = matmul_gflops(), stream_gbps(args.repeats)
    rows = []
    from_paddle = args.network not in NETWORKS
    for layer, count in layers(args.network).items():
        for batch in BATCHES.get(args.network, (PADDLE_BATCH,)):
            for layout in ("NHWC", "NCHW"):
                row = measure(layer, batch, layout, args.repeats, peak, gbps, args.splits, from_paddle)
                rows.append(row | {"count": count})
                times = " ".join(f"{a} {s * 1e3:.2f}" for a, s in row["seconds"].items())
                times += f" onednn {row['onednn_s'] * 1e3:.2f}" if "onednn_s" in row else ""
                print(
                    f"{row['layer']:34s} b{batch} {layout}: {times} ms; best {row['best']}, "
                    f"{row['best_of_bound']:.2f} of its {row['bound']} bound",
                    flush=True,
                )
    out = "conv_layers" if args.network == "resnet18" else f"conv_layers_{args.network}"
    out += "_splits" if args.splits else ""
    out += "_onednn" if args.onednn else ""
    results = {"network": args.network, "matmul_peak_gflops": peak, "stream_gbps": gbps}
    if from_paddle:
        results["total_s"] = totals(rows)
        print(" | ".join(f"{k} {v * 1e3:.1f} ms" for k, v in results["total_s"].items()))
    print(f"wrote {write(out, results | {'repeats': args.repeats, 'rows': rows})}")


if __name__ == "__main__":
    main()
