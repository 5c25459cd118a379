"""``eqsat.jit``: like ``jax.jit``, with equality saturation between tracing and compiling.

On the first call for each signature (pytree structure, shapes and dtypes of the array arguments,
values of the static ones) the function is traced, optimized, lowered and compiled; later calls with
the same signature hit jax.jit's cache.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from eqsat.api import OptimizeResult, optimize
from eqsat.cost import CostModel
from eqsat.errors import UnsupportedError
from eqsat.frontend.jax import trace
from eqsat.lowering import lower
from eqsat.rules import Rule
from eqsat.saturate import Limits


class Jitted:
    """The callable ``eqsat.jit`` returns: a ``jax.jit`` whose tracing step optimizes.

    jax.jit traces once per signature (pytree structure, shapes, dtypes, static values); eqsat hooks
    into that trace: it traces the function to a Program, optimizes it, and emits the optimized
    program instead. Later calls of the signature run through jax.jit's own cache, with no eqsat
    overhead. ``optimizations`` counts signatures optimized; ``results`` maps each to its
    :class:`OptimizeResult`.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        rules: Iterable[Rule | str] | None,
        cost: str | CostModel | Callable[..., float],
        limits: Limits | None,
        verify: bool,
        static_argnums: Sequence[int],
    ) -> None:
        self.fn = fn
        self.options = {"rules": None if rules is None else list(rules), "cost": cost, "limits": limits}
        self.verify = verify
        self.static_argnums = tuple(static_argnums)
        self.results: dict[Any, OptimizeResult] = {}
        self._jitted = jax.jit(self._optimized_trace, static_argnums=self.static_argnums)
        functools.update_wrapper(self, fn)

    @property
    def optimizations(self) -> int:
        return len(self.results)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        dynamic = [a for i, a in enumerate(args) if i not in self.static_argnums]
        for leaf in jax.tree_util.tree_leaves((dynamic, kwargs)):
            if not hasattr(leaf, "dtype") and not isinstance(leaf, int | float | bool):
                raise UnsupportedError(
                    f"eqsat.jit arguments must be arrays (or pytrees of arrays), got a "
                    f"{type(leaf).__name__}; mark other arguments static with static_argnums"
                )
        return self._jitted(*args, **kwargs)

    def _optimized_trace(self, *args: Any, **kwargs: Any) -> Any:
        """Runs while jax.jit traces a new signature: trace to a Program, optimize, emit it."""
        static = {i: args[i] for i in self.static_argnums if i < len(args)}
        dynamic = [a for i, a in enumerate(args) if i not in static]
        specs = jax.tree_util.tree_map(
            lambda a: jax.ShapeDtypeStruct(jnp.shape(a), jnp.result_type(a)), (dynamic, kwargs)
        )

        def with_static(*dyn: Any, **kw: Any) -> Any:
            it = iter(dyn)
            full = [static[i] if i in static else next(it) for i in range(len(dyn) + len(static))]
            return self.fn(*full, **kw)

        traced = trace(with_static, *specs[0], **specs[1])
        with jax.ensure_compile_time_eval():
            result = optimize(traced.program, verify=self.verify, **self.options)
        signature = (
            jax.tree_util.tree_structure(specs),
            tuple(jax.tree_util.tree_leaves(specs)),
            tuple(static.items()),
        )
        self.results[signature] = result
        outs = lower(result.program)(*jax.tree_util.tree_leaves((dynamic, kwargs)))
        return jax.tree_util.tree_unflatten(traced.out_tree, outs)


def jit(
    fn: Callable[..., Any] | None = None,
    *,
    rules: Iterable[Rule | str] | None = None,
    cost: str | CostModel | Callable[..., float] = "roofline",
    limits: Limits | None = None,
    verify: bool = False,
    static_argnums: int | Sequence[int] = (),
) -> Any:
    """Decorator: ``@eqsat.jit`` or ``@eqsat.jit(verify=True, static_argnums=(1,))``."""
    nums = (static_argnums,) if isinstance(static_argnums, int) else tuple(static_argnums)

    def wrap(f: Callable[..., Any]) -> Jitted:
        return Jitted(f, rules=rules, cost=cost, limits=limits, verify=verify, static_argnums=nums)

    return wrap(fn) if fn is not None else wrap
