"""Control flow that eqsat runs but does not rewrite across: Paddle's ``pd_op.if`` as ``lax.cond`` over
its two branches and ``pd_op.while`` as ``lax.while_loop`` over its body, each a Program of the values
it reads (optimized on its own by ``eqsat.optimize``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp
from jax import lax

from eqsat.ir import Program

from . import lower


@dataclass(frozen=True)
class Cond:
    """The meaning of an ``if`` op whose operands are the condition, then the values the first branch
    reads, then those the second reads: the chosen branch's outputs."""

    branches: tuple[Program, Program]

    def map(self, rewrite: Callable[[Program], Program]) -> Cond:
        """The same op with each branch rewritten (optimized)."""
        then, other = self.branches
        return Cond((rewrite(then), rewrite(other)))

    def __call__(self, pred: Any, *args: Any) -> tuple[Any, ...]:
        then, other = (lower(b) for b in self.branches)
        n = len(self.branches[0].inputs)
        return lax.cond(jnp.reshape(pred, ()), lambda *a: then(*a[:n]), lambda *a: other(*a[n:]), *args)


@dataclass(frozen=True)
class Loop:
    """The meaning of a ``while`` op whose operands are the condition, the ``carried`` loop values,
    then the values the body reads from around it: the loop values once the condition is false. The
    body's inputs are the loop values, then those it reads; its outputs the next condition and the
    next loop values."""

    body: Program
    carried: int

    def map(self, rewrite: Callable[[Program], Program]) -> Loop:
        return Loop(rewrite(self.body), self.carried)

    def __call__(self, pred: Any, *args: Any) -> tuple[Any, ...]:
        values, reads = args[: self.carried], args[self.carried :]
        body = lower(self.body)

        def step(carry: tuple[Any, ...]) -> tuple[Any, ...]:
            following, *rest = body(*carry[1:], *reads)
            return (jnp.reshape(following, ()), *rest)

        final = lax.while_loop(lambda carry: carry[0], step, (jnp.reshape(pred, ()), *values))
        return tuple(final[1:])
