"""Device profiles for the roofline cost model: peak arithmetic, memory bandwidth, per-kernel overhead.

Accelerator numbers are public spec-sheet figures (cited per entry); ``cpu`` was measured on the
2-core machine this project is developed and tested on (``bench/rewrites.py`` records its matmul peak).
"""

from __future__ import annotations

import json
import math
import warnings
from dataclasses import asdict, dataclass, fields
from importlib.metadata import version
from pathlib import Path
from typing import Any

import jax

from eqsat.config import config
from eqsat.version import __version__ as eqsat_version
from eqsat.xla_flags import tag as xla_flags_tag

FUSED_CPU_ATTENTION = tuple(int(part) for part in version("jax").split(".")[:2]) >= (0, 11)
"""Whether XLA:CPU runs a whole attention block (q kᵀ, softmax, × v) as one fast fused kernel: from
jax 0.11 (measured here, naive attention at S=2048: ~40 ms on jax 0.11.2 and 0.12, 95 ms on 0.10.2)."""


MAX_FLOPS = 1e17
"""Flops per second no single device reaches (the fastest's low-precision peak is ~1e16)."""
MAX_BYTES_PER_S = 1e15
"""Bytes per second no device's memory or cache streams at (HBM ~1e13, on-chip SRAM ~1e14)."""
MIN_OVERHEAD_S = 1e-7
"""Seconds below which a kernel launch or a loop step is not a measurement: a call into any runtime
costs more (XLA:CPU's smallest kernels ~2e-7 to 1e-6 s here, a GPU launch ~5e-6 s)."""
MAX_LAUNCH_S = 1e-3
"""Seconds per kernel launch above which the figure is a timing of something else."""
PRODUCT_SLACK = 2.0
"""How far above the dot peak of its dtype a fitted product rate (naive attention's) may come: the
peak is the fastest of a few sizes, the fit has noise, but no product is much faster than products."""
CONV_SLACK = 4.0
"""How far above the dot peak of its dtype a conv's rate (in direct-conv flops) may come: Winograd's
F(4x4, 3x3) does a 3x3 conv in a quarter of its direct flops."""
STREAM_SLACK = 2.0
"""How far above the cache bandwidth the streaming (DRAM) bandwidth may come: noise, no more."""


