"""Declarative rewrite rules, grouped by theme: ``transpose``, ``reshape``, ``cast``, ``fold``.

Each rule has a name, a one-line reason, egglog patterns and an example that
``eqsat.verify.check_rule`` instantiates on random data (see ``rules/base.py`` for the format).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from .base import Rule


def _load() -> dict[str, list[Rule]]:
    from . import algebra, attention, cast, fold, fusion, reshape, softmax, transpose

    themes = {}
    for module in (transpose, reshape, cast, fold, algebra, fusion, softmax, attention):
        theme = module.__name__.rsplit(".", 1)[-1]
        themes[theme] = [replace(r, theme=theme) for r in module.RULES]
    return themes


RULESETS: dict[str, list[Rule]] = _load()
ALL_RULES: list[Rule] = [r for rs in RULESETS.values() for r in rs]


EXACT = "exact"  # the selector of every rule exact in IEEE arithmetic


def select(names: Iterable[str] | None = None) -> list[Rule]:
    """Rules by theme, by rule name, or ``"exact"`` (every exact rule); ``None``: all. Unknown names
    raise ``KeyError`` listing the known."""
    if names is None:
        return list(ALL_RULES)
    by_name = {r.name: r for r in ALL_RULES}
    out: list[Rule] = []
    for n in names:
        if n == EXACT:
            out.extend(r for r in ALL_RULES if r.exact)
        elif n in RULESETS:
            out.extend(RULESETS[n])
        elif n in by_name:
            out.append(by_name[n])
        else:
            raise KeyError(f"unknown rule or theme {n!r} (themes: {', '.join(RULESETS)}, {EXACT})")
    return out
