"""egglog text is written in one layer: ``eqsat/egglog_text.py`` and ``rules/terms.py`` (its typed
constructors). Every other module builds egglog commands and terms through them; a scan of each
module's string literals holds it there."""

from __future__ import annotations

import ast
import math
import re
from pathlib import Path

from eqsat.egglog_text import Fact, Term, app, let, literal, tlist, vec
from eqsat.ops import OPS
from eqsat.rules.terms import Exp, equal

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = ("eqsat", "rules", "lowering", "bench", "scripts")
LAYER = {"eqsat/egglog_text.py", "rules/terms.py"}
_HOLE = "\x00"  # an f-string's placeholder
_KEYWORDS = (
    "union|set|rule|rewrite|relation|function|datatype\\*?|sort|ruleset|let|let-scheduler|run-schedule"
    "|run-with|run|saturate|back-off|push|pop|extract|check|print-size|min|max|abs|sqrt|shape|dtype"
)
_CTORS = "|".join(sorted({op.ctor for op in OPS.values()} | {"TCons", "TNil", "Input", "Opaque"}))
# An s-expression's head: egglog's vector primitives, arithmetic, commands and actions, a constructor.
_HEAD = re.compile(rf"\((vec-|to-f64|[-+*/%&<>=!]+ |({_KEYWORDS})[ )]|({_CTORS})[ )])")
# What an s-expression holds: atoms (names, numbers, quoted strings, placeholders) and parentheses;
# prose has punctuation besides.
_SEXP = re.compile(rf"[\w\s\-+*/%&<>=!.$@\"'{_HOLE}():]*")


def _literal_texts(tree: ast.AST) -> list[tuple[int, str]]:
    """Every string literal of a module but its docstrings, an f-string's placeholders ``_HOLE``."""
    inside = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values}
    inside |= {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and ast.get_docstring(node) is not None
    }
    texts = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            parts = [v.value if isinstance(v, ast.Constant) else _HOLE for v in node.values]
            texts.append((node.lineno, "".join(str(p) for p in parts)))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in inside:
            texts.append((node.lineno, node.value))
    return texts


def _group(text: str, start: int) -> str:
    """The parenthesized group that opens at ``start`` (to the end of ``text`` if it stays open)."""
    depth = 0
    for i in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return text[start : i + 1]
    return text[start:]


def _is_egglog(text: str) -> bool:
    """An s-expression with a known head, or the whole text one whose head is a placeholder."""
    if text.startswith(f"({_HOLE} ") and _SEXP.fullmatch(text):
        return True
    return any(_SEXP.fullmatch(_group(text, m.start())) for m in _HEAD.finditer(text))


def egglog_text(source: str) -> list[str]:
    """The string literals of ``source`` that write egglog s-expressions, with their lines."""
    return [f"line {n}: {t!r}" for n, t in _literal_texts(ast.parse(source)) if _is_egglog(t)]


def _modules() -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for folder in FOLDERS for p in (ROOT / folder).rglob("*.py"))


def test_no_egglog_text_outside_the_layer():
    found = {
        path: hits
        for path in _modules()
        if path not in LAYER and (hits := egglog_text((ROOT / path).read_text()))
    }
    assert not found, (
        f"egglog text outside eqsat/egglog_text.py and rules/terms.py (write it with them): {found}"
    )


def test_the_finder_sees_egglog_text_and_not_prose():
    source = (
        'a = f"(vec-get {s} 0)"\nb = "(= x y)"\nc = f"(let {n} {t})"\nd = "(Exp x)"\ne = "(push)"\n'
        'f = f"(rule ({facts}) ({actions}) :ruleset {r})"\ng = f"({op.ctor} {args})"\n'
    )
    assert len(egglog_text(source)) == 7
    prose = (
        '"""(x + y) + z = x + (y + z); (a·b)ᵀ = bᵀ·aᵀ; (p @ v) / l"""\nr = "(g * r) * z, (AB)C"\n'
        's = f"time limit ({t} s) passed"\nt = "(* inexact in IEEE arithmetic: guarded; left out)"\n'
        'u = f"{a} ({b} / {c})"\nv = ("min", "max")\n'
    )
    assert egglog_text(prose) == []


def test_literals_spell_values_as_egglog_does():
    assert [literal(v) for v in (1.5, 1e20, -0.0, math.inf, -math.inf, math.nan)] == [
        "1.5",
        "1e20",
        "-0.0",
        "inf",
        "-inf",
        "NaN",
    ]
    assert [literal(v) for v in (3, True, "float32", (2, 3), ())] == [
        "3",
        "1",
        '"float32"',
        "(vec-of 2 3)",
        "(vec-empty)",
    ]


def test_terms_vectors_lists_and_commands():
    assert vec(["n", 1, 2.5]) == "(vec-of n 1 2.5)" and app("TNil") == "(TNil)"
    assert tlist(["a", "b"]) == "(TCons a (TCons b (TNil)))"
    assert let("$v0", app("Input", literal("in0"))) == '(let $v0 (Input "in0"))'


def test_a_term_is_not_a_fact():
    """Constructors give ``Term``s, guards ``Fact``s: mypy tells one from the other (both are egglog
    text, so either renders as itself)."""
    term, fact = Exp("x"), equal("x", "y")
    assert isinstance(term, Term) and not isinstance(term, Fact) and term == "(Exp x)"
    assert isinstance(fact, Fact) and not isinstance(fact, Term) and fact == "(= x y)"