@dataclass(frozen=True)
class Device:
    """A roofline: ``time(kernel) = max(flops / peak, bytes / bandwidth) + launch_s``, where a kernel
    moving no more than ``cache_bytes`` streams at ``cache_bandwidth`` instead. A step of a sequential
    device loop (``lax.fori_loop``/``lax.scan``, as in flash attention) costs ``loop_step_s`` more: the
    loop's bookkeeping and the lower efficiency of its smaller kernels. ``peak`` is ``peak_flops``, or
    for a dot or conv kernel the entry of ``peaks`` for its kind (``dot:bfloat16``, ``conv:NHWC:float32``,
    else ``conv:float32``) where there is one. An entry ``write:<kind>`` is the bandwidth at which such a
    product writes its result (one over a short contraction, as q kᵀ in attention, is bound by it): the
    write then costs ``written / write_bandwidth`` more. ``kernels``: the ops this backend runs on a
    fused kernel of its own (``eqsat.ops.attention_kernels``), priced as one kernel that reads its
    operands and writes its result once where that kernel takes the call (``OpDef.device_kernel``;
    its rate the entry ``kernel:<op>:<dtype>`` of ``peaks`` where there is one). ``platform``: the JAX
    backend the profile is of (``cpu``, ``gpu``, ``tpu``). ``measured``: whether its figures were
    measured (``eqsat.calibrate``, or by hand on such a device) rather than read off a datasheet: a
    cost model over an unmeasured profile of this device has no known error, so every program it
    changes is measured before it replaces the program as written (``eqsat.speed.compared``)."""

    name: str
    peak_flops: float
    bandwidth: float
    launch_s: float
    cache_bytes: float
    cache_bandwidth: float
    loop_step_s: float
    source: str
    peaks: tuple[tuple[str, float], ...] = ()
    kernels: tuple[str, ...] = ()
    platform: str = "cpu"
    measured: bool = True

    def peak(self, kind: str = "") -> float:
        """Flops per second of a kernel of ``kind`` (see ``ops.contraction_kind``)."""
        return self._entry("", kind) or self.peak_flops

    def write_bandwidth(self, kind: str) -> float | None:
        """Bytes per second at which a product of ``kind`` writes its result (``write:dot:float32`` in
        ``peaks``), where the profile measured it."""
        return self._entry("write:", kind)

    def _entry(self, prefix: str, kind: str) -> float | None:
        """The entry of ``peaks`` for ``prefix`` + ``kind``, else for its op and dtype alone
        (``dot:attention:bfloat16`` falls back to ``dot:bfloat16``)."""
        known = dict(self.peaks)
        parts = kind.split(":")
        # conv:depthwise:NCHW:float32, conv:depthwise:float32, conv:float32
        for key in (kind, ":".join([*parts[:-2], parts[-1]]), f"{parts[0]}:{parts[-1]}"):
            if prefix + key in known:
                return known[prefix + key]
        return None

    def implausible(self) -> list[str]:
        """What in this profile no device can do, one line a figure (its name, value and the bound it
        crosses; none: the profile is plausible). Derived rates are bounded by the measured peak they
        derive from: naive attention's products are products (at most ``PRODUCT_SLACK`` times the dot
        peak of their dtype, fastest of ``dot:<dtype>`` and ``dot:widened:<dtype>``), a conv at most
        ``CONV_SLACK`` times it (Winograd's transforms save up to that much of a 3x3 conv's direct
        flops), a product's result is written no faster than the cache streams (``cache_bandwidth``),
        DRAM streams no faster than ``STREAM_SLACK`` times the cache; ``launch_s`` and ``loop_step_s``
        are at least ``MIN_OVERHEAD_S`` (what calling anything costs) and a launch at most
        ``MAX_LAUNCH_S``; no rate exceeds ``MAX_FLOPS`` or ``MAX_BYTES_PER_S``. ``eqsat.calibrate``
        refuses a profile that is not plausible, and a saved one read back is ignored, with a warning."""
        problems: list[str] = []

        def bound(name: str, value: float, low: float, high: float, unit: str, why: str) -> None:
            if not low <= value <= high:  # a NaN crosses every bound
                limit = f"{low:.3g}" if not value >= low else f"{high:.3g}"
                side = "below" if not value >= low else "above"
                problems.append(f"{name} = {value:.3g} {unit}: {side} {limit} {unit} ({why})")

        bound("peak_flops", self.peak_flops, 0.0, MAX_FLOPS, "flop/s", "no device's peak")
        bound("cache_bandwidth", self.cache_bandwidth, 0.0, MAX_BYTES_PER_S, "B/s", "no device's memory")
        why = f"{STREAM_SLACK:g}x the cache bandwidth {self.cache_bandwidth:.3g} B/s"
        bound("bandwidth", self.bandwidth, 0.0, STREAM_SLACK * self.cache_bandwidth, "B/s", why)
        bound("launch_s", self.launch_s, MIN_OVERHEAD_S, MAX_LAUNCH_S, "s", "what a kernel call costs")
        bound("loop_step_s", self.loop_step_s, MIN_OVERHEAD_S, math.inf, "s", "what a loop step costs")
        for key, value in self.peaks:
            parts = key.split(":")
            dtype = parts[-1]
            if parts[0] == "write":
                why = "the cache bandwidth: no write is faster"
                bound(key, value, 0.0, self.cache_bandwidth, "B/s", why)
                continue
            dot = max(self.peak(f"dot:{dtype}"), self.peak(f"dot:widened:{dtype}"))
            if key.startswith("dot:attention:"):
                why = f"{PRODUCT_SLACK:g}x the {dtype} dot peak {dot:.3g} flop/s: its products are products"
                bound(key, value, 0.0, PRODUCT_SLACK * dot, "flop/s", why)
            elif parts[0] == "conv":
                why = f"{CONV_SLACK:g}x the {dtype} dot peak {dot:.3g} flop/s"
                bound(key, value, 0.0, CONV_SLACK * dot, "flop/s", why)
            else:
                bound(key, value, 0.0, MAX_FLOPS, "flop/s", "no device's peak")
        return problems

    def to_json(self) -> dict[str, Any]:
        """Plain data: what ``calibrate`` writes and a user may edit."""
        data = asdict(self)
        data["peaks"] = dict(self.peaks)
        data["kernels"] = list(self.kernels)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Device:
        """A profile from ``to_json``'s data; a ``ValueError`` naming what is missing or not a number."""
        names = [f.name for f in fields(cls)]
        optional = ("peaks", "kernels", "platform", "measured")
        missing = [n for n in names if n not in data and n not in optional]
        if missing:
            raise ValueError(f"a device profile needs {', '.join(missing)}")
        values = {n: data[n] for n in names if n in data}
        try:
            numbers = {n: float(values[n]) for n in names if n not in ("name", "source", *optional)}
            peaks = tuple(sorted((str(k), float(v)) for k, v in dict(values.get("peaks", {})).items()))
        except (TypeError, ValueError) as e:
            raise ValueError(f"a device profile's numbers must be numbers: {e}") from None
        bad = [n for n, v in [*numbers.items(), *peaks] if not v > 0 and n != "loop_step_s"]
        if bad:
            raise ValueError(f"a device profile's {bad[0]} must be positive")
        kernels = tuple(str(op) for op in values.get("kernels", ()))
        return cls(
            str(values["name"]),
            **numbers,
            source=str(values["source"]),
            peaks=peaks,
            kernels=kernels,
            platform=str(values.get("platform", "cpu")),
            measured=bool(values.get("measured", True)),
        )


