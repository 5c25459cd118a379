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

Several figures are what is left of a timing once the profile's other figures are taken off (a
product's write, naive attention's products, a loop step): noise in either can leave nothing, or less
than nothing. Nothing is clamped into range: before it is saved, the profile is checked against what
its own measured peaks allow (``Device.implausible``); one that fails is measured again, all of it,
with ``RETRY_SAMPLES`` samples a timing, and if it fails again ``calibrate`` raises
``CalibrationError`` naming each figure, its value and the bound, and saves nothing.
"""

from __future__ import annotations

import functools
import json
import math
import statistics
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
from eqsat.errors import EqsatError
from eqsat.ops.attention_kernels import KERNELS as ATTENTION_KERNELS
from eqsat.ops.base import contraction_kind
from eqsat.speed import median_seconds, sampled

from .models import Roofline, phases

Progress = Callable[[str], None]

SAMPLES = 5
"""Samples per timing (each as many calls as take a few milliseconds; the median is kept)."""
RETRY_SAMPLES = 15
"""Samples per timing when a profile is measured again because a figure failed its check."""
HIDDEN = 0.1
"""The part of a product's time its write must take to be told from noise in the arithmetic's; a
write that takes less is hidden behind the arithmetic, and priced at the cache bandwidth."""


class CalibrationError(EqsatError):
    """The measurements give figures no device can have, measured twice: names each figure, its
    value and the bound it crosses; no profile is saved."""


def _random(shape: tuple[int, ...], dtype: Any = jnp.float32) -> jax.Array:
    return jnp.asarray(np.random.default_rng(0).standard_normal(shape), dtype)


def dot_peak(dtype: Any, sizes: tuple[int, ...], result: Any = None, samples: int = SAMPLES) -> float:
    """Flops per second of the fastest of square matrix products of ``sizes`` (returned as
    ``result``: by default ``dtype``)."""
    product = functools.partial(jnp.matmul, preferred_element_type=result)
    rates = []
    for n in sizes:
        a, b = _random((n, n), dtype), _random((n, n), dtype)
        rates.append(2.0 * n**3 / median_seconds(product, a, b, samples=samples))
    return max(rates)


def timed_with_peak(
    fn: Callable[..., Any], args: tuple[Any, ...], dtype: Any, sizes: tuple[int, ...], samples: int = SAMPLES
) -> tuple[float, float]:
    """(median seconds per call of jitted ``fn(*args)``, ``dtype``'s dot peak as ``dot_peak``
    measures it), timed in interleaved samples: a fit of one against the other (what is left of a
    product's time once its arithmetic at the peak is taken off) then sees the same load on a shared
    machine, where a peak measured a few seconds before may not."""
    run, product = jax.jit(fn), jax.jit(jnp.matmul)
    squares = [(_random((n, n), dtype), _random((n, n), dtype)) for n in sizes]
    thunks: list[Callable[[], Any]] = [lambda: run(*args)]
    thunks += [functools.partial(product, a, b) for a, b in squares]
    times = sampled(thunks, samples, 5e-3)
    peak = max(2.0 * n**3 / statistics.median(t) for n, t in zip(sizes, times[1:], strict=True))
    return statistics.median(times[0]), peak


def dot_write_bandwidth(
    dtype: Any,
    sizes: tuple[int, ...],
    size: int,
    launch_s: float,
    cache_bandwidth: float,
    samples: int = SAMPLES,
) -> float:
    """Bytes per second at which a product writes its result, where the write binds: ``size``²
    results per head over a contraction of 64, 4 heads (as q kᵀ in attention), its time less its
    arithmetic at the dot peak (square products of ``sizes``, timed with it) and a launch. Where that
    leaves less than ``HIDDEN`` of its time (or nothing: noise), the write is hidden behind the
    arithmetic: ``cache_bandwidth``, the fastest a result is written."""
    a, b = _random((4, size, 64), dtype), _random((4, 64, size), dtype)
    flops = 2.0 * 4 * size * size * 64
    written = 4.0 * size * size * jnp.dtype(dtype).itemsize
    seconds, peak = timed_with_peak(jnp.matmul, (a, b), dtype, sizes, samples)
    writing = seconds - flops / peak - launch_s
    return written / writing if writing >= HIDDEN * seconds else cache_bandwidth


def conv_peak(layout: str, batch: int, depthwise: bool = False, samples: int = SAMPLES) -> float:
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
    return flops / median_seconds(conv, _random(shape), _random(kernel), samples=samples)


def add_seconds(nbytes: float, samples: int = SAMPLES) -> float:
    """Seconds per call of x + y moving ``nbytes`` in all (two reads, one write, float32)."""
    n = max(1, int(nbytes / 12))
    return median_seconds(jnp.add, _random((n,)), _random((n,)), samples=samples)


def add_bandwidth(nbytes: float, floor_s: float = 0.0, samples: int = SAMPLES) -> float:
    """Bytes per second of x + y moving ``nbytes`` in all (two reads, one write, float32), less
    ``floor_s`` per call (the cost of calling a kernel that moves nothing); infinite where the call
    took no longer than that."""
    seconds = add_seconds(nbytes, samples) - floor_s
    return 12.0 * max(1, int(nbytes / 12)) / seconds if seconds > 0 else math.inf


def memory(largest: float, samples: int = SAMPLES) -> tuple[float, float, float]:
    """(streaming bandwidth, cache bandwidth, cache bytes): adds of ``largest`` bytes, and a sweep of
    smaller ones (from 1 MiB, by 4x), each less the cost of an add of nothing; the cache bandwidth is
    the fastest of the sweep, the cache ends at the largest size still above the geometric mean of
    the two. A size whose add takes no more than twice the call's own cost (a GPU's launch is most of
    a small add) tells nothing of bandwidth and is left out; if none is left, the cache is not told
    from memory (cache bandwidth = streaming bandwidth)."""
    floor = add_seconds(12, samples)
    stream = add_bandwidth(largest, floor, samples)
    sweep = {}
    for size in (2.0**k for k in range(20, int(math.log2(largest)), 2)):
        seconds = add_seconds(size, samples)
        if seconds > 2 * floor:
            sweep[size] = 12.0 * max(1, int(size / 12)) / (seconds - floor)
    cached = max([*sweep.values(), stream])
    edge = math.sqrt(cached * stream)
    fits = [size for size, rate in sorted(sweep.items()) if rate >= edge]
    return stream, cached, fits[-1] if fits else 2.0**20


def kernel_cost(chain: int = 64, samples: int = SAMPLES) -> float:
    """Seconds one more kernel adds to a program: a chain of small products XLA cannot fuse, less a
    chain of one, timed in interleaved samples (so that a change in the machine's load falls on both),
    over the kernels between them."""
    a = _random((16, 16))

    def products(x: jax.Array, k: int) -> jax.Array:
        for _ in range(k):
            x = jnp.tanh(x @ a)
        return x

    long, short = jax.jit(lambda x: products(x, chain)), jax.jit(lambda x: products(x, 1))
    times = sampled([lambda: long(a), lambda: short(a)], samples, 5e-3)
    return (statistics.median(times[0]) - statistics.median(times[1])) / (chain - 1)


def loop_step_cost(
    device: Device, seq: int, sizes: tuple[int, ...] = (512,), samples: int = SAMPLES
) -> float:
    """Seconds a step of a device loop costs beyond its arithmetic and traffic, fitted where it
    matters: eqsat's flash attention (one batch, 4 heads of 64, float32, ``seq`` queries and keys),
    timed, less what ``device`` (its ``loop_step_s`` aside) predicts, per loop step; the float32
    peak of that prediction timed with it (``timed_with_peak``, square products of ``sizes``)."""
    from eqsat.lowering import lower

    program = _attention_program("flash_attention", seq, "float32")
    op = program.ops[-1]
    types = ([t.type for t in op.inputs], op.output.type)
    inputs = tuple(_random((1, 4, seq, 64)) for _ in range(3))
    measured, peak = timed_with_peak(lower(program), inputs, jnp.float32, sizes, samples)
    predicted = Roofline(replace(device, peak_flops=peak)).op_cost(op.name, op.attrs, *types)
    steps = sum(kernel.loop_step for kernel in phases(op.name, op.attrs, *types))
    return (measured - predicted) / max(steps, 1)


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


def attention_peak(device: Device, dtype: str, seq: int, samples: int = SAMPLES) -> float:
    """Flops per second of naive attention's products (``dot:attention:<dtype>``): eqsat's attention
    op timed, less what ``device`` predicts for the rest of it (its softmax, launches, the scores'
    write), over the products' flops; infinite where the rest takes all of its time."""
    from eqsat.lowering import lower

    program = _attention_program("attention", seq, dtype)
    op = program.ops[-1]
    types = ([t.type for t in op.inputs], op.output.type)
    kind = contraction_kind("dot", dtype, "attention")
    unbounded = replace(device, peaks=(*device.peaks, (kind, math.inf)))
    rest = Roofline(unbounded).op_cost(op.name, op.attrs, *types)
    flops = sum(k.flops for k in phases(op.name, op.attrs, *types) if k.kind == kind)
    inputs = (_random((1, 4, seq, 64), dtype) for _ in range(3))
    left = median_seconds(lower(program), *inputs, samples=samples) - rest
    return flops / left if left > 0 else math.inf


def calibrate(*, quick: bool = False, save: bool = True, progress: Progress | None = None) -> Device:
    """Measure this device (under a minute; ``quick``: smaller kernels, a few seconds, rougher) and
    return its profile; with ``save``, write it where ``Roofline()`` finds it from now on
    (``eqsat.devices.profile_path()``). ``progress`` is called with each step's name.

    A profile with figures its own peaks do not allow (``Device.implausible``: noise on a busy
    machine) is measured again, all of it (its figures derive from one another), with
    ``RETRY_SAMPLES`` samples a timing; if it still fails, ``CalibrationError`` names each figure,
    its value and the bound it crosses, and nothing is saved."""
    say = progress or (lambda step: None)
    device = measure(quick=quick, samples=SAMPLES, progress=say)
    problems = device.implausible()
    if problems:
        say(f"implausible: {'; '.join(problems)}")
        say(f"measuring again, {RETRY_SAMPLES} samples a timing")
        device = measure(quick=quick, samples=RETRY_SAMPLES, progress=say)
        retried = device.implausible()
        if retried:
            raise CalibrationError(
                f"calibrate measured figures no device can have, twice (the second time with "
                f"{RETRY_SAMPLES} samples a timing; a busy machine?), and saved nothing: "
                f"{'; '.join(retried)}"
            )
        again = f"measured again with {RETRY_SAMPLES} samples a timing, the first time {'; '.join(problems)}"
        device = replace(device, source=f"{device.source}; {again}")
    if save:
        path = profile_path()
        write_atomically(path, json.dumps(device.to_json(), indent=2) + "\n")
        say(f"wrote {path}")
    return device


def measure(*, quick: bool = False, samples: int = SAMPLES, progress: Progress | None = None) -> Device:
    """This device's profile, measured (``calibrate`` without its check), each timing the median of
    ``samples`` samples."""
    say = progress or (lambda step: None)
    sizes = (256, 512) if quick else (512, 1024, 2048)
    say("dot peaks")
    peak = dot_peak(jnp.float32, sizes, samples=samples)
    peaks = {f"dot:{d}": dot_peak(d, sizes, samples=samples) for d in ("bfloat16", "float16")}
    peaks |= {
        f"dot:widened:{d}": dot_peak(d, sizes, jnp.float32, samples=samples) for d in ("bfloat16", "float16")
    }
    say("conv peaks")
    for layout in ("NCHW", "NHWC"):
        peaks[f"conv:{layout}:float32"] = conv_peak(layout, 2 if quick else 8, samples=samples)
        peaks[f"conv:depthwise:{layout}:float32"] = conv_peak(
            layout, 2 if quick else 8, depthwise=True, samples=samples
        )
    say("kernel cost")
    launch = kernel_cost(64, samples=samples)
    say("bandwidth")
    stream, cached, cache_bytes = memory(2**26 if quick else 2**28, samples=samples)
    say("product writes")
    hidden = []
    for d in ("float32", "bfloat16", "float16"):
        size = 512 if quick else 1024
        rate = dot_write_bandwidth(d, sizes, size, launch, cached, samples=samples)
        peaks[f"write:dot:{d}"] = rate
        hidden += [d] * (rate == cached)
    notes = (
        f"; {', '.join(hidden)} products' writes hidden by their arithmetic: at cache bandwidth"
        if hidden
        else ""
    )
    device = Device(
        f"calibrated:{jax.default_backend()}",
        peak_flops=peak,
        bandwidth=stream,
        launch_s=launch,
        cache_bytes=cache_bytes,
        cache_bandwidth=cached,
        loop_step_s=0.0,
        source=f"measured by eqsat.calibrate({'quick=True' if quick else ''}) on {date.today()}: "
        f"{jax.devices()[0].device_kind}, jax {version('jax')}{notes}",
        peaks=tuple(sorted(peaks.items())),
        kernels=("flash_attention",) if jax.default_backend() in ATTENTION_KERNELS else (),
        platform=jax.default_backend(),
    )
    say("attention")
    seq = 256 if quick else 512
    attention = {
        f"dot:attention:{d}": attention_peak(device, d, seq, samples=samples) for d in ("float32", "bfloat16")
    }
    device = replace(device, peaks=tuple(sorted({**peaks, **attention}.items())))
    say("loop-step cost (flash attention)")
    return replace(device, loop_step_s=loop_step_cost(device, 512 if quick else 1024, sizes, samples=samples))
