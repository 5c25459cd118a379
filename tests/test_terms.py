"""``rules/terms.py``: the typed constructors and guards of rule patterns (with ``eqsat/egglog_text.py``,
the one layer that writes egglog text: ``tests/test_egglog_text.py`` holds the others to it)."""

from __future__ import annotations

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
