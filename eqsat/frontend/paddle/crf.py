"""``pd_op.viterbi_decode``: the best tag path of a linear-chain CRF (``paddle.text.viterbi_decode``,
LAC's and PaddleNLP's sequence labeling), each sequence to its own length.

Operands: the potentials (B, T, N), the transition scores (N, N) from tag i (rows) to tag j, and the
lengths (B,). With ``include_bos_eos_tag`` the last two tags are the stop and start tags: the start
row's scores are added at the first step and the stop row's at each sequence's last. Results: each
sequence's best score (B,) and its path (B, T), int64, 0 past its length. Paddle's path has as many
columns as the longest length; here it has T, the padded length (the same where the longest sequence
fills the padding, as LAC's batches are made).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from eqsat.ops.elementwise import available

Array = jax.Array


def viterbi_decode(
    potentials: Array, transition: Array, lengths: Array, *, include_bos_eos_tag: bool, **_attrs: Any
) -> tuple[Array, Array]:
    """Forward: the best score ending in each tag, frozen past each sequence's length; then the path
    traced back from each sequence's best last tag (the first best, as Paddle's argmax picks)."""
    n_tags = potentials.shape[-1]
    steps = jnp.swapaxes(potentials, 0, 1)  # (T, B, N)
    lengths = lengths.astype(jnp.int32)
    stop = transition[n_tags - 2] if include_bos_eos_tag else jnp.zeros((n_tags,), potentials.dtype)
    start = transition[n_tags - 1] if include_bos_eos_tag else stop

    def ends(alpha: Array, left: Array) -> Array:
        """The stop tag's scores added where a sequence ends at this step."""
        return alpha + jnp.where((left == 1)[:, None], stop, jnp.zeros((), alpha.dtype))

    def forward(carry: tuple[Array, Array], logit: Array) -> tuple[tuple[Array, Array], Array]:
        alpha, left = carry
        scores = alpha[:, :, None] + transition  # (B, from, to)
        best = jnp.argmax(scores, axis=1)
        moved = jnp.max(scores, axis=1) + logit
        alpha = ends(jnp.where((left > 0)[:, None], moved, alpha), left)
        return (alpha, left - 1), best

    first = ends(steps[0] + start, lengths)
    (alpha, left), history = lax.scan(forward, (first, lengths - 1), steps[1:])
    last = jnp.argmax(alpha, axis=1)

    def back(carry: tuple[Array, Array], best: Array) -> tuple[tuple[Array, Array], Array]:
        tag, left = carry
        left = left + 1  # the tags still to trace of the sequence, at this position
        traced = jnp.take_along_axis(best, tag[:, None], axis=1)[:, 0]
        here = jnp.where(left > 0, traced, jnp.where(left == 0, tag, 0))
        return (jnp.where(left < 0, tag, here), left), here

    ending = jnp.where(left >= 0, last, 0)
    _, earlier = lax.scan(back, (last, left), history, reverse=True)
    path = jnp.concatenate([earlier, ending[None]], axis=0).T
    return jnp.max(alpha, axis=1), path.astype(available("int64"))
