"""Declarative rewrite rules, grouped by theme (a module each): ``transpose``, ``reshape``, ``cast``,
``fold``, ``algebra``, ``fusion``, ``softmax``, ``attention``, ``conv``, ``normalize``, ``scan``,
``order``, ``diag``, ``axioms``.

Each rule has a name, a one-line reason, egglog patterns and an example that
``eqsat.verify.check_rule`` instantiates on random data (see ``rules/base.py`` for the format).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from .base import Rule


def _load() -> dict[str, list[Rule]]:
    from . import (
        algebra,
        attention,
        axioms,
        cast,
        conv,
        diag,
        fold,
        fusion,
        normalize,
        order,
        reshape,
        scan,
        softmax,
        transpose,
    )

    themes = {}
    for module in (
        transpose,
        reshape,
        cast,
        fold,
        algebra,
        fusion,
        softmax,
        attention,
        conv,
        normalize,
        scan,
        order,
        diag,
        axioms,
    ):
        theme = module.__name__.rsplit(".", 1)[-1]
        themes[theme] = [replace(r, theme=theme) for r in module.RULES]
    return themes


RULESETS: dict[str, list[Rule]] = _load()
ALL_RULES: list[Rule] = [r for rs in RULESETS.values() for r in rs]


EXACT = "exact"  # the selector of every exact rule that is on by default
ALL = "all"  # the selector of every rule, the axioms off by default included
DEFAULT = "default"  # the selector of the rules on by default (to add a user's rule beside them)


def select(names: Iterable[str] | None = None) -> list[Rule]:
    """Rules by theme, by rule name, ``"default"``, ``"exact"`` (every exact rule on by default) or
    ``"all"``;
    ``None``: the rules on by default. Unknown names raise ``KeyError`` listing the known."""
    if names is None:
        return [r for r in ALL_RULES if r.default]
    by_name = {r.name: r for r in ALL_RULES}
    out: list[Rule] = []
    for n in names:
        if n == ALL:
            out.extend(ALL_RULES)
        elif n == DEFAULT:
            out.extend(r for r in ALL_RULES if r.default)
        elif n == EXACT:
            out.extend(r for r in ALL_RULES if r.exact and r.default)
        elif n in RULESETS:
            out.extend(RULESETS[n])
        elif n in by_name:
            out.append(by_name[n])
        else:
            known = ", ".join([*RULESETS, DEFAULT, EXACT, ALL])
            raise KeyError(f"unknown rule or theme {n!r} (themes: {known})")
    return out


def resolve(rules: Iterable[Rule | str] | None, default: Iterable[str] | None = None) -> list[Rule]:
    """Rules given as ``Rule`` objects and selector names (as ``select`` takes them), each once in the
    order first named (``["default", "conv-winograd-4x4"]``, or a rule a theme also names); ``None``:
    ``select(default)``."""
    if rules is None:
        return select(default)
    out: dict[Rule, None] = {}
    for r in rules:
        out |= dict.fromkeys(select([r]) if isinstance(r, str) else [r])
    return list(out)
