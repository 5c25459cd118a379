"""``calibrate``: measure this device's kernels and write the roofline profile ``Roofline`` uses.

Each parameter of ``eqsat.devices.Device`` is measured by a kernel that exposes it, jitted and timed
(median of samples, a sample as many calls as take a few milliseconds): the dot peak per dtype
(float32, bfloat16, float16 matrix products), the rate at which a product over a short contraction
writes its result, per dtype, the conv peak per layout (a 3x3 conv, NCHW and NHWC, dense and depthwise),
streaming bandwidth (an add over arrays far larger than the cache), cache bandwidth (the same over
arrays that fit), where the cache ends (the size at which bandwidth falls to the geometric mean of
the two), the cost of one more kernel in a program (a chain of small dots that XLA cannot fuse) and
of one more step of a device loop. The profile is plain JSON in ``eqsat.config.cache_dir``: read it,
edit it, or delete it to return to the built-in profile.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from dataclasses import replace
from datetime import date
from importlib.metadata import version
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from eqsat.config import write_atomically
from eqsat.devices import Device, profile_path
from eqsat.ops.attention_kernels import KERNELS as ATTENTION_KERNELS
from eqsat.ops.base import contraction_kind
from eqsat.speed import median_seconds

from .models import Roofline, phases

Progress = Callable[[str], None]


def _random(shape: tuple[int, ...], dtype: Any = jnp.float32) -> jax.Array:
    return jnp.asarray(np.random.default_rng(0).standard_normal(shape), dtype)


def dot_peak(dtype: Any, sizes: tuple[int, ...], result: Any = None) -> float:
    """Flops per second of the fastest of square matrix products of ``sizes`` (returned as
    ``result``: by default ``dtype``)."""
    product = functools.partial(jnp.matmul, preferred_element_type=result)
    rates = []
    for n in sizes:
        a, b = _random((n, n), dtype), _random((n, n), dtype)
        rates.append(2.0 * n**3 / median_seconds(product, a, b))
    return max(rates)


def dot_write_bandwidth(dtype: Any, peak: float, size: int) -> float:
    """Bytes per second at which a product writes its result, where the write binds: ``size``²
    results per head over a contraction of 64, 4 heads (as q kᵀ in attention), its time less its
    arithmetic at ``peak``."""
    a, b = _random((4, size, 64), dtype), _random((4, 64, size), dtype)
    flops = 2.0 * 4 * size * size * 64
    written = 4.0 * size * size * jnp.dtype(dtype).itemsize
    return written / max(median_seconds(jnp.matmul, a, b) - flops / peak, written / 1e12)


def conv_peak(layout: str, batch: int, depthwise: bool = False) -> float:
    """Flops per second of a 3x3, 64-channel conv (or a depthwise one: one kernel per channel) on
    32x32 images in ``layout`` (NCHW or NHWC), as XLA runs lax.conv."""
    c, hw = 64, 32
    per_group = 1 if depthwise else c
    shape = (batch, c, hw, hw) if layout == "NCHW" else (batch, hw, hw, c)
    kernel = (c, per_group, 3, 3) if layout == "NCHW" else (3, 3, per_group, c)
    dims = (layout, "OIHW" if layout == "NCHW" else "HWIO", layout)
    groups = c // per_group

    def conv(x: jax.Array, w: jax.Array) -> jax.Array:
        return lax.conv_general_dilated(
            x, w, (1, 1), "SAME", dimension_numbers=dims, feature_group_count=groups
        )

    flops = 2.0 * batch * hw * hw * c * per_group * 9
    return flops / median_seconds(conv, _random(shape), _random(kernel))


def add_bandwidth(nbytes: float, floor_s: float = 0.0) -> float:
    """Bytes per second of x + y moving ``nbytes`` in all (two reads, one write, float32), less
    ``floor_s`` per call (the cost of calling a kernel that moves nothing)."""
    n = max(1, int(nbytes / 12))
    x, y = _random((n,)), _random((n,))
    return 12.0 * n / max(median_seconds(jnp.add, x, y) - floor_s, 1e-9)


def kernel_cost(chain: int = 64) -> float:
    """Seconds one more kernel adds to a program: a chain of small products XLA cannot fuse."""
    a = _random((16, 16))

    def products(x: jax.Array, k: int) -> jax.Array:
        for _ in range(k):
            x = jnp.tanh(x @ a)
        return x

    long = median_seconds(lambda x: products(x, chain), a)
    short = median_seconds(lambda x: products(x, 1), a)
    return max((long - short) / (chain - 1), 1e-8)


def loop_step_cost(device: Device, seq: int) -> float:
    """Seconds a step of a device loop costs beyond its arithmetic and traffic, fitted where it
    matters: eqsat's flash attention (one batch, 4 heads of 64, float32, ``seq`` queries and keys),
    timed, less what ``device`` (its ``loop_step_s`` aside) predicts, per loop step."""
    from eqsat.lowering import lower

    program = _attention_program("flash_attention", seq, "float32")
    op = program.ops[-1]
    types = ([t.type for t in op.inputs], op.output.type)
    predicted = Roofline(device).op_cost(op.name, op.attrs, *types)
    steps = sum(kernel.loop_step for kernel in phases(op.name, op.attrs, *types))
    measured = median_seconds(lower(program), *(_random((1, 4, seq, 64)) for _ in range(3)))
    return max((measured - predicted) / max(steps, 1), 0.0)


def _attention_program(op: str, seq: int, dtype: str) -> Any:
    """One ``op`` (attention or flash_attention) over 1 batch, 4 heads of 64, ``seq`` queries and keys."""
    from eqsat.ir import Program, TensorType

    program = Program()
    shape = TensorType((1, 4, seq, 64), dtype)
    q, k, v = (program.add_input(name, shape) for name in "qkv")
    bias = program.add_op("full", [], shape=(), value=0.0, dtype=dtype)
    mask = program.add_op("full", [], shape=(), value=1.0, dtype="bool")
    program.add_output(program.add_op(op, [q, k, v, bias, mask], scale=0.125))
    return program


def attention_peak(device: Device, dtype: str, seq: int) -> float:
    """Flops per second of naive attention's products (``dot:attention:<dtype>``): eqsat's attention
    op timed, less what ``device`` predicts for the rest of it (its softmax, launches, the scores'
    write), over the products' flops."""
    from eqsat.lowering import lower

    program = _attention_program("attention", seq, dtype)
    op = program.ops[-1]
    types = ([t.type for t in op.inputs], op.output.type)
    kind = contraction_kind("dot", dtype, "attention")
    unbounded = replace(device, peaks=(*device.peaks, (kind, math.inf)))
    rest = Roofline(unbounded).op_cost(op.name, op.attrs, *types)
    flops = sum(k.flops for k in phases(op.name, op.attrs, *types) if k.kind == kind)
    measured = median_seconds(lower(program), *(_random((1, 4, seq, 64), dtype) for _ in range(3)))
    return flops / max(measured - rest, flops / 1e15)


