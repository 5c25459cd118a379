"""Scans and top-k as programs write them (issue #54's targets), eqsat.jit against jax.jit, interleaved in
one process, float32 on this machine's CPU:

- ``position-ids``: position ids from a padding mask (``cumsum(mask) * mask``, as HF and PaddleNLP
  write them), batch 8 x 4096;
- ``top-k-sampler``: a top-k sampler's candidates over a 32k vocabulary at batch 8 (a temperature, a
  softmax, then ``lax.top_k`` of 40: their probabilities and token ids);
- ``top-k-of-softmax-indices``: only the ids of the top 40 of a softmax (batch 8 x 32k);
- ``top-k-by-argsort``: the ids of the top 40 as numpy habits write them, ``argsort(-x)[:, :40]``;
- ``greedy``: ``argmax`` of a log-softmax (greedy decoding, batch 8 x 32k);
- ``cumsum-4096`` and ``cumsum-65536``: a running sum of one row; of 8 rows of 65536 and 64 of 4096
  (long axes: blocked, short running sums within blocks plus one of the blocks' totals, where the timed
  scan is slower); ``cumsum-4096-rows-of-64``: of 4096 rows of 64 (a short axis: a product with a
  triangular constant where the timed scan is slower).

Each row: eqsat's and jax.jit's seconds per call, the speedup, jax.jit against itself (the noise),
the ops of the program eqsat runs, and the largest difference of its result from jax.jit's (positions:
of the values they pick). ``python -m bench.order [--repeats N] [--only CASE ...]`` writes
bench/order.json.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import eqsat

from .common import against_jax, interleaved, max_abs_diff, run_cases

BATCH, VOCAB, K = 8, 32_000, 40


def _position_ids(mask: jax.Array) -> jax.Array:
    return jnp.cumsum(mask, axis=1) * mask


def _sampler(logits: jax.Array) -> tuple[jax.Array, jax.Array]:
    return lax.top_k(jax.nn.softmax(logits / 0.8, axis=-1), K)


def _ids(logits: jax.Array) -> jax.Array:
    return lax.top_k(jax.nn.softmax(logits, axis=-1), K)[1]


def _greedy(logits: jax.Array) -> jax.Array:
    return jnp.argmax(jax.nn.log_softmax(logits, axis=-1), axis=-1)


def _ids_by_argsort(logits: jax.Array) -> jax.Array:
    return jnp.argsort(-logits, axis=-1)[:, :K]


def _cumsum(x: jax.Array) -> jax.Array:
    return jnp.cumsum(x, axis=-1)


def _logits(rng: np.random.Generator) -> jax.Array:
    return jnp.asarray(rng.normal(size=(BATCH, VOCAB)), jnp.float32)


# case: (function, its argument from a generator, the values its positions pick, if any)
CASES: dict[
    str, tuple[Callable[..., Any], Callable[[np.random.Generator], jax.Array], Callable[..., Any] | None]
] = {
    "position-ids": (
        _position_ids,
        lambda rng: jnp.asarray(rng.random((BATCH, 4096)) < 0.9, jnp.int32),
        None,
    ),
    "top-k-sampler": (_sampler, _logits, None),
    "top-k-of-softmax-indices": (_ids, _logits, lambda x: jax.nn.softmax(x, axis=-1)),
    "top-k-by-argsort": (_ids_by_argsort, _logits, lambda x: x),
    "greedy": (_greedy, _logits, lambda x: jax.nn.log_softmax(x, axis=-1)),
    "cumsum-4096": (_cumsum, lambda rng: jnp.asarray(rng.normal(size=4096), jnp.float32), None),
    "cumsum-65536": (_cumsum, lambda rng: jnp.asarray(rng.normal(size=65536), jnp.float32), None),
    "cumsum-8-rows-of-65536": (
        _cumsum,
        lambda rng: jnp.asarray(rng.normal(size=(8, 65536)), jnp.float32),
        None,
    ),
    "cumsum-64-rows-of-4096": (
        _cumsum,
        lambda rng: jnp.asarray(rng.normal(size=(64, 4096)), jnp.float32),
        None,
    ),
    "cumsum-4096-rows-of-64": (
        _cumsum,
        lambda rng: jnp.asarray(rng.normal(size=(4096, 64)), jnp.float32),
        None,
    ),
}


def _difference(case: str, x: jax.Array, got: Any, want: Any) -> float:
    """The largest difference of eqsat's result from jax.jit's; for positions, of the values they pick."""
    ranked = CASES[case][2]
    if ranked is None:
        return max_abs_diff(got, want)
    values = ranked(x)

    def held(positions: jax.Array) -> jax.Array:
        picked = positions if positions.ndim == values.ndim else positions[..., None]
        return jnp.take_along_axis(values, picked, -1)

    return max_abs_diff(held(got), held(want))


def measure(case: str, repeats: int) -> dict[str, Any]:
    fn, make, _ = CASES[case]
    x = make(np.random.default_rng(0))
    mine, theirs, again = eqsat.jit(fn), jax.jit(fn), jax.jit(fn)
    result = mine.result(x)
    times = interleaved(
        {"eqsat": lambda: mine(x), "jax": lambda: theirs(x), "jax_again": lambda: again(x)}, repeats
    )
    return {
        "model": case,
        **against_jax(times),
        "ops": result.program.op_counts(),
        "max_abs_diff": _difference(case, x, mine(x), theirs(x)),
    }


def _line(row: dict[str, Any]) -> str:
    return (
        f"{row['model']:26s} eqsat {row['eqsat_s'] * 1e3:8.3f} ms  jax.jit {row['jax_s'] * 1e3:8.3f} ms  "
        f"speedup {row['speedup']:5.2f}x  (noise {row['noise']:4.2f})  {row['ops']}"
    )


def main(argv: list[str] | None = None) -> int:
    return run_cases("order", __doc__, list(CASES), measure, _line, argv)


if __name__ == "__main__":
    sys.exit(main())