_CPU_PEAK = 1.26e11  # float32 products, fitted (see the cpu profile's source)
DEVICES: dict[str, Device] = {
    "cpu": Device(
        "cpu",
        peak_flops=_CPU_PEAK,
        bandwidth=1.0e10,
        launch_s=5e-6,
        cache_bytes=(256 if FUSED_CPU_ATTENTION else 32) * 2**20,
        cache_bandwidth=1.0e11,
        loop_step_s=1.5e-4,
        peaks=(
            ("conv:depthwise:float32", 1.0e9),
            ("order", 2.2e9),
            ("dot:attention:bfloat16", 1.12 * _CPU_PEAK),
            ("dot:bfloat16", 1.94 * _CPU_PEAK),
            ("dot:widened:bfloat16", _CPU_PEAK),
        ),
        source="measured here (AMD EPYC, 2 cores, 32 MiB L3, jax 0.10-0.12): f32 2048² matmul 126-430 "
        "GFLOP/s (a shared machine); streaming ~10 GB/s; ~5-7 µs per small XLA:CPU kernel; flash attention "
        "~0.3 ms slower than naive at S=512. cache_bytes is an effective value, fitted: from jax 0.11 "
        "XLA:CPU fuses naive attention into one kernel, so its S×S traffic reaches DRAM only from S≈4096 "
        "(flash's cache-sized exact blocks tie with it at S=1024 and win from S=2048); before, its scores "
        "stream through the 32 MiB L3 (bench/rewrites.py). bfloat16 products run at 1.94x float32's "
        "rate, naive attention's at 1.12x, and those accumulated in float32 (flash's) at float32's: "
        "XLA:CPU computes them in float32 (ratios from eqsat.calibrate, jax 0.12). A depthwise conv "
        "(lax.conv, feature_group_count = channels) runs at 0.7-2.3 GFLOP/s in either layout (3x3 and "
        "5x5, 16²-56² maps, jax 0.12), 50-100x below the same work as shifted multiply-adds. Comparisons "
        "(TopK, sort: kind order) run at ~2.2e9/s (TopK of 8 x 32000 floats, jax 0.12)",
    ),
    "h100": Device(
        "h100",
        peak_flops=4.95e14,
        bandwidth=3.35e12,
        launch_s=5e-6,
        cache_bytes=50 * 2**20,
        cache_bandwidth=1.2e13,
        loop_step_s=3.3e-5,
        peaks=(
            *sorted((f"dot:{w}{d}", 9.89e14) for d in ("bfloat16", "float16") for w in ("", "widened:")),
            ("kernel:flash_attention:bfloat16", 3.5e14),
        ),
        kernels=("flash_attention",),
        source="NVIDIA H100 SXM5 datasheet: TF32 Tensor Core 494.7 TFLOPS (dense; JAX's default precision "
        "runs float32 products as TF32 on GPUs), BF16/FP16 Tensor Core 989.4 TFLOPS (dense, float32 "
        "accumulation), HBM3 3.35 TB/s; 50 MB L2; ~5 µs kernel launch (CUDA launch latency). Measured "
        "once on an H100 80GB HBM3 (jax 0.11.2, bench/device_first_run.json, 2026-11-27): cuDNN's "
        "flash attention (bfloat16, 8 heads of 64, S = 8192, not causal) at 3.5e14 flop/s, and eqsat's "
        "own flash lowering (XLA's loop over blocks) 1.4e-5 to 7.5e-5 s per block step beyond its roofline "
        "(median 3.3e-5; S = 2048 to 32768): 4-6x slower than XLA's fusion of the program as written "
        "where no kernel takes the call. flash attention runs as one cuDNN or Pallas (Triton) kernel "
        "where one takes the call (eqsat.ops.attention_kernels)",
        platform="gpu",
        measured=False,
    ),
    "tpu-v5e": Device(
        "tpu-v5e",
        peak_flops=1.97e14,
        bandwidth=8.19e11,
        launch_s=2e-6,
        cache_bytes=48 * 2**20,
        cache_bandwidth=4.0e12,
        loop_step_s=5e-6,
        kernels=("flash_attention",),
        platform="tpu",
        measured=False,
        source="Google Cloud TPU v5e system architecture: 197 TFLOPS bf16 per chip, 16 GiB HBM2 at 819 GB/s; "
        "on-chip vector memory modeled as a 48 MiB cache; flash attention runs as one Pallas kernel "
        "(eqsat.ops.attention_kernels); none of these figures was measured by this project",
    ),
}


