"""Does calibrating ever make a choice slower? Programs optimized under the built-in CPU profile and
under a profile ``eqsat.calibrate`` just measured on this machine, both reading the same kernel
timings (the convs', timed on this device), each timed against jax.jit, all interleaved in one
process. The calibrated profile's peaks once turned bfloat16 causal attention at S = 512 into flash
attention, which ran at 0.55x of jax.jit (the built-in: 1.09x).

    python -m bench.calibrated            # -> bench/calibrated.json
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

import eqsat
from bench.common import interleaved, max_abs_diff, run_cases, settled_jit
from eqsat import Limits, Roofline
from eqsat.cost import KernelTimes
from eqsat.cost.calibrate import calibrate


def _causal_attention(dtype: Any) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """Causal attention as jax.nn.dot_product_attention computes it: batch 4, 512 tokens, 8 heads of 64."""
    keys = jax.random.split(jax.random.key(0), 3)
    q, k, v = (jax.random.normal(key, (4, 512, 8, 64), dtype) for key in keys)
    return (lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=True)), (q, k, v)


def _depthwise_block() -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """A depthwise-separable block (depthwise 3x3, relu, pointwise 1x1), NHWC, batch 8, 32x32x64."""
    keys = jax.random.split(jax.random.key(1), 3)
    dw = jax.random.normal(keys[0], (3, 3, 1, 64)) * 0.3
    pw = jax.random.normal(keys[1], (1, 1, 64, 128)) * 0.1
    x = jax.random.normal(keys[2], (8, 32, 32, 64))
    numbers = ("NHWC", "HWIO", "NHWC")

    def block(x: jax.Array) -> jax.Array:
        y = jax.lax.conv_general_dilated(
            x, dw, (1, 1), "SAME", dimension_numbers=numbers, feature_group_count=64
        )
        return jax.lax.conv_general_dilated(jax.nn.relu(y), pw, (1, 1), "VALID", dimension_numbers=numbers)

    return block, (x,)


CASES = {
    "attention_causal_bfloat16": lambda: _causal_attention(jnp.bfloat16),
    "attention_causal_float32": lambda: _causal_attention(jnp.float32),
    "depthwise_block": _depthwise_block,
}
_PROFILE: list[Any] = []  # the calibrated profile, measured once


def _profiles() -> dict[str, Any]:
    if not _PROFILE:
        _PROFILE.append(calibrate(quick=True, save=False))  # the user's own profile is left alone
    return {"builtin": "cpu", "calibrated": _PROFILE[0]}


def measure(name: str, repeats: int) -> dict[str, Any]:
    fn, args = CASES[name]()
    plain = jax.jit(fn)
    timings = KernelTimes()
    fns: dict[str, Callable[[], Any]] = {"jax": lambda: plain(*args)}
    row: dict[str, Any] = {"model": name}
    limits = Limits(timeout_s=60)
    for label, profile in _profiles().items():
        cost = Roofline(profile, timings=timings)
        _, result, timed, fast = settled_jit(lambda cost=cost: eqsat.jit(fn, cost=cost, limits=limits), args)
        fns[label] = lambda fast=fast: fast(*args)
        row[f"{label}_ops"] = sorted(
            op.name for op in result.program.live_ops() if "attention" in op.name or "conv" in op.name
        )
        row[f"{label}_kernels_timed"] = timed
        row[f"{label}_max_abs_diff"] = max_abs_diff(fast(*args), plain(*args))
    times = interleaved(fns, repeats)
    for label in ("builtin", "calibrated"):
        row[f"{label}_s"] = times[label]
        row[f"{label}_speedup"] = times["jax"] / times[label]
    row["jax_s"] = times["jax"]
    return row


def _line(row: dict[str, Any]) -> str:
    speed = f"built-in {row['builtin_speedup']:.2f}x  calibrated {row['calibrated_speedup']:.2f}x"
    return f"{row['model']:28s} {speed}  ({row['builtin_ops']} / {row['calibrated_ops']})"


if __name__ == "__main__":
    sys.exit(run_cases("calibrated", __doc__, list(CASES), measure, _line))
