"""Convolutional programs as in TENSAT's evaluation, written with flax (inference: BatchNorm on running
statistics): a ResNeXt-50 block, a SqueezeNet fire module, an Inception-v3 module, a NasRNN cell, NasRNN
over five steps as Constable runs it (weights as arguments), and Paddle's conv_bn_relu program.
eqsat.jit against jax.jit (interleaved, one process), e-graph size, optimizer time.

    python -m bench.conv            # -> bench/conv.json
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

import eqsat
from bench.common import interleaved, max_abs_diff, run_cases
from eqsat.lowering import lower


class ConvBN(nn.Module):
    """conv + batch norm (+ relu): the unit of every convolutional model here."""

    features: int
    kernel: tuple[int, int] = (1, 1)
    groups: int = 1
    relu: bool = True

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = nn.Conv(self.features, self.kernel, feature_group_count=self.groups, use_bias=False)(x)
        x = nn.BatchNorm(use_running_average=True)(x)
        return nn.relu(x) if self.relu else x


class ResNeXtBlock(nn.Module):
    """ResNeXt-50's bottleneck (conv2 stage): 1x1, grouped 3x3 (32 groups), 1x1, residual."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        y = ConvBN(128)(x)
        y = ConvBN(128, (3, 3), groups=32)(y)
        y = ConvBN(256, relu=False)(y)
        return nn.relu(x + y)


class Fire(nn.Module):
    """SqueezeNet's fire module (fire2): squeeze 1x1, expand 1x1 and 3x3, concatenated."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        s = nn.relu(nn.Conv(16, (1, 1))(x))
        return jnp.concatenate([nn.relu(nn.Conv(64, (1, 1))(s)), nn.relu(nn.Conv(64, (3, 3))(s))], axis=-1)


class InceptionA(nn.Module):
    """Inception-v3's first module (Mixed_5b): four branches concatenated."""

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        b1 = ConvBN(64)(x)
        b5 = ConvBN(64, (5, 5))(ConvBN(48)(x))
        b3 = ConvBN(96, (3, 3))(ConvBN(96, (3, 3))(ConvBN(64)(x)))
        pool = nn.avg_pool(x, (3, 3), strides=(1, 1), padding="SAME")
        return jnp.concatenate([b1, b5, b3, ConvBN(32)(pool)], axis=-1)


class NasRNN(nn.Module):
    """A NasRNN cell (TENSAT's benchmark): eight gates, each a projection of x and of h, combined."""

    hidden: int = 512

    @nn.compact
    def __call__(self, x: jax.Array, h: jax.Array) -> jax.Array:
        gates = [nn.Dense(self.hidden)(x) + nn.Dense(self.hidden, use_bias=False)(h) for _ in range(8)]
        a = [jax.nn.sigmoid(gates[0]), nn.relu(gates[1]), jax.nn.sigmoid(gates[2]), nn.relu(gates[3])]
        b = [jnp.tanh(gates[4]), jax.nn.sigmoid(gates[5]), jnp.tanh(gates[6]), jax.nn.sigmoid(gates[7])]
        c = [a[0] * b[0], a[1] + b[1], a[2] * b[2], a[3] + b[3]]
        return jnp.tanh(c[0] * c[1]) * jnp.tanh(c[2] + c[3])


def _nas_node(x: jax.Array, h: jax.Array, w1: list[jax.Array], w2: list[jax.Array]) -> jax.Array:
    """One NasRNN step as TASO writes it: eight gates, each a projection of the input plus one of the
    state, combined into the next state."""
    t = [x @ a + h @ b for a, b in zip(w1, w2, strict=True)]
    sig, relu = jax.nn.sigmoid, jax.nn.relu
    m = [
        relu(t[0]) + sig(t[3]),
        sig(t[1]) + jnp.tanh(t[2]),
        sig(t[4]) * jnp.tanh(t[5]),
        sig(t[6]) * relu(t[7]),
    ]
    m += [sig(m[1]) + jnp.tanh(m[2]), jnp.tanh(m[0]) * jnp.tanh(m[3])]
    return jnp.tanh(jnp.tanh(m[4]) * jnp.tanh(m[5]))


