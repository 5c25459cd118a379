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

A program may also be compiled under options of its own: ``jax.jit``'s ``compiler_options``, which
``eqsat.jit`` and ``eqsat.optimize`` take (``ONEDNN_CPU_OPTIONS`` are the flags above as options). While
eqsat optimizes such a program, they are in force (``compiling_with``): everything it compiles to time
or check runs under them (``jit``), and they count among the flags (``current``), so what is measured
under them is stored apart too.

Where a program is given no options, eqsat may choose them: each of ``ALTERNATIVES`` for the platform
that changes a kernel of the program is timed against XLA's defaults (the program optimized again
under it where it ran faster), and the fastest kept where it agrees with itself under the defaults
(``eqsat.pipeline.compiler_options``).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import jax

CompilerOptions = Mapping[str, Any] | Iterable[tuple[str, Any]]  # jax.jit's, or their pairs
_IN_FORCE: ContextVar[tuple[tuple[str, Any], ...]] = ContextVar("eqsat_compiler_options", default=())


def normalized(options: CompilerOptions | None) -> tuple[tuple[str, Any], ...]:
    """``options`` as (name, value) pairs sorted by name: one spelling of one set of options."""
    pairs = (options.items() if isinstance(options, Mapping) else options) if options else ()
    return tuple(sorted(pairs))


def as_flags(options: CompilerOptions) -> tuple[str, ...]:
    """``jax.jit``'s ``compiler_options`` written as XLA flags: ``--name=value``, booleans lower-case."""
    pairs = normalized(options)
    return tuple(f"--{name}={str(v).lower() if isinstance(v, bool) else v}" for name, v in pairs)


ONEDNN_CPU_OPTIONS: dict[str, Any] = {
    "xla_cpu_experimental_onednn_custom_call": True,
    "xla_cpu_experimental_ynn_fusion_type": "",
}
ONEDNN_CPU = as_flags(ONEDNN_CPU_OPTIONS)


@dataclass(frozen=True)
class Alternative:
    """Compiler options eqsat may choose for a program it optimizes on ``platform`` where the caller gave
    none: tried where the program has a kernel of the ``contractions`` they change (``OpDef.contraction``),
    kept where the program was measured faster under them (``eqsat.pipeline.compiler_options``).
    ``exact``: whether results stay as IEEE arithmetic has them, infinities and NaNs included (if not,
    they are tried only where the rules asked for admit an inexact one, as fast-math rewrites are)."""

    name: str
    platform: str
    options: tuple[tuple[str, Any], ...]
    contractions: frozenset[str]
    exact: bool


# oneDNN's convs: on this project's 2-core CPU, plain-JAX networks at 224x224 ran 1.14-1.26x faster
# under them (ResNet-18 and -50, batch 1 and 8), MobileNetV2 6.96x (XLA's depthwise conv is slow); its
# bfloat16 products ran at half XLA's rate, so programs of products alone are not tried. Inexact: a relu
# fused into a oneDNN conv as its post-op maps NaN to 0, where XLA's relu keeps it. On an AMX Xeon its
# bfloat16 depthwise convs can be wrong: a program is kept under it only where it agrees with itself
ALTERNATIVES = (
    Alternative("oneDNN", "cpu", normalized(ONEDNN_CPU_OPTIONS), frozenset({"conv"}), exact=False),
)


def alternatives(platform: str) -> tuple[Alternative, ...]:
    """The ``ALTERNATIVES`` for ``platform`` not already in force (``$XLA_FLAGS`` or ``compiling_with``)."""
    flags = set(current())
    return tuple(a for a in ALTERNATIVES if a.platform == platform and not set(as_flags(a.options)) <= flags)


def in_force() -> dict[str, Any]:
    """The compiler options of the program being optimized (``compiling_with``); none outside one."""
    return dict(_IN_FORCE.get())


@contextmanager
def compiling_with(options: CompilerOptions | None) -> Iterator[None]:
    """Within it, ``options`` are in force (``in_force``) in this thread, those of any outer one not."""
    token = _IN_FORCE.set(normalized(options))
    try:
        yield
    finally:
        _IN_FORCE.reset(token)


def jit(fn: Callable[..., Any], options: CompilerOptions | None = None, **kwargs: Any) -> Any:
    """``jax.jit(fn, **kwargs)`` under the compiler ``options`` (by default those in force): how eqsat
    compiles what it times, checks or returns."""
    chosen = dict(normalized(options)) if options is not None else in_force()
    return jax.jit(fn, compiler_options=chosen or None, **kwargs)


def current(environ: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """The flags in ``XLA_FLAGS`` of ``environ`` (this process's, by default) and the compiler options
    in force, sorted, each once."""
    return tuple(sorted(set(environ.get("XLA_FLAGS", "").split()) | set(as_flags(_IN_FORCE.get()))))


def tag(environ: Mapping[str, str] = os.environ) -> str:
    """A part of a file name: empty without flags, else ``-xla`` and 8 hex digits of them."""
    flags = current(environ)
    return f"-xla{hashlib.sha256(' '.join(flags).encode()).hexdigest()[:8]}" if flags else ""


def with_flags(flags: Sequence[str], environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """A copy of ``environ`` with ``flags`` added to its ``XLA_FLAGS``: a child process's environment."""
    return {**environ, "XLA_FLAGS": " ".join([*current(environ), *flags])}
