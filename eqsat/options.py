"""How a program is optimized, beyond the program itself: the rules, the cost model, the limits, the
extractor, and whether to verify and measure."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from eqsat.cost import CostModel, get_cost_model
from eqsat.rules import Rule, resolve
from eqsat.saturate import Limits
from eqsat.xla_flags import compiling_with, normalized

EXTRACTORS = ("auto", "greedy", "ilp", "egglog")
CARRIED = "carried"  # the extractor of a result carried from another size (``OptimizeResult.specialized``)


@dataclass(frozen=True)
class Options:
    """How a program is optimized, beyond the program itself: what ``optimize`` was asked for, kept
    with its result (``OptimizeResult.fn`` optimizes other signatures so) and by ``eqsat.jit``."""

    rules: tuple[Rule, ...]
    cost: CostModel
    limits: Limits = field(default_factory=Limits)
    verify: bool = False
    extractor: str = "auto"
    measure: bool = False
    compiler_options: tuple[tuple[str, Any], ...] = ()  # ``jax.jit``'s, sorted: the program runs under them

    def __repr__(self) -> str:
        """A summary: the rules counted (``describe()`` lists them), the cost model named."""
        first = ", ".join(r.name for r in self.rules[:3]) + ", ..." * (len(self.rules) > 3)
        rules = f"<{len(self.rules)} rules: {first}>"
        return (
            f"Options(rules={rules}, cost={self.cost.name!r}, limits={self.limits!r}, verify={self.verify}, "
            f"extractor={self.extractor!r}, measure={self.measure}"
            + (f", compiler_options={dict(self.compiler_options)!r})" if self.compiler_options else ")")
        )

    def describe(self) -> str:
        """Everything: the summary, then each rule's name and reason, one a line."""
        return "\n".join([repr(self), *(f"  {r.name}: {r.reason}" for r in self.rules)])

    def __post_init__(self) -> None:
        if self.extractor not in EXTRACTORS:
            raise ValueError(f"unknown extractor {self.extractor!r} ({', '.join(EXTRACTORS)})")

    @classmethod
    def of(
        cls,
        rules: Iterable[Rule | str] | None = None,
        cost: str | CostModel | Callable[..., float] = "roofline",
        limits: Limits | None = None,
        verify: bool = False,
        extractor: str = "auto",
        measure: bool = False,
        compiler_options: Mapping[str, Any] | None = None,
    ) -> Options:
        """Options from ``optimize``'s arguments: rules resolved, the cost model built (a model
        named, under the ``compiler_options``: it times its kernels under them)."""
        in_force = normalized(compiler_options)
        with compiling_with(in_force):
            model = get_cost_model(cost)
        return cls(tuple(resolve(rules)), model, limits or Limits(), verify, extractor, measure, in_force)
