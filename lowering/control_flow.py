"""What the control-flow payloads (``eqsat.control_flow``) run as: ``lax.cond`` over an ``if``'s two
branches, ``lax.while_loop`` over a ``while``'s body, each branch or body lowered by ``lower`` (the
package's, passed in: this module does not import its package)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
from jax import lax

from eqsat.control_flow import Cond, Loop
from eqsat.ir import Program

Lower = Callable[[Program], Callable[..., Any]]


def run_cond(cond: Cond, lower: Lower, pred: Any, *args: Any) -> tuple[Any, ...]:
    """The chosen branch's outputs, ``args`` holding the first branch's values then the second's."""
    then, other = (lower(b) for b in cond.branches)
    n = len(cond.branches[0].inputs)
    return lax.cond(jnp.reshape(pred, ()), lambda *a: then(*a[:n]), lambda *a: other(*a[n:]), *args)


def run_loop(loop: Loop, lower: Lower, pred: Any, *args: Any) -> tuple[Any, ...]:
    """The loop values once the condition is false, ``args`` holding the carried values then those
    the body reads."""
    values, reads = args[: loop.carried], args[loop.carried :]
    body = lower(loop.body)

    def step(carry: tuple[Any, ...]) -> tuple[Any, ...]:
        following, *rest = body(*carry[1:], *reads)
        return (jnp.reshape(following, ()), *rest)

    final = lax.while_loop(lambda carry: carry[0], step, (jnp.reshape(pred, ()), *values))
    return tuple(final[1:])
