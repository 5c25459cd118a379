"""``eqsat.jit``: like ``jax.jit``, with equality saturation between tracing and compiling.

On the first call for each signature (pytree structure, shapes and dtypes of the array arguments,
values of the static ones) the function is traced, optimized, lowered and ``jax.jit``-ed; later calls
with the same signature reuse it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import jax
import numpy as np

from eqsat.api import OptimizeResult, optimize
from eqsat.cost import CostModel
from eqsat.errors import UnsupportedError
from eqsat.frontend.jax import trace
from eqsat.rules import Rule
from eqsat.saturate import Limits


class Jitted:
    """The callable ``eqsat.jit`` returns. ``optimizations`` counts signatures optimized so far;
    ``results`` maps each signature to its :class:`OptimizeResult`."""

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
        self.options = {
            "rules": None if rules is None else list(rules),
            "cost": cost,
            "limits": limits,
            "verify": verify,
        }
        self.static_argnums = tuple(static_argnums)
        self.results: dict[Any, OptimizeResult] = {}
        self._compiled: dict[Any, tuple[Callable[..., Any], Any]] = {}
        functools.update_wrapper(self, fn)

    @property
    def optimizations(self) -> int:
        return len(self._compiled)

    def _split(self, args: tuple[Any, ...]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        static = tuple(args[i] for i in self.static_argnums if i < len(args))
        dynamic = tuple(a for i, a in enumerate(args) if i not in self.static_argnums)
        return static, dynamic

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        static, dynamic = self._split(args)
        leaves, treedef = jax.tree_util.tree_flatten((dynamic, kwargs))
        arrays = [np.asarray(x) if isinstance(x, int | float | bool) else x for x in leaves]
        try:
            signature = (treedef, tuple((tuple(a.shape), str(a.dtype)) for a in arrays), static)
            hash(signature)
        except (AttributeError, TypeError):
            raise UnsupportedError(
                "eqsat.jit arguments must be arrays (or pytrees of arrays); mark others with static_argnums"
            ) from None
        if signature not in self._compiled:
            self._compiled[signature] = self._build(static, dynamic, kwargs, signature)
        compiled, out_tree = self._compiled[signature]
        return jax.tree_util.tree_unflatten(out_tree, compiled(*arrays))

    def _build(
        self, static: tuple[Any, ...], dynamic: tuple[Any, ...], kwargs: dict[str, Any], signature: Any
    ) -> tuple[Callable[..., Any], Any]:
        def with_static(*dyn: Any, **kw: Any) -> Any:
            it, st = iter(dyn), iter(static)
            n = len(dyn) + len(static)
            full = [next(st) if i in self.static_argnums else next(it) for i in range(n)]
            return self.fn(*full, **kw)

        traced = trace(with_static, *dynamic, **kwargs)
        result = optimize(traced.program, **self.options)
        self.results[signature] = result
        return result.fn, traced.out_tree


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
