"""``rules/terms.py``: the typed constructors and guards, the one module of ``rules/`` that writes egglog."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from eqsat.ops import OPS
from eqsat.rules import terms
from eqsat.rules.terms import (
    SCALAR,
    Full,
    Matmul,
    dim,
    equal,
    get,
    largest,
    last_axis,
    length,
    not_nan,
    set_item,
    shape_of,
    var,
)

RULES = Path(__file__).resolve().parent.parent / "rules"
_HOLE = "\x00"  # an f-string's placeholder
# An s-expression's head: egglog's primitives, commands and actions, a constructor, or a placeholder.
_HEADS = ["vec-", "to-f64", "[-+*/%&<>=!]+ ", "(union|set|rule|rewrite|relation|function|min|max|abs|sqrt) "]
_CTORS = "|".join(sorted({op.ctor for op in OPS.values()} | {"TCons", "TNil", "Input", "Opaque"}))
_EGGLOG = re.compile(rf"\(({'|'.join(_HEADS)}|({_CTORS})[ )]|{_HOLE} [^)])")


def _literal_texts(tree: ast.AST) -> list[tuple[int, str]]:
    """Every string literal of a module but its docstrings, an f-string's placeholders ``_HOLE``."""
    inside = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values}
    inside |= {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
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


def egglog_text(source: str) -> list[str]:
    return [f"line {n}: {t!r}" for n, t in _literal_texts(ast.parse(source)) if _EGGLOG.search(t)]


def test_no_egglog_text_in_rules_outside_terms():
    found = {
        path.name: hits
        for path in sorted(RULES.glob("*.py"))
        if path.name != "terms.py" and (hits := egglog_text(path.read_text()))
    }
    assert not found, f"egglog text outside rules/terms.py (write it with terms' helpers): {found}"


def test_the_finder_sees_egglog_text_and_not_prose():
    source = 'a = f"(vec-get {s} 0)"\nb = "(= x y)"\nc = f"({head} a b)"\nd = "(Exp x)"\n'
    assert len(egglog_text(source)) == 4
    prose = '"""(x + y) + z = x + (y + z); (a·b)ᵀ = bᵀ·aᵀ; (p @ v) / l"""\nr = "(g * r) * z, (AB)C"\n'
    assert egglog_text(prose) == []


def test_every_op_has_its_constructor_derived_from_its_definition():
    """``terms.<Ctor>`` is derived from ``OPS``: a new op has one without a line in rules/terms.py."""
    assert len({op.ctor for op in OPS.values()}) == len(OPS), "two ops share an egglog constructor name"
    for op in OPS.values():
        make = getattr(terms, op.ctor)
        assert (make.__name__, make.__doc__) == (op.ctor, op.doc)
    with pytest.raises(AttributeError, match="NoSuchOp"):
        terms.NoSuchOp  # noqa: B018


def test_expressions_render_as_egglog():
    assert str(last_axis("q")) == "(- (vec-length (shape q)) 1)"
    assert str(dim("x", var("a"))) == "(vec-get (shape x) a)"
    assert str(set_item(shape_of("x"), "a", 1)) == "(vec-set (shape x) a 1)"
    assert str(var("g") % 2) == "(% g 2)"
    assert str(1 - var("t")) == "(- 1 t)"
    assert str(2 * var("g")) == "(* 2 g)"
    assert str(1.0 / var("c")) == "(/ 1.0 c)"
    assert str(largest("a", "b", "c")) == "(max (max a b) c)"
    assert equal(length("p"), 3) == "(= (vec-length p) 3)"
    assert equal(get("p", 0), "float32") == '(= (vec-get p 0) "float32")'
    assert not_nan("c") == "(< c NaN)"
    assert Full(shape=SCALAR, value=0.5, dtype="d") == "(Full (vec-empty) 0.5 d)"


def test_a_constructor_checks_what_it_is_given():
    assert Matmul("x", "w", transpose_y=1, dtype=var("d")) == "(Matmul x w 0 1 d)"
    assert terms.Cast("x", dtype="float16") == '(Cast x "float16")'
    with pytest.raises(TypeError, match="Matmul needs dtype="):
        Matmul("x", "w")
    with pytest.raises(TypeError, match="no attribute 'perm'"):
        terms.Reshape("x", perm="p")
    with pytest.raises(TypeError, match="takes 1 operands"):
        terms.Exp("x", "y")


def test_a_variable_keys_an_example_by_its_name():
    scale = var("c")
    bindings = {scale: 0.5}
    assert bindings["c"] == 0.5 and scale == "c" and str(scale * 2) == "(* c 2)"
    assert terms.Exp(var("x")) == "(Exp x)"  # a tensor variable too