def get_device(name: str) -> Device:
    """A built-in profile by name, or ``calibrated`` (this backend's, from ``eqsat.calibrate``)."""
    if name == "calibrated":
        device = calibrated_device()
        if device is None:
            raise KeyError(f"no calibrated profile at {profile_path()}: run eqsat.calibrate()")
        return device
    try:
        return DEVICES[name]
    except KeyError:
        raise KeyError(f"unknown device {name!r} (known: {', '.join(DEVICES)}, calibrated)") from None


def device_file(prefix: str, versioned: bool = False) -> Path:
    """``<prefix>-<backend>-<device kind>.json`` in ``eqsat.config.cache_dir``: what eqsat measured
    on this device; ``versioned``: ``...-eqsat<version>-jax<version>.json``, for timings of programs
    eqsat lowers, which another eqsat (its formulations) or JAX (its compiler) runs otherwise. Under
    XLA flags, ``-xla<hash>`` follows the device kind (``eqsat.xla_flags.tag``): they change what XLA
    runs."""
    kind = str(jax.devices()[0].device_kind).replace(" ", "_").replace("/", "_")
    versions = f"-eqsat{eqsat_version}-jax{jax.__version__}" if versioned else ""
    return config.cache_dir / f"{prefix}-{jax.default_backend()}-{kind}{xla_flags_tag()}{versions}.json"


def profile_path() -> Path:
    """Where ``calibrate`` keeps this backend's profile."""
    return device_file("device")


def calibrated_device() -> Device | None:
    """This backend's calibrated profile, if ``calibrate`` wrote one (a profile that does not read, or
    holds figures no device can have (``Device.implausible``), is a warning, and None)."""
    path = profile_path()
    try:
        device = Device.from_json(json.loads(path.read_text()))
        problems = device.implausible()
        if problems:
            raise ValueError(f"implausible figures: {'; '.join(problems)}")
        return device
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError, AttributeError) as e:
        warnings.warn(f"eqsat: ignoring the device profile {path}: {e}", RuntimeWarning, stacklevel=2)
        return None
