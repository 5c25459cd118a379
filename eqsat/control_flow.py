"""Control flow that eqsat runs but does not rewrite across, as the payload of an opaque op: Paddle's
``pd_op.if`` (two branches) and ``pd_op.while`` (a body), each a Program of the values it reads
(optimized on its own by ``eqsat.optimize``). What they run as is the lowering's
(``eqsat.lowering.control_flow``): a frontend builds them without importing it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from eqsat.ir import Program


@dataclass(frozen=True)
class Cond:
    """An ``if`` op whose operands are the condition, then the values the first branch reads, then
    those the second reads: its results are the chosen branch's outputs."""

    branches: tuple[Program, Program]

    def map(self, rewrite: Callable[[Program], Program]) -> Cond:
        """The same op with each branch rewritten (optimized)."""
        then, other = self.branches
        return Cond((rewrite(then), rewrite(other)))


@dataclass(frozen=True)
class Loop:
    """A ``while`` op whose operands are the condition, the ``carried`` loop values, then the values the
    body reads from around it: its results are the loop values once the condition is false. The body's
    inputs are the loop values, then those it reads; its outputs the next condition and the next loop
    values."""

    body: Program
    carried: int

    def map(self, rewrite: Callable[[Program], Program]) -> Loop:
        return Loop(rewrite(self.body), self.carried)