def _nasrnn(steps: int = 5, hidden: int = 512) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """NasRNN as Constable and TASO run it: ``steps`` inputs of one row, each step's 16 projections by
    weights shared over the steps, the inputs, state and weights all arguments."""

    def run(xs: list[jax.Array], h: jax.Array, w1: list[jax.Array], w2: list[jax.Array]) -> jax.Array:
        for x in xs:
            h = _nas_node(x, h, w1, w2)
        return h

    keys = iter(jax.random.split(jax.random.key(1), 2 * 8 + steps + 1))
    xs = [jax.random.normal(next(keys), (1, hidden)) for _ in range(steps)]
    weights = [jax.random.normal(next(keys), (hidden, hidden)) / hidden**0.5 for _ in range(16)]
    return run, (xs, jax.random.normal(next(keys), (1, hidden)), weights[:8], weights[8:])


def _flax(module: nn.Module, *shapes: tuple[int, ...]) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """The module's inference function (random running statistics) and random inputs."""
    keys = iter(jax.random.split(jax.random.key(0), 64))
    args = tuple(jax.random.normal(next(keys), s) for s in shapes)
    variables = module.init(next(keys), *args)
    if "batch_stats" in variables:
        stats = jax.tree_util.tree_map_with_path(  # means about 0, variances about 1
            lambda path, v: (
                jax.random.uniform(next(keys), v.shape) + (0.5 if path[-1].key == "var" else -0.5)
            ),
            variables["batch_stats"],
        )
        variables = {**variables, "batch_stats": stats}
    return (lambda *a: module.apply(variables, *a)), args


PADDLE = Path(__file__).resolve().parent.parent / "tests" / "data" / "paddle"


def _paddle_conv_bn_relu() -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """Paddle's own conv2d + bias + batch_norm + relu program (its weights and input), as a Program:
    ``eqsat.optimize`` sees Paddle's ops, not their JAX lowering."""
    program = eqsat.load(PADDLE / "dumps" / "conv_bn_relu.pir")
    ref = np.load(PADDLE / "refs" / "conv_bn_relu.npz")
    program.param_values.update({p.name: ref[f"param_{p.name}"] for p in program.params})
    return program, (jnp.asarray(ref["in_x"]),)


# Each case: a JAX function (optimized by eqsat.jit) or a Program (by eqsat.optimize), and its inputs.
CASES: dict[str, Callable[[], tuple[Callable[..., Any] | eqsat.Program, tuple[Any, ...]]]] = {
    "resnext50_block": lambda: _flax(ResNeXtBlock(), (1, 56, 56, 256)),
    "squeezenet_fire": lambda: _flax(Fire(), (1, 55, 55, 96)),
    "inception_v3_a": lambda: _flax(InceptionA(), (1, 35, 35, 192)),
    "nasrnn_cell": lambda: _flax(NasRNN(), (16, 512), (16, 512)),
    "nasrnn_5_steps": _nasrnn,
    "paddle_conv_bn_relu": _paddle_conv_bn_relu,
}


def _both(case: Callable[..., Any] | eqsat.Program) -> tuple[Any, Any, eqsat.OptimizeResult]:
    """jax.jit of the case as written, eqsat's optimized version, and its optimization result."""
    if isinstance(case, eqsat.Program):
        result = eqsat.optimize(case)
        return jax.jit(lower(case)), jax.jit(lower(result.program)), result
    optimized = eqsat.jit(case)
    return jax.jit(case), optimized, optimized


def measure(name: str, repeats: int) -> dict[str, Any]:
    case, args = CASES[name]()
    plain, optimized, source = _both(case)
    diff = max_abs_diff(optimized(*args), plain(*args))
    result = source if isinstance(source, eqsat.OptimizeResult) else next(iter(source.results.values()))
    times = interleaved({"eqsat": lambda: optimized(*args), "jax": lambda: plain(*args)}, repeats)
    last = result.report.saturation.iterations[-1] if result.report.saturation.iterations else None
    return {
        "model": name,
        "ops_before": result.original.op_counts(),
        "ops_after": result.program.op_counts(),
        "rules_fired": dict(result.report.rules_fired),
        "egraph_nodes": last.nodes if last else 0,
        "optimize_s": sum(result.report.timings.values()),
        "eqsat_s": times["eqsat"],
        "jax_s": times["jax"],
        "speedup": times["jax"] / times["eqsat"],
        "max_abs_diff": diff,
    }


def _line(row: dict[str, Any]) -> str:
    timing = f"{row['speedup']:5.2f}x  eqsat {row['eqsat_s'] * 1e3:8.3f} ms  jax {row['jax_s'] * 1e3:8.3f} ms"
    return (
        f"{row['model']:22s} {timing}  e-nodes {row['egraph_nodes']:5d}  optimize {row['optimize_s']:.2f} s"
    )


if __name__ == "__main__":
    sys.exit(run_cases("conv", __doc__, list(CASES), measure, _line))
