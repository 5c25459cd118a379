"""The XLA flags this process compiles under: ``$XLA_FLAGS``, which XLA reads once, when JAX starts its
backend. They change what XLA emits (which library runs a convolution, what it fuses), so what eqsat
measures and chooses under them is kept apart: kernel timings, verdicts and optimized programs are
stored per set of flags (``tag``).

``ONEDNN_CPU``: XLA:CPU runs convolutions and products as oneDNN calls (``__onednn$convolution``,
``__onednn$matmul``, a bias and activation fused into them as oneDNN post-ops) rather than through
YNNPACK. A depthwise 3x3 conv at 56x56x144, batch 8, took 2.0 ms so, against 2.9-4.1 ms (three runs)
for eqsat's shifted formulation, its best under XLA's own kernels
(bench/conv_layers_mobilenet_v2_onednn.json has the layers of MobileNetV2). Set the flags before JAX
starts, in the shell
(``XLA_FLAGS="--xla_cpu_experimental_onednn_custom_call=true --xla_cpu_experimental_ynn_fusion_type="``),
or with ``with_flags`` for a child process.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence

ONEDNN_CPU = ("--xla_cpu_experimental_onednn_custom_call=true", "--xla_cpu_experimental_ynn_fusion_type=")


def current(environ: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """The flags in ``XLA_FLAGS`` of ``environ`` (this process's, by default), sorted, each once."""
    return tuple(sorted(set(environ.get("XLA_FLAGS", "").split())))


def tag(environ: Mapping[str, str] = os.environ) -> str:
    """A part of a file name: empty without flags, else ``-xla`` and 8 hex digits of them."""
    flags = current(environ)
    return f"-xla{hashlib.sha256(' '.join(flags).encode()).hexdigest()[:8]}" if flags else ""


def with_flags(flags: Sequence[str], environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """A copy of ``environ`` with ``flags`` added to its ``XLA_FLAGS``: a child process's environment."""
    return {**environ, "XLA_FLAGS": " ".join([*current(environ), *flags])}
