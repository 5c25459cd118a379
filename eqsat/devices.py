"""Device profiles for the roofline cost model: peak arithmetic, memory bandwidth, per-kernel overhead.

Accelerator numbers are public spec-sheet figures (cited per entry); ``cpu`` was measured on the
2-core machine this project is developed and tested on (``bench/rewrites.py`` records its matmul peak).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import version

FUSED_CPU_ATTENTION = tuple(int(part) for part in version("jax").split(".")[:2]) >= (0, 11)
"""Whether XLA:CPU runs a whole attention block (q kᵀ, softmax, × v) as one fast fused kernel: from
jax 0.11 (measured here, naive attention at S=2048: ~40 ms on jax 0.11.2 and 0.12, 95 ms on 0.10.2)."""


@dataclass(frozen=True)
class Device:
    """A roofline: ``time(kernel) = max(flops / peak_flops, bytes / bandwidth) + launch_s``, where a
    kernel moving no more than ``cache_bytes`` streams at ``cache_bandwidth`` instead. A step of a
    sequential device loop (``lax.fori_loop``/``lax.scan``, as in flash attention) costs ``loop_step_s`` more:
    the loop's bookkeeping and the lower efficiency of its smaller kernels."""

    name: str
    peak_flops: float
    bandwidth: float
    launch_s: float
    cache_bytes: float
    cache_bandwidth: float
    loop_step_s: float
    source: str


DEVICES: dict[str, Device] = {
    "cpu": Device(
        "cpu",
        peak_flops=1.26e11,
        bandwidth=1.0e10,
        launch_s=5e-6,
        cache_bytes=(256 if FUSED_CPU_ATTENTION else 32) * 2**20,
        cache_bandwidth=1.0e11,
        loop_step_s=1.5e-4,
        source="measured here (AMD EPYC, 2 cores, 32 MiB L3, jax 0.10-0.12): f32 2048² matmul 126-430 "
        "GFLOP/s (a shared machine); streaming ~10 GB/s; ~5-7 µs per small XLA:CPU kernel; flash attention "
        "~0.3 ms slower than naive at S=512. cache_bytes is an effective value, fitted: from jax 0.11 "
        "XLA:CPU fuses naive attention into one kernel, so its S×S traffic reaches DRAM only from S≈4096 "
        "(flash's cache-sized exact blocks tie with it at S=1024 and win from S=2048); before, its scores "
        "stream through the 32 MiB L3 (bench/rewrites.py)",
    ),
    "h100": Device(
        "h100",
        peak_flops=4.95e14,
        bandwidth=3.35e12,
        launch_s=5e-6,
        cache_bytes=50 * 2**20,
        cache_bandwidth=1.2e13,
        loop_step_s=1e-5,
        source="NVIDIA H100 SXM5 datasheet: TF32 Tensor Core 494.7 TFLOPS (dense), HBM3 3.35 TB/s; "
        "50 MB L2; ~5 µs kernel launch (CUDA launch latency)",
    ),
    "tpu-v5e": Device(
        "tpu-v5e",
        peak_flops=1.97e14,
        bandwidth=8.19e11,
        launch_s=2e-6,
        cache_bytes=48 * 2**20,
        cache_bandwidth=4.0e12,
        loop_step_s=5e-6,
        source="Google Cloud TPU v5e system architecture: 197 TFLOPS bf16 per chip, 16 GiB HBM2 at 819 GB/s; "
        "on-chip vector memory modeled as a 48 MiB cache",
    ),
}


def get_device(name: str) -> Device:
    try:
        return DEVICES[name]
    except KeyError:
        raise KeyError(f"unknown device {name!r} (known: {', '.join(DEVICES)})") from None