def calibrate(*, quick: bool = False, save: bool = True, progress: Progress | None = None) -> Device:
    """Measure this device (under a minute; ``quick``: smaller kernels, a few seconds, rougher) and
    return its profile; with ``save``, write it where ``Roofline()`` finds it from now on
    (``eqsat.devices.profile_path()``). ``progress`` is called with each step's name."""
    say = progress or (lambda step: None)
    sizes = (256, 512) if quick else (512, 1024, 2048)
    say("dot peaks")
    peak = dot_peak(jnp.float32, sizes)
    peaks = {f"dot:{d}": dot_peak(d, sizes) for d in ("bfloat16", "float16")}
    peaks |= {f"dot:widened:{d}": dot_peak(d, sizes, jnp.float32) for d in ("bfloat16", "float16")}
    say("product writes")
    for d in ("float32", "bfloat16", "float16"):
        peaks[f"write:dot:{d}"] = dot_write_bandwidth(d, peaks.get(f"dot:{d}", peak), 512 if quick else 1024)
    say("conv peaks")
    for layout in ("NCHW", "NHWC"):
        peaks[f"conv:{layout}:float32"] = conv_peak(layout, 2 if quick else 8)
        peaks[f"conv:depthwise:{layout}:float32"] = conv_peak(layout, 2 if quick else 8, depthwise=True)
    say("kernel cost")
    launch = kernel_cost(16 if quick else 64)
    say("bandwidth")
    floor = median_seconds(jnp.add, _random((1,)), _random((1,)))
    largest = 2**26 if quick else 2**28  # bytes moved by the largest add
    stream = add_bandwidth(largest, floor)
    sweep = {2.0**k: add_bandwidth(2.0**k, floor) for k in range(20, int(math.log2(largest)), 2)}
    cached = max(sweep.values())
    edge = math.sqrt(cached * stream)
    fits = [size for size, rate in sorted(sweep.items()) if rate >= edge]
    device = Device(
        f"calibrated:{jax.default_backend()}",
        peak_flops=peak,
        bandwidth=stream,
        launch_s=launch,
        cache_bytes=fits[-1] if fits else min(sweep),
        cache_bandwidth=cached,
        loop_step_s=0.0,
        source=f"measured by eqsat.calibrate({'quick=True' if quick else ''}) on {date.today()}: "
        f"{jax.devices()[0].device_kind}, jax {version('jax')}",
        peaks=tuple(sorted(peaks.items())),
        kernels=("flash_attention",) if jax.default_backend() in ATTENTION_KERNELS else (),
    )
    say("attention")
    seq = 256 if quick else 512
    attention = {f"dot:attention:{d}": attention_peak(device, d, seq) for d in ("float32", "bfloat16")}
    device = replace(device, peaks=tuple(sorted({**peaks, **attention}.items())))
    say("loop-step cost (flash attention)")
    device = replace(device, loop_step_s=loop_step_cost(device, 512 if quick else 1024))
    if save:
        path = profile_path()
        write_atomically(path, json.dumps(device.to_json(), indent=2) + "\n")
        say(f"wrote {path}")
    return device
